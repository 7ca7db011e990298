//! The reference data the TopDown tests read (`data/`, see its README): each model's metric formulas and
//! thresholds, merged as perf merges them, and event names normalised as perf treats them.

use std::{collections::HashMap, path::PathBuf};

use serde_json::Value;

/// The repository's `data/` folder.
pub fn data_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data"));
    assert!(
        dir.join("linux-pmu-events").is_dir(),
        "the reference data is missing: {} has no linux-pmu-events",
        dir.display()
    );
    dir
}

/// A model's `(formulas, thresholds)` by metric name, from its sources: pmu-events JSON files
/// (later files override earlier ones by `ArchStdEvent`, as perf merges them; `unit` picks a
/// hybrid part's metrics) and Intel's `Atom_TMA.csv` (`unit` is the model column).
pub fn formulas(
    files: &[&str],
    unit: Option<&str>,
) -> (HashMap<String, String>, HashMap<String, String>) {
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
                .or_insert_with(|| Value::Object(serde_json::Map::default()));
            for (k, v) in metric.as_object().unwrap() {
                if !v.is_null() {
                    entry[k] = v.clone();
                }
            }
        }
    }
    let field = |key: &str| -> HashMap<String, String> {
        merged
            .iter()
            .filter_map(|(n, m)| Some((n.clone(), m[key].as_str()?.to_owned())))
            .collect()
    };
    let (mut exprs, mut thresholds) = (field("MetricExpr"), field("MetricThreshold"));
    for (name, (expr, threshold)) in crate::atom_csv::metrics(files, unit) {
        exprs.insert(name.clone(), expr);
        if let Some(threshold) = threshold {
            thresholds.insert(name, threshold);
        }
    }
    (exprs, thresholds)
}

/// The TopDown nodes of Levels 1 to 3 a model's pmu-events JSON files define for `unit`: every
/// `tma_` metric in a `TopdownL1`, `TopdownL2` or `TopdownL3` group (what `perf stat -M
/// TopdownL1,TopdownL2,TopdownL3` evaluates).
pub fn topdown_nodes(files: &[&str], unit: Option<&str>) -> std::collections::BTreeSet<String> {
    let mut nodes = std::collections::BTreeSet::new();
    for file in files.iter().filter(|f| f.ends_with(".json")) {
        let path = data_dir().join("linux-pmu-events").join(file);
        let list: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for metric in list {
            let (Some(name), Some(groups)) = (
                metric["MetricName"].as_str(),
                metric["MetricGroup"].as_str(),
            ) else {
                continue;
            };
            let levels = groups
                .split(';')
                .any(|g| matches!(g, "TopdownL1" | "TopdownL2" | "TopdownL3"));
            if levels && name.starts_with("tma_") && unit.is_none_or(|u| metric["Unit"] == u) {
                nodes.insert(name.to_owned());
            }
        }
    }
    nodes
}

/// Whether a formula is written in percent: `100 * ...` (Neoverse V1's overrides), or a sum
/// whose every term is multiplied by 100 at its end (Neoverse V3's and N3's), while sbsa's
/// formulas they override are fractions (`ScaleUnit` 100%).
pub fn is_percent(expr: &str) -> bool {
    if expr.trim_start_matches('(').starts_with("100 *") {
        return true;
    }
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in expr.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            '+' | '-' if depth == 0 && !expr[..i].trim_end().ends_with(['*', '/', '(']) => {
                terms.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&expr[start..]);
    terms.iter().all(|t| {
        t.trim()
            .strip_suffix("100")
            .is_some_and(|rest| rest.trim_end().ends_with('*'))
    })
}

/// One event's name as perf treats it: `pmu@E@` without modifiers is E; Arm names are
/// case-insensitive (lower case here).
pub fn normalize(event: &str, arm: bool) -> String {
    // perf's `slots` is TOPDOWN.SLOTS (its sysfs alias); `cmask=0x1` is `cmask=1`.
    if event == "slots" {
        return "TOPDOWN.SLOTS".to_owned();
    }
    let event = &decimal_masks(event);
    let plain = ["cpu@", "cpu_core@", "cpu_atom@"].iter().find_map(|p| {
        let inner = event.strip_prefix(p)?.strip_suffix('@')?;
        (!inner.contains(',')).then(|| inner.to_owned())
    });
    let name = plain.unwrap_or_else(|| event.to_owned());
    if arm { name.to_lowercase() } else { name }
}

/// `cmask=0xN` (and `edge`, `inv`) written in decimal, as the rest of the tool spells them.
fn decimal_masks(event: &str) -> String {
    let mut out = String::new();
    let mut rest = event;
    while let Some(at) = ["cmask=0x", "edge=0x", "inv=0x"]
        .iter()
        .filter_map(|term| rest.find(term).map(|i| (i, term.len())))
        .min()
    {
        let (i, len) = at;
        out.push_str(&rest[..i + len - 2]);
        let digits: String = rest[i + len..]
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect();
        out.push_str(&u64::from_str_radix(&digits, 16).unwrap_or(0).to_string());
        rest = &rest[i + len + digits.len()..];
    }
    out.push_str(rest);
    out
}
