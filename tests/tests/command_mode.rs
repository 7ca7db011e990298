//! Command mode and narrowed targets as `perf stat` behaves: the command's exit status becomes
//! the tool's, SIGINT and SIGTERM are passed to the command and its last slices reported, the
//! tool's own threads are never the command's, `-p PID` ends when the process ends, and JSON
//! without `-I` is one final document. Needs root.

use std::{
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use topdown_tests::{
    OUTPUT_PATIENCE, OutputWithin, assert_charged_through_exit_after_schedstat, http::Running,
    privileged, topdown_bpf_binary,
};

fn topdown() -> Command {
    Command::new(topdown_bpf_binary())
}

/// The JSON documents of `stdout`, one per line.
fn documents(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .filter(|doc: &Value| doc["schema"].is_string())
        .collect()
}

#[test]
fn exit_status_and_one_final_document() {
    if !privileged("exit_status_and_one_final_document") {
        return;
    }
    let output = topdown()
        .args(["--json", "--", "sh", "-c", "sleep 0.2; exit 7"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(7),
        "the command's status: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let docs = documents(&output.stdout);
    assert_eq!(docs.len(), 1, "without -I, only the final document");
    let doc = &docs[0];
    assert_eq!(doc["final"], true);
    assert_eq!(
        doc["idle_ns"].as_array().map(Vec::len),
        Some(0),
        "idle is not measured when only the command is charged"
    );
    let comms: Vec<&str> = doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["comm"].as_str().unwrap())
        .collect();
    assert!(comms.contains(&"sleep"), "{comms:?}");
    assert!(
        !comms.contains(&"topdown-bpf"),
        "never our own threads: {comms:?}"
    );
}

#[test]
fn sigterm_goes_to_the_command_whose_end_ends_the_report() {
    if !privileged("sigterm_goes_to_the_command") {
        return;
    }
    // The shell spins until SIGTERM, then says what the scheduler counted for it so far.
    let child = topdown()
        .args(["--json", "--", "sh", "-c"])
        .arg(
            "trap 'read ran rest < /proc/$$/schedstat; echo \"ran $ran\" >&2; exit 3' TERM; \
             while :; do :; done",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The shell is in its loop (its trap set) once it has run 200 ms: the tool started it
    // after its own signal handlers, so the SIGTERM reaches the shell through the tool.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
            .unwrap_or_default();
        let shell_ran = children
            .split_whitespace()
            .next()
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok())
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        if shell_ran > 200_000_000 {
            break;
        }
        assert!(Instant::now() < deadline, "the shell never ran its loop");
        thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(3),
        "the command got SIGTERM and its status is ours: {stderr}"
    );
    let ran: u64 = stderr
        .lines()
        .find_map(|line| line.strip_prefix("ran ")?.trim().parse().ok())
        .expect("the shell's own runtime");
    let docs = documents(&output.stdout);
    let shell = docs[0]["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "sh")
        .expect("the command's thread");
    // It read its own schedstat while running (as of its latest tick), then echoed and exited.
    assert_charged_through_exit_after_schedstat(
        "the command's busy loop",
        shell["on_cpu_ns"].as_u64().unwrap(),
        ran,
    );
}

#[test]
fn pid_mode_ends_with_the_process() {
    if !privileged("pid_mode_ends_with_the_process") {
        return;
    }
    // The process runs until the collector is seen charging it (an interval document with its
    // threads), then is killed: a fixed run of 5 s ended before the collector had started
    // while another suite loaded both CPUs (nothing was charged).
    // Killed at the end whatever happens (a failing test leaves no workload behind).
    let mut target = Running(
        Command::new(env!("CARGO_BIN_EXE_workload"))
            .args(["--run-ms", "600000", "--churn", "1", "--no-wait"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = target.0.id();
    let started = Instant::now();
    let mut tool = topdown()
        .args(["--json", "-I", "200", "--duration", "900", "-p"])
        .arg(pid.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = OutputWithin::new(tool.stdout.take().unwrap());
    loop {
        let line = stdout.line("an interval document", OUTPUT_PATIENCE);
        let charged = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|doc| Some(!doc["threads"].as_array()?.is_empty()))
            .unwrap_or(false);
        if charged {
            break;
        }
    }
    target.0.kill().unwrap();
    target.0.wait().unwrap();
    let rest = stdout.rest("the documents after the process ended", OUTPUT_PATIENCE);
    let status = tool.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut tool.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(600),
        "ended with the process, not at --duration"
    );
    let docs = documents(rest.as_bytes());
    let last = docs.last().expect("a final document");
    assert_eq!(last["final"], true, "the last document is the final one");
    let threads = last["threads"].as_array().unwrap();
    assert!(
        threads.iter().all(|t| t["pid"] == pid),
        "only the process: {threads:?}"
    );
    assert!(!threads.is_empty(), "the process was charged");
}
