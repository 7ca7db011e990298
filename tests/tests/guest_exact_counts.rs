//! Exact per-thread hardware counts on a real kernel PMU driver: Linux's `armv8_pmuv3` under
//! QEMU's emulated Arm PMUv3 with one CPU and `-icount shift=0`, where INST_RETIRED counts user
//! instructions exactly. Runs only in the guest `cargo xtask test` boots (xtask/src/guest.rs);
//! on other machines this file holds no test.
#![cfg(target_arch = "aarch64")]

use std::{collections::HashMap, process::Command};

use serde_json::Value;
use topdown_tests::{assert_known_instructions, privileged, threads_by_tid, topdown_bpf_binary};

/// The loop lengths the threads run: a calibration thread (0) and several others, up to 1e8.
const LOOPS: [u64; 7] = [0, 1, 1_000, 1_000_000, 10_000_000, 50_000_000, 100_000_000];

/// The known-instructions program beside the tool.
fn known_instructions() -> std::path::PathBuf {
    topdown_bpf_binary().with_file_name("known_instructions")
}

/// Runs the tool with `events` over the known-instructions program (its threads started
/// together, so that they interleave on the one CPU): the tool's final JSON document, and the
/// program's `tid -> n`.
fn run(events: &[&str]) -> (Value, HashMap<u64, u64>) {
    let report = std::env::temp_dir().join("exact.json");
    let mut command = Command::new(topdown_bpf_binary());
    command
        .args(["--per-thread", "--json", "--force", "-o"])
        .arg(&report);
    for event in events {
        command.args(["-e", event]);
    }
    let output = command
        .arg("--")
        .arg(known_instructions())
        .args(LOOPS.map(|n| n.to_string()))
        .output()
        .expect("running topdown-bpf");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "topdown-bpf failed: {stderr}");
    eprintln!("{stderr}");
    let loops = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a JSON line per thread");
            (v["tid"].as_u64().unwrap(), v["n"].as_u64().unwrap())
        })
        .collect();
    let text = std::fs::read_to_string(&report).expect("the report");
    let document = serde_json::from_str(text.lines().last().expect("a final document"))
        .expect("a JSON document");
    (document, loops)
}

#[test]
fn each_thread_is_charged_exactly_the_user_instructions_it_retired() {
    if !privileged("exact per-thread counts") {
        return;
    }
    // perf's spellings of one event: the PMU's sysfs alias and the raw event number.
    let events = ["armv8_pmuv3/inst_retired/u", "r08:u"];
    for round in 0..2 {
        let (document, loops) = run(&events);
        assert_eq!(loops.len(), LOOPS.len(), "every thread reported its tid");
        assert_eq!(
            document["lost_anything"], false,
            "{}",
            document["kernel_stats"]
        );
        let threads = threads_by_tid(&document);
        let count = |tid: u64, event: &str| -> u64 {
            let thread = threads
                .get(&tid)
                .unwrap_or_else(|| panic!("thread {tid} not in the report"));
            let counter = &thread["counters"][event];
            // One CPU, three events (two hardware counters and the clock): never multiplexed.
            assert_eq!(
                counter["enabled_ns"], counter["running_ns"],
                "{event} of {tid} ran all the time it was enabled"
            );
            counter["raw"].as_u64().expect("a raw count")
        };
        let calibration = loops
            .iter()
            .find(|(_, n)| **n == 0)
            .map(|(tid, _)| *tid)
            .unwrap();
        for event in events {
            let baseline = count(calibration, event);
            eprintln!("round {round} {event}: a thread with no loop retired {baseline}");
            assert!(baseline > 0 && baseline < 100_000, "{event}: {baseline}");
            for (&tid, &n) in &loops {
                assert_known_instructions(
                    &format!("round {round}, thread {tid} (n = {n}), {event}"),
                    count(tid, event),
                    baseline,
                    n,
                );
            }
        }
        for (&tid, &n) in &loops {
            assert_eq!(
                threads[&tid]["exited"], true,
                "thread {tid} (n = {n}) ended before the report: it is reported exited"
            );
        }
    }
}

/// IPC on a real PMU driver: with `-e cycles -e instructions` every thread's row carries `ipc`,
/// its scaled instructions over its scaled cycles, and the table has the column.
#[test]
fn ipc_is_each_threads_instructions_over_its_cycles() {
    if !privileged("IPC from the PMU") {
        return;
    }
    let (document, loops) = run(&["cycles", "instructions"]);
    let threads = threads_by_tid(&document);
    for tid in loops.keys() {
        let thread = threads[tid];
        let value = |event: &str| thread["counters"][event]["value"].as_f64();
        let (cycles, instructions) = (value("cycles").unwrap(), value("instructions").unwrap());
        assert!(cycles > 0.0 && instructions > 0.0, "{thread}");
        let ipc = thread["ipc"].as_f64().expect("an IPC where both counted");
        assert!(
            (ipc - instructions / cycles).abs() <= 1e-12 * ipc,
            "thread {tid}: ipc {ipc}, {instructions} / {cycles}"
        );
    }
    let table = Command::new(topdown_bpf_binary())
        .args(["--per-thread", "-e", "cycles", "-e", "instructions", "--"])
        .arg(known_instructions())
        .arg("1000")
        .output()
        .expect("running topdown-bpf");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("SWITCHES") && l.contains("IPC")),
        "{text}"
    );
}

/// `--per-core` shows the value columns a core's own counters make: here, where the PMU counts
/// cycles and instructions (QEMU exposes INST_RETIRED only under `-icount`), a core that ran
/// cycles has an IPC, its instructions over its cycles as the same document scales them; one
/// that ran none has null, never a 0.
#[test]
fn per_core_rows_carry_each_cores_ipc() {
    if !privileged("per-core IPC") {
        return;
    }
    let output = Command::new(topdown_bpf_binary())
        .args(["--per-core", "-e", "cycles,instructions", "--duration", "1"])
        .arg("--json")
        .output()
        .expect("running topdown-bpf --per-core");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "--per-core: {stderr}");
    let text = String::from_utf8_lossy(&output.stdout);
    let last: Value =
        serde_json::from_str(text.lines().last().expect("a document")).expect("a JSON document");
    assert_eq!(last["schema"], "topdown-bpf/cores/v1");
    let cores = last["cores"].as_array().expect("cores");
    let mut with_ipc = 0;
    for core in cores {
        let value = |name: &str| core["counters"][name]["value"].as_f64();
        match (value("cycles"), value("instructions")) {
            (Some(cycles), Some(instructions)) if cycles > 0.0 => {
                let ipc = core["ipc"]
                    .as_f64()
                    .unwrap_or_else(|| panic!("no ipc: {core}"));
                let expected = instructions / cycles;
                assert!((ipc - expected).abs() <= 1e-12 * expected, "{core}");
                with_ipc += 1;
            }
            _ => assert!(core["ipc"].is_null(), "not measured, not a number: {core}"),
        }
    }
    assert!(with_ipc > 0, "some core ran cycles: {last}");
}
