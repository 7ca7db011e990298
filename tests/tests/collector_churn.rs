//! The collector under thread churn, end to end through the binary: a command whose two
//! creator threads start and join threads as fast as they can for ~10 s, under
//! `--per-thread -I 1000 --json -- CMD`. Every exited thread appears once in its interval's
//! document (its own row, or past the hottest 500 its process's fold), nothing is lost, the command's on-CPU time adds up to the kernel's books (its own
//! cgroup's `cpu.stat`, and `getrusage` with the part of each exit it leaves out), and the
//! tool's memory stays bounded. Needs root and cgroup2.

use std::process::{Command, Stdio};

use serde_json::Value;
use topdown_tests::{
    assert_books_within,
    cgroup_tree::{TestTree, unified_mount},
    topdown_bpf_binary,
};

/// Peak RSS the tool may reach in this run (the target for 10 s at full churn).
const MAX_RSS_MB: u64 = 150;

/// Most of a thread's exit that `getrusage` may leave out, per exited thread (measured here:
/// ~1.3 us on average).
const EXIT_TAIL_MAX_NS: u64 = 20_000;

#[test]
fn churn_loses_nothing_and_adds_up_to_getrusage() {
    let Some(mount) = unified_mount("churn_loses_nothing_and_adds_up_to_getrusage") else {
        return;
    };
    let tree = TestTree::new(&mount, "churn", &["cmd"]);
    let procs = tree.dir("cmd").join("cgroup.procs");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("run.jsonl");
    let child = Command::new(topdown_bpf_binary())
        .args(["--per-thread", "-I", "1000", "--json", "-o"])
        .arg(&report)
        // The command joins its own cgroup before it execs the churn, so the cgroup's books
        // hold all of the churn's time.
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo $$ > {} && exec {} --seconds 10 --creators 2",
            procs.display(),
            env!("CARGO_BIN_EXE_churn")
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting topdown-bpf");
    let pid = child.id() as libc::pid_t;
    let output = child.wait_with_output_and_rusage();
    assert!(
        output.status.success(),
        "topdown-bpf failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let done: Value = String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .expect("the churn command's summary line");
    let exits = done["exits"].as_u64().unwrap();
    let rusage_ns = done["rusage_cpu_ns"].as_u64().unwrap();
    eprintln!(
        "churn: {exits} threads exited, {} exits/s; topdown-bpf (pid {pid}) peak RSS {} MB",
        done["exits_per_s"], output.max_rss_mb
    );
    assert!(exits > 1000, "the churn ran: {done}");

    let text = std::fs::read_to_string(&report).unwrap();
    let docs: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON document per line"))
        .collect();
    let (last, windows) = docs.split_last().expect("documents");
    assert_eq!(last["final"], true, "the last document is the run's totals");
    // Interval documents, each with the threads that exited in it (a loaded machine may delay
    // an interval, so no exact count).
    assert!(windows.len() >= 2, "interval documents: {}", windows.len());
    assert!(windows.iter().all(|d| d["final"] == false));

    // Every churned thread exited once, in the interval it exited in, and appears there once:
    // on its own row, or past the hottest 500 of its interval in its process's fold (the
    // creators and the main thread, busy, are never among the folded).
    let churn_pid = last["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "churn" && t["tid"] == t["pid"])
        .map(|t| t["pid"].clone())
        .expect("the command's main thread carries its name after exec");
    let (mut own, mut folded) = (0, 0);
    for doc in windows {
        let dead: Vec<&Value> = doc["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["exited"] == true)
            .collect();
        let folds = dead.iter().filter(|t| t["folded_threads"] != 0).count();
        // The bound a recording's header writes down: 500 own rows, as many folds, the rest.
        assert!(
            dead.len() - folds <= 500 && folds <= 501,
            "{} exited rows, {folds} folds in one interval",
            dead.len()
        );
        for thread in dead.iter().filter(|t| t["pid"] == churn_pid) {
            match thread["folded_threads"].as_u64().unwrap() {
                0 if thread["comm"] == "churned" => own += 1,
                0 => {}
                n => {
                    assert_eq!(thread["tid"], 0, "a fold is no one thread: {thread}");
                    folded += n;
                }
            }
        }
    }
    eprintln!("{own} exits on their own rows, {folded} folded per process and interval");
    assert_eq!(own + folded, exits, "every exited thread, once");
    for doc in &docs {
        let threads = doc["threads"].as_array().unwrap();
        assert!(
            threads.iter().all(|t| t["comm"] != "topdown-bpf"),
            "the tool's own threads are never the command's"
        );
    }

    assert_eq!(last["lost_anything"], false, "{}", last["kernel_stats"]);
    let charged: u64 = last["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["on_cpu_ns"].as_u64().unwrap())
        .sum();
    // The scheduler's books: the cgroup's cpu.stat counts every thread's runtime up to its last
    // switch. The command's first instant (sh before it joined the cgroup) is within the
    // tolerance's 2 ms floor.
    let cgroup_ns = tree.usage_ns("cmd");
    assert_books_within(
        "the command's on-CPU time vs its cgroup's cpu.stat",
        charged,
        cgroup_ns,
        0.01,
    );
    // getrusage holds the process's own books: a dying thread's runtime is added to them in
    // __exit_signal (release_task, from exit_notify), before the rest of do_exit and its last
    // switch, which the cgroup's books (and ours) still count. So getrusage is short of the
    // cgroup by a small tail per exited thread, never over it.
    let tail_ns = cgroup_ns.saturating_sub(rusage_ns);
    eprintln!(
        "getrusage {rusage_ns} ns: {tail_ns} ns short of cpu.stat, {} ns per exited thread",
        tail_ns / exits
    );
    assert!(
        rusage_ns <= cgroup_ns + 5_000_000,
        "getrusage {rusage_ns} ns over the cgroup's {cgroup_ns} ns"
    );
    assert!(
        tail_ns <= exits * EXIT_TAIL_MAX_NS,
        "getrusage is {tail_ns} ns short for {exits} exits"
    );
    assert!(
        output.max_rss_mb <= MAX_RSS_MB,
        "peak RSS {} MB over {MAX_RSS_MB} MB",
        output.max_rss_mb
    );
}

/// What the child printed and how it ended, with its peak RSS from `wait4`.
struct Finished {
    status: std::process::ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    max_rss_mb: u64,
}

trait WaitWithRusage {
    fn wait_with_output_and_rusage(self) -> Finished;
}

impl WaitWithRusage for std::process::Child {
    fn wait_with_output_and_rusage(mut self) -> Finished {
        use std::{io::Read as _, os::unix::process::ExitStatusExt as _};
        let mut stdout = self.stdout.take().unwrap();
        let mut stderr = self.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            stdout.read_to_end(&mut bytes).unwrap();
            bytes
        });
        let err = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            stderr.read_to_end(&mut bytes).unwrap();
            bytes
        });
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child, with valid out-pointers.
        let waited = unsafe { libc::wait4(self.id() as i32, &raw mut status, 0, &raw mut usage) };
        assert!(waited > 0, "wait4: {}", std::io::Error::last_os_error());
        Finished {
            status: std::process::ExitStatus::from_raw(status),
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
            max_rss_mb: usage.ru_maxrss as u64 / 1024,
        }
    }
}
