//! The built-in TopDown formulas against the data they come from (data/): the checked-in
//! generated code and event tables are what the generators write today, and for every model its
//! Level 1, 2 and 3 values (and threshold verdicts) on random counts equal an independent
//! interpretation of the same data within 1e-9.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash as _, Hasher as _},
    path::{Path, PathBuf},
    process::Command,
};

use topdown_tests::{
    metric_expr::{Env, parse},
    perfmon_metrics::{PerfmonMetrics, perfmon_name},
    pmu_events::{data_dir, formulas, is_percent, normalize, topdown_nodes},
};
use topdown_tma::{Model, generated::SOURCES, inputs::Inputs};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Runs a generator of `xtask/gen` with `args` and returns what it printed.
fn generate(script: &str, args: &[&Path]) -> String {
    let output = Command::new("python3")
        .arg(root().join("xtask/gen").join(script))
        .args(args)
        .output()
        .expect("python3 runs the generator");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn tma_formulas_are_generated_from_the_data() {
    let fresh = generate("tma_formulas.py", &[&data_dir().join("linux-pmu-events")]);
    let kept = std::fs::read_to_string(root().join("topdown-tma/src/generated.rs")).unwrap();
    assert!(
        fresh == kept,
        "topdown-tma/src/generated.rs is stale: run python3 xtask/gen/tma_formulas.py > it"
    );
}

#[test]
fn event_tables_are_generated_from_the_data() {
    let out = tempfile::tempdir().unwrap();
    generate("event_tables.py", &[&data_dir(), out.path()]);
    let kept = root().join("topdown-user/src/pmu/events");
    let mut tables = 0;
    for entry in std::fs::read_dir(out.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        let fresh = std::fs::read_to_string(&path).unwrap();
        assert!(
            fresh == std::fs::read_to_string(kept.join(name)).unwrap_or_default(),
            "topdown-user/src/pmu/events/{} is stale: run python3 xtask/gen/event_tables.py",
            name.to_string_lossy()
        );
        tables += 1;
    }
    assert_eq!(
        tables,
        std::fs::read_dir(&kept).unwrap().count(),
        "no table left over"
    );
}

/// A deterministic pseudo-random count per (event, seed), in [1e5, 1e9). Seeds from
/// [`SHAPED`] on are shaped like a machine (even: SMT off, odd: SMT on): an AnyThread count
/// (the Haswell to Cascade Lake `*_ANY` clocks and recovery cycles) is its thread's count (SMT
/// off) or 1.8 times it (the sibling ran too), and one thread was active all the reference
/// cycles (SMT off) or a fifth of them.
fn count(event: &str, seed: u64) -> f64 {
    if seed >= SHAPED {
        let factor = if seed % 2 == 1 {
            (1.8, 0.2)
        } else {
            (1.0, 1.0)
        };
        for (any_thread, thread) in ANY_THREAD {
            if event == any_thread {
                return random(thread, seed) * factor.0;
            }
        }
        if event == "CPU_CLK_UNHALTED.ONE_THREAD_ACTIVE" {
            return random("CPU_CLK_UNHALTED.REF_XCLK", seed) * factor.1;
        }
    }
    random(event, seed)
}

/// AnyThread events and the thread's own count of the same.
const ANY_THREAD: [(&str, &str); 3] = [
    ("CPU_CLK_UNHALTED.THREAD_ANY", "CPU_CLK_UNHALTED.THREAD"),
    ("CPU_CLK_UNHALTED.REF_XCLK_ANY", "CPU_CLK_UNHALTED.REF_XCLK"),
    ("INT_MISC.RECOVERY_CYCLES_ANY", "INT_MISC.RECOVERY_CYCLES"),
];

/// Seeds from here on give machine-shaped counts ([`count`]).
const SHAPED: u64 = 20;

fn random(event: &str, seed: u64) -> f64 {
    let mut hasher = DefaultHasher::new();
    (event, seed).hash(&mut hasher);
    1e5 + (hasher.finish() % 1_000_000_000) as f64 * 0.999_9
}

struct Random<'a> {
    seed: u64,
    arm: bool,
    /// Counts are keyed by the perfmon spelling of each event (models from perfmon metrics).
    perfmon: bool,
    literals: &'a HashMap<String, f64>,
}

impl Inputs for Random<'_> {
    fn event(&self, name: &str) -> f64 {
        if self.perfmon {
            count(&perfmon_name(name), self.seed)
        } else {
            count(&normalize(name, self.arm), self.seed)
        }
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
        if let Some(path) = files[0]
            .strip_prefix("../intel-perfmon/")
            .filter(|p| p.ends_with(".json"))
        {
            checked += check_perfmon_model(model, path, mapping);
            continue;
        }
        let (exprs, thresholds) = formulas(files, unit);
        let arm = files.iter().all(|f| f.starts_with("arm64/"));
        let built_in = Model::named(model).unwrap();
        // A node's metric in this model's data (several names may map to one node).
        let source_of = |node: &'static str| {
            mapping
                .iter()
                .find(|(s, n)| *n == node && exprs.contains_key(*s))
                .map_or(node, |(s, _)| *s)
        };
        // Random counts, then machine-shaped ones (SMT off, on) per thread and core-wide.
        for seed in 0..SHAPED + 4 {
            let literals = HashMap::from([
                ("#slots".to_owned(), if seed % 2 == 0 { 8.0 } else { 5.0 }),
                ("#smt_on".to_owned(), (seed % 2) as f64),
                // SMT off or on, counted per thread or core-wide (perf stat -a): all four.
                ("#core_wide".to_owned(), (seed / 2 % 2) as f64),
                ("#has_pmem".to_owned(), f64::from(u8::from(seed % 3 == 0))),
            ]);
            let events = |name: &str| count(&normalize(name, arm), seed);
            let env = Env {
                metrics: &exprs,
                events: &events,
                literals: &literals,
            };
            let evaluation = built_in.values(&Random {
                seed,
                arm,
                perfmon: false,
                literals: &literals,
            });
            assert!(!evaluation.values.is_empty(), "{model} has nodes");
            for &(node, value) in &evaluation.values {
                let expr = &exprs[source_of(node)];
                let mut expected = env.metric(source_of(node));
                if is_percent(expr) {
                    expected /= 100.0;
                }
                assert!(
                    close(value, expected),
                    "{model} {node} (seed {seed}): built-in {value}, data {expected}\n  {expr}"
                );
                checked += 1;
            }
            for &(node, over) in &evaluation.over_threshold {
                let threshold = &thresholds[source_of(node)];
                let expected = env.eval(&parse(threshold)) != 0.0;
                assert_eq!(
                    over, expected,
                    "{model} {node} threshold (seed {seed}): {threshold}"
                );
            }
        }
    }
    assert!(checked > 1000, "checked {checked} values");
}

/// Every model generated from perf's own metric files computes every Level 1 to 3 node those
/// files define for its PMU, or names it as unmeasurable (it reads a retire latency, which is
/// sampled): nothing perf shows at `-M TopdownL1,TopdownL2,TopdownL3` is missing from ours.
/// (The value test above checks the nodes a model computes; this one, that none is left out.)
#[test]
fn models_from_perfs_files_compute_every_level_one_to_three_node() {
    let mut models = 0;
    for &(model, files, unit, mapping) in SOURCES {
        if !mapping.is_empty() || !files.iter().all(|f| f.starts_with("x86-perf/")) {
            continue;
        }
        let built_in = Model::named(model).unwrap();
        let literals = HashMap::from([
            ("#slots".to_owned(), 8.0),
            ("#smt_on".to_owned(), 1.0),
            ("#core_wide".to_owned(), 1.0),
            ("#has_pmem".to_owned(), 0.0),
        ]);
        let evaluation = built_in.values(&Random {
            seed: 1,
            arm: false,
            perfmon: false,
            literals: &literals,
        });
        let mut ours: std::collections::BTreeSet<String> = evaluation
            .values
            .iter()
            .map(|(node, _)| (*node).to_owned())
            .collect();
        ours.extend(built_in.unmeasurable.iter().map(|n| (*n).to_owned()));
        let perfs = topdown_nodes(files, unit);
        assert_eq!(
            ours.difference(&perfs).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "{model}: nodes not in perf's Level 1-3"
        );
        assert_eq!(
            perfs.difference(&ours).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "{model}: perf's Level 1-3 nodes we do not compute"
        );
        models += 1;
    }
    assert!(models >= 15, "checked {models} models from perf's files");
}

/// A model generated from Intel's perfmon metric JSON against the file's own formulas,
/// evaluated over their aliases (`PerfmonMetrics`); returns the values checked.
fn check_perfmon_model(model: &str, path: &str, mapping: &[(&str, &str)]) -> usize {
    let metrics = PerfmonMetrics::read(path);
    let built_in = Model::named(model).unwrap();
    let mut checked = 0;
    for seed in 0..20u64 {
        let smt_on = (seed % 2) as f64;
        let literals = HashMap::from([
            ("#slots".to_owned(), 8.0),
            ("#smt_on".to_owned(), smt_on),
            ("#has_pmem".to_owned(), 0.0),
        ]);
        let evaluation = built_in.values(&Random {
            seed,
            arm: false,
            perfmon: true,
            literals: &literals,
        });
        let events = |name: &str| count(name, seed);
        assert!(evaluation.values.len() >= 4, "{model} has nodes");
        for &(node, value) in &evaluation.values {
            // Level 1 and 2 through the model's mapping; Level 3 by perf's naming rule.
            let source = mapping
                .iter()
                .find(|(s, n)| *n == node && metrics.has(s))
                .map(|(s, _)| *s)
                .or_else(|| metrics.for_node(node))
                .unwrap_or_else(|| panic!("{model}: {node} maps to no metric"));
            let expected = metrics.value(source, &events, smt_on) / 100.0;
            assert!(
                close(value, expected),
                "{model} {node} (seed {seed}): built-in {value}, perfmon {expected}"
            );
            checked += 1;
        }
        for &(node, over) in &evaluation.over_threshold {
            let source = mapping
                .iter()
                .find(|(s, n)| *n == node && metrics.has(s))
                .map(|(s, _)| *s)
                .or_else(|| metrics.for_node(node))
                .unwrap();
            assert_eq!(
                Some(over),
                metrics.over(source, &events, smt_on),
                "{model} {node} threshold (seed {seed})"
            );
        }
    }
    checked
}

/// Counts of an Arm core that fit together: every stalled slot is a frontend or a backend
/// one (`stall_slot = stall_slot_frontend + stall_slot_backend`), and `#slots` is the width
/// the model's own constants assume.
struct ArmCounts {
    slots: f64,
    seed: u64,
}

impl Inputs for ArmCounts {
    fn event(&self, name: &str) -> f64 {
        let cycles = 1e9;
        let width = self.slots * cycles;
        match name {
            "cpu_cycles" => cycles,
            "stall_slot_frontend" => width * 0.1 + count(name, self.seed) / 10.0,
            "stall_slot_backend" => width * 0.3 + count(name, self.seed) / 10.0,
            "stall_slot" => self.event("stall_slot_frontend") + self.event("stall_slot_backend"),
            "op_spec" => 2e9 + count(name, self.seed),
            "op_retired" => 1.5e9 + count(name, self.seed) / 10.0,
            other => count(other, self.seed) / 100.0,
        }
    }
    fn literal(&self, name: &str) -> f64 {
        assert_eq!(name, "#slots");
        self.slots
    }
}

/// Arm's Level 1 nodes split every slot: they sum to 1 whatever the counts, as long as the
/// stalled slots are frontend or backend ones and `#slots` is the core's width (V1 and V3 write
/// theirs as constants). Independent of how the data writes each formula (fractions, or
/// percent: V1's `100 * (...)`, V3's and N3's terms each `* 100`), so a node left in percent
/// shows up as a sum near 100 or 200.
#[test]
fn arm_level_one_nodes_sum_to_one() {
    for (model, slots) in [
        ("neoverse_v1", 8.0),
        ("neoverse_n2", 5.0),
        ("neoverse_n2", 8.0),
        ("neoverse_v3", 10.0),
        ("neoverse_n3", 5.0),
    ] {
        for seed in 0..5 {
            let values = Model::named(model)
                .unwrap()
                .values(&ArmCounts { slots, seed })
                .values;
            assert_eq!(values.len(), 4, "{model}: four Level 1 nodes");
            let sum: f64 = values.iter().map(|(_, v)| v).sum();
            assert!(
                (sum - 1.0).abs() < 1e-9,
                "{model} ({slots} slots, seed {seed}): Level 1 sums to {sum}: {values:?}"
            );
        }
    }
}
