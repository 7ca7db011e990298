//! The c2c filter in the real kernel. No machine here can sample memory, so the filter is
//! attached to `cpu-clock` sampling instead: it must load, run on the samples, find no data_src,
//! count every sample as unparsable, forward nothing, and lose nothing. Needs root.

use std::time::{Duration, Instant};

use topdown_tests::privileged;
use topdown_user::collect::c2c::C2cCollector;

#[test]
fn filter_counts_samples_without_data_src_as_unparsable_and_loses_nothing() {
    if !privileged("filter_counts_samples_without_data_src") {
        return;
    }
    let period = Duration::from_millis(1);
    let mut collector = C2cCollector::start_on_cpu_clock(period, 30, 1 << 20).expect("filter");
    let started = Instant::now();
    let mut x = 0u64;
    while started.elapsed() < Duration::from_millis(400) {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    let elapsed = started.elapsed();
    let counts = collector.counts().expect("counts");
    // The busy CPU samples every millisecond; idle CPUs (NO_HZ) may not sample at all.
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let busy = elapsed.as_millis() as u64;
    eprintln!("{counts:?} ({busy} ms busy on one of {cpus} CPUs)");
    let stats = counts.stats;
    assert!(
        stats.nr_entries >= busy / 2 && stats.nr_entries <= cpus * busy * 2,
        "{} samples over {elapsed:?} at 1 ms on {cpus} CPUs",
        stats.nr_entries
    );
    assert_eq!(
        stats.noparse, stats.nr_entries,
        "no data_src: every sample unparsable"
    );
    assert_eq!(stats.load + stats.store, 0);
    assert_eq!(counts.forwarded, 0);
    assert_eq!(
        (counts.ring_full, counts.read_errors),
        (0, 0),
        "nothing lost"
    );
    assert!(collector.drain().is_empty());
}

/// The live command end to end, on the software stand-in: `c2c -e cpu-clock -- COMMAND` opens
/// the sampling events itself, attaches the filter with PERF_EVENT_IOC_SET_BPF, records until the
/// command exits, and reports every sample the kernel classified (all unparsable: cpu-clock
/// samples carry no data source), with its losses on one line.
#[test]
fn live_c2c_records_until_the_command_exits_and_reports_every_sample() {
    if !privileged("live_c2c_records_until_the_command_exits") {
        return;
    }
    let output = std::process::Command::new(topdown_tests::topdown_bpf_binary())
        .args(["c2c", "-e", "cpu-clock", "-F", "1000", "--json", "--"])
        .arg(env!("CARGO_BIN_EXE_workload"))
        .args(["--run-ms", "600", "--churn", "0", "--no-wait"])
        .output()
        .expect("running topdown-bpf c2c");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("topdown-bpf: c2c recorded"))
        .unwrap_or_else(|| panic!("a summary line in {stderr}"));
    assert!(
        summary.contains("ring buffer full 0, unreadable samples 0"),
        "{summary}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The workload's own event lines come first (it shares our stdout).
    let doc: serde_json::Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|doc| doc["schema"] == "topdown-bpf/c2c/v2")
        .unwrap_or_else(|| panic!("a JSON report in {stdout}"));
    let totals = &doc["totals"];
    let samples = totals["nr_entries"].as_u64().unwrap();
    // The workload keeps one CPU busy for 600 ms at 1000 samples per second.
    assert!(samples > 300, "{samples} samples: {summary}");
    assert_eq!(
        totals["noparse"], samples,
        "every cpu-clock sample is unparsable"
    );
    assert_eq!(totals["load"], 0);
    assert_eq!(doc["shared"]["lines"], 0);
    assert_eq!(doc["events"][0], "cpu-clock");
}

/// `c2c record -o FILE` runs as root: an existing FILE is refused before anything is
/// recorded unless --force, a symbolic link is refused even then (its target is never
/// written), and a forced FILE is replaced whole.
#[test]
fn c2c_record_never_writes_through_a_link_or_over_a_file_unasked() {
    if !privileged("c2c_record_never_writes_through_a_link_or_over_a_file_unasked") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (existing, target, link) = (
        dir.path().join("existing.data"),
        dir.path().join("target"),
        dir.path().join("link.data"),
    );
    std::fs::write(&existing, "keep").unwrap();
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let record = |output: &std::path::Path, force: bool| {
        let mut command = std::process::Command::new(topdown_tests::topdown_bpf_binary());
        command
            .args(["c2c", "record", "-e", "cpu-clock", "-F", "1000", "-o"])
            .arg(output)
            .args(force.then_some("--force"))
            .args(["--", "true"]);
        command.output().expect("running topdown-bpf c2c record")
    };
    let refused = record(&existing, false);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert!(
        !stderr.contains("c2c recorded"),
        "refused before the run: {stderr}"
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep");
    for force in [false, true] {
        let through = record(&link, force);
        assert!(!through.status.success(), "through a link, force {force}");
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"keep",
            "the link's target"
        );
    }
    let forced = record(&existing, true);
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    assert!(std::fs::read(&existing).unwrap().starts_with(b"PERFILE2"));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 3, "no temporary file left: {left:?}");
}

/// `c2c record -o FILE` saves the recording (with the kernel's count of every sample) as a
/// perf.data file: our report reads back the statistics the live run classified, and perf
/// itself reads the file.
#[test]
fn recordings_saved_by_c2c_record_read_back() {
    if !privileged("recordings_saved_by_c2c_record_read_back") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c2c.data");
    let output = std::process::Command::new(topdown_tests::topdown_bpf_binary())
        .args(["c2c", "record", "-e", "cpu-clock", "-F", "1000", "-o"])
        .arg(&file)
        .args(["--", env!("CARGO_BIN_EXE_workload")])
        .args(["--run-ms", "400", "--churn", "0", "--no-wait"])
        .output()
        .expect("running topdown-bpf c2c record");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let classified: u64 = stderr
        .split("on cpu-clock: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the summary in {stderr}"));
    assert!(classified > 100, "{stderr}");
    let report = std::process::Command::new(topdown_tests::topdown_bpf_binary())
        .args(["c2c", "report", "--stats", "-i"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    let total = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Total records"))
        .and_then(|v| v.trim().trim_start_matches(':').trim().parse::<u64>().ok());
    assert_eq!(total, Some(classified), "{text}");
    if let Ok(perf) = std::process::Command::new("perf")
        .args(["c2c", "report", "--stdio", "--stats", "-i"])
        .arg(&file)
        .output()
    {
        assert!(
            perf.status.success(),
            "perf reads it: {}",
            String::from_utf8_lossy(&perf.stderr)
        );
    }
}

/// `--stores contended` loads the filter with its line map and runs it (these samples carry no
/// stores to skip; the decision itself needs memory samples, which no machine here has).
#[test]
fn the_contended_store_filter_loads_and_runs() {
    if !privileged("the_contended_store_filter_loads_and_runs") {
        return;
    }
    let output = std::process::Command::new(topdown_tests::topdown_bpf_binary())
        .args(["c2c", "-e", "cpu-clock", "--stores", "contended"])
        .args(["--duration", "0.3", "--stats"])
        .output()
        .expect("running topdown-bpf c2c");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("0 stores skipped") && stderr.contains("contended lines not remembered 0"),
        "{stderr}"
    );
}
