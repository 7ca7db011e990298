//! True or false sharing and the gain of fixing it (issue 12), on a recording made for it
//! (tests/fixtures/c2c/sharing.json): line 0x7f0000000000, where each of two threads stores to and
//! loads its own word, is falsely shared; at 0x7f0000000040 one thread loads the word the other
//! stores, truly shared; at 0x7f0000000080 both. Every value below is worked out by hand from the
//! spec, not read from our output. perf's layout stays the default (c2c_perf.rs compares it).

use std::path::Path;

use serde_json::Value;
use topdown_tests::{perf_data_of, stdout_of, topdown_bpf_binary};

fn report(dir: &Path, data: &Path, args: &[&str]) -> String {
    stdout_of(
        &format!("c2c report {args:?}"),
        std::process::Command::new(topdown_bpf_binary())
            .args(["c2c", "report"])
            .args(args)
            .arg("-i")
            .arg(data)
            .current_dir(dir),
    )
}

/// The spec's loads: contended ones at 200 (line F: 40 of them), 300 (line T: 30) and 100
/// cycles (line M: 20); 100 uncontended ones at 10 cycles.
const ALL_CYCLES: f64 = 40.0 * 200.0 + 30.0 * 300.0 + 20.0 * 100.0 + 100.0 * 10.0;
const UNCONTENDED_MEAN: f64 = 10.0;

#[test]
fn lines_are_labelled_and_their_gain_estimated_as_worked_out_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/c2c/sharing.json");
    let data = perf_data_of(Path::new(spec), dir.path());

    let doc: Value = serde_json::from_str(&report(dir.path(), &data, &["--json"])).unwrap();
    assert_eq!(doc["schema"], "topdown-bpf/c2c/v2");
    let lines = doc["lines"].as_array().unwrap();
    // (address, label, true loads, false loads, contended cycles, contended loads)
    let expected = [
        ("0x7f0000000000", "false", 0, 40, 40.0 * 200.0, 40.0),
        ("0x7f0000000040", "true", 30, 0, 30.0 * 300.0, 30.0),
        ("0x7f0000000080", "mixed", 10, 10, 20.0 * 100.0, 20.0),
    ];
    assert_eq!(lines.len(), expected.len());
    for (line, (address, label, true_loads, false_loads, cycles, loads)) in
        lines.iter().zip(expected)
    {
        assert_eq!(line["address"], address, "addresses are hex strings");
        assert_eq!(line["sharing"], label, "{address}");
        assert_eq!(line["sharing_loads"]["true"], true_loads, "{address}");
        assert_eq!(line["sharing_loads"]["false"], false_loads, "{address}");
        let share = line["contended_latency_share"].as_f64().unwrap();
        assert!(
            (share - cycles / ALL_CYCLES).abs() < 1e-12,
            "{address}: {share}"
        );
        let gain = line["estimated_gain"].as_f64().unwrap();
        let by_hand = (cycles - loads * UNCONTENDED_MEAN) / ALL_CYCLES;
        assert!(
            (gain - by_hand).abs() < 1e-12,
            "{address}: {gain} vs {by_hand}"
        );
        for entry in line["entries"].as_array().unwrap() {
            let symbol = entry["symbol"].as_str().unwrap();
            assert!(["reader", "writer"].contains(&symbol), "clean: {symbol}");
            assert_eq!(entry["symbol_kind"], "user");
            assert!(entry["code_address"].as_str().unwrap().starts_with("0x401"));
        }
    }

    // --sharing: perf's table and two columns; --by-gain: the most worth fixing first.
    let table = |args: &[&str]| -> Vec<Vec<String>> {
        report(dir.path(), &data, args)
            .lines()
            .skip_while(|l| !l.contains("Shared Data Cache Line Table"))
            .take_while(|l| !l.contains("Shared Cache Line Distribution Pareto"))
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    let sharing = table(&["--stdio", "--sharing"]);
    let plain = table(&["--stdio"]);
    for (with, without) in sharing.iter().zip(&plain) {
        assert_eq!(
            with[..with.len() - 2],
            without[..],
            "perf's columns unchanged"
        );
    }
    let tail: Vec<(&str, &str, &str)> = sharing
        .iter()
        .map(|r| {
            (
                r[1].as_str(),
                r[r.len() - 2].as_str(),
                r[r.len() - 1].as_str(),
            )
        })
        .collect();
    assert_eq!(
        tail,
        [
            ("0x7f0000000000", "false", "38.00%"),
            ("0x7f0000000040", "true", "43.50%"),
            ("0x7f0000000080", "mixed", "9.00%"),
        ]
    );
    let by_gain: Vec<String> = table(&["--stdio", "--sharing", "--by-gain"])
        .iter()
        .map(|r| r[1].clone())
        .collect();
    assert_eq!(
        by_gain,
        ["0x7f0000000040", "0x7f0000000000", "0x7f0000000080"]
    );
}
