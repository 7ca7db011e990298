//! A real recording exported for other tools: the Parquet file read back by DuckDB (its sums
//! per thread and per cgroup are `report --json`'s totals, exactly; its top five threads are
//! `report --top 5`'s), and the Trace Event timeline (every thread's slice and counter samples
//! are the recording's windows as `report --json -I` prints them). Needs root and cgroup2;
//! DuckDB is the `duckdb` Python package (`cargo xtask test` installs it).

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use serde_json::Value;
use topdown_tests::{
    cgroup_tree::{TestTree, unified_mount},
    stdout_of, topdown_bpf_binary,
};

fn topdown() -> Command {
    Command::new(topdown_bpf_binary())
}

fn report(file: &Path, args: &[&str]) -> String {
    stdout_of(
        &format!("report {}", args.join(" ")),
        topdown().arg("report").arg("-i").arg(file).args(args),
    )
}

fn documents(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON document per line"))
        .collect()
}

/// A two-second recording, 200 ms windows, of two workloads in two cgroups (threads that
/// churn, exit, sleep and spin) beside whatever else the machine runs.
fn recording(test: &str, name: &str, dir: &Path) -> Option<PathBuf> {
    let mount = unified_mount(test)?;
    let tree = TestTree::new(&mount, name, &["a", "b"]);
    // The workloads start once the recorder is attached (its file has its header): loading the
    // programs takes seconds when the tests beside this one load theirs (seen: workloads of 4 s
    // started first were done before the recorder attached, their cgroups missing). They run
    // past the 2 s recording.
    let file = dir.join("run.rec");
    let recorder = topdown()
        .arg("record")
        .arg("-o")
        .arg(&file)
        .args(["--duration", "2", "-I", "200", "--json"])
        // A counter beside on-CPU time, which every output carries as its own field.
        .args(["-e", "context-switches"])
        .arg("--parquet")
        .arg(dir.join("parts"))
        .args(["--parquet-windows", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting record");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::metadata(&file).map_or(0, |m| m.len()) == 0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut children: Vec<_> = ["a", "b"]
        .iter()
        .map(|leaf| {
            let child = Command::new(env!("CARGO_BIN_EXE_workload"))
                .args(["--run-ms", "3000", "--churn", "6", "--no-wait"])
                .stdout(Stdio::null())
                .spawn()
                .expect("starting the workload");
            tree.enter(leaf, child.id());
            child
        })
        .collect();
    let recorded = recorder.wait_with_output().expect("record");
    assert!(
        recorded.status.success(),
        "record: {}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    for child in &mut children {
        child.wait().unwrap();
    }
    Some(file)
}

/// What DuckDB reads from the Parquet file: sums per thread and per cgroup, the top five
/// threads by on-CPU time, and the counters' column names from the file's metadata. A thread
/// is its tid and pid, named by its latest window (one that execs changes its name; the run's
/// totals keep the latest).
const QUERIES: &str = r#"
import duckdb, json, sys
path = sys.argv[1]
con = duckdb.connect()
con.execute(f"create view t as select * from read_parquet('{path}')")
meta = dict(con.execute(
    f"select decode(key), decode(value) from parquet_kv_metadata('{path}')").fetchall())
counters = json.loads(meta["topdown-bpf.counters"])
sums = ", ".join(
    f"sum({p}_value), sum({p}_enabled_ns), sum({p}_running_ns), count({p}_value)"
    for p in counters)
def rows(sql):
    return [list(r) for r in con.execute(sql).fetchall()]
out = {
    "schema": meta["topdown-bpf.schema"],
    "counters": counters,
    "threads": rows(f"select tid, pid, arg_max(comm, window_start_ns), sum(on_cpu_ns), "
                    f"sum(switches), count(*), sum(run_delay_ns), {sums} "
                    "from t where kind = 'thread' group by tid, pid"),
    "cgroups": rows(f"select cgroup, sum(on_cpu_ns), sum(switches), {sums} "
                    "from t where kind = 'cgroup' group by cgroup"),
    "top5": rows("select tid, sum(on_cpu_ns) as s from t where kind = 'thread' "
                 "group by tid, pid order by s desc, tid limit 5"),
    "nulls_in_required": rows("select count(*) from t where on_cpu_ns is null "
                              "or switches is null or cgroup is null or time is null"),
    "thread_fields_of_cgroups": rows("select count(*) from t where kind = 'cgroup' "
                                     "and (tid is not null or comm is not null)"),
}
print(json.dumps(out))
"#;

fn duckdb(parquet: &Path) -> Value {
    let output = Command::new("python3")
        .args(["-c", QUERIES])
        .arg(parquet)
        .output()
        .expect("running python3");
    assert!(
        output.status.success(),
        "DuckDB could not read the file (the `duckdb` Python package; `cargo xtask test` \
         installs it): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the query script's JSON")
}

fn u64_of(value: &Value) -> u64 {
    value
        .as_u64()
        .or_else(|| value.as_f64().map(|f| f as u64))
        .unwrap_or_else(|| panic!("a count: {value}"))
}

#[test]
fn duckdb_reads_the_parquet_export_with_the_reports_sums() {
    let test = "duckdb_reads_the_parquet_export";
    let dir = tempfile::tempdir().unwrap();
    let Some(file) = recording(test, test, dir.path()) else {
        return;
    };
    let parquet = dir.path().join("run.parquet");
    report(&file, &["--parquet", parquet.to_str().unwrap()]);
    let db = duckdb(&parquet);
    assert_eq!(db["schema"], "topdown-bpf/rows/v1");
    assert_eq!(db["nulls_in_required"][0][0], 0);
    assert_eq!(db["thread_fields_of_cgroups"][0][0], 0);
    let counters: Vec<(String, String)> = db["counters"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(prefix, name)| (prefix.clone(), name.as_str().unwrap().to_owned()))
        .collect();
    assert!(!counters.is_empty(), "{db}");

    // Per thread: the totals the live run printed (no folding in a run this small).
    let totals = documents(&report(&file, &["--json"])).pop().unwrap();
    let threads = totals["threads"].as_array().unwrap();
    assert!(threads.len() > 8, "{totals}");
    let by_thread: HashMap<(u64, u64, String), &Vec<Value>> = db["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = r.as_array().unwrap();
            (
                (
                    u64_of(&r[0]),
                    u64_of(&r[1]),
                    r[2].as_str().unwrap().to_owned(),
                ),
                r,
            )
        })
        .collect();
    let reported: std::collections::HashSet<(u64, u64, String)> = threads
        .iter()
        .map(|t| {
            let comm = t["comm"].as_str().unwrap().to_owned();
            (u64_of(&t["tid"]), u64_of(&t["pid"]), comm)
        })
        .collect();
    let extra: Vec<_> = by_thread
        .keys()
        .filter(|k| !reported.contains(*k))
        .collect();
    assert_eq!(
        by_thread.len(),
        threads.len(),
        "one group per thread of the totals; not in the totals: {extra:?}"
    );
    for thread in threads {
        assert_eq!(thread["folded_threads"], 0, "{thread}");
        let key = (
            u64_of(&thread["tid"]),
            u64_of(&thread["pid"]),
            thread["comm"].as_str().unwrap().to_owned(),
        );
        let row = by_thread
            .get(&key)
            .unwrap_or_else(|| panic!("DuckDB has no rows of {key:?}"));
        assert_eq!(
            u64_of(&row[3]),
            u64_of(&thread["on_cpu_ns"]),
            "{key:?} on-CPU"
        );
        assert_eq!(
            u64_of(&row[4]),
            u64_of(&thread["switches"]),
            "{key:?} switches"
        );
        // Run-queue wait: measured on this kernel, summed over windows as the totals sum it.
        assert_eq!(
            u64_of(&row[6]),
            u64_of(&thread["run_delay_ns"]),
            "{key:?} run-queue wait"
        );
        for (i, (_, name)) in counters.iter().enumerate() {
            let counter = &thread["counters"][name.as_str()];
            let at = 7 + 4 * i;
            // A counter that never ran is null in Parquet, 0 raw in JSON.
            let value = if row[at + 3] == 0 {
                0
            } else {
                u64_of(&row[at])
            };
            assert_eq!(value, u64_of(&counter["raw"]), "{key:?} {name}");
            assert_eq!(
                u64_of(&row[at + 1]),
                u64_of(&counter["enabled_ns"]),
                "{key:?} {name}"
            );
            assert_eq!(
                u64_of(&row[at + 2]),
                u64_of(&counter["running_ns"]),
                "{key:?} {name}"
            );
        }
    }

    // Per cgroup, each for itself.
    let groups = documents(&report(&file, &["--json", "--per-cgroup"]))
        .pop()
        .unwrap();
    let groups = groups["groups"].as_array().unwrap();
    let by_cgroup: BTreeMap<String, (u64, u64)> = db["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_owned(),
                (u64_of(&r[1]), u64_of(&r[2])),
            )
        })
        .collect();
    let reported: BTreeMap<String, (u64, u64)> = groups
        .iter()
        .map(|g| {
            (
                g["cgroup"].as_str().unwrap().to_owned(),
                (u64_of(&g["on_cpu_ns"]), u64_of(&g["switches"])),
            )
        })
        .collect();
    assert_eq!(by_cgroup, reported, "on-CPU ns and switches per cgroup");
    let leaves = reported.keys().filter(|p| p.contains(test)).count();
    assert!(leaves >= 2, "both workload cgroups are there: {reported:?}");

    // The top five, as `report --top 5` ranks them.
    let top = documents(&report(&file, &["--json", "--top", "5"]))
        .pop()
        .unwrap();
    let top: Vec<(u64, u64)> = top["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (u64_of(&t["tid"]), u64_of(&t["on_cpu_ns"])))
        .collect();
    let queried: Vec<(u64, u64)> = db["top5"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (u64_of(&r[0]), u64_of(&r[1])))
        .collect();
    assert_eq!(queried, top);

    // The same rows, written by `record --parquet` as the run went: a file per three windows.
    let parts = dir.path().join("parts");
    // Ten windows of 200 ms where the recorder keeps up; fewer, longer ones where it does not
    // (a host of thousands of busy threads and a debug build): as many as the recording holds.
    let windows = documents(&report(&file, &["--json", "-I", "200"]))
        .iter()
        .filter(|d| d["final"] == false)
        .count();
    let files = std::fs::read_dir(&parts).unwrap().count();
    assert!(
        windows >= 2 && files >= windows.div_ceil(3),
        "{windows} windows, three per file: {files} files"
    );
    let live = duckdb(&parts.join("*.parquet"));
    for key in ["threads", "cgroups", "top5"] {
        assert_eq!(
            sorted(&live[key]),
            sorted(&db[key]),
            "{key}: recorded = exported"
        );
    }
}

/// Rows of a query result in one order (group-by results come in any).
fn sorted(rows: &Value) -> Vec<String> {
    let mut rows: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(Value::to_string)
        .collect();
    rows.sort();
    rows
}

/// `record --parquet --user nobody`, killed with SIGKILL once three parts are written.
#[test]
fn a_killed_record_leaves_every_finished_parquet_part_readable() {
    if !topdown_tests::privileged("a_killed_record_leaves_every_finished_parquet_part") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let parts = dir.path().join("parts");
    let file = dir.path().join("killed.rec");
    let mut record = topdown()
        .arg("record")
        .arg("-o")
        .arg(&file)
        .args(["--duration", "60", "-I", "100", "--json", "--parquet"])
        .arg(&parts)
        .args(["--parquet-windows", "2", "--user", "nobody"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting record");
    let finished = |parts: &Path| {
        std::fs::read_dir(parts).map_or(0, |entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
                .count()
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while finished(&parts) < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Set up, it runs as nobody with no capability in any thread, and still records (the
    // folder is in root's private temporary folder: parts are made through the folder's fd).
    let nobody = topdown_user::privileges::lookup("nobody").unwrap().uid;
    for task in std::fs::read_dir(format!("/proc/{}/task", record.id())).unwrap() {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(field("Uid:"), nobody.to_string(), "{status}");
        assert_eq!(field("CapEff:"), "0000000000000000", "{status}");
    }
    record.kill().unwrap();
    record.wait().unwrap();
    let done = finished(&parts);
    assert!(done >= 3, "three parts of two windows in 30 s: {done}");
    let db = duckdb(&parts.join("*.parquet"));
    let threads = db["threads"].as_array().unwrap();
    assert!(!threads.is_empty(), "{db}");
    // Every finished part holds two whole windows: the thread rows DuckDB reads are those of
    // the first 2 x parts windows of the recording (readable up to its last window).
    let windows: Vec<Value> = documents(&report(&file, &["--json", "-I", "100"]))
        .into_iter()
        .filter(|d| d["final"] == false)
        .collect();
    assert!(windows.len() >= 2 * done, "{} windows", windows.len());
    let mut expected: HashMap<(u64, u64), u64> = HashMap::new();
    for window in &windows[..2 * done] {
        for t in window["threads"].as_array().unwrap() {
            let key = (u64_of(&t["tid"]), u64_of(&t["pid"]));
            *expected.entry(key).or_default() += u64_of(&t["on_cpu_ns"]);
        }
    }
    let got: HashMap<(u64, u64), u64> = threads
        .iter()
        .map(|r| ((u64_of(&r[0]), u64_of(&r[1])), u64_of(&r[3])))
        .collect();
    assert_eq!(
        got, expected,
        "on-CPU ns per thread over the finished parts' windows"
    );
}

#[test]
fn the_trace_holds_every_windows_threads_with_the_recordings_values() {
    let test = "the_trace_holds_every_windows_threads";
    let dir = tempfile::tempdir().unwrap();
    let Some(file) = recording(test, test, dir.path()) else {
        return;
    };
    let path = dir.path().join("run.trace.json");
    report(&file, &["--trace", path.to_str().unwrap()]);
    let trace: Value = serde_json::from_slice(&std::fs::read(&path).unwrap())
        .expect("the trace is one JSON document");
    // One pass writes the trace and the Parquet file, each byte for byte as written alone: the
    // recording's windows go to every sink as one frame each.
    let (both_trace, both_parquet, parquet) = (
        dir.path().join("both.trace.json"),
        dir.path().join("both.parquet"),
        dir.path().join("alone.parquet"),
    );
    report(
        &file,
        &[
            "--trace",
            both_trace.to_str().unwrap(),
            "--parquet",
            both_parquet.to_str().unwrap(),
        ],
    );
    report(&file, &["--parquet", parquet.to_str().unwrap()]);
    let read = |path: &Path| std::fs::read(path).unwrap();
    assert!(
        read(&both_trace) == read(&path),
        "the trace, written beside Parquet"
    );
    assert!(
        read(&both_parquet) == read(&parquet),
        "Parquet, written beside the trace"
    );
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    assert_eq!(trace["displayTimeUnit"], "ms");
    assert!(trace["otherData"]["host"].is_string());
    let windows: Vec<Value> = documents(&report(&file, &["--json", "-I", "200"]))
        .into_iter()
        .filter(|d| d["final"] == false)
        .collect();
    // Ten where the recorder keeps up; fewer, longer ones where it does not (see above).
    assert!(windows.len() >= 2, "windows of 200 ms: {}", windows.len());

    let of = |ph: &'static str| events.iter().filter(move |e| e["ph"] == ph);
    // By process too: a window's folds of exited threads (a row per process beyond the ones
    // shown, one for other processes: see attrib::exited) all have tid 0, and a machine-wide
    // recording has them wherever enough of the host's threads exit in a window.
    let slices: HashMap<(u64, u64, u64), &Value> = of("X")
        .map(|e| {
            (
                (
                    u64_of(&e["pid"]),
                    u64_of(&e["tid"]),
                    (e["ts"].as_f64().unwrap() * 1000.0).round() as u64,
                ),
                e,
            )
        })
        .collect();
    let samples: HashMap<(String, u64, String, u64), f64> = of("C")
        .map(|e| {
            (
                (
                    e["name"].as_str().unwrap().to_owned(),
                    u64_of(&e["pid"]),
                    e["id"].as_str().unwrap().to_owned(),
                    (e["ts"].as_f64().unwrap() * 1000.0).round() as u64,
                ),
                e["args"]["value"].as_f64().unwrap(),
            )
        })
        .collect();
    let mut rows = 0;
    let mut exited = 0;
    let mut latest_comm = HashMap::new();
    for window in &windows {
        let start_ns = (window["interval"]["start_s"].as_f64().unwrap() * 1e9).round() as u64;
        for thread in window["threads"].as_array().unwrap() {
            rows += 1;
            let (pid, tid) = (u64_of(&thread["pid"]), u64_of(&thread["tid"]));
            // Nanosecond times through f64 microseconds: within a microsecond.
            let slice = (start_ns.saturating_sub(1000)..=start_ns + 1000)
                .find_map(|ts| slices.get(&(pid, tid, ts)))
                .unwrap_or_else(|| panic!("no slice of {pid}/{tid} at {start_ns} ns"));
            let args = &slice["args"];
            assert_eq!(u64_of(&slice["pid"]), u64_of(&thread["pid"]));
            assert_eq!(args["on_cpu_ns"], thread["on_cpu_ns"], "{tid}");
            assert_eq!(args["switches"], thread["switches"], "{tid}");
            assert_eq!(args["cpu_percent"], thread["cpu_percent"], "{tid}");
            assert_eq!(args["cgroup"], thread["cgroup"], "{tid}");
            for (name, counter) in thread["counters"].as_object().unwrap() {
                if counter["value"].is_null() {
                    assert!(args["counters"].get(name).is_none(), "not counted: absent");
                } else {
                    assert_eq!(
                        args["counters"][name]["raw"], counter["raw"],
                        "{tid} {name}"
                    );
                }
            }
            let ts = (slice["ts"].as_f64().unwrap() * 1000.0).round() as u64;
            let sample = samples
                .get(&("%CPU".to_owned(), pid, tid.to_string(), ts))
                .unwrap_or_else(|| panic!("no %CPU sample of {pid}/{tid}"));
            assert_eq!(Some(*sample), thread["cpu_percent"].as_f64(), "{tid}");
            if thread["exited"] == true {
                exited += 1;
                let instant = of("i").any(|e| {
                    e["name"] == "exit" && u64_of(&e["pid"]) == pid && u64_of(&e["tid"]) == tid
                });
                // A fold of exited threads is no one thread: it has no exit instant.
                if thread["folded_threads"] == 0 {
                    assert!(instant, "{pid}/{tid} exited: an exit instant");
                } else {
                    assert!(
                        !instant,
                        "{pid}/{tid} folds exited threads: no exit instant"
                    );
                }
            }
            latest_comm.insert((u64_of(&thread["pid"]), tid), thread["comm"].clone());
        }
    }
    assert_eq!(
        of("X").count(),
        rows,
        "one slice per thread per window it ran in"
    );
    assert!(exited >= 6, "the churned threads exited: {exited}");
    let names: HashMap<(u64, u64), &Value> = of("M")
        .filter(|e| e["name"] == "thread_name")
        .map(|e| ((u64_of(&e["pid"]), u64_of(&e["tid"])), &e["args"]["name"]))
        .collect();
    for (key, comm) in &latest_comm {
        assert_eq!(names.get(key), Some(&comm), "thread {key:?} is named");
    }
    let processes = of("M").filter(|e| e["name"] == "process_name").count();
    let pids: std::collections::HashSet<u64> = latest_comm.keys().map(|k| k.0).collect();
    assert_eq!(processes, pids.len(), "a process per pid");
}
