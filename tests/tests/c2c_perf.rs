//! `topdown-bpf c2c report --stats` against Linux perf itself: perf.data files written by the
//! tool's own writer from the specs in tests/fixtures/c2c (`topdown_tests::c2c_spec`; every classification
//! branch and perf's quirks: unmapped addresses, address 0, unparsable data_src, Intel's remote
//! HITM, peers, private anonymous vs shared file lines), reported by both, compared line by line.
//! The real `perf` is run where installed (Debian's is 6.1); the recorded perf 6.1 output in the
//! fixtures stands in otherwise, and is checked against the live perf when there is one.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use topdown_tests::{c2c_spec::perf_data_with_cgroups, perf_data_of, topdown_bpf_binary};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/c2c"))
}

/// A perf to compare with: Debian's (6.1, on PATH), or 6.12, which has `--double-cl`
/// (`cargo xtask test` unpacks Debian's bookworm-backports `linux-perf` into target/perf612
/// and names the folder in `TOPDOWN_PERF612_DIR`).
#[derive(Clone, Copy)]
enum Perf {
    Debian,
    V612,
}

impl Perf {
    /// The version its recorded outputs are named after.
    const fn version(self) -> &'static str {
        match self {
            Self::Debian => "6.1",
            Self::V612 => "6.12",
        }
    }

    /// A command running it, if it is here.
    fn command(self) -> Option<Command> {
        match self {
            Self::Debian => Some(Command::new("perf")),
            Self::V612 => {
                let dir = PathBuf::from(std::env::var_os("TOPDOWN_PERF612_DIR")?);
                let bin = dir.join("usr/bin/perf");
                bin.exists().then(|| {
                    let mut command = Command::new(bin);
                    command.env("LD_LIBRARY_PATH", dir.join("usr/lib/x86_64-linux-gnu"));
                    command
                })
            }
        }
    }
}

/// `perf c2c report --stdio [extra]` on `data`, if a working perf is installed.
fn live_perf(data: &Path, dir: &Path, extra: &[&str]) -> Option<String> {
    live(Perf::Debian, data, dir, extra)
}

fn live(perf: Perf, data: &Path, dir: &Path, extra: &[&str]) -> Option<String> {
    let output = perf
        .command()?
        .args(["c2c", "report", "--stdio"])
        .args(extra)
        .arg("-i")
        .arg(data)
        .current_dir(dir)
        .output()
        .ok()?;
    (output.status.success() && !output.stdout.is_empty())
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Our output of `c2c report ARGS -i data` must equal Debian's perf's (live, or recorded in
/// `{name}.perf-6.1.{kind}.txt`).
fn compare(name: &str, kind: &str, args: &[&str]) {
    compare_with(Perf::Debian, name, kind, args);
}

/// Our output of `c2c report ARGS -i data` must equal `perf`'s (live, or recorded in
/// `{name}.perf-{version}.{kind}.txt`).
fn compare_with(perf: Perf, name: &str, kind: &str, args: &[&str]) {
    let version = perf.version();
    let dir = tempfile::tempdir().unwrap();
    let data = perf_data_of(&fixtures().join(format!("{name}.json")), dir.path());
    let recorded =
        std::fs::read_to_string(fixtures().join(format!("{name}.perf-{version}.{kind}.txt")))
            .unwrap();
    let perf_args: Vec<&str> = args.iter().copied().filter(|a| *a != "--stdio").collect();
    let expected = match live(perf, &data, dir.path(), &perf_args) {
        Some(live) => {
            let reported = perf.command().unwrap().arg("--version").output().unwrap();
            if String::from_utf8_lossy(&reported.stdout).contains(&format!(" {version}.")) {
                assert_eq!(
                    live, recorded,
                    "{name}: the recorded perf {version} output is stale"
                );
            }
            live
        }
        None => {
            eprintln!("perf {version} not here: comparing {name} with its recorded output");
            recorded
        }
    };
    let ours = ours(&data, dir.path(), args);
    for (line, (a, b)) in expected.lines().zip(ours.lines()).enumerate() {
        assert_eq!(a, b, "{name} {args:?}: line {} differs", line + 1);
    }
    assert_eq!(
        expected.lines().count(),
        ours.lines().count(),
        "{name} {args:?}: line count"
    );
    assert!(
        expected.contains("Total Shared Cache Lines"),
        "{name}: a real report"
    );
}

const FIXTURES: [&str; 5] = ["example", "branches", "cgroups", "ties", "sharing"];

#[test]
fn stats_equal_perf_c2c_report_line_by_line() {
    for name in FIXTURES {
        compare(name, "stats", &["--stats"]);
    }
}

/// The whole report: statistics, the Shared Data Cache Line Table and the Pareto table (symbols
/// from the ELF files the generator writes, widths sized from the content, per-line widths).
#[test]
fn full_report_equals_perf_c2c_report_line_by_line() {
    for name in FIXTURES {
        compare(name, "stdio", &["--stdio"]);
    }
}

/// Every display mode (`-d`), and `--show-all` (lines that rank equal in perf's own order, and
/// perf's "Total Stores" counting stores without an address or uncached ones), on the file that
/// covers every branch.
#[test]
fn display_modes_and_show_all_equal_perf() {
    for (kind, args) in [
        ("stdio-d-lcl", &["--stdio", "-d", "lcl"][..]),
        ("stdio-d-rmt", &["--stdio", "-d", "rmt"]),
        ("stdio-d-peer", &["--stdio", "-d", "peer"]),
        ("stdio-show-all", &["--stdio", "--show-all"]),
        (
            "stdio-d-peer-show-all",
            &["--stdio", "-d", "peer", "--show-all"],
        ),
    ] {
        compare("branches", kind, args);
    }
}

#[test]
fn truncated_or_corrupt_perf_data_is_one_line_naming_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let data = perf_data_of(&fixtures().join("branches.json"), dir.path());
    let bytes = std::fs::read(&data).unwrap();
    for cut in [100, bytes.len() / 2, bytes.len() - 8] {
        let truncated = dir.path().join(format!("cut{cut}.data"));
        std::fs::write(&truncated, &bytes[..cut]).unwrap();
        let output = Command::new(topdown_bpf_binary())
            .args(["c2c", "report", "--stats", "-i"])
            .arg(&truncated)
            .output()
            .unwrap();
        assert!(!output.status.success(), "cut at {cut}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains("byte"), "names the offset: {stderr}");
    }
    // A record whose size field is broken: the error names the record's offset.
    let data_offset = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    let mut broken = bytes.clone();
    broken[data_offset + 6..data_offset + 8].copy_from_slice(&3u16.to_le_bytes());
    let path = dir.path().join("broken.data");
    std::fs::write(&path, &broken).unwrap();
    let output = Command::new(topdown_bpf_binary())
        .args(["c2c", "report", "--stats", "-i"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.trim().lines().count() == 1 && stderr.contains(&format!("byte {data_offset}")),
        "{stderr}"
    );
}

/// `c2c report ARGS -i data` run in `dir` (where the generator put the ELF files): its
/// standard output, which must be a success.
fn ours(data: &Path, dir: &Path, args: &[&str]) -> String {
    let output = Command::new(topdown_bpf_binary())
        .args(["c2c", "report"])
        .args(args)
        .arg("-i")
        .arg(data)
        .current_dir(dir)
        .output()
        .expect("running topdown-bpf");
    assert!(
        output.status.success(),
        "c2c report {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The `(TotHitm, LclHitm, RmtHitm, Stores)` columns of a per-group summary, by group name.
fn summary(text: &str) -> std::collections::BTreeMap<String, [u64; 4]> {
    text.lines()
        .skip_while(|l| !l.contains("Shared cache lines per"))
        .filter(|l| !l.starts_with('#') && !l.starts_with('='))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let numbers: Vec<u64> = fields
                .get(1..5)?
                .iter()
                .map(|f| f.parse().ok())
                .collect::<Option<_>>()?;
            Some((fields.get(6)?.to_string(), numbers.try_into().ok()?))
        })
        .collect()
}

/// A recording with cgroups (`perf c2c record -- --all-cgroups`): the same spec written with
/// each sample's cgroup. perf reads it as before (the same statistics), and names the same
/// cgroups; our split of the shared lines per cgroup and per container adds up to what the spec
/// says each process did.
#[test]
fn shared_lines_split_by_cgroup_and_container() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = fixtures().join("cgroups.json");
    let plain = perf_data_of(&spec_path, dir.path());
    let data = perf_data_with_cgroups(&spec_path, dir.path(), "cgroups.data");

    let stats = ours(&data, dir.path(), &["--stats"]);
    assert_eq!(
        stats,
        ours(&plain, dir.path(), &["--stats"]),
        "cgroups change no statistic"
    );
    if let Some(perf) = live_perf(&data, dir.path(), &["--stats"]) {
        assert_eq!(stats, perf, "perf reads the cgroup recording as we do");
    }

    // What each process did, from the spec: HITM loads (remote or local) and stores per pid.
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&spec_path).unwrap()).unwrap();
    let path_of = |pid: u64| {
        spec["cgroups"][pid.to_string()]["path"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let mut expected: std::collections::BTreeMap<String, [u64; 4]> = Default::default();
    for sample in spec["samples"].as_array().unwrap() {
        let count = sample["count"].as_u64().unwrap_or(1);
        let entry = expected
            .entry(path_of(sample["pid"].as_u64().unwrap()))
            .or_default();
        let ds = &sample["data_src"];
        if ds["snoop"] == "HITM" {
            entry[0] += count;
            entry[if ds["remote"] == 1 { 2 } else { 1 }] += count;
        }
        if sample["store"] == true {
            entry[3] += count;
        }
    }
    expected.retain(|_, v| v[0] > 0 || v[3] > 0);

    let by_cgroup = summary(&ours(&data, dir.path(), &["--per-cgroup"]));
    assert_eq!(by_cgroup, expected, "per cgroup");

    let by_container = summary(&ours(&data, dir.path(), &["--per-container"]));
    let docker = format!("docker:{}", "5e".repeat(6));
    let containerd = format!("containerd:{}", "c7".repeat(6));
    let key = |path: &str| {
        if path.contains("docker-") {
            docker.clone()
        } else if path.contains("cri-containerd-") {
            containerd.clone()
        } else {
            "cron.service".to_owned()
        }
    };
    let expected: std::collections::BTreeMap<String, [u64; 4]> = expected
        .into_iter()
        .map(|(path, v)| (key(&path), v))
        .collect();
    assert_eq!(by_container, expected, "per container");

    // perf names the same cgroups from the same records.
    if let Ok(report) = Command::new("perf")
        .args(["report", "--stdio", "--sort", "cgroup", "-i"])
        .arg(&data)
        .current_dir(dir.path())
        .output()
        && report.status.success()
    {
        let text = String::from_utf8_lossy(&report.stdout);
        for path in by_cgroup.keys() {
            assert!(text.contains(path.as_str()), "perf report names {path}");
        }
    }

    let error = Command::new(topdown_bpf_binary())
        .args(["c2c", "report", "--per-cgroup", "-i"])
        .arg(&plain)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&error.stderr);
    assert!(
        !error.status.success() && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(stderr.contains("--all-cgroups"), "{stderr}");
}

/// Node information in the Pareto table (`-N`: CPU counts and shares per node, blanks for nodes
/// not touched; `-NN`: CPU lists) and `--no-source`, on the recording whose lines are shared
/// across nodes.
#[test]
fn node_info_and_no_source_equal_perf() {
    for (kind, args) in [
        ("stdio-N", &["--stdio", "-N"][..]),
        ("stdio-NN", &["--stdio", "-NN"]),
        ("stdio-d-peer-N", &["--stdio", "-d", "peer", "-N"]),
        ("stdio-no-source", &["--stdio", "--no-source"]),
    ] {
        compare("cgroups", kind, args);
    }
}

/// `--json` carries perf's numbers: the Trace Event Information counters, the shared-line count,
/// each line's HITMs as the Shared Data Cache Line Table prints them, and as many entries per
/// line as the Pareto table has rows, for every fixture.
#[test]
fn json_carries_the_numbers_perf_prints() {
    let labels = [
        ("Total records", "nr_entries"),
        ("Locked Load/Store Operations", "locks"),
        ("Load Operations", "load"),
        ("Loads - uncacheable", "ld_uncache"),
        ("Loads - IO", "ld_io"),
        ("Loads - Miss", "ld_miss"),
        ("Loads - no mapping", "ld_noadrs"),
        ("Load Fill Buffer Hit", "ld_fbhit"),
        ("Load L1D hit", "ld_l1hit"),
        ("Load L2D hit", "ld_l2hit"),
        ("Load Local HITM", "lcl_hitm"),
        ("Load Remote HITM", "rmt_hitm"),
        ("Load Remote HIT", "rmt_hit"),
        ("Load Local DRAM", "lcl_dram"),
        ("Load Remote DRAM", "rmt_dram"),
        ("Load HIT Local Peer", "lcl_peer"),
        ("Load HIT Remote Peer", "rmt_peer"),
        ("Store Operations", "store"),
        ("Store - uncacheable", "st_uncache"),
        ("Store - no mapping", "st_noadrs"),
        ("Store L1D Hit", "st_l1hit"),
        ("Store L1D Miss", "st_l1miss"),
        ("No Page Map Rejects", "nomap"),
        ("Unable to parse data source", "noparse"),
    ];
    for name in FIXTURES {
        let dir = tempfile::tempdir().unwrap();
        let data = perf_data_of(&fixtures().join(format!("{name}.json")), dir.path());
        let perf = live_perf(&data, dir.path(), &[]).unwrap_or_else(|| {
            std::fs::read_to_string(fixtures().join(format!("{name}.perf-6.1.stdio.txt"))).unwrap()
        });
        let doc: serde_json::Value =
            serde_json::from_str(&ours(&data, dir.path(), &["--json"])).unwrap();
        let value = |label: &str| -> u64 {
            perf.lines()
                .find_map(|l| l.trim().strip_prefix(label)?.trim().strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name}: {label} in perf's output"))
        };
        for (label, counter) in labels {
            assert_eq!(doc["totals"][counter], value(label), "{name}: {counter}");
        }
        assert_eq!(doc["shared"]["lines"], value("Total Shared Cache Lines"));

        // The line table's rows: index, address, node, PA cnt, share, then Total, Lcl, Rmt HITM.
        let table: Vec<Vec<&str>> = perf
            .lines()
            .skip_while(|l| !l.contains("Shared Data Cache Line Table"))
            .take_while(|l| !l.contains("Shared Cache Line Distribution Pareto"))
            .filter(|l| !l.starts_with('#') && !l.starts_with('='))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() > 8 && f[0].parse::<usize>().is_ok())
            .collect();
        let lines = doc["lines"].as_array().unwrap();
        assert_eq!(lines.len(), table.len(), "{name}: lines");
        let pareto = perf
            .split("Shared Cache Line Distribution Pareto")
            .nth(1)
            .unwrap();
        for (line, row) in lines.iter().zip(&table) {
            let stats = &line["stats"];
            assert_eq!(
                [&stats["tot_hitm"], &stats["lcl_hitm"], &stats["rmt_hitm"]],
                [row[5], row[6], row[7]].map(|v| v.parse::<u64>().unwrap()),
                "{name}: line {}",
                row[0]
            );
            assert_eq!(
                line["address"].as_str().unwrap(),
                row[1],
                "{name}: a hex string"
            );
        }
        let rows_in_pareto = pareto
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains('%'))
            .count();
        let entries: usize = lines
            .iter()
            .map(|l| l["entries"].as_array().unwrap().len())
            .sum();
        assert_eq!(entries, rows_in_pareto, "{name}: Pareto rows");
    }
}

/// Coalescing (`-c`): entries told apart by pid, thread (with its COMM name), object, code
/// address, in any combination and order; entries that rank equal keep perf's collapse order
/// (pid descending; thread, code address and object ascending), on the file made of such ties.
#[test]
fn coalescing_equals_perf() {
    for fields in [
        "pid",
        "tid",
        "dso",
        "pid,tid",
        "dso,iaddr",
        "tid,pid,iaddr,dso",
    ] {
        compare(
            "ties",
            &format!("stdio-c-{fields}"),
            &["--stdio", "-c", fields],
        );
    }
}

/// `--double-cl` (128-byte lines, for adjacent-line prefetch) against perf 6.12, which has it.
/// 6.12 prints `sym+off` where 6.1 prints `??:0` for code without line info, so these compare
/// with `--no-source` (every number, no source column).
#[test]
fn double_cl_equals_perf_6_12() {
    for (name, kind, args) in [
        (
            "branches",
            "stdio-double-cl",
            &["--stdio", "--double-cl", "--no-source"][..],
        ),
        (
            "branches",
            "stdio-double-cl-d-peer-show-all",
            &[
                "--stdio",
                "--double-cl",
                "--no-source",
                "-d",
                "peer",
                "--show-all",
            ],
        ),
        (
            "cgroups",
            "stdio-double-cl-N-c-pid-tid",
            &[
                "--stdio",
                "--double-cl",
                "--no-source",
                "-N",
                "-c",
                "pid,tid",
            ],
        ),
    ] {
        compare_with(Perf::V612, name, kind, args);
    }
}

/// `c2c record -o` writes what it recorded as a perf.data file: rewriting each fixture's
/// recording with our writer gives a file that both our report and perf's own report read
/// exactly as they read the original.
#[test]
fn recordings_written_back_read_the_same_in_perf_and_here() {
    for name in FIXTURES {
        let dir = tempfile::tempdir().unwrap();
        let original = perf_data_of(&fixtures().join(format!("{name}.json")), dir.path());
        let recording = topdown_user::perf_file::reader::read_all(&original).unwrap();
        let rewritten = dir.path().join("rewritten.data");
        std::fs::write(
            &rewritten,
            topdown_user::perf_file::writer::encode(&recording, None),
        )
        .unwrap();
        assert_eq!(
            ours(&rewritten, dir.path(), &["--stdio"]),
            ours(&original, dir.path(), &["--stdio"]),
            "{name}: our report of the rewritten file"
        );
        if let Some(before) = live_perf(&original, dir.path(), &[]) {
            let after = live_perf(&rewritten, dir.path(), &[])
                .unwrap_or_else(|| panic!("{name}: perf reads the rewritten file"));
            assert_eq!(after, before, "{name}: perf's report of the rewritten file");
        }
    }
}
