//! TopDown of a region of code measured from inside the program with RDPMC (the crate's
//! `region` module): a pointer chase through a table larger than the caches (backend bound)
//! and a tight arithmetic loop (retiring), each measured on its own.
//!
//! `cargo run -p topdown-user --example region`. On a machine without PERF_METRICS (before
//! Ice Lake, AMD, Arm, VMs) it prints one line saying why and exits with status 1.

use std::{hint::black_box, process::ExitCode};

use topdown_user::region::{Region, decode::Fractions};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("region: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let mut region = Region::open()?;
    println!(
        "reading the group with {:?}, Level {} available",
        region.mode(),
        region.level()
    );
    // A random cycle through 64 MiB: every step a likely cache miss.
    let table = cycle(8 << 20);
    region.start()?;
    let mut at = 0usize;
    for _ in 0..2_000_000 {
        at = table[at];
    }
    black_box(at);
    show("pointer chase", &region.stop()?);

    region.start()?;
    let mut x = 1u64;
    for i in 0..50_000_000u64 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
    }
    black_box(x);
    show("arithmetic", &region.stop()?);
    Ok(())
}

/// A single cycle through `n` slots in a shuffled order (xorshift, fixed seed).
fn cycle(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    let mut next = vec![0; n];
    for pair in order.windows(2) {
        next[pair[0]] = pair[1];
    }
    next[order[n - 1]] = order[0];
    next
}

fn show(what: &str, fractions: &Fractions) {
    println!(
        "{what}: {} slots (each value ±{:.1} %)",
        fractions.slots,
        fractions.uncertainty * 100.0
    );
    for (metric, value) in &fractions.values {
        println!("  {metric:<24} {:5.1} %", value * 100.0);
    }
}
