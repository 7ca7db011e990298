//! `topdown-bpf check`: what this kernel and machine give the tool, each verified for real:
//! the floor's features, every kernel program loaded (the verifier's verdict), the start-up
//! check's numbers, and the CPU's PMU. One line each; non-zero exit when the tool cannot run.

use anyhow::{Context as _, Result};

use crate::{
    collect::{self, Collector, CollectorOptions, c2c::C2cCollector, calibration, canary},
    pmu::{counter_set::CounterSet, machine::Machine, sysfs::SysRoot},
    tma::choice::counter_set,
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
    let migrated_waits = collector.migrated_waits();
    drop(collector);
    println!(
        "start-up check: a thread the scheduler booked {:.3} ms was charged {:.3} ms: ok",
        verdict.booked_ns as f64 / 1e6,
        verdict.charged_ns.unwrap_or(0) as f64 / 1e6
    );
    println!(
        "programs: sched_switch, tick, follow, exec, cgroup moves and removals: loaded and attached"
    );
    println!("{}", migrated_waits.line());
    match C2cCollector::verify() {
        Ok(()) => {
            println!("c2c filter: loaded (memory sampling is the CPU's: see `topdown-bpf c2c`)")
        }
        Err(error) => println!("c2c filter: not loaded: {error:#}"),
    }
    println!("counters: {} ({})", set.name, set.reason);
    pmu_check()
}

/// Cycles, instructions and mispredicted branches, which every core PMU of the architecture
/// counts: by name (the CPU's event table), or raw (Arm's common event numbers). x86's generic
/// names map to its architectural events; Arm's generic mapping needs the PMU to advertise each
/// event (QEMU's advertises none but cycles), so the CPU's own numbers are used there.
fn architectural(named: bool) -> Vec<String> {
    let events: [&str; 3] = match (std::env::consts::ARCH, named) {
        ("aarch64", true) => ["CPU_CYCLES", "INST_RETIRED", "BR_MIS_PRED"],
        ("aarch64", false) => ["r11", "r08", "r10"],
        _ => ["cycles", "instructions", "branch-misses"],
    };
    events.map(String::from).to_vec()
}

/// Says which hardware events this PMU counts: TopDown Level 1's where the CPU has it, else
/// cycles, instructions and branch misses, through the calibration every run does at start.
fn pmu_check() -> Result<()> {
    let machine = Machine::read(&SysRoot::host())?;
    if machine.core_pmus.is_empty() {
        println!("pmu: none (no hardware PMU: software counters only)");
        return Ok(());
    }
    let (set, _) = counter_set(Some(1), &[], false, &[])
        .or_else(|_| counter_set(None, &[], false, &architectural(true)))
        .or_else(|_| counter_set(None, &[], false, &architectural(false)))?;
    let calibration = calibration::calibrate(&set)?;
    let counted = calibration.readings.iter().filter(|r| r.count > 0).count();
    println!(
        "pmu: {counted} of {} events of `{}` counted over the start-up loop",
        calibration.readings.len(),
        set.name
    );
    for (slot, why) in &calibration.unopened {
        let name = set.counters.get(*slot).map_or("?", |c| c.name.as_str());
        println!("pmu: {name} does not open on a thread: {why}");
    }
    for line in calibration::lines(&calibration, &set) {
        println!("{}", line.trim_start_matches("topdown-bpf: "));
    }
    Ok(())
}
