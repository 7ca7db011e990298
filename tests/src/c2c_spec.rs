//! The perf.data files the c2c tests read, written by the tool's own writer
//! (`topdown_user::perf_file::writer`, the one `c2c record -o` uses) from the JSON specs in
//! `tests/fixtures/c2c`: processes (pid, comm, tids, mappings with their symbols and physical
//! base), samples (repeated by `count`, 1 us apart from 1.001 s on) and the NUMA nodes. Code
//! mappings with symbols get a tiny x86-64 ELF file beside the recording, so `perf` and the
//! tool both resolve symbols (and find no source line).
//!
//! A spec's `data_src` is a number (or hex string) or the fields of `union perf_mem_data_src`
//! by name, as `include/uapi/linux/perf_event.h` spells them:
//! `{"op": "LOAD", "lvl": "HIT|L3", "snoop": "HITM", "lvl_num": "L3", "snoopx": "PEER"}`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use serde_json::Value;
use topdown_user::perf_file::{
    contents::{MemSample, MemoryTopology, PerfData},
    maps::Mapping,
    writer,
};

/// The events `perf c2c record` opens on Intel.
const EVENTS: [&str; 2] = ["cpu/mem-loads,ldlat=30/P", "cpu/mem-stores/P"];

/// Bytes per memory block in the recording's memory topology; node `n` owns block `n`.
const MEMORY_BLOCK: u64 = 1 << 27;

/// Writes the perf.data of the c2c `spec` into `dir` (and the ELF files its mappings name,
/// relative to `dir`); returns its path.
pub fn perf_data_of(spec: &Path, dir: &Path) -> PathBuf {
    write_spec(spec, dir, "perf.data", false)
}

/// As [`perf_data_of`], into `dir/name`, recorded with cgroups as `perf record --all-cgroups`
/// records them: each sample carries its process's cgroup id from the spec's `cgroups`
/// (`{"<pid>": {"id": N, "path": "/a/b"}}`; other processes are in the root, id 1).
pub fn perf_data_with_cgroups(spec: &Path, dir: &Path, name: &str) -> PathBuf {
    write_spec(spec, dir, name, true)
}

fn write_spec(spec_path: &Path, dir: &Path, name: &str, cgroups: bool) -> PathBuf {
    let text = std::fs::read_to_string(spec_path)
        .unwrap_or_else(|e| panic!("{}: {e}", spec_path.display()));
    let spec: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", spec_path.display()));
    let mut data = PerfData {
        events: EVENTS.iter().map(|e| (*e).to_owned()).collect(),
        ..PerfData::default()
    };
    // (pid, start, length, physical base) of the mappings that say where they sit.
    let mut physical = Vec::new();
    for process in array(&spec["processes"]) {
        let pid = number(&process["pid"]) as u32;
        let comm = process["comm"].as_str().expect("a comm");
        let tids: Vec<u32> = match process.get("tids") {
            Some(tids) => array(tids).iter().map(|t| number(t) as u32).collect(),
            None => vec![pid],
        };
        for tid in tids {
            data.comms.insert(tid, comm.to_owned());
        }
        for map in process.get("mmaps").map(array).unwrap_or_default() {
            let start = number(&map["start"]);
            let len = number(&map["len"]);
            let path = map["filename"].as_str().expect("a filename");
            if let Some(symbols) = map.get("symbols").map(array).filter(|s| !s.is_empty()) {
                write_elf(&dir.join(path), start, symbols);
            }
            if let Some(base) = map.get("phys") {
                physical.push((pid, start, len, number(base)));
            }
            let field = |name: &str, default: u64| map.get(name).map_or(default, number);
            data.mappings.entry(pid).or_default().push(Mapping {
                start,
                end: start + len,
                pgoff: field("pgoff", 0),
                dev_ino: (
                    field("maj", 0) as u32,
                    field("min", 0) as u32,
                    field("ino", 0),
                ),
                // mmap(2)'s MAP_SHARED is 1, MAP_PRIVATE 2.
                shared: field("flags", 2) == 1,
                prot: field("prot", 5) as u32,
                path: path.to_owned(),
            });
        }
    }
    let cgroup_of: HashMap<u32, u64> = if cgroups {
        data.cgroups.insert(1, "/".to_owned());
        let listed = spec["cgroups"].as_object().expect("the spec's cgroups");
        listed
            .iter()
            .map(|(pid, cgroup)| {
                let id = number(&cgroup["id"]);
                let path = cgroup["path"].as_str().expect("a cgroup path");
                data.cgroups.insert(id, path.to_owned());
                (pid.parse().expect("a pid"), id)
            })
            .collect()
    } else {
        HashMap::new()
    };
    let mut time = 1_001_000_000;
    for sample in array(&spec["samples"]) {
        let pid = number(&sample["pid"]) as u32;
        let addr = number(&sample["addr"]);
        let phys_addr = physical
            .iter()
            .find(|(p, start, len, _)| *p == pid && *start <= addr && addr < start + len)
            .map_or(0, |(_, start, _, base)| base + addr - start);
        for _ in 0..sample.get("count").map_or(1, number) {
            data.samples.push(MemSample {
                pid,
                tid: number(&sample["tid"]) as u32,
                cpu: number(&sample["cpu"]) as u32,
                ip: number(&sample["ip"]),
                addr,
                data_src: data_src(&sample["data_src"]),
                weight: sample.get("weight").map_or(0, number),
                phys_addr,
                time,
                cgroup: if cgroups {
                    cgroup_of.get(&pid).copied().unwrap_or(1)
                } else {
                    0
                },
                kernel: false,
            });
            time += 1000;
        }
    }
    let nodes = array(&spec["numa_nodes"]);
    data.numa_cpus = nodes
        .iter()
        .map(|node| cpu_list(node["cpus"].as_str().expect("a node's cpus")))
        .collect();
    data.memory = Some(MemoryTopology {
        block_size: MEMORY_BLOCK,
        nodes: (0..nodes.len() as u64)
            .map(|node| {
                let mut words = vec![0; node as usize / 64 + 1];
                words[node as usize / 64] |= 1 << (node % 64);
                (node, words)
            })
            .collect(),
    });
    let path = dir.join(name);
    std::fs::write(&path, writer::encode(&data, None)).expect("writing the spec's perf.data");
    path
}

fn array(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// A number, or a string holding one (`"0x401000"`).
fn number(value: &Value) -> u64 {
    match value {
        Value::String(text) => match text.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => text.parse(),
        }
        .unwrap_or_else(|e| panic!("{text}: {e}")),
        other => other
            .as_u64()
            .unwrap_or_else(|| panic!("{other} is not a number")),
    }
}

/// `0-1,4` as CPU numbers.
fn cpu_list(list: &str) -> Vec<u32> {
    list.split(',')
        .flat_map(|part| {
            let (low, high) = part.split_once('-').unwrap_or((part, part));
            low.parse().expect("a CPU")..=high.parse().expect("a CPU")
        })
        .collect()
}

/// A field of `union perf_mem_data_src`: name, shift, width, and the symbols of its
/// `PERF_MEM_*` values.
type DataSrcField = (&'static str, u32, u32, &'static [(&'static str, u64)]);

/// The fields of `union perf_mem_data_src` (include/uapi/linux/perf_event.h).
const DATA_SRC_FIELDS: [DataSrcField; 10] = [
    (
        "op",
        0,
        5,
        &[
            ("NA", 1),
            ("LOAD", 2),
            ("STORE", 4),
            ("PFETCH", 8),
            ("EXEC", 0x10),
        ],
    ),
    (
        "lvl",
        5,
        14,
        &[
            ("NA", 1),
            ("HIT", 2),
            ("MISS", 4),
            ("L1", 8),
            ("LFB", 0x10),
            ("L2", 0x20),
            ("L3", 0x40),
            ("LOC_RAM", 0x80),
            ("REM_RAM1", 0x100),
            ("REM_RAM2", 0x200),
            ("REM_CCE1", 0x400),
            ("REM_CCE2", 0x800),
            ("IO", 0x1000),
            ("UNC", 0x2000),
        ],
    ),
    (
        "snoop",
        19,
        5,
        &[
            ("NA", 1),
            ("NONE", 2),
            ("HIT", 4),
            ("MISS", 8),
            ("HITM", 0x10),
        ],
    ),
    ("lock", 24, 2, &[("NA", 1), ("LOCKED", 2)]),
    (
        "dtlb",
        26,
        7,
        &[
            ("NA", 1),
            ("HIT", 2),
            ("MISS", 4),
            ("L1", 8),
            ("L2", 0x10),
            ("WK", 0x20),
            ("OS", 0x40),
        ],
    ),
    (
        "lvl_num",
        33,
        4,
        &[
            ("L1", 1),
            ("L2", 2),
            ("L3", 3),
            ("L4", 4),
            ("CXL", 9),
            ("IO", 0xa),
            ("ANY_CACHE", 0xb),
            ("LFB", 0xc),
            ("RAM", 0xd),
            ("PMEM", 0xe),
            ("NA", 0xf),
        ],
    ),
    ("remote", 37, 1, &[("REMOTE", 1)]),
    ("snoopx", 38, 2, &[("FWD", 1), ("PEER", 2)]),
    ("blk", 40, 3, &[("NA", 1), ("DATA", 2), ("ADDR", 4)]),
    (
        "hops",
        43,
        3,
        &[("HOPS_0", 1), ("HOPS_1", 2), ("HOPS_2", 3), ("HOPS_3", 4)],
    ),
];

/// A spec's `data_src`: a number, or fields by name whose values are numbers or `|`-joined
/// symbols.
fn data_src(value: &Value) -> u64 {
    let Some(fields) = value.as_object() else {
        return number(value);
    };
    let mut encoded = 0;
    for (name, spec) in fields {
        let (_, shift, width, symbols) = DATA_SRC_FIELDS
            .iter()
            .find(|(field, ..)| field == name)
            .unwrap_or_else(|| panic!("no data_src field {name}"));
        let field = match spec.as_str() {
            Some(text) if !text.starts_with(|c: char| c.is_ascii_digit()) => text
                .split('|')
                .map(|symbol| {
                    symbols
                        .iter()
                        .find(|(s, _)| *s == symbol.trim())
                        .unwrap_or_else(|| panic!("no {name} value {symbol}"))
                        .1
                })
                .fold(0, |all, bit| all | bit),
            _ => number(spec),
        };
        assert!(field < 1 << width, "{name}: {spec} does not fit");
        encoded |= field << shift;
    }
    encoded
}

/// A minimal x86-64 ELF executable at `path`: one R+X `PT_LOAD` at `base` (file offset 0),
/// `.text` at `base + 0x1000` (offset 0x1000) filled with `ret`, and a `.symtab` of the
/// `symbols` (`{"addr", "size" (default 0x40), "name"}`) as `STT_FUNC`, so perf and the tool
/// resolve them (and addr2line finds no source line).
fn write_elf(path: &Path, base: u64, symbols: &[Value]) {
    let mut symbols: Vec<(u64, u64, &str)> = symbols
        .iter()
        .map(|s| {
            (
                number(&s["addr"]),
                s.get("size").map_or(0x40, number),
                s["name"].as_str().expect("a symbol name"),
            )
        })
        .collect();
    symbols.sort_unstable();
    let text_addr = base + 0x1000;
    let text_size = symbols
        .iter()
        .map(|(addr, size, _)| addr + size)
        .max()
        .unwrap_or(text_addr)
        - text_addr;
    let (mut strtab, mut symtab) = (vec![0u8], vec![0u8; 24]);
    for (addr, size, name) in &symbols {
        symtab.extend((strtab.len() as u32).to_le_bytes());
        // STB_GLOBAL << 4 | STT_FUNC, default visibility, section 1 (.text).
        symtab.extend([0x12, 0]);
        symtab.extend(1u16.to_le_bytes());
        symtab.extend(addr.to_le_bytes());
        symtab.extend(size.to_le_bytes());
        strtab.extend(name.as_bytes());
        strtab.push(0);
    }
    let shstrtab = b"\0.text\0.symtab\0.strtab\0.shstrtab\0";
    let symtab_at = (0x1000 + text_size).next_multiple_of(8);
    let strtab_at = symtab_at + symtab.len() as u64;
    let shstrtab_at = strtab_at + strtab.len() as u64;
    let headers_at = (shstrtab_at + shstrtab.len() as u64).next_multiple_of(8);

    let mut image = Vec::new();
    let put16 = |image: &mut Vec<u8>, v: u16| image.extend(v.to_le_bytes());
    let put32 = |image: &mut Vec<u8>, v: u32| image.extend(v.to_le_bytes());
    let put64 = |image: &mut Vec<u8>, v: u64| image.extend(v.to_le_bytes());
    // ELF header: 64-bit, little-endian, version 1; ET_EXEC, EM_X86_64.
    image.extend(b"\x7fELF\x02\x01\x01\0");
    image.extend([0; 8]);
    put16(&mut image, 2);
    put16(&mut image, 62);
    put32(&mut image, 1);
    put64(&mut image, text_addr);
    put64(&mut image, 64);
    put64(&mut image, headers_at);
    put32(&mut image, 0);
    for v in [64u16, 56, 1, 64, 5, 4] {
        put16(&mut image, v);
    }
    // The program header: PT_LOAD, R+X, the file from offset 0 at `base`.
    let loaded = 0x1000 + text_size;
    put32(&mut image, 1);
    put32(&mut image, 5);
    for v in [0, base, base, loaded, loaded, 0x1000] {
        put64(&mut image, v);
    }
    image.resize(0x1000, 0);
    image.resize((0x1000 + text_size) as usize, 0xc3);
    image.resize(symtab_at as usize, 0);
    image.extend(&symtab);
    image.extend(&strtab);
    image.extend(shstrtab);
    image.resize(headers_at as usize, 0);
    // Section headers (`Elf64_Shdr`): null, .text, .symtab (link .strtab, one local),
    // .strtab, .shstrtab.
    let mut section = |name: u32,
                       kind: u32,
                       (flags, addr): (u64, u64),
                       (offset, size): (u64, u64),
                       (link, info): (u32, u32),
                       (align, entsize): (u64, u64)| {
        put32(&mut image, name);
        put32(&mut image, kind);
        for v in [flags, addr, offset, size] {
            put64(&mut image, v);
        }
        put32(&mut image, link);
        put32(&mut image, info);
        put64(&mut image, align);
        put64(&mut image, entsize);
    };
    section(0, 0, (0, 0), (0, 0), (0, 0), (0, 0));
    section(1, 1, (6, text_addr), (0x1000, text_size), (0, 0), (16, 0));
    section(
        7,
        2,
        (0, 0),
        (symtab_at, symtab.len() as u64),
        (3, 1),
        (8, 24),
    );
    section(
        15,
        3,
        (0, 0),
        (strtab_at, strtab.len() as u64),
        (0, 0),
        (1, 0),
    );
    section(
        23,
        3,
        (0, 0),
        (shstrtab_at, shstrtab.len() as u64),
        (0, 0),
        (1, 0),
    );
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, image).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
