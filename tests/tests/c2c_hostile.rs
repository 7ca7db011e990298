//! `c2c report -i` on crafted perf.data files, written from a valid one by
//! tests/tools/craft_perf_data.py (each breaks the file as a case that once aborted the reader
//! did): a one-line error naming the byte offset, exit 1, in well under a second, within 2 GB of
//! address space; a corrupt topology section is said and left out.

use std::{
    os::unix::process::CommandExt as _,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use topdown_tests::topdown_bpf_binary;

fn python(script: &Path, args: &[&Path]) {
    let status = Command::new("python3")
        .arg(script)
        .args(args)
        .status()
        .expect("python3");
    assert!(status.success(), "{} failed", script.display());
}

#[test]
fn crafted_files_get_one_line_and_never_take_the_report_down() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let valid = dir.path().join("valid.data");
    let crafted = dir.path().join("crafted");
    python(
        &root.join("../../shared/tools/gen_perf_data.py"),
        &[&root.join("fixtures/c2c/branches.json"), &valid],
    );
    python(&root.join("tools/craft_perf_data.py"), &[&valid, &crafted]);
    let mut files: Vec<_> = std::fs::read_dir(&crafted)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 9, "{files:?}");
    let output = Command::new(topdown_bpf_binary())
        .args(["c2c", "report", "--stdio", "-i"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.code() == Some(1) && stderr.contains("is a directory"),
        "{stderr}"
    );
    for file in &files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let mut command = Command::new(topdown_bpf_binary());
        command.args(["c2c", "report", "--stdio", "-i"]).arg(file);
        // SAFETY: setrlimit is async-signal-safe and touches only this (child) process.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 2 << 30,
                    rlim_max: 2 << 30,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let started = Instant::now();
        let output = command.output().unwrap();
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("{name}: {:?} in {took:?}: {stderr}", output.status);
        assert!(took < Duration::from_secs(5), "{name}: took {took:?}");
        let lines: Vec<&str> = stderr.lines().collect();
        if name.ends_with("topology-node") || name == "numa-cpus" {
            assert!(output.status.success(), "{name}: {stderr}");
            assert!(
                lines.len() == 1 && lines[0].contains("section is corrupt"),
                "{name}: says what it left out: {stderr}"
            );
        } else {
            assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
            assert_eq!(lines.len(), 1, "{name}: one line: {stderr}");
            assert!(
                lines[0].starts_with("topdown-bpf: ") && lines[0].contains("byte"),
                "{name}: names the byte offset: {stderr}"
            );
        }
    }
}
