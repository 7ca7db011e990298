//! `topdown-bpf analyze` end to end, for every model: the events `analyze --events` says to
//! record are written as `perf stat -x,` would (names holding commas included) with random counts,
//! and the values `analyze --json` computes equal an independent evaluation of the pmu-events
//! JSON in ../shared/data (within 1e-9).

use std::{collections::HashMap, path::PathBuf, process::Command};

use serde_json::Value;
use topdown_tests::{
    metric_expr::{Env, parse},
    topdown_bpf_binary,
};
use topdown_user::tma::generated::SOURCES;

/// (model, analyze arguments selecting it).
const CASES: &[(&str, &[&str])] = &[
    ("icelake", &["--cpu", "GenuineIntel-6-7E"]),
    ("sapphirerapids", &["--cpu", "GenuineIntel-6-8F"]),
    (
        "alderlake_core",
        &["--cpu", "GenuineIntel-6-97", "--pmu", "cpu_core"],
    ),
    (
        "alderlake_atom",
        &["--cpu", "GenuineIntel-6-97", "--pmu", "cpu_atom"],
    ),
    ("skylake", &["--cpu", "GenuineIntel-6-5E"]),
    ("skylake_smt", &["--cpu", "GenuineIntel-6-5E", "--smt"]),
    ("goldmont", &["--cpu", "GenuineIntel-6-5C"]),
    ("tremont", &["--cpu", "GenuineIntel-6-86"]),
    ("zen4", &["--cpu", "AuthenticAMD-25-11"]),
    ("zen5", &["--cpu", "AuthenticAMD-26-2"]),
    ("neoverse_v1", &["--cpu", "arm-0x41-0xd40"]),
    ("neoverse_n2", &["--cpu", "arm-0x41-0xd49"]),
];

fn data(file: &str) -> Vec<Value> {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/linux-pmu-events"
    ))
    .join(file);
    serde_json::from_str(&std::fs::read_to_string(&path).expect("../shared/data beside the repo"))
        .unwrap()
}

/// The `-e` list of `perf stat` split into events: commas inside `pmu/.../` belong to the event,
/// group braces are dropped.
fn split_events(list: &str) -> Vec<String> {
    let (mut events, mut current, mut in_pmu) = (Vec::new(), String::new(), false);
    for c in list.chars() {
        match c {
            '{' | '}' => {}
            '/' => {
                in_pmu = !in_pmu;
                current.push(c);
            }
            ',' if !in_pmu => events.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    events.push(current);
    events.into_iter().filter(|e| !e.is_empty()).collect()
}

/// The formula spelling the interpreter looks events up by.
fn normalize(perf: &str, arm: bool) -> String {
    let name = match perf.split_once('/') {
        Some((pmu, rest)) => {
            let inner = rest.trim_end_matches('/');
            if inner.contains(',') {
                format!("{pmu}@{inner}@")
            } else {
                inner.to_owned()
            }
        }
        None if perf == "slots" => "TOPDOWN.SLOTS".to_owned(),
        None => perf.to_owned(),
    };
    if arm { name.to_lowercase() } else { name }
}

fn normalize_formula(event: &str, arm: bool) -> String {
    let plain = ["cpu@", "cpu_core@", "cpu_atom@"].iter().find_map(|p| {
        let inner = event.strip_prefix(p)?.strip_suffix('@')?;
        (!inner.contains(',')).then(|| inner.to_owned())
    });
    let name = plain.unwrap_or_else(|| event.to_owned());
    if arm { name.to_lowercase() } else { name }
}

#[test]
fn analyze_matches_an_independent_evaluation_for_every_model() {
    let dir = tempfile::tempdir().unwrap();
    for &(model, select) in CASES {
        let (_, files, unit, mapping) = SOURCES.iter().find(|s| s.0 == model).unwrap();
        let arm = model.starts_with("neoverse");
        let events = Command::new(topdown_bpf_binary())
            .args(["analyze", "--events"])
            .args(select)
            .output()
            .unwrap();
        assert!(
            events.status.success(),
            "{}",
            String::from_utf8_lossy(&events.stderr)
        );
        let text = String::from_utf8(events.stdout).unwrap();
        let list = text.split('\'').nth(1).expect("perf stat -e '...'");
        let mut counts = HashMap::new();
        let mut csv = String::from("# started on a machine far away\n\n");
        for (i, event) in split_events(list).iter().enumerate() {
            let count =
                1_000_000 + (i as u64 * 7_919_993 + model.len() as u64 * 104_729) % 900_000_000;
            counts.insert(normalize(event, arm), count as f64);
            csv.push_str(&format!("{count},,{event},2000000000,100.00,,\n"));
        }
        let file = dir.path().join(format!("{model}.csv"));
        std::fs::write(&file, &csv).unwrap();
        let output = Command::new(topdown_bpf_binary())
            .arg("analyze")
            .arg(&file)
            .args(select)
            .args(["--td-level", "2", "--json"])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{model}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(doc["model"], model);
        assert_eq!(
            doc["missing_events"].as_array().unwrap().len(),
            0,
            "{model}: {doc}"
        );

        // The independent side: the data's formulas, interpreted.
        let mut exprs = topdown_tests::atom_csv::metrics(files, *unit)
            .into_iter()
            .map(|(name, (expr, _))| (name, expr))
            .collect::<HashMap<_, _>>();
        for file in files.iter().filter(|f| f.ends_with(".json")) {
            for metric in data(file) {
                if unit.is_some_and(|u| metric["Unit"] != u) {
                    continue;
                }
                let name = match (&metric["MetricName"], &metric["ArchStdEvent"]) {
                    (Value::String(n), _) => n.clone(),
                    (_, Value::String(n)) => n.to_lowercase(),
                    _ => continue,
                };
                if let Some(expr) = metric["MetricExpr"].as_str() {
                    exprs.insert(name, expr.to_owned());
                }
            }
        }
        let literals = HashMap::from([
            (
                "#slots".to_owned(),
                if model == "neoverse_n2" { 5.0 } else { 8.0 },
            ),
            (
                "#smt_on".to_owned(),
                if model == "skylake_smt" { 1.0 } else { 0.0 },
            ),
        ]);
        let lookup = |name: &str| {
            *counts
                .get(&normalize_formula(name, arm))
                .unwrap_or_else(|| panic!("{model}: `analyze --events` did not list {name}"))
        };
        let env = Env {
            metrics: &exprs,
            events: &lookup,
            literals: &literals,
        };
        let nodes = doc["nodes"].as_object().unwrap();
        assert!(nodes.len() >= 4, "{model}: {doc}");
        for (node, value) in nodes {
            let source = mapping
                .iter()
                .find(|(_, n)| n == node)
                .map_or(node.as_str(), |(s, _)| *s);
            let mut expected = env.eval(&parse(&exprs[source]));
            if exprs[source].trim_start_matches('(').starts_with("100 *") {
                expected /= 100.0;
            }
            let value = value.as_f64().unwrap();
            assert!(
                (value - expected).abs() <= 1e-9 * expected.abs().max(1.0),
                "{model} {node}: analyze {value}, data {expected}"
            );
        }
    }
}

#[test]
fn malformed_csv_gets_a_line_numbered_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.csv");
    std::fs::write(&file, "1000,,slots,10,100.00,,\nthis is not perf output\n").unwrap();
    let output = Command::new(topdown_bpf_binary())
        .arg("analyze")
        .arg(&file)
        .args(["--cpu", "GenuineIntel-6-8F"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("line 2:"), "{stderr}");
    let output = Command::new(topdown_bpf_binary())
        .args(["analyze", "--events", "--cpu", "GenuineIntel-6-3C"])
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "Haswell has no model: one clear line"
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stderr)
            .trim()
            .lines()
            .count(),
        1
    );
}
