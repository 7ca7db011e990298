//! In a PID namespace of its own (a container without `hostPID`), every command that loads the
//! programs refuses in one line that names the fix, instead of blaming the kernel (issue 52,
//! finding 6): the kernel side names threads by the host's ids, which the namespace neither
//! shows nor translates. Needs root (`unshare -p`).

use std::process::Command;

use topdown_tests::{privileged, topdown_bpf_binary};

#[test]
fn every_command_refuses_a_pid_namespace_in_one_line() {
    if !privileged("every_command_refuses_a_pid_namespace_in_one_line") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let recording = dir.path().join("ns.rec");
    let commands: [&[&str]; 4] = [
        &["--duration", "0.2"],
        &[
            "record",
            "-o",
            recording.to_str().unwrap(),
            "--duration",
            "0.2",
        ],
        &["serve", "--listen", "127.0.0.1:0", "--duration", "0.2"],
        &["check"],
    ];
    for args in commands {
        let output = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc"])
            .arg(topdown_bpf_binary())
            .args(args)
            .output()
            .expect("running unshare (util-linux)");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} refused: {said}");
        let last = said.trim().lines().last().unwrap_or_default();
        assert!(
            last.starts_with("topdown-bpf: ") && last.contains("hostPID"),
            "{args:?}: one line naming the fix: {said}"
        );
        assert!(
            !said.contains("does not count right"),
            "{args:?}: not the kernel's fault: {said}"
        );
    }
    assert!(!recording.exists(), "a refused record leaves no file");
}
