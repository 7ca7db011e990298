//! The `topdown-bpf` binary as a user runs it: a command's threads, JSON and CSV output, and
//! one-line errors.

use std::{collections::HashSet, process::Command};

use serde_json::Value;
use topdown_tests::{assert_ran, assert_switch_counts, privileged, topdown_bpf_binary};

fn topdown() -> Command {
    Command::new(topdown_bpf_binary())
}

/// The workload runs as a grandchild (under `sh`), after a short-lived `true`: the kernel
/// follows every process the command starts.
#[test]
fn json_report_of_a_command_lists_every_thread_including_exited_ones() {
    if !privileged("json_report_of_a_command") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let output = topdown()
        .args([
            "--per-thread",
            "--duration",
            "20",
            "-I",
            "500",
            "--json",
            "-o",
        ])
        .arg(&report)
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            "/bin/true; {} --run-ms 1500 --churn 5 --no-wait; true",
            env!("CARGO_BIN_EXE_workload")
        ))
        .output()
        .expect("running topdown-bpf");
    assert!(
        output.status.success(),
        "topdown-bpf failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The workload's own stdout (inherited) names its threads.
    let mut tids = HashSet::new();
    let mut exited = HashSet::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match event["event"].as_str() {
            Some("thread") => {
                tids.insert(event["tid"].as_u64().unwrap());
            }
            Some("exit") => {
                exited.insert(event["tid"].as_u64().unwrap());
            }
            _ => {}
        }
    }
    assert_eq!(tids.len(), 3);
    assert_eq!(exited.len(), 5);

    let text = std::fs::read_to_string(&report).unwrap();
    let docs: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is a JSON document"))
        .collect();
    assert!(
        docs.len() >= 3,
        "interval documents and a final one: {}",
        docs.len()
    );
    let last = docs.last().unwrap();
    assert_eq!(last["final"], true);
    assert!(docs[..docs.len() - 1].iter().all(|d| d["final"] == false));
    assert_eq!(last["schema"], "topdown-bpf/threads/v1");
    assert_eq!(last["lost_anything"], false);
    let threads = last["threads"].as_array().unwrap();
    let reported: HashSet<u64> = threads.iter().map(|t| t["tid"].as_u64().unwrap()).collect();
    for tid in tids.iter().chain(&exited) {
        assert!(
            reported.contains(tid),
            "thread {tid} missing from {reported:?}"
        );
    }
    for thread in threads {
        let tid = thread["tid"].as_u64().unwrap();
        if tids.contains(&tid) || exited.contains(&tid) {
            assert_eq!(
                thread["exited"], true,
                "the command ended, so thread {tid} died"
            );
        }
        // On-CPU time is its own field, not a counter of the (software) set; run-queue wait
        // is measured on this kernel (exact values: per_thread_kernel.rs).
        assert!(thread["on_cpu_ns"].as_u64().is_some(), "{thread}");
        assert!(thread["run_delay_ns"].as_u64().is_some(), "{thread}");
        assert!(thread["wait_percent"].as_f64().is_some(), "{thread}");
        assert!(
            thread["counters"].as_object().is_none_or(|c| c.is_empty()),
            "{thread}"
        );
    }
    let busy = threads
        .iter()
        .find(|t| t["comm"] == "busy")
        .expect("busy thread");
    // Charged its run (how much a loaded machine gives it varies; the exact time is checked
    // against the kernel's books in per_thread_kernel.rs).
    assert!(
        busy["on_cpu_ns"].as_u64().unwrap() > 10_000_000,
        "busy was charged its run"
    );
}

#[test]
fn csv_has_a_header_and_one_line_per_thread() {
    if !privileged("csv_has_a_header") {
        return;
    }
    let output = topdown()
        .args([
            "-x",
            ";",
            "--",
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
        ])
        .output()
        .expect("running topdown-bpf");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(';').collect();
    assert_eq!(&header[..3], ["time_s", "tid", "pid"]);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(';').collect()).collect();
    assert!(!rows.is_empty());
    assert!(
        rows.iter()
            .all(|r| r.len() == header.len() && r[0] == "total")
    );
    assert!(
        rows.iter().any(|r| r[3] == "sh"),
        "the shell is reported: {rows:?}"
    );
}

fn assert_one_line_error(output: &std::process::Output, needle: &str) {
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(needle), "`{needle}` in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `-o FILE` is refused over an existing file unless `--force`, and is written as the run
/// goes, whole lines at a time (it can be followed while the run lasts).
#[test]
fn the_report_file_is_replaced_only_when_asked_and_follows_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    std::fs::write(&report, "kept\n").unwrap();
    let output = topdown()
        .args(["--json", "--duration", "1", "-o"])
        .arg(&report)
        .output()
        .unwrap();
    assert_one_line_error(
        &output,
        "exists: give another name, or --force to replace it",
    );
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "kept\n");
    if !privileged("the_report_file_is_replaced_only_when_asked") {
        return;
    }
    let run = topdown()
        .args(["--json", "-I", "200", "--duration", "4", "--force", "-o"])
        .arg(&report)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Windows show up while the run lasts, each a whole document.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let documents = |text: &str| -> Vec<Value> {
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    while documents(&std::fs::read_to_string(&report).unwrap()).len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no window was written"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = run.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(!text.contains("kept"), "replaced");
    let all = documents(&text);
    assert_eq!(
        all.len(),
        text.lines().count(),
        "every line a whole document"
    );
    assert!(all.len() >= 3, "{} documents", all.len());
    assert_eq!(all.last().unwrap()["final"], true);
}

#[test]
fn unknown_pid_and_unwritable_output_are_one_line_errors() {
    let output = topdown().args(["-p", "4000000000"]).output().unwrap();
    assert_one_line_error(&output, "no process with pid 4000000000");
    let output = topdown().args(["-t", "4000000000"]).output().unwrap();
    assert_one_line_error(&output, "no thread with tid 4000000000");
    let output = topdown()
        .args(["-o", "/nonexistent-dir/report.txt", "--duration", "1"])
        .output()
        .unwrap();
    assert_one_line_error(
        &output,
        "cannot write the report /nonexistent-dir/report.txt",
    );
    let output = topdown().args(["--sort", "bogus"]).output().unwrap();
    assert_one_line_error(&output, "unknown sort field `bogus`");
}

#[test]
fn topdown_without_a_hardware_pmu_is_one_clear_line() {
    let has_pmu = ["cpu", "cpu_core", "armv8_pmuv3_0"].iter().any(|pmu| {
        std::path::Path::new("/sys/bus/event_source/devices")
            .join(pmu)
            .exists()
    });
    if has_pmu {
        eprintln!("SKIPPED topdown_without_a_hardware_pmu: this machine has a hardware PMU");
        return;
    }
    let output = topdown()
        .args(["--per-thread", "--td-level", "1"])
        .output()
        .unwrap();
    assert_one_line_error(&output, "needs a hardware PMU and this machine has none");
    assert!(
        output.stdout.is_empty(),
        "nothing printed on stdout, no number"
    );
}

/// `--drilldown` probes the machine before the run: it needs Level 3 and no command, and says
/// so in one line; without a PMU the probe is never started.
#[test]
fn drilldown_needs_level_three_and_the_whole_machine() {
    for args in [
        &["--td-level", "2", "--drilldown"][..],
        &["--td-level", "3", "--drilldown", "--", "true"],
    ] {
        let output = topdown().args(args).output().unwrap();
        assert_one_line_error(&output, "--drilldown probes the whole machine");
    }
    let output = topdown()
        .args(["--td-level", "3", "--drilldown", "--nodes", "memory_bound"])
        .output()
        .unwrap();
    assert!(!output.status.success(), "--drilldown and --nodes conflict");
    let has_pmu = ["cpu", "cpu_core"].iter().any(|pmu| {
        std::path::Path::new("/sys/bus/event_source/devices")
            .join(pmu)
            .exists()
    });
    if !has_pmu {
        let output = topdown()
            .args(["--td-level", "3", "--drilldown"])
            .output()
            .unwrap();
        assert_one_line_error(&output, "--td-level 3 needs a hardware PMU");
    }
}

#[test]
fn extra_events_are_counted_per_thread_and_bad_ones_are_one_line() {
    if !privileged("extra_events_are_counted_per_thread") {
        return;
    }
    let output = topdown()
        .args([
            "--json",
            "-e",
            "context-switches,page-faults",
            "-e",
            "msr/tsc/",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_workload"))
        .args(["--run-ms", "300", "--churn", "1", "--no-wait"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let doc: Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|d| d["final"] == true)
        .expect("the final document");
    let names: Vec<&str> = doc["counter_set"]["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        names.ends_with(&["context-switches", "page-faults", "msr/tsc/"]),
        "{names:?}"
    );
    let busy = doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "busy")
        .unwrap();
    let switches = busy["switches"].as_u64().unwrap();
    let counted = busy["counters"]["context-switches"]["raw"]
        .as_u64()
        .unwrap();
    assert_switch_counts("busy", counted, switches);
    assert!(busy["counters"]["page-faults"]["raw"].as_u64().is_some());

    let output = topdown().args(["-e", "context-switchs"]).output().unwrap();
    assert_one_line_error(&output, "did you mean `context-switches`?");
    let output = topdown().args(["-e", "nope/event=1/"]).output().unwrap();
    assert_one_line_error(&output, "no PMU `nope`");
}

#[test]
fn per_core_sums_each_cores_cpus() {
    if !privileged("per_core_sums_each_cores_cpus") {
        return;
    }
    let output = topdown()
        .args(["--per-core", "--duration", "1", "--json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["schema"], "topdown-bpf/cores/v1");
    let length_ns = doc["interval"]["length_s"].as_f64().unwrap() * 1e9;
    let cores = doc["cores"].as_array().unwrap();
    let mut cpus: Vec<u64> = cores
        .iter()
        .flat_map(|c| {
            c["cpus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
        })
        .collect();
    cpus.sort_unstable();
    let online = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(
        cpus,
        (0..online).collect::<Vec<_>>(),
        "every CPU in exactly one core"
    );
    for core in cores {
        // A per-CPU clock counts wall time: a core's sum is its CPU count times the run.
        let siblings = core["cpus"].as_array().unwrap().len() as f64;
        let clock = core["counters"]["cpu-clock"]["raw"].as_f64().unwrap();
        assert!(
            (clock / (siblings * length_ns) - 1.0).abs() < 0.05,
            "{}: {clock} ns over {siblings} CPUs in {length_ns} ns",
            core["core"]
        );
    }
}

#[test]
fn without_privileges_it_says_what_to_do() {
    if !privileged("without_privileges_it_says_what_to_do") {
        return;
    }
    // Drop to nobody with no capabilities, as an unprivileged user would run it.
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(topdown_bpf_binary())
        .args(["--duration", "1"])
        .output()
        .expect("setpriv (util-linux)");
    assert_one_line_error(&output, "needs root, or CAP_BPF and CAP_PERFMON");
}

/// `--cpus 1`: a hog pinned to CPU 1 is charged its run; one pinned to CPU 0 is not charged at
/// all (the switch program returns at once there, and no tick or counter of ours is opened),
/// and the first line says which CPUs are left out. A CPU that is not online is one line.
#[test]
fn cpus_counts_only_on_the_cpus_named() {
    if !privileged("cpus_counts_only_on_the_cpus_named") {
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("ONE CPU: --cpus cannot leave one out here (the test needs two)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let hog = env!("CARGO_BIN_EXE_neighbours");
    let output = topdown()
        .args(["--per-thread", "--json", "--cpus", "1", "-o"])
        .arg(&report)
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            "taskset -c 0 {hog} hog --threads 1 --run-ms 1000 & echo \"cpu0 $!\"; \
             taskset -c 1 {hog} hog --threads 1 --run-ms 1000 & echo \"cpu1 $!\"; wait"
        ))
        .output()
        .expect("running topdown-bpf");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "topdown-bpf failed: {stderr}");
    assert!(
        stderr
            .lines()
            .next()
            .is_some_and(|l| l.contains("counting on CPUs 1 only (--cpus): not on 0")),
        "the first line says it: {stderr}"
    );
    let pid_on = |cpu: &str| -> u64 {
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{cpu} "))?.trim().parse().ok())
            .unwrap_or_else(|| panic!("the hog on {cpu} was started"))
    };
    let (on_0, on_1) = (pid_on("cpu0"), pid_on("cpu1"));
    let text = std::fs::read_to_string(&report).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().expect("a final document")).unwrap();
    // What the threads of process `pid` were charged: its main thread's and its hog's.
    let charged = |pid: u64| -> (u64, u64) {
        let threads = last["threads"].as_array().unwrap().iter();
        let mut main = 0;
        let mut hog = 0;
        for thread in threads.filter(|t| t["pid"] == pid) {
            let ns = thread["on_cpu_ns"].as_u64().unwrap_or(0);
            if thread["tid"] == pid {
                main += ns
            } else {
                hog += ns
            }
        }
        (main, hog)
    };
    // The hog on CPU 1 spun a second, less what the machine's other work took of that CPU.
    assert_ran("the hog on CPU 1", charged(on_1).1);
    // The hog thread on CPU 0 lived there alone: never charged. Its process's main thread
    // was `taskset` until it moved itself to CPU 0: the time it ran before that (on CPU 1,
    // where its shell forked it) is charged at its first charge, a switch on CPU 1.
    let (main, hog) = charged(on_0);
    assert_eq!(hog, 0, "the hog on CPU 0 was not charged: {last}");
    assert!(
        main < 50_000_000,
        "the main thread on CPU 0 was charged only its start on CPU 1: {main} ns"
    );

    let offline = topdown()
        .args(["--duration", "1", "--cpus", "4095"])
        .output()
        .expect("running topdown-bpf");
    assert_one_line_error(&offline, "--cpus names CPUs that are not online here: 4095");
    let bad = topdown()
        .args(["--duration", "1", "--cpus", "3-1"])
        .output()
        .expect("running topdown-bpf");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("is a reversed range"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
