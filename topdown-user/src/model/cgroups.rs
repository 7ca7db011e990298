//! The fleet's model step (`serve`): each cgroup of a window with its path, usage and TopDown,
//! computed on the collector's tick, so the exporter only turns them into series.

use super::columns;
use crate::{
    attrib::{
        Window,
        cgroups::CgroupNames,
        usage::{CounterValue, further},
    },
    pmu::counter_set::CounterSet,
    tma::{TopDown, view::TopdownView},
};
use topdown_common::cgroup::CgroupId;

/// One cgroup over one window.
#[derive(Clone, Debug)]
pub struct CgroupRow {
    /// Its cgroup2 id.
    pub id: CgroupId,
    /// Its path under the cgroup2 mount.
    pub path: String,
    /// On-CPU nanoseconds.
    pub on_cpu_ns: u64,
    /// Switches out of its threads.
    pub switches: u64,
    /// The counters after the on-CPU clock ([`CounterSet::further`]): [`CounterValue::scaled`]
    /// gives each count (none for a counter that did not run), `silent` an event this PMU does
    /// not count.
    pub counters: Vec<CounterValue>,
    /// TopDown per core type of the view (none without a TopDown set).
    pub topdown: Vec<Option<TopDown>>,
    /// Instructions per cycle, where the set counts both and they counted
    /// ([`columns::ipc`]).
    pub ipc: Option<f64>,
}

/// `window`'s cgroups, named (the tick's /sys reads) and with TopDown where `view` asks.
pub fn rows(
    window: &Window,
    names: &mut CgroupNames,
    set: &CounterSet,
    view: Option<&TopdownView>,
) -> Vec<CgroupRow> {
    names.allow_rescan();
    let ipc_slots = columns::ipc_slots(set);
    let view = view.map(|view| view.bind(set));
    window
        .cgroups
        .iter()
        .map(|usage| CgroupRow {
            id: usage.id,
            path: names.name(usage.id),
            on_cpu_ns: usage.on_cpu_ns(),
            switches: usage.switches,
            counters: further(&usage.counters).to_vec(),
            topdown: view
                .as_ref()
                .map_or_else(Vec::new, |v| v.of(&usage.counters)),
            ipc: ipc_slots.and_then(|(cycles, instructions)| {
                columns::ipc(&usage.counters, cycles, instructions)
            }),
        })
        .collect()
}
