//! Intel's perfmon metric JSON (`<MODEL>/metrics/*_metrics*.json`) evaluated for the tests,
//! independently of the generator: each metric's `Formula` over its own aliases, the aliases
//! bound to the counts of the events its `Events` list names (and `smt_on` to `#smt_on`), and
//! thresholds over the metrics their `ThresholdMetrics` name (E-core files name them in the
//! formula itself, `metric_TMA_..X(%) >0.15 && ...`, compared as fractions).

use std::collections::HashMap;

use serde_json::Value;

use crate::metric_expr::{Env, parse};

/// One model's TMA metrics, read from the file.
pub struct PerfmonMetrics {
    metrics: HashMap<String, Value>,
    /// MetricName by LegacyName (`metric_TMA_..Fetch_Latency(%)`).
    legacy: HashMap<String, String>,
}

impl PerfmonMetrics {
    /// The TMA metrics of `path` (relative to `data/intel-perfmon`).
    pub fn read(path: &str) -> Self {
        let file = crate::pmu_events::data_dir()
            .join("intel-perfmon")
            .join(path);
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let metrics: HashMap<String, Value> = doc["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["Category"] == "TMA")
            .map(|m| (m["MetricName"].as_str().unwrap().to_owned(), m.clone()))
            .collect();
        let legacy = metrics
            .iter()
            .filter_map(|(name, m)| Some((m["LegacyName"].as_str()?.to_owned(), name.clone())))
            .collect();
        Self { metrics, legacy }
    }

    /// The metric perf names `node` (`tma_l1_bound` is `L1_Bound`).
    pub fn for_node(&self, node: &str) -> Option<&str> {
        self.metrics
            .keys()
            .find(|name| format!("tma_{}", name.to_lowercase()) == node)
            .map(String::as_str)
    }

    /// Whether the file has TMA metric `name`.
    pub fn has(&self, name: &str) -> bool {
        self.metrics.contains_key(name)
    }

    /// The value of metric `name` (as the file writes it: percent for `100 * ...`), with
    /// `count` giving each event's count by its perfmon name (`:perf_metrics` dropped).
    pub fn value(&self, name: &str, count: &dyn Fn(&str) -> f64, smt_on: f64) -> f64 {
        let metric = &self.metrics[name];
        let events: HashMap<&str, &str> = metric["Events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["Alias"].as_str().unwrap(), e["Name"].as_str().unwrap()))
            .collect();
        let constants: HashMap<&str, &str> = metric["Constants"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|c| (c["Alias"].as_str().unwrap(), c["Name"].as_str().unwrap()))
                    .collect()
            })
            .unwrap_or_default();
        let lookup = |alias: &str| -> f64 {
            if let Some(event) = events.get(alias) {
                // Modifiers as perf spells their values: `u0x3C` is `umask=0x3c`.
                let mut parts = event.split(':');
                let mut name = parts.next().unwrap_or_default().to_owned();
                for modifier in parts.filter(|m| *m != "perf_metrics") {
                    name.push(':');
                    name.push_str(&modifier.to_lowercase());
                }
                return count(&name);
            }
            match constants.get(alias) {
                Some(&"HYPERTHREADING_ON") => smt_on,
                other => panic!("{name}: unbound alias {alias} ({other:?})"),
            }
        };
        let (empty, no_literals) = (HashMap::new(), HashMap::new());
        Env {
            metrics: &empty,
            events: &lookup,
            literals: &no_literals,
        }
        .eval(&parse(metric["Formula"].as_str().unwrap()))
    }

    /// Whether metric `name` is over its threshold; `None` where it has none.
    pub fn over(&self, name: &str, count: &dyn Fn(&str) -> f64, smt_on: f64) -> Option<bool> {
        let threshold = &self.metrics[name]["Threshold"];
        let formula = threshold["Formula"].as_str().filter(|f| !f.is_empty())?;
        let (empty, no_literals) = (HashMap::new(), HashMap::new());
        let value = |legacy: &str| self.value(&self.legacy[legacy], count, smt_on);
        let result = match threshold["ThresholdMetrics"].as_array() {
            Some(list) if !list.is_empty() => {
                let bound: HashMap<&str, &str> = list
                    .iter()
                    .map(|t| (t["Alias"].as_str().unwrap(), t["Value"].as_str().unwrap()))
                    .collect();
                let lookup = |alias: &str| value(bound[alias]);
                Env {
                    metrics: &empty,
                    events: &lookup,
                    literals: &no_literals,
                }
                .eval(&parse(formula))
            }
            _ => {
                // `metric_TMA_..IFetch_Latency(%) >0.15 && metric_TMA_Frontend_Bound(%) >0.20`:
                // each name a fraction of its percent value.
                let mut text = formula.replace("&&", "&");
                let mut names = Vec::new();
                for legacy in self.legacy.keys() {
                    if text.contains(legacy.as_str()) {
                        let alias = format!("m{}", names.len());
                        text = text.replace(legacy.as_str(), &alias);
                        names.push((alias, legacy.clone()));
                    }
                }
                let lookup = |alias: &str| {
                    let (_, legacy) = names.iter().find(|(a, _)| a == alias).unwrap();
                    value(legacy) / 100.0
                };
                Env {
                    metrics: &empty,
                    events: &lookup,
                    literals: &no_literals,
                }
                .eval(&parse(&text))
            }
        };
        Some(result != 0.0)
    }
}

/// An event named as perf names it (`topdown-fe-bound`, `cpu@X,cmask=1,edge@`), as perfmon
/// names it (`PERF_METRICS.FRONTEND_BOUND`, `X:c1:e1`).
pub fn perfmon_name(perf: &str) -> String {
    let metrics = [
        ("topdown-fe-bound", "FRONTEND_BOUND"),
        ("topdown-bad-spec", "BAD_SPECULATION"),
        ("topdown-be-bound", "BACKEND_BOUND"),
        ("topdown-retiring", "RETIRING"),
        ("topdown-heavy-ops", "HEAVY_OPERATIONS"),
        ("topdown-br-mispredict", "BRANCH_MISPREDICTS"),
        ("topdown-fetch-lat", "FETCH_LATENCY"),
        ("topdown-mem-bound", "MEMORY_BOUND"),
    ];
    if let Some((_, field)) = metrics.iter().find(|(p, _)| *p == perf) {
        return format!("PERF_METRICS.{field}");
    }
    let Some(inner) = perf.strip_prefix("cpu@").and_then(|p| p.strip_suffix('@')) else {
        return perf.to_owned();
    };
    let mut parts = inner.split(',');
    let mut name = parts.next().unwrap().to_owned();
    for term in parts {
        name.push(':');
        match term.split_once('=') {
            Some(("cmask", n)) => name.push_str(&format!("c{n}")),
            Some(("umask", n)) => name.push_str(&format!("u{n}")),
            Some(("eq", n)) => name.push_str(&format!("eq{n}")),
            None if term == "edge" => name.push_str("e1"),
            None if term == "inv" => name.push_str("i1"),
            _ => panic!("term {term} of {perf}"),
        }
    }
    name
}
