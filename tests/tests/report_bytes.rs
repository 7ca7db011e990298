//! The JSON and CSV writers' bytes on a recorded busy run do not change when the code behind
//! them does (issue 55: work that makes them cheaper must keep the output byte for byte).
//!
//! `tests/fixtures/busy/run.rec` is a real recording (`topdown-bpf record -I 1000 --duration 3`
//! beside `sleepers 60 1000`: 60 threads of one process each waking every second for a few
//! microseconds, so every one runs in every window; 4 windows, 76 threads, waits split over
//! their culprits). The other files are what `report` wrote of it at 55014cd, before the flat
//! fields of CSV and Parquet were one list. Where a change means to change the output, write
//! them again with the commands below and say why in the commit. No privileges needed.

use std::{path::Path, process::Command};

use topdown_tests::topdown_bpf_binary;

/// Each expected file and the `report` arguments that wrote it.
const WRITTEN: [(&str, &[&str]); 4] = [
    ("threads.json", &["--json", "-I", "1000"]),
    ("threads.csv", &["--csv", "-I", "1000"]),
    ("containers.json", &["--json", "--per-container"]),
    ("cgroups.csv", &["--csv", "--per-cgroup"]),
];

#[test]
fn json_and_csv_of_a_recorded_busy_run_keep_their_bytes() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/busy");
    for (file, args) in WRITTEN {
        let expected = std::fs::read(fixtures.join(file)).unwrap();
        let output = Command::new(topdown_bpf_binary())
            .arg("report")
            .arg("-i")
            .arg(fixtures.join("run.rec"))
            .args(args)
            // The report names nothing from the machine it runs on: not its time zone either.
            .env("TZ", "Asia/Tokyo")
            .output()
            .expect("running report");
        assert!(
            output.status.success(),
            "report {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        if output.stdout != expected {
            let (got, want) = (
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&expected),
            );
            let line = got
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
            panic!(
                "report {args:?} no longer writes {file} byte for byte: line {} differs \
                 ({} bytes, {} expected)\n got: {:.300}\nwant: {:.300}",
                line + 1,
                got.len(),
                want.len(),
                got.lines().nth(line).unwrap_or("<end>"),
                want.lines().nth(line).unwrap_or("<end>"),
            );
        }
    }
}
