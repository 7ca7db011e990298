//! Hardware counters on a real kernel PMU driver: Linux's `armv8_pmuv3` under QEMU's emulated
//! Arm PMUv3 (the `pmu` guest: two CPUs, the virtual clock in real time: CPU_CYCLES counts
//! about 1e9 per second; every other event reads 0, INST_RETIRED too without `-icount`). Runs
//! only in the guests `cargo xtask test` boots (xtask/src/guest.rs); on other machines this
//! file holds no test. [`cycles_per_thread_follow_each_threads_on_cpu_time`] runs in the
//! `exact` guest instead (one CPU, `-icount`), where no host stall moves time between threads.
#![cfg(target_arch = "aarch64")]

use std::{
    os::fd::{FromRawFd as _, OwnedFd},
    process::{Command, Output},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use topdown_tests::{
    ClockRun, TICK_NS, assert_cycles_track_time, assert_multiplexed_clock,
    http::{Running, free_port, get, serve_command, wait_for},
    instruction_clock, privileged, stolen_ns, thread_cputime_ns, threads_by_tid,
    topdown_bpf_binary,
};

/// The emulated machine's CPU PMU (QEMU's `virt` board describes it in its device tree).
const PMU: &str = "armv8_pmuv3";
/// CPU_CYCLES.
const CPU_CYCLES: u64 = 0x11;

fn pmu_type() -> u32 {
    std::fs::read_to_string(format!("/sys/bus/event_source/devices/{PMU}/type"))
        .expect("the guest has the armv8_pmuv3 PMU")
        .trim()
        .parse()
        .unwrap()
}

/// Opens CPU_CYCLES with `pinned` on `cpu` for `pid` (-1: every task), counting at once.
fn open_cycles(pid: i32, cpu: i32, pinned: bool) -> OwnedFd {
    let mut attr = perf_event_open_sys::bindings::perf_event_attr {
        type_: pmu_type(),
        size: std::mem::size_of::<perf_event_open_sys::bindings::perf_event_attr>() as u32,
        config: CPU_CYCLES,
        ..Default::default()
    };
    attr.set_pinned(u64::from(pinned));
    // SAFETY: a valid attr; the fd returned is owned below.
    let fd = unsafe { perf_event_open_sys::perf_event_open(&mut attr, pid, cpu, -1, 0) };
    assert!(
        fd >= 0,
        "perf_event_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a new fd nobody else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn read_count(fd: &OwnedFd) -> u64 {
    let mut count = 0u64;
    // SAFETY: reads one u64 (read_format 0) into a u64.
    let n = unsafe {
        libc::read(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            (&raw mut count).cast(),
            8,
        )
    };
    assert_eq!(n, 8, "reading a counter");
    count
}

/// The PMU's cycles per nanosecond of on-CPU time, measured without the tool: a counter on
/// this thread alone against the thread's own CPU clock over 300 ms of spinning.
fn cycles_per_ns() -> f64 {
    let fd = open_cycles(0, -1, false);
    let (c0, t0) = (read_count(&fd), thread_cputime_ns());
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < Duration::from_millis(300) {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    let (c1, t1) = (read_count(&fd), thread_cputime_ns());
    let rate = (c1 - c0) as f64 / (t1 - t0) as f64;
    eprintln!("PMU rate: {rate} cycles per on-CPU ns");
    assert!(rate > 0.1 && rate < 10.0, "CPU_CYCLES counts: {rate}/ns");
    rate
}

fn workload() -> std::path::PathBuf {
    topdown_bpf_binary().with_file_name("workload")
}

/// As [`run_tool`], with what [`assert_cycles_track_time`] needs of the run: the time stolen
/// over it, and the switches the kernel did not report (the final document's count).
fn run_tool_measured(args: &[&str], run_ms: u32) -> ((Output, Vec<Value>), ClockRun) {
    let stolen_before = stolen_ns();
    let (output, documents) = run_tool(args, run_ms);
    let unreported = documents.last().expect("a final document")["kernel_stats"]
        ["switches_the_kernel_did_not_report"]
        .as_u64()
        .expect("the count");
    let run = ClockRun {
        stolen: stolen_ns() - stolen_before,
        unreported,
    };
    ((output, documents), run)
}

/// Runs the tool with `args` over the test workload (`--run-ms run_ms`), its report in a
/// file: the tool's output and every JSON document of the report.
fn run_tool(args: &[&str], run_ms: u32) -> (Output, Vec<Value>) {
    let report = std::env::temp_dir().join("guest-report.json");
    let output = Command::new(topdown_bpf_binary())
        .args(args)
        .args(["--json", "--force", "-o"])
        .arg(&report)
        .arg("--")
        .arg(workload())
        .args(["--run-ms", &run_ms.to_string(), "--churn", "6", "--no-wait"])
        .output()
        .expect("running topdown-bpf");
    assert!(
        output.status.success(),
        "topdown-bpf {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let documents = std::fs::read_to_string(&report)
        .expect("the report")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    (output, documents)
}

/// Runs in the `exact` guest: it compares a clock counter with the scheduler's books at each
/// thread's switches, and under a clock that follows the host's a host stall between the
/// scheduler's clock update and the program's read moves itself from one thread to the next
/// (21 ms once, on a loaded CI host), unbounded; under `-icount` the stall stops the guest's
/// clocks too.
#[test]
fn cycles_per_thread_follow_each_threads_on_cpu_time() {
    if !privileged("cycles per thread") {
        return;
    }
    assert!(
        instruction_clock(),
        "runs in the `exact` guest, whose clock follows its instructions (xtask/src/guest.rs)"
    );
    let rate = cycles_per_ns();
    let event = format!("{PMU}/cpu_cycles/");
    let ((_, documents), run) = run_tool_measured(&["--per-thread", "-e", &event], 2000);
    let last = documents.last().unwrap();
    // A slice whose count the kernel refused as impossible (QEMU's PMU has given a count 2^31
    // too high, see docs/how-it-counts.md) is charged as if the counter had been off: running
    // then falls short of enabled by that slice.
    let refused = last["kernel_stats"]["counts_refused_as_impossible"]
        .as_u64()
        .expect("the count of refused counts");
    if refused > 0 {
        eprintln!("THE KERNEL REFUSED {refused} COUNTS AS IMPOSSIBLE in this run");
    }
    let mut checked = 0;
    for thread in threads_by_tid(last).values() {
        let counter = &thread["counters"][event.as_str()];
        let (enabled, running) = (
            counter["enabled_ns"].as_u64().expect("enabled_ns"),
            counter["running_ns"].as_u64().expect("running_ns"),
        );
        if refused == 0 {
            assert_eq!(
                enabled, running,
                "one hardware event on a 7-counter PMU is never multiplexed: {thread}"
            );
        } else {
            assert!(running <= enabled, "{thread}");
        }
        let on_cpu = thread["on_cpu_ns"].as_u64().unwrap();
        let cycles = counter["value"].as_f64().expect("counted");
        assert_cycles_track_time(
            &format!("thread {} ({})", thread["tid"], thread["comm"]),
            cycles,
            rate,
            on_cpu,
            thread["switches"].as_u64().unwrap(),
            1.0,
            &run,
        );
        checked += 1;
    }
    assert!(
        checked >= 4,
        "the workload's threads were reported: {checked}"
    );
}

/// Ten spellings of CPU_CYCLES (all modes), more events than the PMU's seven counters.
const TEN_CYCLES: [&str; 10] = [
    "armv8_pmuv3/cpu_cycles/",
    "armv8_pmuv3/event=0x11/",
    "armv8_pmuv3/event=0x011/",
    "armv8_pmuv3/event=17/",
    "armv8_pmuv3/config=0x11/",
    "r11",
    "r011",
    "r0011",
    "cycles",
    "cpu-cycles",
];

#[test]
fn more_cycle_events_than_counters_are_multiplexed_and_scaled_per_thread() {
    if !privileged("multiplexing") {
        return;
    }
    let rate = cycles_per_ns();
    let mut args = vec!["--per-thread"];
    for event in TEN_CYCLES {
        args.extend(["-e", event]);
    }
    let (_, documents) = run_tool(&args, 3000);
    let last = documents.last().unwrap();
    let mut multiplexed = 0;
    for thread in threads_by_tid(last).values() {
        let on_cpu = thread["on_cpu_ns"].as_u64().unwrap();
        for event in TEN_CYCLES {
            let counter = &thread["counters"][event];
            let (enabled, running) = (
                counter["enabled_ns"].as_u64().unwrap(),
                counter["running_ns"].as_u64().unwrap(),
            );
            let Some(cycles) = counter["value"].as_f64() else {
                // A short thread may have run only while this event was multiplexed out.
                assert_eq!(running, 0, "null only when it never ran");
                assert!(on_cpu < 50_000_000, "{event}: a busy thread was counted");
                continue;
            };
            if running < enabled {
                multiplexed += 1;
            }
            // Scaled by the thread's own enabled / running times: a clock counted at a fixed
            // rate while on a counter scales back to the rate times the enabled time. On
            // failure, every spelling's readings of this thread: one event off and the others
            // right points at the PMU's counter, all off at the charging.
            assert_multiplexed_clock(
                &format!(
                    "{event} of {} ({}); every spelling: {}",
                    thread["tid"], thread["comm"], thread["counters"]
                ),
                (counter["raw"].as_u64().unwrap(), enabled, running),
                cycles,
                rate,
                thread["switches"].as_u64().unwrap() + on_cpu / TICK_NS + 1,
            );
        }
    }
    assert!(
        multiplexed > 10,
        "ten events on seven counters were multiplexed"
    );
}

/// The interval documents written to `report` so far.
fn documents_in(report: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(report)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn counters_another_pmu_user_holds_are_not_counted_then_resume() {
    if !privileged("another PMU user") {
        return;
    }
    // A TopDown set (Neoverse N2's, forced: six events) on every counter there is. (Of its
    // events this PMU counts only CPU_CYCLES: its nodes are never shown here, see
    // `topdown_sets_forced_on_a_pmu_that_counts_only_cycles_show_no_node`.)
    let event = "cpu_cycles";
    let report = std::env::temp_dir().join("hog-report.json");
    let _ = std::fs::remove_file(&report);
    let tool = Command::new(topdown_bpf_binary())
        .args(["--per-thread", "-I", "250", "--json", "--td-level", "1"])
        .args(["--cpuid", "neoverse-n2", "-o"])
        .arg(&report)
        .arg("--")
        .arg(workload())
        .args(["--run-ms", "6000", "--churn", "0", "--no-wait"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running topdown-bpf");
    // Counting first (four windows), then every counter of every CPU held by pinned CPU-wide
    // events (7 per CPU: 6 general and the cycle counter) for two seconds, then released.
    let deadline = Instant::now() + Duration::from_secs(120);
    while documents_in(&report).len() < 4 {
        assert!(Instant::now() < deadline, "the tool wrote no intervals");
        thread::sleep(Duration::from_millis(50));
    }
    let cpus = thread::available_parallelism().unwrap().get() as i32;
    let held: Vec<OwnedFd> = (0..cpus)
        .flat_map(|cpu| (0..7).map(move |_| open_cycles(-1, cpu, true)))
        .collect();
    thread::sleep(Duration::from_secs(2));
    let counted: Vec<u64> = held.iter().map(read_count).collect();
    drop(held);
    let output = tool.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(counted.iter().all(|&c| c > 0), "the pinned events counted");
    let documents = documents_in(&report);
    let (mut before, mut not_counted, mut after) = (0, 0, 0);
    for document in documents.iter().filter(|d| d["final"] == false) {
        let busy = threads_by_tid(document)
            .into_values()
            .find(|t| t["comm"] == "busy");
        let Some(busy) = busy else { continue };
        let counter = &busy["counters"][event];
        let nodes: usize = busy["topdown"]
            .as_array()
            .expect("TopDown per thread")
            .iter()
            .map(|part| part["nodes"].as_object().map_or(0, |n| n.len()))
            .sum();
        assert_eq!(
            nodes, 0,
            "no ratio of counters that did not run or count: {busy}"
        );
        let (running, enabled) = (
            counter["running_ns"].as_u64().unwrap(),
            counter["enabled_ns"].as_u64().unwrap(),
        );
        match counter["value"].as_f64() {
            None => {
                assert_eq!(running, 0, "not counted means it never ran");
                assert!(enabled > 0);
                not_counted += 1;
            }
            Some(value) => {
                assert!(running > 0 && value > 0.0, "counted: {counter}");
                if not_counted == 0 {
                    before += 1;
                } else {
                    after += 1;
                }
            }
        }
    }
    eprintln!("windows: {before} counted, {not_counted} not counted, {after} counted again");
    assert!(
        before > 0 && not_counted >= 4 && after > 0,
        "counted, not (two seconds of 250 ms windows), counted again"
    );
    let told: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("never running"))
        .collect();
    assert_eq!(told.len(), 1, "told once: {stderr}");
    let last = documents.last().unwrap();
    assert_eq!(last["final"], true, "a final report");
    assert!(
        last["kernel_stats"]["counter_not_running"]
            .as_u64()
            .unwrap()
            > 0,
        "the kernel side counted the slices it could not count"
    );
}

/// Neoverse models with slot-based TopDown, forced on this PMU, and their widths.
const ARM_MODELS: [(&str, &str, &[&str], f64); 3] = [
    (
        "neoverse-n2",
        "neoverse_n2",
        &["arm64/sbsa.json", "arm64/arm/neoverse-n2-v2/metrics.json"],
        5.0,
    ),
    (
        "neoverse-v1",
        "neoverse_v1",
        &["arm64/sbsa.json", "arm64/arm/neoverse-v1/metrics.json"],
        8.0,
    ),
    (
        "neoverse-v3",
        "neoverse_v3",
        &["arm64/sbsa.json", "arm64/arm/neoverse-v3/metrics.json"],
        10.0,
    ),
];

/// Whether this PMU counts the event `name` of a set: QEMU's counts CPU_CYCLES, and
/// INST_RETIRED only with `-icount` (the `exact` guest, not this one); every other event reads
/// 0. (`cpu-clock` is the kernel's clock.)
fn counts_here(name: &str) -> bool {
    ["cpu-clock", "cpu_cycles"]
        .iter()
        .any(|counting| name.eq_ignore_ascii_case(counting))
}

/// Neoverse TopDown sets forced on this PMU open and run, and their events this PMU never
/// counts make no number: the calibration at start names them in one line, the document's
/// counter set lists them, every row has them null with `not_counting`, and no TopDown node
/// (nor a bottleneck) is shown, while cycles are counted. (Their formulas are checked against
/// perf's data on the host: tests/tests/tma_formulas.rs.)
#[test]
fn topdown_sets_forced_on_a_pmu_that_counts_only_cycles_show_no_node() {
    if !privileged("Arm TopDown sets") {
        return;
    }
    // The emulated CPU is a Neoverse N1: no slot-based TopDown, said in one line.
    let n1 = Command::new(topdown_bpf_binary())
        .args(["--td-level", "1", "--duration", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&n1.stderr);
    assert!(!n1.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Neoverse N1"), "{stderr}");

    for (cpuid, model, _, _) in ARM_MODELS {
        let (output, documents) =
            run_tool(&["--per-thread", "--td-level", "1", "--cpuid", cpuid], 1500);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = documents.last().unwrap();
        let set = &last["counter_set"];
        let reason = set["reason"].as_str().unwrap();
        assert!(
            reason.contains(model) && reason.contains("forced") && reason.contains(PMU),
            "the first line says the model was forced: {reason}"
        );
        let silent: Vec<&str> = set["counters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|name| !counts_here(name))
            .collect();
        assert!(silent.len() >= 3, "{model}: {set}");
        let told: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("does not count"))
            .collect();
        assert_eq!(told.len(), 1, "{model}: said once: {stderr}");
        for name in &silent {
            assert!(told[0].contains(name), "{model}: {name} in {}", told[0]);
        }
        let mut rows = 0;
        for document in &documents {
            let listed: Vec<&str> = document["counter_set"]["not_counting"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(listed, silent, "{model}");
            for thread in threads_by_tid(document).values() {
                let counters = thread["counters"].as_object().unwrap();
                for (name, counter) in counters {
                    if counts_here(name) {
                        assert!(counter.get("not_counting").is_none(), "{model} {name}");
                    } else {
                        assert!(counter["value"].is_null(), "{model} {name}: {counter}");
                        assert_eq!(counter["not_counting"], true, "{model} {name}");
                        assert!(
                            counter["running_ns"].as_u64() > Some(0),
                            "it ran: {counter}"
                        );
                    }
                }
                let cycles = counters
                    .iter()
                    .find(|(name, _)| name.eq_ignore_ascii_case("cpu_cycles"))
                    .map(|(_, c)| c["value"].as_f64().expect("cycles are counted"))
                    .unwrap();
                if thread["on_cpu_ns"].as_u64() > Some(1_000_000) {
                    assert!(cycles > 0.0, "{model}: {thread}");
                }
                let parts = thread["topdown"].as_array().expect("TopDown per thread");
                assert!(
                    parts.iter().all(|p| p["nodes"]
                        .as_object()
                        .is_some_and(serde_json::Map::is_empty)),
                    "{model}: no node made of what this PMU does not count: {thread}"
                );
                rows += 1;
            }
        }
        assert!(rows >= 8, "{model}: {rows} rows");
    }

    // The table says it under every window, and shows no TopDown column.
    let table = Command::new(topdown_bpf_binary())
        .args([
            "--per-thread",
            "--td-level",
            "1",
            "--cpuid",
            "neoverse-n2",
            "--",
        ])
        .arg(workload())
        .args(["--run-ms", "500", "--churn", "0", "--no-wait"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    assert!(stdout.contains("NOT COUNTING on this PMU: "), "{stdout}");
    assert!(!stdout.contains("Backend%"), "{stdout}");
}

/// `check` says how many of a set's events count on this PMU, and names those that do not.
#[test]
fn check_says_which_events_this_pmu_counts() {
    if !privileged("check on a PMU that does not count") {
        return;
    }
    let check = Command::new(topdown_bpf_binary())
        .arg("check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{stdout}");
    let pmu = stdout
        .lines()
        .find(|l| l.starts_with("pmu: "))
        .unwrap_or_else(|| panic!("a pmu line: {stdout}"));
    // CPU_CYCLES, INST_RETIRED and BR_MIS_PRED (raw: QEMU's PMU advertises no common event
    // to the generic names); cycles count.
    assert!(pmu.starts_with("pmu: 1 of 3 events"), "{stdout}");
    let silent = stdout
        .lines()
        .find(|l| l.contains("does not count"))
        .unwrap_or_else(|| panic!("one line names what does not count: {stdout}"));
    assert!(
        silent.contains("does not count r08, r10 (") && silent.contains("r11 counted"),
        "{silent}"
    );
    assert!(
        !stdout.contains("NMI watchdog"),
        "arm64 without pseudo-NMIs: the buddy detector holds no counter: {stdout}"
    );
}

/// `serve` with a set whose events this PMU never counts: no series for them (their zeros are
/// no counts), each named by `topdown_event_not_counting` with 1, and no TopDown gauge.
#[test]
fn serve_exports_no_series_for_events_this_pmu_does_not_count() {
    if !privileged("serve on a PMU that does not count") {
        return;
    }
    let port = free_port();
    let _serve = Running(
        serve_command(port)
            .args(["--td-level", "1", "--cpuid", "neoverse-n2"])
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("starting serve"),
    );
    let body = wait_for("serve to export", Duration::from_secs(120), || {
        get(port, "/metrics").filter(|body| {
            body.contains("topdown_event_not_counting{") && body.contains("event=\"cpu_cycles\"")
        })
    });
    let silent: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("topdown_event_not_counting{event=\""))
        .filter_map(|rest| rest.strip_suffix("\"} 1"))
        .collect();
    assert!(silent.len() >= 3, "{body}");
    assert!(!silent.iter().any(|name| counts_here(name)), "{silent:?}");
    for name in &silent {
        let series = format!("event=\"{name}\"");
        assert!(
            !body
                .lines()
                .any(|l| l.starts_with("topdown_cgroup_") && l.contains(&series)),
            "no series for {name}: {body}"
        );
    }
    assert!(!body.contains("topdown_cgroup_tma_ratio{"), "{body}");
}

#[test]
fn c2c_says_in_one_line_that_there_is_no_memory_sampling_pmu() {
    if !privileged("c2c without SPE") {
        return;
    }
    let output = Command::new(topdown_bpf_binary())
        .args(["c2c", "--duration", "1"])
        .output()
        .expect("running topdown-bpf c2c");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "c2c cannot run here: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].contains("memory") && lines[0].contains("SPE"),
        "says why: {stderr}"
    );
}
