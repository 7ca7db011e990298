//! The layers of `topdown-user`, kept: each room (a top-level module of `src/`) may use only the
//! rooms below it in [`ORDER`], so data flows one way (kernel -> collect -> attribute -> model ->
//! render -> commands). The test reads every `crate::` path in the code (comments left out) and
//! fails on an import that runs up the order. docs/architecture.md says what each room holds.
//! The rooms that stand alone are crates of their own, below all of these, and Cargo keeps
//! them there: `topdown-tma` (TopDown) and `topdown-c2c` (perf.data, symbols, the c2c model)
//! cannot name anything of this crate.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

/// The rooms, lowest first.
const ORDER: &[&str] = &[
    // Unit tests' count of heap allocations (the test binary's allocator), for every room.
    "allocations",
    // The heap's settings: freed memory kept between windows.
    "heap",
    // Crates of their own, re-exported (`topdown-c2c`): perf.data and names of addresses.
    "perf_file",
    "symbols",
    // The host: privileges and limits, signal handling, process exits, progress on stderr.
    "preflight",
    "privileges",
    "session",
    "process_exit",
    "progress",
    // Hints to the CPU of memory read soon.
    "prefetch",
    // What the machine can count: PMUs, events, counter sets.
    "pmu",
    // The kernel half's userspace side: loading, counters, snapshots, records.
    "collect",
    // Who used what: threads, cgroups, containers, per window.
    "attrib",
    // perf stat's CSV, read for `analyze`.
    "import",
    // TopDown: the model, its formulas and the counters it needs.
    "tma",
    // The recording file format.
    "recording",
    // The model step: rows named and summed with TopDown, per-core rows, timelines.
    "model",
    // Cache-to-cache sharing by cgroup or container (the model itself is `topdown-c2c`).
    "c2c",
    // Renderers: tables, JSON, CSV (c2c's too); pictures; the full-screen view; metrics.
    "report",
    "picture",
    "tui",
    "serve",
    // The region API (RDPMC inside a program).
    "region",
    // The command line, then the commands that run it: the only room that takes `cli` types.
    "cli",
    "commands",
];

/// Every Rust file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).expect("reading src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without `//` comments (doc comments name other rooms in links).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of each item of a `crate::` path: `a` in `crate::a::b`, `a` and `b`
/// in `crate::{a::x, b::{y, z}}`.
fn rooms_named(after: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = after.strip_prefix('{') else {
        return vec![ident(after)];
    };
    let mut names = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                names.push(ident(&group[start..i]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                names.push(ident(&group[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    names.retain(|name| !name.is_empty());
    names
}

/// (room, room it uses) -> the files that do, for every `crate::` path in `src`.
fn imports(src: &Path) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let room = relative
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        // The binary's root is a crate of its own (it uses `topdown_user::`); lib.rs declares.
        if room == "main" || room == "lib" {
            continue;
        }
        let code = without_comments(&fs::read_to_string(&file).unwrap());
        for (at, _) in code.match_indices("crate::") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            for used in rooms_named(&code[at + "crate::".len()..]) {
                if !used.is_empty() && used != room && used != "self" {
                    found
                        .entry((room.clone(), used))
                        .or_default()
                        .insert(relative.clone());
                }
            }
        }
    }
    found
}

fn rank(room: &str) -> usize {
    ORDER
        .iter()
        .position(|r| *r == room)
        .unwrap_or_else(|| panic!("room `{room}` is not in ORDER: give it its place"))
}

#[test]
fn rooms_use_only_the_rooms_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = imports(&src);
    assert!(
        found.contains_key(&("tui".into(), "report".into())),
        "the reader sees imports: {found:?}"
    );
    let upward: Vec<String> = found
        .iter()
        .filter(|((room, used), _)| rank(used) > rank(room))
        .map(|((room, used), files)| format!("{room} -> {used} ({files:?})"))
        .collect();
    assert!(
        upward.is_empty(),
        "imports up the layers (ORDER, lowest first: {ORDER:?}):\n{}",
        upward.join("\n")
    );
    // Every room has its place.
    for entry in fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let room = name.trim_end_matches(".rs");
        if room != "main" && room != "lib" {
            rank(room);
        }
    }
}

#[test]
fn the_reader_finds_rooms_in_nested_groups() {
    assert_eq!(rooms_named("pmu::sysfs::SysRoot;"), ["pmu"]);
    assert_eq!(
        rooms_named(
            "{\n    attrib::{Window, groups::GroupBy},\n    cli::ReportArgs,\n    tui::{self, state::{Key}},\n};"
        ),
        ["attrib", "cli", "tui"]
    );
    assert_eq!(
        without_comments("use a; // crate::tui\n//! [`crate::stat`]\nx"),
        "use a; \n\nx"
    );
}

/// One road: outside the model (and the attributor that names usage), no room makes rows of
/// its own. Every output, the live view, `report` and `plot` take them from a window's
/// `model::frame::Frame`, which names and computes each grouping's rows once (`rows::rows` is
/// the model's own; naming usage into rows, `attrib::named::name*`, is checked here). Tests
/// may build rows as they like.
#[test]
fn rows_are_made_only_through_the_frame() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut checked = 0;
    let mut outside: Vec<String> = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if relative.starts_with("model/") || relative.starts_with("attrib/") {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        let production = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code = without_comments(production);
        checked += 1;
        let grouped = code.match_indices("named::{").any(|(at, _)| {
            let group = &code[at..];
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|word| word == "name" || word == "name_threads")
        });
        if grouped || code.contains("named::name") || code.contains("name_threads") {
            outside.push(relative);
        }
    }
    assert!(checked > 50, "the reader saw the rooms: {checked} files");
    assert!(
        outside.is_empty(),
        "rows named outside the model (take them from the frame): {outside:?}"
    );
}
