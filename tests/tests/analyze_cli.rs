//! `topdown-bpf analyze` end to end, for every model: the events `analyze --events` says to
//! record are written as `perf stat -x,` would (names holding commas included) with random counts,
//! and the values `analyze --json` computes equal an independent evaluation of the pmu-events
//! JSON in data/ (within 1e-9).

use std::{collections::HashMap, process::Command};

use serde_json::Value;
use topdown_tests::{
    metric_expr::{Env, Expr, parse},
    perfmon_metrics::{PerfmonMetrics, perfmon_name},
    pmu_events::{formulas, is_percent, normalize},
    stdout_of, topdown_bpf_binary,
};
use topdown_user::{pmu::event_spec::split_event_list, tma::generated::SOURCES};

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
    ("graniterapids", &["--cpu", "GenuineIntel-6-AD"]),
    ("icelakex", &["--cpu", "GenuineIntel-6-6A"]),
    (
        "meteorlake_core",
        &["--cpu", "GenuineIntel-6-AA", "--pmu", "cpu_core"],
    ),
    (
        "crestmont",
        &["--cpu", "GenuineIntel-6-AA", "--pmu", "cpu_atom"],
    ),
    (
        "lunarlake_atom",
        &["--cpu", "GenuineIntel-6-BD", "--pmu", "cpu_atom"],
    ),
    ("sierraforest", &["--cpu", "GenuineIntel-6-AF"]),
    ("haswell", &["--cpu", "GenuineIntel-6-3C"]),
    ("cascadelakex", &["--cpu", "GenuineIntel-6-55-7"]),
    ("tigerlake", &["--cpu", "GenuineIntel-6-8C"]),
    ("rocketlake", &["--cpu", "GenuineIntel-6-A7"]),
    ("emeraldrapids", &["--cpu", "GenuineIntel-6-CF"]),
    (
        "lunarlake_core",
        &["--cpu", "GenuineIntel-6-BD", "--pmu", "cpu_core"],
    ),
    (
        "arrowlake_core",
        &["--cpu", "GenuineIntel-6-C6", "--pmu", "cpu_core"],
    ),
    (
        "arrowlake_atom",
        &["--cpu", "GenuineIntel-6-C6", "--pmu", "cpu_atom"],
    ),
    ("broadwell", &["--cpu", "GenuineIntel-6-3D"]),
    ("grandridge", &["--cpu", "GenuineIntel-6-B6"]),
    ("broadwell", &["--cpu", "GenuineIntel-6-3D", "--smt"]),
    ("haswell", &["--cpu", "GenuineIntel-6-3C", "--smt"]),
    // SMT on, counted per thread: perf's estimate (`#core_wide < 1`).
    ("cascadelakex", &["--cpu", "GenuineIntel-6-55-7", "--smt"]),
    ("skylakex", &["--cpu", "GenuineIntel-6-55-4", "--smt"]),
    // SMT on, `perf stat -a`: core-wide counts.
    ("skylakex", &["--cpu", "GenuineIntel-6-55-4", "--smt", "-a"]),
    // Persistent memory on the recording machine: perf's `#has_pmem`.
    ("sapphirerapids", &["--cpu", "GenuineIntel-6-8F", "--pmem"]),
];

/// The formula spelling of an event as `perf stat` writes it: `pmu/E/` is `pmu@E@` (or E when
/// it has no modifiers), `slots` is `TOPDOWN.SLOTS`.
fn formula_spelling(perf: &str, arm: bool) -> String {
    let name = match perf.split_once('/') {
        Some((pmu, rest)) => format!("{pmu}@{}@", rest.trim_end_matches('/')),
        None if perf == "slots" => "TOPDOWN.SLOTS".to_owned(),
        None => perf.to_owned(),
    };
    normalize(&name, arm)
}

#[test]
fn analyze_matches_an_independent_evaluation_for_every_model() {
    let dir = tempfile::tempdir().unwrap();
    for &(model, select) in CASES {
        let (_, files, unit, mapping) = SOURCES.iter().find(|s| s.0 == model).unwrap();
        let arm = model.starts_with("neoverse");
        let text = stdout_of(
            model,
            Command::new(topdown_bpf_binary())
                .args(["analyze", "--events", "--td-level", "3"])
                .args(select),
        );
        let list = text.split('\'').nth(1).expect("perf stat -e '...'");
        let mut counts = HashMap::new();
        let mut csv = String::from("# started on a machine far away\n\n");
        for (i, event) in split_event_list(&list.replace("}:W", "").replace(['{', '}'], ""))
            .expect("a list of events")
            .iter()
            .enumerate()
        {
            let count =
                1_000_000 + (i as u64 * 7_919_993 + model.len() as u64 * 104_729) % 900_000_000;
            counts.insert(formula_spelling(event, arm), count as f64);
            csv.push_str(&format!("{count},,{event},2000000000,100.00,,\n"));
        }
        let file = dir.path().join(format!("{model}.csv"));
        std::fs::write(&file, &csv).unwrap();
        let output = stdout_of(
            model,
            Command::new(topdown_bpf_binary())
                .arg("analyze")
                .arg(&file)
                .args(select)
                .args(["--td-level", "3", "--json"]),
        );
        let doc: Value = serde_json::from_str(&output).unwrap();
        assert_eq!(doc["model"], model);
        if model == "meteorlake_core" {
            // perf's file computes the mispredict breakdown from counted events (perfmon's
            // simplified file needed retire latencies).
            assert!(doc["nodes"]["tma_cond_nt_mispredicts"].is_number(), "{doc}");
            assert_eq!(doc["not_measurable"], serde_json::json!([]), "{doc}");
        }
        assert_eq!(
            doc["missing_events"].as_array().unwrap().len(),
            0,
            "{model}: {doc}"
        );

        let nodes = doc["nodes"].as_object().unwrap();
        assert!(nodes.len() >= 4, "{model}: {doc}");
        if let Some(path) = files[0]
            .strip_prefix("../intel-perfmon/")
            .filter(|p| p.ends_with(".json"))
        {
            // Intel's perfmon formulas over their aliases, with the same counts.
            let metrics = PerfmonMetrics::read(path);
            let by_perfmon: HashMap<String, f64> = counts
                .iter()
                .map(|(name, count)| (perfmon_name(name), *count))
                .collect();
            let lookup = |name: &str| {
                *by_perfmon
                    .get(name)
                    .unwrap_or_else(|| panic!("{model}: `analyze --events` did not list {name}"))
            };
            for (node, value) in nodes {
                let source = mapping
                    .iter()
                    .find(|(s, n)| n == node && metrics.has(s))
                    .map(|(s, _)| *s)
                    .or_else(|| metrics.for_node(node))
                    .unwrap();
                let expected = metrics.value(source, &lookup, 0.0) / 100.0;
                let value = value.as_f64().unwrap();
                assert!(
                    (value - expected).abs() <= 1e-9 * expected.abs().max(1.0),
                    "{model} {node}: analyze {value}, perfmon {expected}"
                );
            }
            continue;
        }
        // The independent side: the data's formulas, interpreted.
        let (exprs, _) = formulas(files, *unit);
        let literals = HashMap::from([
            (
                "#slots".to_owned(),
                if model == "neoverse_n2" { 5.0 } else { 8.0 },
            ),
            (
                "#smt_on".to_owned(),
                if select.contains(&"--smt") { 1.0 } else { 0.0 },
            ),
            (
                "#has_pmem".to_owned(),
                if select.contains(&"--pmem") { 1.0 } else { 0.0 },
            ),
            // Without `-a`: perf's per-thread estimate of the core's clocks.
            (
                "#core_wide".to_owned(),
                if select.contains(&"-a") { 1.0 } else { 0.0 },
            ),
        ]);
        let estimate = select.contains(&"--smt")
            && !select.contains(&"-a")
            && ["skylakex", "cascadelakex", "haswell", "broadwell"].contains(&model);
        assert_eq!(doc["estimate"], estimate, "{model} {select:?}: {doc}");
        let lookup = |name: &str| {
            *counts
                .get(&normalize(name, arm))
                .unwrap_or_else(|| panic!("{model}: `analyze --events` did not list {name}"))
        };
        let env = Env {
            metrics: &exprs,
            events: &lookup,
            literals: &literals,
        };
        for (node, value) in nodes {
            let source = mapping
                .iter()
                .find(|(s, n)| n == node && exprs.contains_key(*s))
                .map_or(node.as_str(), |(s, _)| *s);
            let mut expected = env.eval(&parse(&exprs[source]));
            if is_percent(&exprs[source]) {
                expected /= 100.0;
            }
            let value = value.as_f64().unwrap();
            assert!(
                (value - expected).abs() <= 1e-9 * expected.abs().max(1.0),
                "{model} {node}: analyze {value}, data {expected}"
            );
        }
        // These counts are arbitrary, so they contradict each other: nodes outside [0, 1] are
        // flagged, each with counts of the file that move it.
        let flagged: HashMap<&str, &Value> = doc["out_of_range"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["node"].as_str().unwrap(), o))
            .collect();
        for (node, value) in nodes {
            let value = value.as_f64().unwrap();
            let outside = !(0.0..=1.0).contains(&value);
            assert_eq!(
                flagged.contains_key(node.as_str()),
                outside,
                "{model} {node} = {value}: flagged exactly when outside [0, 1]"
            );
            if let Some(o) = flagged.get(node.as_str()) {
                assert_eq!(o["value"].as_f64(), Some(value));
                let inputs = o["inputs"].as_object().unwrap();
                assert!(!inputs.is_empty(), "{model} {node}: no inputs named");
                for (name, count) in inputs {
                    assert_eq!(
                        counts.get(name.as_str()).copied(),
                        count.as_f64(),
                        "{model} {node}: input {name} is a count of the file"
                    );
                }
            }
        }
    }
}

/// A count that cannot be (more frontend slots than slots) makes Backend Bound negative: it
/// is printed flagged, with the counts it is computed from, and JSON says the same.
#[test]
fn a_node_outside_zero_to_one_is_flagged_with_its_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("inconsistent.csv");
    // Skylake: 4 slots per cycle, 4e9 slots; 5e9 slots not delivered.
    std::fs::write(
        &file,
        "1000000000,,cycles,1000,100.00,,\n\
         5000000000,,IDQ_UOPS_NOT_DELIVERED.CORE,1000,100.00,,\n\
         1000000000,,UOPS_ISSUED.ANY,1000,100.00,,\n\
         1000000000,,UOPS_RETIRED.RETIRE_SLOTS,1000,100.00,,\n\
         1000,,INT_MISC.RECOVERY_CYCLES,1000,100.00,,\n",
    )
    .unwrap();
    let run = |json: bool| {
        stdout_of(
            "analyze of inconsistent counts",
            Command::new(topdown_bpf_binary())
                .arg("analyze")
                .arg(&file)
                .args(["--cpu", "GenuineIntel-6-5E", "--td-level", "1"])
                .args(json.then_some("--json")),
        )
    };
    let text = run(false);
    let line = text
        .lines()
        .find(|l| l.starts_with("tma_backend_bound is -"))
        .unwrap_or_else(|| panic!("Backend Bound flagged: {text}"));
    for input in ["IDQ_UOPS_NOT_DELIVERED.CORE", "cycles"] {
        assert!(line.contains(input), "{input} named: {line}");
    }
    let doc: Value = serde_json::from_str(&run(true)).unwrap();
    let flagged = doc["out_of_range"].as_array().unwrap();
    assert!(
        flagged.iter().any(|o| o["node"] == "tma_backend_bound"
            && o["value"].as_f64().unwrap() < 0.0
            && o["inputs"]["IDQ_UOPS_NOT_DELIVERED.CORE"] == 5e9),
        "{doc}"
    );
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
        .args(["analyze", "--events", "--cpu", "GenuineIntel-6-DD"])
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "Clearwater Forest has no TMA data: one clear line"
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("Clearwater Forest"));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr)
            .trim()
            .lines()
            .count(),
        1
    );
}

/// `analyze --events`: the events the level needs, as a JSON array of the names perf writes in
/// `-x` output with `--json`, and the commands carry every option given.
#[test]
fn events_as_json_and_commands_with_every_option() {
    let run = |args: &[&str]| {
        stdout_of(
            &args.join(" "),
            Command::new(topdown_bpf_binary())
                .args(["analyze", "--events", "--cpu", "GenuineIntel-6-8F"])
                .args(args),
        )
    };
    let level = |n: &str| -> Vec<String> {
        serde_json::from_str(&run(&["--td-level", n, "--json"])).expect("a JSON array")
    };
    let (one, two) = (level("1"), level("2"));
    assert_eq!(one[0], "slots", "the group's leader first: {one:?}");
    for name in [
        "topdown-retiring",
        "topdown-fe-bound",
        "INT_MISC.UOP_DROPPING",
    ] {
        assert!(one.contains(&name.to_owned()), "{name} in {one:?}");
    }
    assert!(
        !one.contains(&"topdown-heavy-ops".to_owned()),
        "Level 2 only: {one:?}"
    );
    assert!(
        two.contains(&"topdown-heavy-ops".to_owned()) && one.iter().all(|e| two.contains(e)),
        "Level 2 reads Level 1's events and more: {two:?}"
    );
    let text = run(&["--smt", "--pmem", "--td-level", "1", "-x", ";"]);
    let analyze = text.lines().nth(1).unwrap();
    for option in [
        "--smt",
        "--pmem",
        "--td-level 1",
        "-x ';'",
        "--cpu GenuineIntel-6-8F",
    ] {
        assert!(analyze.contains(option), "{option} in {analyze}");
    }
    assert!(text.starts_with("perf stat -x ';' "), "{text}");
}

/// toplev's drilldown from a Level 2 recording: on Granite Rapids, 40 % of slots memory bound
/// and 20 % core bound (backend 60 %) put both over their thresholds (20 % and 10 %, under a
/// backend over 20 %); the frontend (10 %) is not. Level 3 is then recorded only under those
/// two, and analyzed with `--nodes`.
#[test]
fn drilldown_records_level_three_only_under_the_nodes_over_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let l2 = dir.path().join("l2.csv");
    let counts = [
        ("slots", 1_000_000_000u64),
        ("topdown-retiring", 200_000_000),
        ("topdown-bad-spec", 100_000_000),
        ("topdown-fe-bound", 100_000_000),
        ("topdown-be-bound", 600_000_000),
        ("topdown-heavy-ops", 50_000_000),
        ("topdown-br-mispredict", 50_000_000),
        ("topdown-fetch-lat", 50_000_000),
        ("topdown-mem-bound", 400_000_000),
        ("INT_MISC.UOP_DROPPING", 1_000_000),
    ];
    let csv: String = counts
        .iter()
        .map(|(event, count)| format!("{count},,{event},2000000000,100.00,,\n"))
        .collect();
    std::fs::write(&l2, csv).unwrap();
    let output = Command::new(topdown_bpf_binary())
        .args([
            "analyze",
            "--events",
            "--cpu",
            "GenuineIntel-6-AD",
            "--td-level",
            "3",
        ])
        .arg("--drilldown")
        .arg(&l2)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "drilling down under tma_memory_bound, tma_core_bound"
    );
    let list = stdout.split('\'').nth(1).unwrap();
    for under in [
        "MEMORY_ACTIVITY.STALLS_L3_MISS",
        "EXE_ACTIVITY.BOUND_ON_STORES",
        "ARITH.DIV_ACTIVE",
    ] {
        assert!(list.contains(under), "{under} in {list}");
    }
    for elsewhere in [
        "ICACHE_DATA.STALLS",
        "DECODE.LCP",
        "INT_MISC.CLEAR_RESTEER_CYCLES",
    ] {
        assert!(!list.contains(elsewhere), "{elsewhere} in {list}");
    }
    assert!(
        stdout.contains("--td-level 3 --nodes tma_memory_bound,tma_core_bound"),
        "{stdout}"
    );

    // The Level 3 recording of that list, analyzed with the same --nodes.
    let l3 = dir.path().join("l3.csv");
    let events = split_event_list(&list.replace("}:W", "").replace(['{', '}'], ""))
        .expect("a list of events");
    let csv: String = events
        .iter()
        .enumerate()
        .map(|(i, event)| {
            let count = 1_000_000 + i as u64 * 3_000_000;
            format!("{count},,{event},2000000000,100.00,,\n")
        })
        .collect();
    std::fs::write(&l3, csv).unwrap();
    let doc: Value = serde_json::from_str(&stdout_of(
        "analyze l3",
        Command::new(topdown_bpf_binary())
            .arg("analyze")
            .arg(&l3)
            .args(["--cpu", "GenuineIntel-6-AD", "--td-level", "3"])
            .args(["--nodes", "tma_memory_bound,tma_core_bound", "--json"]),
    ))
    .unwrap();
    let nodes = doc["nodes"].as_object().unwrap();
    for under in ["tma_l1_bound", "tma_store_bound", "tma_divider"] {
        assert!(nodes.contains_key(under), "{under}: {doc}");
    }
    assert!(!nodes.contains_key("tma_icache_misses"), "{doc}");
    assert_eq!(doc["missing_events"].as_array().unwrap().len(), 0, "{doc}");
}

/// `event` as another tool (or another perf) spells it: numbers in hex, perfmon's `:c1:e1`
/// modifiers, lower case. Written here without the tool's own key, so it tests the matching.
fn respelt(event: &str, variant: usize) -> String {
    if event == "slots" || event.contains("topdown-") {
        return event.to_owned();
    }
    let Some((pmu, rest)) = event.split_once('/') else {
        return event.to_lowercase();
    };
    let body = rest.trim_end_matches('/');
    let mut parts = body.split(',');
    let name = parts.next().unwrap();
    let terms: Vec<(&str, Option<u64>)> = parts
        .map(|t| match t.split_once('=') {
            Some((k, v)) => (
                k,
                v.strip_prefix("0x")
                    .map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok()),
            ),
            None => (t, None),
        })
        .collect();
    let perfmon_style = terms
        .iter()
        .all(|(k, _)| matches!(*k, "cmask" | "edge" | "inv"));
    if variant % 2 == 1 && perfmon_style {
        let mut text = name.to_owned();
        for (k, v) in &terms {
            text.push_str(&format!(":{}{}", &k[..1], v.unwrap_or(1)));
        }
        return text;
    }
    let terms: Vec<String> = terms
        .iter()
        .map(|(k, v)| v.map_or_else(|| (*k).to_owned(), |v| format!("{k}=0x{v:x}")))
        .collect();
    format!(
        "{pmu}/{}/",
        [vec![name.to_owned()], terms].concat().join(",")
    )
}

#[test]
fn events_are_matched_by_what_they_are_not_how_they_are_spelt() {
    let dir = tempfile::tempdir().unwrap();
    let mut respelt_events = 0;
    for &(model, select) in CASES.iter().filter(|(m, _)| {
        [
            "icelakex",
            "cascadelakex",
            "meteorlake_core",
            "sierraforest",
            "skylake",
        ]
        .contains(m)
    }) {
        let text = stdout_of(
            model,
            Command::new(topdown_bpf_binary())
                .args(["analyze", "--events", "--td-level", "3"])
                .args(select),
        );
        let list = text.split('\'').nth(1).expect("perf stat -e '...'");
        let events = split_event_list(&list.replace("}:W", "").replace(['{', '}'], ""))
            .expect("a list of events");
        let analyze = |variant: Option<usize>| -> Value {
            let mut csv = String::new();
            for (i, event) in events.iter().enumerate() {
                let count = 1_000_000 + (i as u64 * 7_919_993) % 900_000_000;
                let name = variant.map_or_else(|| event.clone(), |v| respelt(event, v + i));
                csv.push_str(&format!("{count},,{name},2000000000,100.00,,\n"));
            }
            let file = dir.path().join(format!("{model}-{variant:?}.csv"));
            std::fs::write(&file, &csv).unwrap();
            let output = stdout_of(
                model,
                Command::new(topdown_bpf_binary())
                    .arg("analyze")
                    .arg(&file)
                    .args(select)
                    .args(["--td-level", "3", "--json"]),
            );
            serde_json::from_str(&output).unwrap()
        };
        let canonical = analyze(None);
        assert_eq!(canonical["missing_events"].as_array().unwrap().len(), 0);
        for variant in 0..2 {
            respelt_events += events
                .iter()
                .enumerate()
                .filter(|(i, e)| respelt(e, variant + i) != **e)
                .count();
            let other = analyze(Some(variant));
            assert_eq!(
                other["missing_events"], canonical["missing_events"],
                "{model}: every respelt event is found"
            );
            assert_eq!(
                other["nodes"], canonical["nodes"],
                "{model} variant {variant}"
            );
        }
    }
    assert!(respelt_events > 50, "{respelt_events} events respelt");
}

/// Every event a metric reaches (through the metrics it names), as its data spells it.
fn events_of(expr: &Expr, metrics: &HashMap<String, String>, out: &mut Vec<String>) {
    match expr {
        Expr::Sym(name) if metrics.contains_key(name) => {
            events_of(&parse(&metrics[name]), metrics, out);
        }
        Expr::Sym(name) if name.starts_with('#') => {}
        Expr::Sym(name) => {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
        Expr::Num(_) => {}
        Expr::Neg(a) => events_of(a, metrics, out),
        Expr::Bin(_, a, b) | Expr::Call(_, a, b) => {
            events_of(a, metrics, out);
            events_of(b, metrics, out);
        }
        Expr::If(a, b, c) => {
            events_of(a, metrics, out);
            events_of(b, metrics, out);
            events_of(c, metrics, out);
        }
    }
}

/// A `perf stat -M TopdownL1,TopdownL2,TopdownL3` recording as perf writes it: perf's own event
/// choice (every event its TopdownL1-L3 metrics read) in perf's own spelling (`slots`,
/// `cpu/EV,cmask=0x1/` from `cpu@EV\,cmask\=0x1@`, `cpu_core/...` on hybrid parts); `analyze`
/// computes every node perf computes from it, each equal to perf's expression.
#[test]
fn a_perf_stat_dash_m_recording_gives_every_node_perf_computes() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = std::collections::BTreeSet::new();
    for &(model, select) in CASES {
        let (_, files, unit, _) = SOURCES.iter().find(|s| s.0 == model).unwrap();
        if !files[0].starts_with("x86-perf/") {
            continue;
        }
        let (exprs, _) = formulas(files, *unit);
        let data: Vec<Value> = serde_json::from_str(
            &std::fs::read_to_string(
                topdown_tests::pmu_events::data_dir()
                    .join("linux-pmu-events")
                    .join(files[0]),
            )
            .unwrap(),
        )
        .unwrap();
        let nodes: Vec<String> = data
            .iter()
            .filter(|m| unit.is_none_or(|u| m["Unit"] == u))
            .filter(|m| {
                let groups = m["MetricGroup"].as_str().unwrap_or_default();
                ["TopdownL1", "TopdownL2", "TopdownL3"]
                    .iter()
                    .any(|g| groups.split(';').any(|x| x == *g))
            })
            .filter_map(|m| m["MetricName"].as_str())
            .filter(|n| n.starts_with("tma_"))
            .map(str::to_owned)
            .collect();
        let mut events = Vec::new();
        for node in &nodes {
            events_of(&parse(&exprs[node]), &exprs, &mut events);
        }
        // As perf stat prints them: `pmu@E,terms@` is `pmu/E,terms/`, on the part's PMU.
        let pmu = unit.unwrap_or("cpu");
        let mut counts: HashMap<String, f64> = HashMap::new();
        let mut csv = String::new();
        for (i, event) in events.iter().enumerate() {
            let count = 1e6 + ((i as u64 * 7_919_993 + model.len() as u64) % 900_000_000) as f64;
            counts.insert(event.clone(), count);
            let spelled = match event.split_once('@') {
                Some((_, rest)) => format!("{pmu}/{}/", rest.trim_end_matches('@')),
                None if unit.is_some() => format!("{pmu}/{event}/"),
                None => event.clone(),
            };
            csv.push_str(&format!("{count},,{spelled},2000000000,100.00,,\n"));
        }
        let file = dir.path().join(format!("{model}-M.csv"));
        std::fs::write(&file, &csv).unwrap();
        let output = stdout_of(
            model,
            Command::new(topdown_bpf_binary())
                .arg("analyze")
                .arg(&file)
                .args(select)
                .args(["--td-level", "3", "--json"]),
        );
        let doc: Value = serde_json::from_str(&output).unwrap();
        assert_eq!(
            doc["missing_events"],
            serde_json::json!([]),
            "{model}: {doc}"
        );
        let computed = doc["nodes"].as_object().unwrap();
        let literals = HashMap::from([
            ("#slots".to_owned(), 8.0),
            (
                "#smt_on".to_owned(),
                if select.contains(&"--smt") { 1.0 } else { 0.0 },
            ),
            (
                "#core_wide".to_owned(),
                if select.contains(&"-a") { 1.0 } else { 0.0 },
            ),
            ("#has_pmem".to_owned(), 0.0),
        ]);
        let lookup = |name: &str| counts[name];
        let env = Env {
            metrics: &exprs,
            events: &lookup,
            literals: &literals,
        };
        for node in &nodes {
            let value = computed
                .get(node)
                .and_then(Value::as_f64)
                .unwrap_or_else(|| panic!("{model} {select:?}: perf computes {node}, analyze not"));
            let expected = env.metric(node);
            assert!(
                (value - expected).abs() <= 1e-9 * expected.abs().max(1.0),
                "{model} {node}: analyze {value}, perf's expression {expected}"
            );
        }
        assert_eq!(computed.len(), nodes.len(), "{model}: no node perf lacks");
        checked.insert(model);
    }
    // Every model perf has a file for (each hybrid core type), some twice (SMT on, `-a`).
    let perf_models: std::collections::BTreeSet<&str> = SOURCES
        .iter()
        .filter(|s| s.1[0].starts_with("x86-perf/"))
        .map(|s| s.0)
        .collect();
    assert_eq!(checked, perf_models);
}

/// Input is read a chunk at a time and refused at its first NUL byte or past `--max-memory`,
/// never read whole first (issue 52 finding 5: `analyze /dev/zero` held 12.5 GB at 30 s): an
/// endless stream of text ends in one line too.
#[test]
fn endless_or_binary_input_is_refused_in_one_line() {
    use std::io::Write as _;
    let output = Command::new(topdown_bpf_binary())
        .args(["analyze", "/dev/zero", "--cpu", "GenuineIntel-6-8F"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(said.contains("NUL byte at offset 0"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");

    let mut child = Command::new(topdown_bpf_binary())
        .args([
            "analyze",
            "-",
            "--cpu",
            "GenuineIntel-6-8F",
            "--max-memory",
            "2",
        ])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Lines of a valid shape, for ever: only the bound ends it (the write fails once the tool
    // has exited and closed its end).
    let writer = std::thread::spawn(move || {
        let line = "1000,,cycles,2000000000,100.00,,\n".repeat(1000);
        while stdin.write_all(line.as_bytes()).is_ok() {}
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(said.contains("over 2 MiB"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
}
