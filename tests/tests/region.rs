//! TopDown of a code region (issue 14): `topdown-bpf decode` on readings worked out by hand, the
//! mmap-page reader against a software counter (no RDPMC index, so read(2), which it must agree
//! with), and the example program on a machine without PERF_METRICS.

use std::{path::Path, process::Command};

use serde_json::Value;
use topdown_tests::{stdout_of, topdown_bpf_binary};
use topdown_user::region::mapped::MappedCounter;

fn decode(args: &[&str]) -> std::process::Output {
    Command::new(topdown_bpf_binary())
        .arg("decode")
        .args(args)
        .output()
        .unwrap()
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&stdout_of(
        "decode",
        Command::new(topdown_bpf_binary()).arg("decode").args(&all),
    ))
    .unwrap()
}

fn close(value: &Value, expected: f64) -> bool {
    (value.as_f64().unwrap() - expected).abs() < 1e-12
}

#[test]
fn decode_gives_the_fractions_worked_out_by_hand() {
    // One reading: bytes (retiring, bad, frontend, backend) = 0x19, 0x66, 0x33, 0x4d.
    let one = json(&["--slots", "1000000", "--metrics", "0x4d336619"]);
    assert!(close(&one["tma_retiring"], 25.0 / 255.0));
    assert!(close(&one["tma_bad_speculation"], 102.0 / 255.0));
    assert!(close(&one["tma_frontend_bound"], 51.0 / 255.0));
    assert!(close(&one["tma_backend_bound"], 77.0 / 255.0));
    assert_eq!(one.as_object().unwrap().len(), 4);

    // Two readings, 1e6 then 4e6 slots after the reset: retiring 102 -> 140, bad 25 -> 30,
    // frontend 77 -> 35, backend 51 -> 50 (each /255 of the slots then); Level 2 bytes:
    // heavy 20 -> 40, mispredicts 10 -> 20, fetch latency 30 -> 60, memory 25 -> 30.
    let by_hand = |x: f64, y: f64| (4e6 * y - 1e6 * x) / 255.0 / 3e6;
    let a = u64::from_le_bytes([102, 25, 77, 51, 20, 10, 30, 25]);
    let b = u64::from_le_bytes([140, 30, 35, 50, 40, 20, 60, 30]);
    // One in hex, one in decimal: both are read.
    let (a, b) = (format!("{a:#x}"), b.to_string());
    let region = [
        "--slots",
        "1000000",
        "--metrics",
        &a,
        "--slots",
        "4000000",
        "--metrics",
        &b,
        "--level",
        "2",
    ];
    let two = json(&region);
    let expected = [
        ("tma_retiring", by_hand(102.0, 140.0)),
        ("tma_bad_speculation", by_hand(25.0, 30.0)),
        ("tma_frontend_bound", by_hand(77.0, 35.0)),
        ("tma_backend_bound", by_hand(51.0, 50.0)),
        ("tma_heavy_operations", by_hand(20.0, 40.0)),
        (
            "tma_light_operations",
            by_hand(102.0, 140.0) - by_hand(20.0, 40.0),
        ),
        ("tma_branch_mispredicts", by_hand(10.0, 20.0)),
        (
            "tma_machine_clears",
            by_hand(25.0, 30.0) - by_hand(10.0, 20.0),
        ),
        ("tma_fetch_latency", by_hand(30.0, 60.0)),
        (
            "tma_fetch_bandwidth",
            by_hand(77.0, 35.0) - by_hand(30.0, 60.0),
        ),
        ("tma_memory_bound", by_hand(25.0, 30.0)),
        ("tma_core_bound", by_hand(51.0, 50.0) - by_hand(25.0, 30.0)),
    ];
    assert_eq!(two.as_object().unwrap().len(), expected.len());
    for (metric, value) in expected {
        assert!(
            close(&two[metric], value),
            "{metric}: {} vs {value}",
            two[metric]
        );
    }
    let level1: f64 = expected[..4].iter().map(|(_, v)| v).sum();
    assert!((level1 - 1.0).abs() < 1e-12, "Level 1 sums to the region");

    // The table: tree order, Level 2 under Level 1.
    let table = String::from_utf8(decode(&region).stdout).unwrap();
    let names: Vec<&str> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(names.len(), 12, "{table}");
    let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(at("tma_frontend_bound") < at("tma_fetch_latency"));
    assert!(at("tma_fetch_bandwidth") < at("tma_bad_speculation"));
    assert!(
        table.lines().any(|l| l.starts_with("  tma_core_bound")),
        "{table}"
    );
}

#[test]
fn bad_readings_are_one_line_errors() {
    let good = "0x4d336619";
    for (args, says) in [
        (
            vec!["--slots", "5", "--metrics", good, "--slots", "5"],
            "give one of each",
        ),
        (vec!["--slots", "0", "--metrics", good], "no slots"),
        (
            vec![
                "--slots",
                "9",
                "--metrics",
                good,
                "--slots",
                "9",
                "--metrics",
                good,
            ],
            "no slots between",
        ),
        (vec!["--slots", "100", "--metrics", "7"], "inconsistent"),
        (
            vec!["--slots", "0xzz", "--metrics", good],
            "not a 64-bit counter value",
        ),
        (
            vec![
                "--slots",
                "1",
                "--metrics",
                good,
                "--slots",
                "2",
                "--metrics",
                good,
                "--slots",
                "3",
                "--metrics",
                good,
            ],
            "3 readings",
        ),
    ] {
        let output = decode(&args);
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        // clap's own errors add a usage hint; ours are one line.
        if !says.contains("counter value") {
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        }
    }
}

/// cpu-clock is a software event: its page has no RDPMC index, so the reader falls back to
/// read(2), and its count lies between two read(2)s taken around it (the clock only grows).
#[test]
fn the_mmap_page_reader_falls_back_to_read_and_agrees_with_it() {
    let mut attr = perf_event_open_sys::bindings::perf_event_attr {
        size: size_of::<perf_event_open_sys::bindings::perf_event_attr>() as u32,
        type_: perf_event_open_sys::bindings::PERF_TYPE_SOFTWARE,
        config: u64::from(perf_event_open_sys::bindings::PERF_COUNT_SW_CPU_CLOCK),
        ..Default::default()
    };
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    let counter = match MappedCounter::open(&attr, None) {
        Ok(counter) => counter,
        Err(error) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root, where a thread may count itself: {error:#}"
            );
            eprintln!("\n*** SKIPPED the mmap page reader: {error:#} ***\n");
            return;
        }
    };
    let mut spin = 0u64;
    for round in 0..200 {
        let state = counter.state(true);
        assert_eq!(state.index, 0, "a software event has no RDPMC index");
        assert_eq!(state.raw, None);
        let before = counter.read_syscall().unwrap();
        let (value, by_rdpmc) = counter.read().unwrap();
        let after = counter.read_syscall().unwrap();
        assert!(!by_rdpmc);
        assert!(
            before <= value && value <= after,
            "round {round}: {before} {value} {after}"
        );
        for i in 0..10_000u64 {
            spin = std::hint::black_box(spin.wrapping_add(i));
        }
    }
    assert!(counter.read_syscall().unwrap() > 0, "the thread ran");
}

/// On a machine without PERF_METRICS (these VMs) the example exits 1 with one line saying so;
/// where there is one, it measures its two regions.
#[test]
fn the_example_says_in_one_line_why_it_cannot_measure() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["run", "-q", "-p", "topdown-user", "--example", "region"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let has_metrics = ["cpu", "cpu_core"].iter().any(|pmu| {
        Path::new("/sys/bus/event_source/devices")
            .join(pmu)
            .join("events/topdown-retiring")
            .exists()
    });
    if has_metrics {
        assert!(output.status.success(), "{stderr}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("tma_backend_bound"), "{stdout}");
    } else {
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("no PMU with PERF_METRICS"), "{stderr}");
        assert!(!stderr.contains("panicked"));
    }
}

/// The C interface: a C program built against `include/topdown_region.h` and the shared
/// library decodes the same readings as the Rust tests (values worked out by hand in the C
/// source) and, without PERF_METRICS, gets NULL from open with the reason in one line.
#[test]
fn c_programs_link_the_same_region_api() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let built = Command::new(cargo)
        .current_dir(root)
        .args([
            "build",
            "-q",
            "-p",
            "topdown-user",
            "--example",
            "topdown_region",
        ])
        .status()
        .unwrap();
    assert!(built.success(), "building the shared library");
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("region.c");
    std::fs::write(
        &source,
        r#"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "topdown_region.h"

static int near(double a, double b) { return fabs(a - b) < 1e-12; }

int main(void) {
    topdown_fractions f;
    /* One reading: bytes 0x19, 0x66, 0x33, 0x4d of 255. */
    if (topdown_decode_reading(1000000, 0x4d336619ULL, 1, &f) != 0) return 10;
    if (!near(f.retiring, 25.0 / 255) || !near(f.backend_bound, 77.0 / 255)) return 11;
    if (f.level != 1 || !isnan(f.heavy_operations)) return 12;
    /* Two readings, 1e6 and 4e6 slots after the reset (bytes as the Rust test's). */
    uint64_t a = 0x191e0a14334d1966ULL, b = 0x1e3c142832231e8cULL;
    if (topdown_decode_region(1000000, a, 4000000, b, 48, 2, &f) != 0) return 20;
    double retiring = (4e6 * 140 - 1e6 * 102) / 255 / 3e6;
    double heavy = (4e6 * 40 - 1e6 * 20) / 255 / 3e6;
    if (!near(f.retiring, retiring) || !near(f.heavy_operations, heavy)) return 21;
    if (!near(f.light_operations, retiring - heavy) || f.level != 2) return 22;
    if (f.slots != 3000000) return 23;
    /* Errors: a return of -1 and one line saying why. */
    if (topdown_decode_region(5, a, 5, a, 48, 1, &f) != -1) return 30;
    if (strstr(topdown_last_error(), "no slots") == NULL) return 31;
    if (topdown_decode_reading(1, a, 1, NULL) != -1) return 32;
    topdown_region *r = topdown_region_open();
    if (r == NULL) {
        printf("open: %s\n", topdown_last_error());
        return 0;
    }
    if (topdown_region_start(r) != 0 || topdown_region_stop(r, &f) != 0) {
        printf("stop: %s\n", topdown_last_error());
    }
    topdown_region_close(r);
    printf("opened\n");
    return 0;
}
"#,
    )
    .unwrap();
    let program = dir.path().join("region");
    let library = root.join("target/debug/examples");
    let compiled = Command::new("cc")
        .arg(&source)
        .arg("-I")
        .arg(root.join("topdown-user/include"))
        .arg("-L")
        .arg(&library)
        .args(["-ltopdown_region", "-lm", "-o"])
        .arg(&program)
        .status();
    if !compiled.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI machines have a C compiler (build-essential)"
        );
        eprintln!("\n*** SKIPPED the C interface: no C compiler ***\n");
        return;
    }
    let output = Command::new(&program)
        .env("LD_LIBRARY_PATH", &library)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let has_metrics = Path::new("/sys/bus/event_source/devices/cpu/events/topdown-retiring")
        .exists()
        || Path::new("/sys/bus/event_source/devices/cpu_core/events/topdown-retiring").exists();
    if has_metrics {
        assert!(stdout.contains("opened"), "{stdout}");
    } else {
        assert!(
            stdout.starts_with("open: no PMU with PERF_METRICS") && stdout.lines().count() == 1,
            "{stdout}"
        );
    }
}
