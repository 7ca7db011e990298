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
    OUTPUT_PATIENCE, OutputWithin,
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
    let output = OutputWithin::new(recorder.stdout.take().expect("record's output"));
    let mut live = output.line("record's first interval", OUTPUT_PATIENCE);
    let mut children = [workload("a"), workload("b")];
    live += &output.rest("record's output", OUTPUT_PATIENCE);
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
    // Each leaf was charged (no fixed amount: on a loaded machine the busy threads get what
    // the scheduler gives them; seen 344 ms of a 1.5 s workload with a build beside).
    assert!(
        on_cpu(&tree.path("a")) > 0 && on_cpu(&tree.path("b")) > 0,
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

    // The plot names the threads it draws, the most on-CPU first: both workloads' `busy`
    // before their `sleepy` threads. The recording is machine-wide, so threads of whatever else
    // runs (a build beside the tests) may rank anywhere: only the workloads' order is tested.
    let svg = dir.path().join("run.svg");
    stdout_of(
        "plot",
        topdown()
            .arg("plot")
            .arg("-i")
            .arg(&file)
            .arg("-o")
            .arg(&svg)
            .args(["--top", "64"]),
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the plot is SVG that parses");
    let labels: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    let busy: Vec<usize> = (0..labels.len())
        .filter(|&i| labels[i].starts_with("busy ("))
        .collect();
    assert_eq!(busy.len(), 2, "both busy threads are named: {labels:?}");
    assert!(
        (0..labels.len())
            .filter(|&i| labels[i].starts_with("sleepy ("))
            .all(|sleepy| busy.iter().all(|&b| b < sleepy)),
        "busy threads rank before sleepy ones: {labels:?}"
    );
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

    // Outputs are whole or absent: never over the input, never over a file unless --force,
    // nothing under the name (nor a temporary file) when the disk is full.
    let before = std::fs::read(&file).unwrap();
    let onto_input = topdown()
        .args(["report", "-i"])
        .arg(&file)
        .arg("--parquet")
        .arg(&file)
        .args(["--force"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&onto_input.stderr);
    assert_eq!(onto_input.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("input") && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the recording is untouched"
    );
    let parquet = dir.path().join("rows.parquet");
    std::fs::write(&parquet, b"keep").unwrap();
    let over = topdown()
        .args(["report", "-i"])
        .arg(&file)
        .arg("--parquet")
        .arg(&parquet)
        .output()
        .unwrap();
    assert_eq!(over.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&over.stderr).contains("--force"));
    assert_eq!(std::fs::read(&parquet).unwrap(), b"keep");
    stdout_of(
        "report --parquet --force",
        topdown()
            .args(["report", "-i"])
            .arg(&file)
            .arg("--parquet")
            .arg(&parquet)
            .arg("--force"),
    );
    assert_eq!(
        &std::fs::read(&parquet).unwrap()[..4],
        b"PAR1",
        "replaced, whole"
    );
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4k", "tmpfs"])
        .arg(&full)
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        // Unmounted however the test ends (a panic before the `umount` left one mounted).
        struct Mounted<'a>(&'a std::path::Path);
        impl Drop for Mounted<'_> {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg(self.0).status();
            }
        }
        let mount = Mounted(&full);
        // Its one page taken: the next write finds the disk full.
        let filler = full.join("filler");
        let _ = std::fs::write(&filler, vec![0u8; 4096]);
        let trace = full.join("run.trace.json");
        let on_full = topdown()
            .args(["report", "-i"])
            .arg(&file)
            .arg("--trace")
            .arg(&trace)
            .output()
            .unwrap();
        let left: Vec<_> = std::fs::read_dir(&full)
            .unwrap()
            .flatten()
            .filter(|entry| entry.path() != filler)
            .collect();
        drop(mount);
        let stderr = String::from_utf8_lossy(&on_full.stderr);
        assert_eq!(
            on_full.status.code(),
            Some(1),
            "a full disk is an error: {stderr}"
        );
        assert!(
            stderr.contains("run.trace.json"),
            "it names the file: {stderr}"
        );
        assert!(left.is_empty(), "nothing left on the full disk: {left:?}");
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI mounts a small tmpfs");
        eprintln!("\n*** SKIPPED the full-disk case: cannot mount a tmpfs ***\n");
    }

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

/// A path that is not UTF-8 works where the OS allows it: `record -o` and `--parquet` write
/// there, `report -i` reads it back; never a panic.
#[test]
fn paths_that_are_not_utf8_are_written_and_read() {
    use std::{ffi::OsStr, os::unix::ffi::OsStrExt as _};
    if !topdown_tests::privileged("paths_that_are_not_utf8") {
        return;
    }
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(OsStr::from_bytes(b"run-\xff.rec"));
    let parquet = dir.path().join(OsStr::from_bytes(b"rows-\xfe"));
    stdout_of(
        "record to paths that are not UTF-8",
        topdown()
            .arg("record")
            .arg("-o")
            .arg(&file)
            .arg("--parquet")
            .arg(&parquet)
            .args(["--duration", "0.5"]),
    );
    let files = std::fs::read_dir(&parquet).unwrap().count();
    assert!(files >= 1, "Parquet files in the folder: {files}");
    // The recording exists now: another run does not write over it without --force.
    let again = topdown()
        .arg("record")
        .arg("-o")
        .arg(&file)
        .args(["--duration", "0.2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--force") && stderr.lines().count() == 1,
        "{stderr}"
    );
    let documents = documents(&report(&file, &["--json"]));
    assert_eq!(documents.last().unwrap()["final"], true);
}

/// `| head -1`: the reader of standard output goes away after one window. `record` goes on
/// into its file and finishes it with its totals; a run that only prints ends at once, quietly
/// (no error, exit 0), as `perf` and `grep` do.
#[test]
fn a_closed_standard_output_ends_a_printing_run_and_not_a_recording() {
    use std::io::BufRead as _;
    if !topdown_tests::privileged("a_closed_standard_output") {
        return;
    }
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("piped.rec");
    let first_line_then_close = |command: &mut Command| {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running topdown-bpf");
        let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        reader.read_line(&mut first).unwrap();
        assert!(first.contains("\"schema\""), "a window first: {first}");
        drop(reader);
        let started = std::time::Instant::now();
        let output = child.wait_with_output().unwrap();
        (output, started.elapsed())
    };
    let (recorded, _) = first_line_then_close(topdown().arg("record").arg("-o").arg(&file).args([
        "-I",
        "200",
        "--json",
        "--duration",
        "2",
    ]));
    let stderr = String::from_utf8_lossy(&recorded.stderr);
    assert!(recorded.status.success(), "{stderr}");
    assert!(stderr.contains("recorded"), "{stderr}");
    let documents = documents(&report(&file, &["--json", "-I", "200"]));
    assert!(documents.len() >= 5, "every window, after the pipe closed");
    assert_eq!(documents.last().unwrap()["final"], true);
    let check = topdown()
        .args(["report", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&check.stderr).contains("ends before"),
        "the recording has its totals"
    );

    let (printed, took) = first_line_then_close(topdown().args([
        "--per-thread",
        "-I",
        "200",
        "--json",
        "--duration",
        "30",
    ]));
    assert!(printed.status.success(), "exit 0");
    assert!(
        printed.stderr.is_empty(),
        "quietly: {}",
        String::from_utf8_lossy(&printed.stderr)
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "ended at once: {took:?}"
    );
}

/// `record --store` as an always-on recorder is run: segments begin as the windows go (one a
/// second here), the oldest are removed to keep the store within `--max-size` (each removal
/// said), `report --store` reads the store while it is written (the open segment up to its
/// last whole window), and after a `kill -9` every window written is read back, in order, the
/// removed ones apart.
#[test]
fn a_store_is_kept_within_its_size_and_read_while_written_and_after_a_kill() {
    if !topdown_tests::privileged("a_store_is_kept_within_its_size") {
        return;
    }
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let max_size = 24 * 1024;
    let mut recorder = topdown()
        .args(["record", "--store"])
        .arg(&store)
        .args([
            "--segment",
            "1s",
            "--max-size",
            "24K",
            "-I",
            "200",
            "--per-cgroup",
        ])
        .args(["--json", "--duration", "120"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting record --store");
    let segments = || -> Vec<(String, u64)> {
        let mut names: Vec<(String, u64)> = std::fs::read_dir(&store)
            .map(|dir| {
                dir.filter_map(|e| {
                    let e = e.ok()?;
                    Some((e.file_name().into_string().ok()?, e.metadata().ok()?.len()))
                })
                .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    // Until the first segment has been removed for the size (bounded: a loaded machine is slow).
    let mut first = None;
    let started = std::time::Instant::now();
    loop {
        let now = segments();
        if first.is_none() {
            first = now.first().map(|(name, _)| name.clone());
        }
        if first.is_some() && now.first().map(|(name, _)| name) != first.as_ref() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(90),
            "no segment removed for --max-size in 90 s: {now:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Read while written.
    let live = documents(&stdout_of(
        "report --store while written",
        topdown().args(["report", "--store"]).arg(&store).args([
            "-I",
            "200",
            "--json",
            "--per-cgroup",
        ]),
    ));
    let live_windows = live.iter().filter(|d| d["final"] == false).count();
    assert!(
        live_windows >= 5,
        "{live_windows} windows read while written"
    );
    assert_eq!(live.last().unwrap()["final"], true);

    recorder.kill().expect("kill -9");
    let output = recorder.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("removed") && said.contains("over --max-size"),
        "each removal is said: {said}"
    );
    let kept = segments();
    let largest = kept.iter().map(|(_, bytes)| *bytes).max().unwrap();
    let held: u64 = kept.iter().map(|(_, bytes)| bytes).sum();
    // Checked as each segment begins: the open one grows past it until the next.
    assert!(
        held <= max_size + 2 * largest,
        "the store holds {held} bytes for --max-size {max_size}: {kept:?}"
    );
    let after = documents(&stdout_of(
        "report --store after a kill -9",
        topdown().args(["report", "--store"]).arg(&store).args([
            "-I",
            "200",
            "--json",
            "--per-cgroup",
            "--from",
            "-10min",
        ]),
    ));
    let windows: Vec<&Value> = after.iter().filter(|d| d["final"] == false).collect();
    assert!(
        windows.len() >= live_windows.saturating_sub(5 * 2),
        "{} windows after the kill, {live_windows} while written (two segments may have gone \
         since)",
        windows.len()
    );
    // Two ranges of the store as a diff's sides, split where the second newest segment
    // begins (its name, `20261206T114003Z.rec`, as RFC 3339): read, lined up, compared.
    let split = &kept[kept.len() - 2].0;
    let at = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &split[0..4],
        &split[4..6],
        &split[6..8],
        &split[9..11],
        &split[11..13],
        &split[13..15]
    );
    let halves = documents(&stdout_of(
        "diff of two ranges of the store",
        topdown()
            .arg("diff")
            .arg(format!("{}@..{at}", store.display()))
            .arg(format!("{}@{at}..", store.display()))
            .args(["--per-cgroup", "--json"]),
    ));
    assert_eq!(halves[0]["schema"], "topdown-bpf/diff/v1");
    assert!(
        !halves[0]["changes"].as_array().unwrap().is_empty(),
        "{}",
        halves[0]
    );
    let starts: Vec<f64> = windows
        .iter()
        .map(|d| d["interval"]["start_s"].as_f64().expect("a window's start"))
        .collect();
    assert!(
        starts.windows(2).all(|w| w[0] < w[1]),
        "windows in time order, none twice: {starts:?}"
    );
}

/// `diff` on real runs: two recordings of the same workload (a thread working 10 % of every 10
/// ms) show no change of what the workload decides (its %CPU) beyond the windows' own
/// variation, with the defaults (Welch's t per row and field, Holm-adjusted, p < 0.01 and at
/// least 5 %); a third where that thread works twice as long flags exactly that thread's %CPU.
/// Both duties stay well under a loaded CPU's fair share: on a machine running two test suites
/// and a build on 2 vCPUs (a fair share near a third of a CPU), a 40 % duty could not be met,
/// fell behind its periods and caught up in bursts, and its windows' %CPU spread so wide that
/// the doubling was not flagged (CI, 2026-12-07: Holm-adjusted p 0.010); 20 % stays met there.
/// Waits are the machine's, not the workload's: a run-queue wait that grew between two runs
/// (CI, 2026-12-06: the duty thread waited 1.9 % of each window, then 8.9 %, the VM's other
/// load and steal) is a change the diff rightly reports, so they are not asserted here.
#[test]
fn diff_flags_nothing_between_runs_alike_and_exactly_a_doubled_thread() {
    if !topdown_tests::privileged("diff_flags_nothing_between_runs_alike") {
        return;
    }
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let record = |name: &str, percent: &str| {
        let file = dir.path().join(name);
        let output = topdown()
            .arg("record")
            .arg("-o")
            .arg(&file)
            .args(["-I", "100", "--", env!("CARGO_BIN_EXE_neighbours"), "duty"])
            .args(["--percent", percent, "--run-ms", "3000"])
            .stdout(Stdio::null())
            .output()
            .expect("record");
        assert!(
            output.status.success(),
            "record: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        file
    };
    let (first, again, doubled) = (
        record("first.rec", "10"),
        record("again.rec", "10"),
        record("doubled.rec", "20"),
    );
    let diff = |before: &Path, after: &Path| -> Value {
        let text = stdout_of(
            "diff --json",
            topdown().arg("diff").arg(before).arg(after).arg("--json"),
        );
        serde_json::from_str(&text).expect("one JSON document")
    };
    // What the workload decides: its %CPU.
    let flagged = |document: &Value| -> Vec<(String, String)> {
        topdown_tests::flagged_changes(document)
            .into_iter()
            .filter(|(_, field)| field == "cpu_percent")
            .collect()
    };
    let alike = diff(&first, &again);
    assert_eq!(alike["test"]["name"], "welch");
    let duty = alike["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["key"] == "neighbours/duty" && c["field"] == "cpu_percent")
        .expect("the duty thread, lined up by process and thread name");
    let before = duty["before"].as_f64().unwrap();
    assert!(
        (7.5..=12.5).contains(&before),
        "{before} %CPU for a 10 % duty"
    );
    assert!(flagged(&alike).is_empty(), "{alike}");
    let changed = diff(&first, &doubled);
    assert_eq!(
        flagged(&changed),
        [("neighbours/duty".to_owned(), "cpu_percent".to_owned())],
        "{changed}"
    );
    // The table says it too, among what changed.
    let table = stdout_of("diff", topdown().arg("diff").arg(&first).arg(&doubled));
    assert!(
        table.lines().any(|l| l.starts_with("neighbours/duty")
            && l.contains("cpu_percent")
            && l.ends_with("changed")),
        "{table}"
    );
}

/// `record --store --user nobody`: the folder is given to nobody as it is opened, and the run,
/// root no more, begins every segment in it (through the folder's handle: the folder sits in
/// root's private temporary folder, which nobody could not walk into).
#[test]
fn a_store_written_as_nobody_goes_on_rotating() {
    use std::os::unix::fs::MetadataExt as _;
    if !topdown_tests::privileged("a_store_written_as_nobody_goes_on_rotating") {
        return;
    }
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let output = topdown()
        .args(["record", "--store"])
        .arg(&store)
        .args([
            "--segment",
            "1s",
            "-I",
            "200",
            "--duration",
            "4",
            "--user",
            "nobody",
        ])
        .stdout(Stdio::null())
        .output()
        .expect("record --store --user nobody");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("stored the run in"), "{said}");
    let nobody = topdown_user::privileges::lookup("nobody").unwrap().uid;
    assert_eq!(std::fs::metadata(&store).unwrap().uid(), nobody);
    let segments: Vec<_> = std::fs::read_dir(&store)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().uid())
        .collect();
    // The first window comes after the privileges went: every segment is nobody's.
    assert!(
        segments.len() >= 3 && segments.iter().all(|&uid| uid == nobody),
        "segments begun as nobody: {segments:?}"
    );
    let read = documents(&stdout_of(
        "report --store",
        topdown()
            .args(["report", "--store"])
            .arg(&store)
            .args(["-I", "200", "--json"]),
    ));
    assert!(read.len() >= 10, "{} documents", read.len());
}
