//! True or false sharing and the gain of fixing it (issue 12), on a recording made for it
//! (tests/fixtures/c2c/sharing.json): line 0x7f0000000000, where each of two threads stores to and
//! loads its own word, is falsely shared; at 0x7f0000000040 one thread loads the word the other
//! stores, truly shared; at 0x7f0000000080 both. Every value below is worked out by hand from the
//! spec, not read from our output. perf's layout stays the default (c2c_perf.rs compares it).

use std::path::Path;

use serde_json::Value;
use topdown_tests::{perf_data_of, stdout_of, topdown_bpf_binary};

/// `source` compiled with debug info and `opt` to `dir/name`; `None` (said loudly) without a C
/// compiler, which CI machines have.
fn compiled(dir: &Path, name: &str, source: &str, opt: &str) -> Option<std::path::PathBuf> {
    let path = dir.join(format!("{name}.c"));
    std::fs::write(&path, source).unwrap();
    let binary = dir.join(name);
    let built = std::process::Command::new("cc")
        .args(["-g", opt, "-no-pie", "-o"])
        .arg(&binary)
        .arg(&path)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI machines have a C compiler (build-essential)"
        );
        eprintln!("\n*** SKIPPED {name}: no C compiler ***\n");
        return None;
    }
    Some(binary)
}

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
    let Some(binary) = compiled(
        dir.path(),
        "globals",
        "struct pair { long a; long b; };\n\
         struct pair counters __attribute__((aligned(64))) = { 1, 2 };\n\
         struct pair table[4] __attribute__((aligned(64))) = { { 3, 4 } };\n\
         int main(void) { return (int)(counters.a + table[0].b); }\n",
        "-O0",
    ) else {
        return;
    };
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

/// Heap data has no variable at its address: a program built with `-O2 -g` accesses a heap
/// `struct pair` through the pointer parameter `p` of `write_a` (`p->a = v`, thread 1001) and of
/// `read_b` (`return p->b`, thread 1002). The samples' IPs are those two instructions (found in
/// the compiled code by their encodings); the words are named by the type of `p` and the
/// displacement of each instruction's memory operand, and the fix separates the two members.
#[test]
fn heap_fields_are_named_by_the_type_of_the_pointer_the_instruction_used() {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

    let dir = tempfile::tempdir().unwrap();
    let Some(binary) = compiled(
        dir.path(),
        "heap",
        "#include <stdlib.h>\n\
         struct pair { long a; long b; };\n\
         __attribute__((noinline)) long read_b(struct pair *p) { return p->b; }\n\
         __attribute__((noinline)) void write_a(struct pair *p, long v) { p->a = v; }\n\
         int main(int argc, char **argv) {\n\
           struct pair *p = malloc(sizeof *p); write_a(p, argc); return (int)read_b(p); }\n",
        "-O2",
    ) else {
        return;
    };
    let bytes = std::fs::read(&binary).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let text = elf.section_by_name(".text").expect("a .text section");
    let (text_offset, _) = text.file_range().unwrap();
    let code = text.data().unwrap();
    // The address of the first instruction of `function` encoded as `encoding`.
    let instruction = |function: &str, encoding: &[u8]| -> u64 {
        let start = elf
            .symbols()
            .find(|s| s.name() == Ok(function))
            .map(|s| s.address())
            .unwrap_or_else(|| panic!("{function} in the symbol table"));
        let at = (start - text.address()) as usize;
        let found = code[at..(at + 32).min(code.len())]
            .windows(encoding.len())
            .position(|w| w == encoding)
            .unwrap_or_else(|| {
                panic!("{function} does not start with {encoding:02x?}: another compiler?")
            });
        start + found as u64
    };
    let load = instruction("read_b", &[0x48, 0x8b, 0x47, 0x08]); // mov rax, [rdi+8]
    let store = instruction("write_a", &[0x48, 0x89, 0x37]); // mov [rdi], rsi
    let text_page = text.address() & !0xfff;
    let pgoff = text_offset - (text.address() - text_page);

    let heap = 0x2000040u64; // a struct pair at the start of a line
    let sample = |tid: u32, ip: u64, addr: u64, is_store: bool| {
        let mut s = serde_json::json!({
            "pid": 1000, "tid": tid, "cpu": if tid == 1001 { 0 } else { 2 },
            "ip": format!("{ip:#x}"), "addr": format!("{addr:#x}"), "count": 10,
            "data_src": if is_store {
                serde_json::json!({"op": "STORE", "lvl": "HIT|L1", "snoop": "NA"})
            } else {
                serde_json::json!({"op": "LOAD", "lvl": "HIT|L3", "snoop": "HITM", "lvl_num": "L3"})
            },
        });
        if is_store {
            s["store"] = true.into();
        } else {
            s["weight"] = 200.into();
        }
        s
    };
    let samples = vec![
        sample(1001, store, heap, true),
        sample(1001, store, heap, true),
        sample(1002, load, heap + 8, false),
        sample(1002, load, heap + 8, false),
    ];
    let spec = serde_json::json!({
        "nr_cpus": 4, "numa_nodes": [{"cpus": "0-1"}, {"cpus": "2-3"}],
        "processes": [{"pid": 1000, "comm": "heap", "tids": [1000, 1001, 1002], "mmaps": [
            {"start": format!("{text_page:#x}"), "len": "0x2000", "pgoff": format!("{pgoff:#x}"),
             "filename": binary.display().to_string(), "prot": 5},
            {"start": "0x2000000", "len": "0x21000", "filename": "[heap]", "prot": 3}]}],
        "samples": samples,
    });
    let spec_path = dir.path().join("heap.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let data = perf_data_of(&spec_path, dir.path());

    let doc: Value = serde_json::from_str(&report(dir.path(), &data, &["--json"])).unwrap();
    let lines = doc["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "one shared line: {lines:?}");
    let line = &lines[0];
    assert_eq!(line["address"], format!("{heap:#x}"));
    assert_eq!(line["sharing"], "false");
    let words: Vec<(u64, &str, &str, &str, &str)> = line["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["offset"].as_u64().unwrap(),
                w["variable"].as_str().unwrap_or("-"),
                w["named_by"].as_str().unwrap_or("-"),
                w["accessed_through"]["pointer"].as_str().unwrap_or("-"),
                w["accessed_through"]["function"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        words,
        [
            (0, "struct pair.a", "operand_type", "p", "write_a"),
            (8, "struct pair.b", "operand_type", "p", "read_b"),
        ]
    );
    let fix = line["fix"].as_str().unwrap();
    assert!(
        fix.contains("struct pair.a")
            && fix.contains("start struct pair.b on its own 64-byte line"),
        "{fix}"
    );
    let stdio = report(dir.path(), &data, &["--stdio", "--sharing"]);
    assert!(
        stdio.contains("struct pair.b (through p in read_b)"),
        "{stdio}"
    );
}
