//! The built-in TopDown formulas against the data they come from (../shared/data): the checked-in
//! generated code is what the generator writes today, and for every model its Level 1 and Level 2
//! values (and threshold verdicts) on random counts equal an independent interpretation of the
//! same pmu-events JSON within 1e-9.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash as _, Hasher as _},
    path::PathBuf,
    process::Command,
};

use serde_json::Value;
use topdown_tests::metric_expr::Env;
use topdown_user::tma::{Model, generated::SOURCES, inputs::Inputs};

fn data_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data"));
    assert!(
        dir.join("linux-pmu-events").is_dir(),
        "the reference data is missing: ../shared/data must sit beside the repository"
    );
    dir
}

#[test]
fn tma_formulas_are_generated_from_the_data() {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let output = Command::new("python3")
        .arg(root.join("xtask/gen/tma_formulas.py"))
        .arg(data_dir().join("linux-pmu-events"))
        .output()
        .expect("python3 runs the generator");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let checked_in =
        std::fs::read_to_string(root.join("topdown-user/src/tma/generated.rs")).unwrap();
    assert!(
        String::from_utf8_lossy(&output.stdout) == checked_in,
        "topdown-user/src/tma/generated.rs is stale: run python3 xtask/gen/tma_formulas.py > it"
    );
}

#[test]
fn event_tables_are_generated_from_the_data() {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let out = tempfile::tempdir().unwrap();
    let output = Command::new("python3")
        .arg(root.join("xtask/gen/event_tables.py"))
        .arg(data_dir())
        .arg(out.path())
        .output()
        .expect("python3 runs the generator");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let checked_in = root.join("topdown-user/src/pmu/events");
    let mut tables = 0;
    for entry in std::fs::read_dir(out.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        let fresh = std::fs::read_to_string(&path).unwrap();
        let kept = std::fs::read_to_string(checked_in.join(name)).unwrap_or_default();
        assert!(
            fresh == kept,
            "topdown-user/src/pmu/events/{} is stale: run python3 xtask/gen/event_tables.py",
            name.to_string_lossy()
        );
        tables += 1;
    }
    assert_eq!(
        tables,
        std::fs::read_dir(&checked_in).unwrap().count(),
        "no table left over"
    );
}

/// Metrics of a model as perf merges them: later files override by `ArchStdEvent`.
fn metrics(files: &[&str], unit: Option<&str>) -> HashMap<String, Value> {
    let mut merged: HashMap<String, Value> = HashMap::new();
    for file in files.iter().filter(|f| f.ends_with(".json")) {
        let path = data_dir().join("linux-pmu-events").join(file);
        let list: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for metric in list {
            if unit.is_some_and(|u| metric["Unit"] != u) {
                continue;
            }
            let name = match (&metric["MetricName"], &metric["ArchStdEvent"]) {
                (Value::String(n), _) => n.clone(),
                (_, Value::String(n)) => n.to_lowercase(),
                _ => continue,
            };
            let entry = merged
                .entry(name)
                .or_insert_with(|| Value::Object(Default::default()));
            for (k, v) in metric.as_object().unwrap() {
                if !v.is_null() {
                    entry[k] = v.clone();
                }
            }
        }
    }
    merged
}

/// A deterministic pseudo-random count per (event, seed), in [1e5, 1e9).
fn count(event: &str, seed: u64) -> f64 {
    let mut hasher = DefaultHasher::new();
    (event, seed).hash(&mut hasher);
    1e5 + (hasher.finish() % 1_000_000_000) as f64 * 0.999_9
}

/// perf's spelling of the same event on both sides: `pmu@E@` is E; Arm names are lower case.
fn normalize(event: &str, arm: bool) -> String {
    let plain = ["cpu@", "cpu_core@", "cpu_atom@"].iter().find_map(|p| {
        let inner = event.strip_prefix(p)?.strip_suffix('@')?;
        (!inner.contains(',')).then(|| inner.to_owned())
    });
    let name = plain.unwrap_or_else(|| event.to_owned());
    if arm { name.to_lowercase() } else { name }
}

struct Random<'a> {
    seed: u64,
    arm: bool,
    literals: &'a HashMap<String, f64>,
}

impl Inputs for Random<'_> {
    fn event(&self, name: &str) -> f64 {
        count(&normalize(name, self.arm), self.seed)
    }
    fn literal(&self, name: &str) -> f64 {
        self.literals[name]
    }
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn every_model_matches_an_independent_evaluation_of_the_data() {
    let mut checked = 0;
    for &(model, files, unit, mapping) in SOURCES {
        let all = metrics(files, unit);
        let atom = topdown_tests::atom_csv::metrics(files, unit);
        let mut exprs: HashMap<String, String> = all
            .iter()
            .filter_map(|(n, m)| Some((n.clone(), m["MetricExpr"].as_str()?.to_owned())))
            .collect();
        let mut thresholds: HashMap<String, String> = all
            .iter()
            .filter_map(|(n, m)| Some((n.clone(), m["MetricThreshold"].as_str()?.to_owned())))
            .collect();
        for (name, (expr, threshold)) in atom {
            exprs.insert(name.clone(), expr);
            if let Some(threshold) = threshold {
                thresholds.insert(name, threshold);
            }
        }
        let arm = files.iter().all(|f| f.starts_with("arm64/"));
        let built_in = Model::named(model).unwrap();
        for seed in 0..20u64 {
            let literals = HashMap::from([
                ("#slots".to_owned(), if seed % 2 == 0 { 8.0 } else { 5.0 }),
                ("#smt_on".to_owned(), (seed % 2) as f64),
            ]);
            let events = |name: &str| count(&normalize(name, arm), seed);
            let env = Env {
                metrics: &exprs,
                events: &events,
                literals: &literals,
            };
            let inputs = Random {
                seed,
                arm,
                literals: &literals,
            };
            let evaluation = built_in.values(&inputs);
            assert!(!evaluation.values.is_empty(), "{model} has nodes");
            for &(node, value) in &evaluation.values {
                let source = mapping
                    .iter()
                    .find(|(_, n)| *n == node)
                    .map_or(node, |(s, _)| *s);
                let expr = &exprs[source];
                let mut expected = env.metric(source);
                if expr.trim_start_matches('(').starts_with("100 *") {
                    expected /= 100.0;
                }
                assert!(
                    close(value, expected),
                    "{model} {node} (seed {seed}): built-in {value}, data {expected}\n  {expr}"
                );
                checked += 1;
            }
            for &(node, over) in &evaluation.over_threshold {
                let source = mapping
                    .iter()
                    .find(|(_, n)| *n == node)
                    .map_or(node, |(s, _)| *s);
                let threshold = &thresholds[source];
                let expected = env.eval(&topdown_tests::metric_expr::parse(threshold)) != 0.0;
                assert_eq!(
                    over, expected,
                    "{model} {node} threshold (seed {seed}): {threshold}"
                );
            }
        }
    }
    assert!(checked > 1000, "checked {checked} values");
}
