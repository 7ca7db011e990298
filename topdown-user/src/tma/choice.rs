//! Which counters a run counts on this machine: the software or hardware default set, or
//! TopDown at a level for each core type (the model each core PMU runs, or why none), plus the
//! user's `-e` events, and the TopDown view over them. Every live command starts here.

use anyhow::{Result, bail};
use topdown_common::MAX_COUNTERS;

use super::{
    ESTIMATE_ASSUMES, Model,
    plan::{HybridPart, drilldown_set, hybrid_topdown_set, topdown_set},
    view::{TopdownPart, TopdownView},
};
use crate::pmu::{
    counter_set::CounterSet,
    event_spec::{EventResolver, split_event_list},
    event_table::EventTable,
    machine::Machine,
    sysfs::SysRoot,
    topdown_model::{Selection, default_slots, select},
};

/// The counter set to run on this machine, and the TopDown view over it: the software or
/// hardware default set, or TopDown at `td_level` for each core type, plus the `-e` events.
pub fn counter_set(
    td_level: Option<u8>,
    nodes: &[String],
    per_core: bool,
    events: &[String],
) -> Result<(CounterSet, Option<TopdownView>)> {
    counter_set_on(&SysRoot::host(), td_level, nodes, per_core, events)
}

/// [`counter_set`] for the machine `sys` describes (a fixture in tests).
pub fn counter_set_on(
    sys: &SysRoot,
    td_level: Option<u8>,
    nodes: &[String],
    per_core: bool,
    events: &[String],
) -> Result<(CounterSet, Option<TopdownView>)> {
    let machine = Machine::read(sys)?;
    if !nodes.is_empty() && td_level != Some(3) {
        bail!("--nodes picks where Level 3 drills down: it needs --td-level 3");
    }
    let (mut set, topdown) = match td_level {
        None => (CounterSet::for_machine(sys)?, None),
        Some(level) => {
            let parts = topdown_models_here(&machine, level, per_core)?;
            // The PMU's `caps/slots`, else the core's known width (an emulated PMU gives none).
            let slots = machine.core_pmus[0]
                .slots
                .or_else(|| default_slots(&machine.cpu))
                .unwrap_or(8);
            if let [(model, pmu)] = parts.as_slice() {
                let set = if nodes.is_empty() {
                    topdown_set(sys, pmu, model, level)?
                } else {
                    drilldown_set(sys, pmu, model, nodes)?
                };
                let mut view = TopdownView::single(*model, level, slots, machine.smt_active);
                // Per-core counts cover whole cores (perf's `#core_wide`, as `perf stat -a`).
                view.core_wide = per_core;
                view.has_pmem = machine.has_pmem;
                (set, Some(view))
            } else {
                let with_cpus: Vec<HybridPart<'_>> = parts
                    .iter()
                    .map(|(model, pmu)| {
                        let cpus = machine.core_pmu(pmu).and_then(|p| p.cpus.clone());
                        HybridPart {
                            pmu: pmu.as_str(),
                            cpus,
                            model: *model,
                        }
                    })
                    .collect();
                let set = hybrid_topdown_set(sys, &with_cpus, level, nodes)?;
                let view = TopdownView {
                    parts: parts
                        .iter()
                        .map(|(model, pmu)| TopdownPart {
                            label: if pmu == "cpu_atom" { "E" } else { "P" },
                            prefix: format!("{pmu}/"),
                            model: *model,
                        })
                        .collect(),
                    level,
                    slots,
                    smt_on: machine.smt_active,
                    core_wide: per_core,
                    has_pmem: machine.has_pmem,
                };
                (set, Some(view))
            }
        }
    };
    if let Some(view) = topdown.as_ref().filter(|v| v.is_estimate()) {
        set.reason = format!("{}; {}", set.reason, estimate_note(view));
    }
    add_events(sys, &machine, &mut set, topdown.as_ref(), events)?;
    if machine.forced {
        set.reason = format!(
            "{}; CPU forced to {} (--cpuid / TOPDOWN_CPUID) on PMU {}",
            set.reason,
            machine.cpu,
            machine
                .core_pmus
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok((set, topdown))
}

/// What a per-thread estimate assumes, said beside the counter set's reason.
fn estimate_note(view: &TopdownView) -> String {
    format!(
        "TopDown per thread with SMT on is perf's estimate ({}): {ESTIMATE_ASSUMES}; --per-core \
         gives the exact core-wide numbers",
        view.parts[0].model.name
    )
}

/// Adds the `-e` events to the set, resolved for this machine's core PMU and CPU event table.
fn add_events(
    sys: &SysRoot,
    machine: &Machine,
    set: &mut CounterSet,
    topdown: Option<&TopdownView>,
    specs: &[String],
) -> Result<()> {
    if specs.is_empty() {
        return Ok(());
    }
    let core = machine.core_pmus.first().map(|p| p.name.clone());
    let table = match (topdown, &core) {
        (Some(view), _) => EventTable::for_model(view.parts[0].model.name),
        (None, Some(pmu)) => match select(&machine.cpu, pmu, machine.smt_active) {
            Selection::Model(model) => EventTable::for_model(model),
            Selection::PerCoreOnly(model) => EventTable::for_model(model),
            Selection::Unsupported(_) => None,
        },
        (None, None) => None,
    };
    let resolver = EventResolver::new(sys, core.as_deref(), table)?;
    for list in specs {
        for spec in split_event_list(list)? {
            set.counters.push(resolver.resolve(&spec)?);
        }
    }
    if set.counters.len() > MAX_COUNTERS {
        bail!(
            "{} counters per CPU requested, more than the {MAX_COUNTERS} a per-thread set \
             holds: drop some -e events",
            set.counters.len()
        );
    }
    Ok(())
}

/// The model TopDown runs with for each core PMU of this machine (two on hybrid parts), or why
/// it cannot: no hardware PMU, no model for the CPU, SMT-shared inputs. Never a made-up number.
pub fn topdown_models_here(
    machine: &Machine,
    level: u8,
    per_core: bool,
) -> Result<Vec<(Model, String)>> {
    if !machine.has_hardware_pmu() {
        bail!(
            "--td-level {level} needs a hardware PMU and this machine has none (a VM without a \
             virtual PMU?): run without --td-level for the software counters, or record \
             `perf stat` on the target machine and read it with `topdown-bpf analyze`"
        );
    }
    machine
        .core_pmus
        .iter()
        .map(|pmu| match select(&machine.cpu, &pmu.name, machine.smt_active) {
            Selection::Unsupported(why) => bail!("--td-level: {why}"),
            Selection::PerCoreOnly(model) if per_core => Ok((Model::named(model)?, pmu.name.clone())),
            // perf's formulas estimate the thread's share of its core (`#core_wide < 1`).
            Selection::PerCoreOnly(model) if Model::named(model)?.per_thread_estimate => {
                Ok((Model::named(model)?, pmu.name.clone()))
            }
            Selection::PerCoreOnly(_) => bail!(
                "--td-level: on this CPU with SMT on, the TopDown inputs count per core and its \
                 formulas have no per-thread estimate, so per-thread TopDown would be wrong: use \
                 --per-core"
            ),
            Selection::Model(model) => Ok((Model::named(model)?, pmu.name.clone())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Skylake-SP with SMT on: per thread, perf's estimate (its events opened, the set and
    /// JSON say so); per core, the exact core-wide numbers.
    #[test]
    fn skylake_sp_with_smt_on_estimates_per_thread_as_perf_does() {
        let sys = SysRoot::fixture("skylake-smt-on");
        let (set, view) = counter_set_on(&sys, Some(1), &[], false, &[]).unwrap();
        let view = view.unwrap();
        assert_eq!(view.parts[0].model.name, "skylakex");
        assert!(view.smt_on && !view.core_wide && view.is_estimate());
        let names: Vec<&str> = set.names().collect();
        for event in [
            "CPU_CLK_UNHALTED.ONE_THREAD_ACTIVE",
            "CPU_CLK_UNHALTED.REF_XCLK",
            "INT_MISC.RECOVERY_CYCLES_ANY",
            "CPU_CLK_UNHALTED.THREAD",
        ] {
            assert!(names.contains(&event), "{event} in {names:?}");
        }
        assert!(set.reason.contains("perf's estimate"), "{}", set.reason);
        assert!(set.reason.contains("--per-core"), "{}", set.reason);

        let (set, view) = counter_set_on(&sys, Some(1), &[], true, &[]).unwrap();
        let view = view.unwrap();
        assert!(view.smt_on && view.core_wide && !view.is_estimate());
        assert!(!set.reason.contains("#core_wide < 1"), "{}", set.reason);
    }
}
