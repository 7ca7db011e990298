//! Per-core rows (`--per-core`): each core's CPUs, counters scaled, and TopDown, computed once
//! for the table, the JSON document and the full-screen view.

use super::columns;
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
}

/// The rows of `cores`, TopDown computed where `view` asks for it.
pub fn rows(cores: &[CoreUsage], set: &CounterSet, view: Option<&TopdownView>) -> Vec<CoreRow> {
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
            topdown: view.and_then(|v| v.of(set, &core.counters).into_iter().next().flatten()),
            counters: core.counters.iter().map(CounterValue::scaled).collect(),
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
