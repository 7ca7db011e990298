//! What one context switch costs each TopDown counter set in kernel work, counted from the sets
//! the tool builds (the same code as live runs, on the sysfs fixtures of each CPU family):
//! counter reads (`bpf_perf_event_read_value`, each also an array lookup) and map operations.
//! `cargo xtask bench collector` multiplies these by the costs it measures.
//!
//! Usage: `switch_reads FIXTURES_DIR` (the repository's `tests/fixtures/sysfs`). Prints one
//! Markdown row per set: model, level, counters read per switch, of which PERF_METRICS events,
//! map lookups per switch.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use topdown_user::{
    pmu::{
        machine::Machine,
        sysfs::SysRoot,
        topdown_model::{Selection, select},
    },
    tma::{Model, plan::topdown_set},
};

/// (fixture, core PMU, what the row is called).
const SETS: [(&str, &str, &str); 5] = [
    ("icelake", "cpu", "Ice Lake"),
    ("sapphirerapids", "cpu", "Sapphire Rapids"),
    ("alderlake", "cpu_core", "Alder Lake P-core"),
    ("zen4", "cpu", "Zen 4"),
    ("neoverse-v1", "armv8_pmuv3_0", "Neoverse V1"),
];

fn main() -> Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .context("usage: switch_reads FIXTURES_DIR")?,
    );
    println!(
        "| CPU (model) | level | counters read per switch | of them in the `slots` group | map lookups per switch |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (fixture, pmu, label) in SETS {
        let sys = SysRoot::at(dir.join(fixture));
        let machine = Machine::read(&sys)?;
        let model = match select(&machine.cpu, pmu, machine.smt_active) {
            Selection::Model(name) => Model::named(name)?,
            other => bail!("{fixture}: no TopDown model ({other:?})"),
        };
        for level in 1..=2 {
            let Ok(set) = topdown_set(&sys, pmu, &model, level) else {
                continue;
            };
            // Slot 0, the on-CPU time, is never read.
            let reads = set.counters.len() - 1;
            // The pinned `slots` group: each read of one of these makes the kernel update and
            // reset SLOTS and PERF_METRICS for the whole group.
            let metrics = set
                .counters
                .iter()
                .filter(|c| c.attr.pinned || c.attr.leader.is_some())
                .count();
            // CPU state and thread, plus the PERF_EVENT_ARRAY lookup inside every read.
            let lookups = 2 + reads;
            println!(
                "| {label} (`{}`) | {level} | {reads} | {metrics} | {lookups} |",
                model.name
            );
        }
    }
    println!(
        "| software set (default: on-CPU time from the scheduler's runtime) | - | 0 | 0 | 2 |"
    );
    Ok(())
}
