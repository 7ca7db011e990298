//! Per-core rows (`--per-core`): each core's CPUs, counters scaled, the value columns its
//! counters make (IPC, MPKI: [`columns::counter_columns`]) and TopDown, computed once for the
//! table, the JSON document and the full-screen view.

use super::columns::{self, Column, Number};
use crate::{
    attrib::{cores::CoreUsage, usage::CounterValue},
    pmu::counter_set::CounterSet,
    tma::{TopDown, node::Node, view::TopdownView},
};

/// One core's line of a report: computed once, formatted by the table and the full-screen view.
#[derive(Clone, Debug)]
pub struct CoreRow {
    /// `S0-C3`.
    pub core: String,
    /// Its CPUs, comma-separated.
    pub cpus: String,
    /// TopDown from its counters, with a TopDown set (the first core type's model).
    pub topdown: Option<TopDown>,
    /// Each counter of the set, scaled to its enabled time.
    pub counters: Vec<Option<f64>>,
    /// The value of each of `columns` (see [`rows`]): `None` where not measured.
    pub values: Vec<Option<Number>>,
}

/// The rows of `cores`, with a value for each of `columns` ([`columns::counter_columns`] of
/// `set`), TopDown computed where `view` asks for it.
pub fn rows(
    cores: &[CoreUsage],
    set: &CounterSet,
    columns: &[Column],
    view: Option<&TopdownView>,
) -> Vec<CoreRow> {
    cores
        .iter()
        .map(|core| CoreRow {
            core: core.core.to_string(),
            cpus: core
                .cpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            topdown: view.and_then(|v| v.of(set, &core.counters).first().cloned().flatten()),
            counters: core.counters.iter().map(CounterValue::scaled).collect(),
            values: columns
                .iter()
                .map(|c| c.of_counters(&core.counters).flatten())
                .collect(),
        })
        .collect()
}

/// The TopDown nodes the per-core columns show, in tree order.
pub fn node_columns(view: Option<&TopdownView>) -> Vec<Node> {
    view.map_or_else(Vec::new, |v| {
        columns::view_nodes(v)
            .into_iter()
            .filter(|c| c.part == 0)
            .map(|c| c.node)
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmu::{
        counter_set::{Counter, CounterSet},
        topology::CoreId,
    };

    /// A core's IPC is its instructions over its cycles, each scaled to its enabled time as
    /// perf scales them (here the instructions counter ran half the time); a core whose
    /// cycles never ran has none, not a 0.
    #[test]
    fn a_cores_ipc_comes_from_its_own_counters() {
        let mut set = CounterSet::software(String::new());
        set.counters = vec![
            Counter::event("cycles", 0, 0),
            Counter::event("instructions", 0, 1),
        ];
        let columns = columns::counter_columns(&set);
        assert_eq!(
            columns.iter().map(|c| c.key).collect::<Vec<_>>(),
            ["ipc"],
            "the set's counter-made columns"
        );
        let core = |core, counters| CoreUsage {
            core: CoreId { package: 0, core },
            cpus: vec![core],
            counters,
        };
        let cores = [
            core(
                0,
                vec![
                    CounterValue::new(4_000_000, 1_000_000, 1_000_000),
                    CounterValue::new(3_000_000, 1_000_000, 500_000),
                ],
            ),
            core(
                1,
                vec![
                    CounterValue::new(0, 1_000_000, 0),
                    CounterValue::new(3_000_000, 1_000_000, 1_000_000),
                ],
            ),
        ];
        let rows = rows(&cores, &set, &columns, None);
        assert_eq!(rows[0].values, [Some(Number::Float(1.5))]);
        assert_eq!(rows[1].values, [None], "cycles never ran: no IPC");
    }
}
