//! `topdown-bpf c2c report --stats` against Linux perf itself: perf.data files written by
//! ../shared/tools/gen_perf_data.py from the specs in tests/fixtures/c2c (every classification
//! branch and perf's quirks: unmapped addresses, address 0, unparsable data_src, Intel's remote
//! HITM, peers, private anonymous vs shared file lines), reported by both, compared line by line.
//! The real `perf` is run where installed (Debian's is 6.1); the recorded perf 6.1 output in the
//! fixtures stands in otherwise, and is checked against the live perf when there is one.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use topdown_tests::{pmu_events::data_dir, topdown_bpf_binary};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/c2c"))
}

/// Writes the perf.data of `spec` into `dir` (with the tiny ELF files perf symbolizes from).
fn generate(spec: &Path, dir: &Path) -> PathBuf {
    let tool = data_dir().parent().unwrap().join("tools/gen_perf_data.py");
    let data = dir.join("perf.data");
    let status = Command::new("python3")
        .arg(&tool)
        .arg(spec)
        .arg(&data)
        .current_dir(dir)
        .status()
        .expect("python3 runs gen_perf_data.py");
    assert!(
        status.success(),
        "gen_perf_data.py failed on {}",
        spec.display()
    );
    data
}

/// `perf c2c report --stdio [extra]` on `data`, if a working perf is installed.
fn live_perf(data: &Path, dir: &Path, extra: &[&str]) -> Option<String> {
    let output = Command::new("perf")
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

/// Our output of `c2c report ARGS -i data` must equal perf's (live, or recorded in
/// `{name}.perf-6.1.{kind}.txt`), or the part of it before `stop_at` when given.
fn compare(name: &str, kind: &str, args: &[&str], stop_at: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let data = generate(&fixtures().join(format!("{name}.json")), dir.path());
    let recorded =
        std::fs::read_to_string(fixtures().join(format!("{name}.perf-6.1.{kind}.txt"))).unwrap();
    let perf_args: Vec<&str> = args.iter().copied().filter(|a| *a != "--stdio").collect();
    let expected = match live_perf(&data, dir.path(), &perf_args) {
        Some(live) => {
            let version = Command::new("perf").arg("--version").output().unwrap();
            if String::from_utf8_lossy(&version.stdout).contains(" 6.1.") {
                assert_eq!(
                    live, recorded,
                    "{name}: the recorded perf 6.1 output is stale"
                );
            }
            live
        }
        None => {
            eprintln!("perf not installed: comparing {name} with the recorded perf 6.1 output");
            recorded
        }
    };
    // Up to the section's opening rule (the line before its title), blank line included.
    let expected = match stop_at {
        Some(title) => {
            let lines: Vec<&str> = expected.lines().collect();
            let at = lines
                .iter()
                .position(|l| l.contains(title))
                .unwrap_or_else(|| panic!("{name}: no `{title}` in perf's output"));
            lines[..at - 1].iter().map(|l| format!("{l}\n")).collect()
        }
        None => expected,
    };
    let ours = Command::new(topdown_bpf_binary())
        .args(["c2c", "report"])
        .args(args)
        .arg("-i")
        .arg(&data)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    let ours = String::from_utf8(ours.stdout).unwrap();
    for (line, (a, b)) in expected.lines().zip(ours.lines()).enumerate() {
        assert_eq!(a, b, "{name}: line {} differs", line + 1);
    }
    assert_eq!(
        expected.lines().count(),
        ours.lines().count(),
        "{name}: line count"
    );
    assert!(
        expected.contains("Total Shared Cache Lines"),
        "{name}: a real report"
    );
}

#[test]
fn stats_equal_perf_c2c_report_line_by_line() {
    for name in ["example", "branches"] {
        compare(name, "stats", &["--stats"], None);
    }
}

#[test]
fn cache_line_table_equals_perf_c2c_report_line_by_line() {
    for name in ["example", "branches"] {
        compare(
            name,
            "stdio",
            &["--stdio"],
            Some("Shared Cache Line Distribution Pareto"),
        );
    }
}

#[test]
fn truncated_perf_data_is_one_line_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let data = generate(&fixtures().join("branches.json"), dir.path());
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
    }
}
