//! `topdown-bpf check`: what this kernel and machine give the tool, each verified for real:
//! the floor's features, every kernel program loaded (the verifier's verdict), the start-up
//! check's numbers, and the CPU's PMU. One line each; non-zero exit when the tool cannot run.

use anyhow::{Context as _, Result};

use crate::{
    collect::{self, Collector, CollectorOptions, c2c::C2cCollector, canary},
    pmu::{counter_set::CounterSet, sysfs::SysRoot},
};

/// Runs every check and prints one line per check to stdout.
pub fn run() -> Result<()> {
    println!(
        "kernel: Linux {} ({})",
        canary::kernel_release(),
        std::env::consts::ARCH
    );
    collect::check_floor()?;
    println!(
        "floor: BTF and BPF ring buffers present (topdown-bpf needs Linux {} or newer)",
        collect::FLOOR
    );
    let set = CounterSet::for_machine(&SysRoot::host()).context("choosing the counter set")?;
    let collector = Collector::start(&set, &CollectorOptions::default())?;
    let verdict = collector
        .startup_check()
        .context("the collector ran no start-up check")?;
    drop(collector);
    println!(
        "start-up check: a thread the scheduler booked {:.3} ms was charged {:.3} ms: ok",
        verdict.booked_ns as f64 / 1e6,
        verdict.charged_ns.unwrap_or(0) as f64 / 1e6
    );
    let set = CounterSet::for_machine(&SysRoot::host()).context("choosing the counter set")?;
    drop(Collector::start(&set, &CollectorOptions::default())?);
    println!(
        "programs: sched_switch, tick, follow, exec, cgroup moves and removals: loaded and attached"
    );
    match C2cCollector::verify() {
        Ok(()) => {
            println!("c2c filter: loaded (memory sampling is the CPU's: see `topdown-bpf c2c`)")
        }
        Err(error) => println!("c2c filter: not loaded: {error:#}"),
    }
    println!("counters: {} ({})", set.name, set.reason);
    Ok(())
}
