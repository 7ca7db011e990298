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

/// A program built with debug info: its global struct's fields and an array's elements are
/// named at the offsets the samples touch, and the fix names them, for 64- and 128-byte lines.
#[test]
fn fields_of_globals_are_named_from_dwarf_and_the_fix_names_them() {
    use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};

    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("globals.c");
    std::fs::write(
        &source,
        "struct pair { long a; long b; };\n\
         struct pair counters __attribute__((aligned(64))) = { 1, 2 };\n\
         struct pair table[4] __attribute__((aligned(64))) = { { 3, 4 } };\n\
         int main(void) { return (int)(counters.a + table[0].b); }\n",
    )
    .unwrap();
    let binary = dir.path().join("globals");
    let built = std::process::Command::new("cc")
        .args(["-g", "-O0", "-no-pie", "-o"])
        .arg(&binary)
        .arg(&source)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI machines have a C compiler (build-essential)"
        );
        eprintln!("\n*** SKIPPED fields_of_globals_are_named_from_dwarf: no C compiler ***\n");
        return;
    }
    let bytes = std::fs::read(&binary).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let address = |name: &str| {
        elf.symbols()
            .find(|s| s.name() == Ok(name))
            .map(|s| s.address())
            .unwrap_or_else(|| panic!("{name} in the symbol table"))
    };
    let (counters, table) = (address("counters"), address("table"));
    // The file-backed mapping of the page holding both, as the loader makes it.
    let segment = elf
        .segments()
        .find(|s| s.address() <= counters && counters < s.address() + s.size())
        .expect("a segment holds the data");
    let page = counters & !0xfff;
    let pgoff = segment.file_range().0 + (page - segment.address());
    assert!(table < page + 0x2000, "both in the mapping");

    let hitm = serde_json::json!({"op": "LOAD", "lvl": "HIT|L3", "snoop": "HITM", "lvl_num": "L3"});
    let store = serde_json::json!({"op": "STORE", "lvl": "HIT|L1", "snoop": "NA"});
    let sample = |tid: u32, addr: u64, is_store: bool| {
        let mut s = serde_json::json!({
            "pid": 1000, "tid": tid, "cpu": if tid == 1001 { 0 } else { 2 },
            "ip": "0x401010", "addr": format!("{addr:#x}"), "count": 10,
            "data_src": if is_store { store.clone() } else { hitm.clone() },
        });
        if is_store {
            s["store"] = true.into();
        } else {
            s["weight"] = 200.into();
        }
        s
    };
    // Each thread writes and reads its own field: counters.a / counters.b, and the elements
    // table[2].a / table[3].b (16-byte elements) in the next line.
    let mut samples = Vec::new();
    for (tid, addr) in [
        (1001, counters),
        (1002, counters + 8),
        (1001, table + 32),
        (1002, table + 56),
    ] {
        samples.push(sample(tid, addr, true));
        samples.push(sample(tid, addr, false));
    }
    let spec = serde_json::json!({
        "nr_cpus": 4, "numa_nodes": [{"cpus": "0-1"}, {"cpus": "2-3"}],
        "processes": [{"pid": 1000, "comm": "globals", "tids": [1000, 1001, 1002], "mmaps": [
            {"start": "0x400000", "len": "0x1000", "filename": "c2c-bin/code", "prot": 5,
             "symbols": [{"addr": "0x401000", "size": "0x100", "name": "worker"}]},
            {"start": format!("{page:#x}"), "len": "0x2000", "pgoff": format!("{pgoff:#x}"),
             "filename": binary.display().to_string(), "prot": 3}]}],
        "samples": samples,
    });
    let spec_path = dir.path().join("globals.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let data = perf_data_of(&spec_path, dir.path());

    for (args, line_size) in [(&["--json"][..], 64), (&["--json", "--double-cl"], 128)] {
        let doc: Value = serde_json::from_str(&report(dir.path(), &data, args)).unwrap();
        let words: Vec<(u64, String, String)> = doc["lines"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|l| l["words"].as_array().unwrap().clone())
            .map(|w| {
                (
                    w["offset"].as_u64().unwrap(),
                    w["variable"].as_str().unwrap_or("-").to_owned(),
                    w["named_by"].as_str().unwrap_or("-").to_owned(),
                )
            })
            .collect();
        let line_of = |addr: u64| addr % line_size;
        let expected = [
            (line_of(counters), "counters.a"),
            (line_of(counters + 8), "counters.b"),
            (line_of(table + 32), "table[2].a"),
            (line_of(table + 56), "table[3].b"),
        ];
        for (offset, name) in expected {
            assert!(
                words
                    .iter()
                    .any(|(o, n, by)| *o == offset && n == name && by == "dwarf"),
                "{name} at {offset:#x} of a {line_size}-byte line: {words:?}"
            );
        }
        let fixes: Vec<&str> = doc["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| l["fix"].as_str())
            .collect();
        assert!(
            fixes.iter().any(|f| f.contains("counters.a")
                && f.contains("counters.b")
                && f.contains(&format!("alignas({line_size})"))),
            "{fixes:?}"
        );
        assert!(
            doc["lines"]
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l["sharing"] == "false"),
            "each thread only touches its own field"
        );
    }
}
