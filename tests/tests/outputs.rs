//! What `record` writes cannot be redirected (issue 52, finding 1 to 3): a symlink at the
//! recording's name, dangling or not, is never followed nor replaced; two runs started together on one name
//! leave one recording and one refusal, never two runs that both say they recorded; a FIFO
//! with no reader is an error at once, not a run stuck in `open()`; a link planted where a
//! Parquet part is to be named is refused, its target untouched. Needs root (BPF).

use std::{
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use topdown_tests::{privileged, topdown_bpf_binary};

/// `record -o PATH` for `seconds`, with `extra` arguments.
fn record(path: &Path, seconds: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(topdown_bpf_binary());
    command
        .arg("record")
        .arg("-o")
        .arg(path)
        .args(["--duration", seconds, "-I", "100"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Its standard error, which must be one line when it failed.
fn refusal(output: &Output) -> String {
    let said = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    assert!(!output.status.success(), "it was refused: {said}");
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    said
}

fn reads_back(path: &Path) {
    let report = Command::new(topdown_bpf_binary())
        .arg("report")
        .arg("-i")
        .arg(path)
        .arg("--json")
        .output()
        .expect("running report");
    assert!(
        report.status.success(),
        "report reads the recording: {}",
        String::from_utf8_lossy(&report.stderr)
    );
}

#[test]
fn a_link_at_the_recordings_name_is_never_followed() {
    if !privileged("a_link_at_the_recordings_name_is_never_followed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    let link = dir.path().join("run.rec");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let said = refusal(&record(&link, "0.3", &[]).output().unwrap());
    assert!(said.contains("symbolic link"), "{said}");
    assert!(
        !outside.exists(),
        "a dangling link's target is never created"
    );

    std::fs::write(&outside, b"root's own file").unwrap();
    let said = refusal(&record(&link, "0.3", &[]).output().unwrap());
    assert!(said.contains("--force"), "{said}");
    let said = refusal(&record(&link, "0.3", &["--force"]).output().unwrap());
    assert!(said.contains("symbolic link"), "{said}");
    assert_eq!(std::fs::read(&outside).unwrap(), b"root's own file");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link is left as it was"
    );
    // A file at the name is replaced with --force.
    let file = dir.path().join("old.rec");
    std::fs::write(&file, b"old").unwrap();
    let forced = record(&file, "0.3", &["--force"]).output().unwrap();
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    reads_back(&file);
}

#[test]
fn two_records_on_one_name_leave_one_recording_and_one_refusal() {
    if !privileged("two_records_on_one_name_leave_one_recording_and_one_refusal") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("same.rec");
    for force in [&[][..], &["--force"][..]] {
        let _ = std::fs::remove_file(&path);
        let runs: Vec<_> = (0..2)
            .map(|_| record(&path, "1", force).spawn().unwrap())
            .collect();
        let outputs: Vec<Output> = runs
            .into_iter()
            .map(|run| run.wait_with_output().unwrap())
            .collect();
        let (ok, refused): (Vec<&Output>, Vec<&Output>) =
            outputs.iter().partition(|o| o.status.success());
        assert_eq!(
            (ok.len(), refused.len()),
            (1, 1),
            "{force:?}: one recorded, one refused: {:?}",
            outputs
                .iter()
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .collect::<Vec<_>>()
        );
        let said = refusal(refused[0]);
        assert!(
            said.contains("exists") || said.contains("appeared") || said.contains("another run"),
            "{said}"
        );
        reads_back(&path);
    }
}

#[test]
fn a_fifo_nobody_reads_is_refused_at_once() {
    if !privileged("a_fifo_nobody_reads_is_refused_at_once") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let started = Instant::now();
    let said = refusal(&record(&fifo, "1", &["--force"]).output().unwrap());
    assert!(said.contains("nobody reads"), "{said}");
    // Refused before anything is set up (the programs take a second or more to load).
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn a_link_planted_at_a_parquet_parts_name_is_refused() {
    if !privileged("a_link_planted_at_a_parquet_parts_name_is_refused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let parts = dir.path().join("parts");
    std::fs::create_dir(&parts).unwrap();
    let outside = dir.path().join("outside");
    std::fs::write(&outside, b"root's own file").unwrap();
    let recording = dir.path().join("run.rec");
    let run = record(
        &recording,
        "2",
        &[
            "--parquet",
            parts.to_str().unwrap(),
            "--parquet-windows",
            "1",
        ],
    )
    .spawn()
    .unwrap();
    // Once the recording has its header, the folder was checked (an empty one) and parts are
    // about to be named, a window (100 ms) each: links are planted at the next ten names. One
    // already taken by a finished part (the run got ahead) is left alone.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&recording).map_or(0, |m| m.len()) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let planted: Vec<_> = (0..10)
        .map(|i| parts.join(format!("part-{i:06}.parquet")))
        .filter(|name| std::os::unix::fs::symlink(&outside, name).is_ok())
        .collect();
    assert!(!planted.is_empty());
    let output = run.wait_with_output().unwrap();
    let said = refusal(&output);
    assert!(
        planted
            .iter()
            .any(|name| said.contains(&*name.file_name().unwrap().to_string_lossy())),
        "{said}"
    );
    assert_eq!(std::fs::read(&outside).unwrap(), b"root's own file");
    for name in &planted {
        assert!(
            std::fs::symlink_metadata(name)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}

/// SIGHUP (a closed terminal or SSH session) ends `record` as SIGTERM does: its totals written
/// and said, never the default action's exit 129 with the last window lost.
#[test]
fn sighup_ends_a_recording_with_its_totals() {
    if !privileged("sighup_ends_a_recording_with_its_totals") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hup.rec");
    let run = record(&path, "60", &[]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&path).map_or(0, |m| m.len()) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // A few windows in.
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(run.id() as i32, libc::SIGHUP) };
    let output = run.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {said}", output.status);
    assert!(said.contains("recorded"), "{said}");
    reads_back(&path);
}
