//! TopDown over a counter set's values: which model reads which counters (one part per core
//! type on hybrid parts), at which level, with which literals.

use crate::{
    attrib::usage::CounterValue,
    pmu::counter_set::CounterSet,
    tma::{Model, TopDown, inputs::NamedCounts},
};

/// One core type's TopDown: hybrid parts have one for P-cores and one for E-cores.
#[derive(Clone, Debug)]
pub struct TopdownPart {
    /// Column label: empty for the only part, `P` or `E` on hybrid parts.
    pub label: &'static str,
    /// What its counters' names start with (`cpu_core/`), empty for the only part.
    pub prefix: String,
    /// The model whose events those counters hold.
    pub model: Model,
}

/// TopDown for every row: one part per core type, the level, and the literals it needs.
#[derive(Clone, Debug)]
pub struct TopdownView {
    /// One part per core type.
    pub parts: Vec<TopdownPart>,
    /// 1, or 2 for Level 2 too.
    pub level: u8,
    /// `#slots` (Arm pipeline width).
    pub slots: u32,
    /// `#smt_on`.
    pub smt_on: bool,
}

impl TopdownView {
    /// A view with one part: `model` over counters named as its formulas name them.
    pub fn single(model: Model, level: u8, slots: u32, smt_on: bool) -> Self {
        Self {
            parts: vec![TopdownPart {
                label: "",
                prefix: String::new(),
                model,
            }],
            level,
            slots,
            smt_on,
        }
    }

    /// Every node it computes, in tree order, once (hybrid parts list them once per core
    /// type).
    pub fn node_names(&self) -> Vec<&'static str> {
        let mut nodes: Vec<&'static str> = Vec::new();
        for part in &self.parts {
            for node in part.model.nodes(self.level) {
                if !nodes.contains(&node.name) {
                    nodes.push(node.name);
                }
            }
        }
        nodes
    }

    /// The thread's TopDown per part from its counters (named as the set names them); `None`
    /// for a part where no node could be computed (it never ran on that core type's PMU).
    pub fn of(&self, set: &CounterSet, counters: &[CounterValue]) -> Vec<Option<TopDown>> {
        self.parts
            .iter()
            .map(|part| {
                let counts = set.names().zip(counters).filter_map(|(name, value)| {
                    let name = name.strip_prefix(part.prefix.as_str())?;
                    Some((name.to_owned(), value.scaled()))
                });
                let inputs = NamedCounts::new(counts, self.slots, self.smt_on);
                let mut td = part.model.evaluate(&inputs, self.level);
                td.nodes.retain(|n| n.value.is_finite());
                // Each node's run %: the least its own inputs ran (a multiplexed counter is
                // scaled by its own enabled/running time; a node is only as sure as its least
                // measured input).
                let reads = part.model.node_inputs();
                let running = |event: &str| {
                    set.names().zip(counters).find_map(|(name, value)| {
                        (name.strip_prefix(part.prefix.as_str()) == Some(event))
                            .then(|| value.running_fraction())
                    })
                };
                for node in &mut td.nodes {
                    if let Some((_, events)) = reads.iter().find(|(n, _)| *n == node.node.name) {
                        node.run_fraction =
                            events.iter().filter_map(|e| running(e)).fold(1.0, f64::min);
                    }
                }
                // Values stay as the formulas give them; those outside [0, 1] are flagged with
                // the counts behind them.
                td.out_of_range = part.model.out_of_range(&td, &inputs, self.level);
                (!td.nodes.is_empty()).then_some(td)
            })
            .collect()
    }
}
