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

use topdown_tests::{perf_data_of, topdown_bpf_binary};

/// Runs `script` with `args` in `dir`.
fn python(script: &Path, args: &[&Path], dir: &Path) {
    let status = Command::new("python3")
        .arg(script)
        .args(args)
        .current_dir(dir)
        .status()
        .expect("python3");
    assert!(status.success(), "{} failed", script.display());
}

#[test]
fn crafted_files_get_one_line_and_never_take_the_report_down() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let valid = perf_data_of(&root.join("fixtures/c2c/branches.json"), dir.path());
    let crafted = dir.path().join("crafted");
    python(
        &root.join("tools/craft_perf_data.py"),
        &[&valid, &crafted],
        dir.path(),
    );
    let mut files: Vec<_> = std::fs::read_dir(&crafted)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
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

/// A recording whose code mapping names a FIFO: the report must not open it (it would wait
/// forever for a writer) and prints the address unresolved, as for any unreadable object.
#[test]
fn object_names_from_the_file_never_block_the_report() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let object = dir.path().join("app");
    let spec = std::fs::read_to_string(root.join("fixtures/c2c/branches.json"))
        .unwrap()
        .replace("c2c-bin/app", &object.display().to_string());
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, spec).unwrap();
    let data = perf_data_of(&spec_path, dir.path());
    // The spec's writer wrote an ELF file there; a FIFO takes its place.
    std::fs::remove_file(&object).unwrap();
    let fifo = std::ffi::CString::new(object.display().to_string()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mut child = Command::new(topdown_bpf_binary())
        .args(["c2c", "report", "--stdio", "-i"])
        .arg(&data)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the report blocked on the FIFO named in the recording");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}
