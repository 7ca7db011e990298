//! `record`, `report` and `plot` on a real run: the report of a recording prints, byte for byte,
//! what the live run printed while it recorded (its intervals and its totals, per cgroup with a
//! roll-up and per thread); merged intervals add up to the recorded ones exactly; the plot is an
//! SVG that parses and names the threads it draws, and a PNG. Needs root.

use std::{
    collections::HashMap,
    path::Path,
    process::{Command, Stdio},
};

use serde_json::Value;
use topdown_tests::{
    cgroup_tree::{TestTree, unified_mount},
    stdout_of, topdown_bpf_binary,
};

/// The tests of this file one at a time: the machine-wide recording must not see the other
/// test's workload.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn topdown() -> Command {
    Command::new(topdown_bpf_binary())
}

/// The JSON documents of `text`, one per line.
fn documents(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON document per line"))
        .collect()
}

/// On-CPU nanoseconds per thread (tid) summed over the interval documents of `docs`.
fn on_cpu_by_tid(docs: &[Value]) -> HashMap<u64, u64> {
    let mut sums = HashMap::new();
    for doc in docs.iter().filter(|d| d["final"] == false) {
        for thread in doc["threads"].as_array().unwrap() {
            *sums.entry(thread["tid"].as_u64().unwrap()).or_default() +=
                thread["on_cpu_ns"].as_u64().unwrap();
        }
    }
    sums
}

fn report(file: &Path, args: &[&str]) -> String {
    stdout_of(
        &format!("report {}", args.join(" ")),
        topdown().arg("report").arg("-i").arg(file).args(args),
    )
}

#[test]
fn a_recording_reports_what_the_live_run_printed() {
    let Some(mount) = unified_mount("a_recording_reports_what_the_live_run_printed") else {
        return;
    };
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let tree = TestTree::new(&mount, "record", &["a", "b"]);
    let workload = |leaf: &str| {
        let child = Command::new(env!("CARGO_BIN_EXE_workload"))
            .args(["--run-ms", "1500", "--churn", "4", "--no-wait"])
            .stdout(Stdio::null())
            .spawn()
            .expect("starting the workload");
        tree.enter(leaf, child.id());
        child
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.rec");
    let root = tree.path("");

    // Per cgroup, rolled up, with intervals: the live documents are kept beside the file. The
    // workloads start once the first interval is out (the recorder counts: its start-up
    // check and loads take a variable time on a loaded machine).
    let mut recorder = topdown()
        .arg("record")
        .arg("-o")
        .arg(&file)
        .args([
            "--duration",
            "2",
            "-I",
            "200",
            "--json",
            "--rollup",
            "-G",
            &root,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting record");
    let mut output = std::io::BufReader::new(recorder.stdout.take().expect("record's output"));
    let mut live = String::new();
    std::io::BufRead::read_line(&mut output, &mut live).expect("record's first interval");
    let mut children = [workload("a"), workload("b")];
    std::io::Read::read_to_string(&mut output, &mut live).expect("record's output");
    assert!(recorder.wait().unwrap().success(), "record failed");
    for child in &mut children {
        child.wait().unwrap();
    }
    let replayed = report(&file, &["--json", "-I", "200", "--rollup", "-G", &root]);
    assert!(
        live.lines().count() >= 10,
        "ten intervals and the totals:\n{live}"
    );
    assert_eq!(
        replayed, live,
        "the report of the recording is the live run's output"
    );
    let totals = documents(&live).pop().unwrap();
    let groups = totals["groups"].as_array().unwrap();
    let on_cpu = |path: &str| {
        groups
            .iter()
            .find(|g| g["cgroup"] == path)
            .map_or(0, |g| g["on_cpu_ns"].as_u64().unwrap())
    };
    assert!(
        on_cpu(&tree.path("a")) > 500_000_000 && on_cpu(&tree.path("b")) > 500_000_000,
        "each leaf ran its busy thread: {totals}"
    );
    assert_eq!(
        on_cpu(&root),
        on_cpu(&tree.path("a")) + on_cpu(&tree.path("b")),
        "the rolled-up root is its leaves"
    );

    // Per thread from the same file: the totals' threads, and intervals merged two by two
    // that add up exactly to the recorded ones.
    let threads = documents(&report(&file, &["--json", "-I", "200"]));
    let merged = documents(&report(&file, &["--json", "-I", "400"]));
    let intervals = threads.len() - 1;
    assert_eq!(
        merged.len(),
        intervals.div_ceil(2) + 1,
        "pairs of intervals, and the totals"
    );
    assert_eq!(on_cpu_by_tid(&merged), on_cpu_by_tid(&threads));
    let final_threads = threads.last().unwrap()["threads"]
        .as_array()
        .unwrap()
        .clone();
    let names: Vec<&str> = final_threads
        .iter()
        .map(|t| t["comm"].as_str().unwrap())
        .collect();
    assert!(
        ["busy", "half", "sleepy", "churn-1"]
            .iter()
            .all(|n| names.contains(n)),
        "{names:?}"
    );
    let csv = report(&file, &["--csv"]);
    assert!(csv.starts_with("time_s,tid,pid,comm,cgroup,"), "{csv}");
    assert!(csv.lines().count() > 8, "{csv}");

    // The plot names the threads it draws: both workloads' `busy` are among the four busiest.
    let svg = dir.path().join("run.svg");
    stdout_of(
        "plot",
        topdown()
            .arg("plot")
            .arg("-i")
            .arg(&file)
            .arg("-o")
            .arg(&svg)
            .args(["--top", "4"]),
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the plot is SVG that parses");
    let labels: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    let busy = labels.iter().filter(|l| l.starts_with("busy (")).count();
    assert_eq!(busy, 2, "both busy threads are named: {labels:?}");
    assert!(labels.iter().any(|l| l.contains("%CPU")), "{labels:?}");

    let png = dir.path().join("run.png");
    stdout_of(
        "plot png",
        topdown()
            .arg("plot")
            .arg("-i")
            .arg(&file)
            .arg("-o")
            .arg(&png)
            .arg("--per-cgroup"),
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "{}",
        bytes.len()
    );
}

#[test]
fn a_command_recorded_reports_its_final_document() {
    if !topdown_tests::privileged("a_command_recorded_reports_its_final_document") {
        return;
    }
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cmd.rec");
    let live = stdout_of(
        "record a command",
        topdown()
            .arg("record")
            .arg("-o")
            .arg(&file)
            .args(["--json", "--", env!("CARGO_BIN_EXE_workload")])
            .args(["--run-ms", "600", "--churn", "3", "--no-wait"]),
    );
    // The workload prints JSON events too; the report's documents carry a schema.
    let live_json: Vec<&str> = live.lines().filter(|l| l.contains("\"schema\"")).collect();
    assert_eq!(live_json.len(), 1, "without -I, the final document only");
    assert_eq!(report(&file, &["--json"]).trim_end(), live_json[0]);

    // The view as a picture, after `t`: the workload's threads under its process.
    let picture = dir.path().join("view.svg");
    stdout_of(
        "report --screenshot",
        topdown()
            .args(["report", "-i"])
            .arg(&file)
            .arg("--screenshot")
            .arg(&picture)
            .args(["--size", "100x20", "--keys", "t"]),
    );
    let svg = std::fs::read_to_string(&picture).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the screenshot is SVG that parses");
    let text: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    let text = text.join("\n");
    assert!(
        text.contains("topdown-bpf") && text.contains("tree"),
        "{text}"
    );
    assert!(text.contains("─ busy") && text.contains("q quit"), "{text}");

    let errors = topdown()
        .args(["report", "-i"])
        .arg(dir.path().join("missing.rec"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&errors.stderr);
    assert_eq!(errors.status.code(), Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot open the recording"), "{stderr}");
    let not_multiple = topdown()
        .args(["report", "--json", "-I", "150", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&not_multiple.stderr);
    assert!(stderr.contains("give -I a multiple of 1000"), "{stderr}");
}
