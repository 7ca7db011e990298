//! TopDown (TMA) models: pure functions from counts to the nodes of Levels 1 to 3.
//!
//! The formulas are Linux perf's pmu-events metrics (and Intel's perfmon files where perf has
//! none), transpiled into [`generated`] by `xtask/gen/tma_formulas.py` from `data/`; a test
//! regenerates them and another checks them against an independent interpreter of the same
//! JSON. [`node`] holds the tree (names, levels, parents, default thresholds);
//! [`Model::evaluate`] turns counts into node values, marks nodes over their thresholds and picks
//! the bottleneck. This crate reads nothing from the system: the machine's facts come in as
//! [`inputs::Literals`]. Which counters a model needs on a machine, and TopDown over a counter
//! set's values, are `topdown-user`'s `tma` room (it knows PMUs and counter sets).

/// The formulas and model table, written by `xtask/gen/tma_formulas.py`: never edited by hand.
#[rustfmt::skip]
pub mod generated;
pub mod inputs;
pub mod node;
pub mod spelling;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use anyhow::{Result, bail};

use self::{
    inputs::{ByName, Counts, Evaluation, Inputs, Literals, NamedCounts},
    node::Node,
};

/// A model: one CPU family's formulas and the events they read.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    /// Short name, e.g. `sapphirerapids`.
    pub name: &'static str,
    /// What it covers.
    pub description: &'static str,
    evaluate: fn(&dyn Counts, &mut [f64], &mut [bool]),
    /// The nodes the formulas compute, in the order of their values (perf's metric names).
    pub nodes: &'static [&'static str],
    /// The nodes whose data gives a threshold, in the order of the formulas' verdicts.
    pub thresholds: &'static [&'static str],
    /// Events the formulas read (every level), as perf names them, in the order the formulas
    /// index them.
    pub events: &'static [&'static str],
    /// The events the values of Level 1 nodes need.
    pub level1_events: &'static [&'static str],
    /// The events the values of Level 1 and 2 nodes need.
    pub level2_events: &'static [&'static str],
    /// Level 3 nodes that read what cannot be counted (retire latency), left out.
    pub unmeasurable: &'static [&'static str],
    /// Its formulas estimate a thread's share of its core's clocks when the counts are per
    /// thread with SMT on (perf's `#core_wide < 1` branch: Haswell to Cascade Lake).
    pub per_thread_estimate: bool,
}

/// What perf's per-thread estimate with SMT on (`#core_wide < 1`) assumes, in words the
/// tool prints wherever it shows one.
pub const ESTIMATE_ASSUMES: &str = "perf's #core_wide < 1 formulas take the core's clocks as \
    the thread's times (1 + ONE_THREAD_ACTIVE / REF_XCLK) / 2 and split core-wide (*_ANY) counts \
    evenly between the two threads";

impl Model {
    /// The model called `name`.
    pub fn named(name: &str) -> Result<Self> {
        match Self::all().find(|m| m.name == name) {
            Some(model) => Ok(model),
            None => bail!(
                "no TopDown model `{name}`: known models are {}",
                Self::all().map(|m| m.name).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// Every model.
    pub fn all() -> impl Iterator<Item = Self> {
        generated::MODELS.iter().copied()
    }

    /// The events nodes down to `level` need.
    pub const fn events_for_level(&self, level: u8) -> &'static [&'static str] {
        match level {
            0 | 1 => self.level1_events,
            2 => self.level2_events,
            _ => self.events,
        }
    }

    /// Where toplev's drilldown goes from `td` (a Level 2 result): the Level 2 nodes over their
    /// thresholds, under a parent over its own, that have Level 3 nodes under them.
    pub fn drill_targets(&self, td: &TopDown) -> Vec<&'static str> {
        let level3 = self.nodes(3);
        let over = |name: &str| {
            td.nodes
                .iter()
                .any(|n| n.node.name == name && n.over_threshold)
        };
        td.nodes
            .iter()
            .filter(|n| n.node.level == 2 && n.over_threshold && n.value.is_finite())
            .filter(|n| n.node.parent.is_none_or(over))
            .filter(|n| level3.iter().any(|c| c.parent == Some(n.node.name)))
            .map(|n| n.node.name)
            .collect()
    }

    /// The events of Level 1 and 2 and of the Level 3 nodes under the Level 2 nodes `expand`
    /// (toplev's drilldown: Level 3 only where it is asked for, so it fits the counters). Names
    /// are perf's (`tma_memory_bound`) or without the prefix (`memory_bound`).
    pub fn drilldown_events(&self, expand: &[String]) -> Result<Vec<&'static str>> {
        let level2: Vec<Node> = self.nodes(2).into_iter().filter(|n| n.level == 2).collect();
        let level3 = self.nodes(3);
        let mut parents = Vec::new();
        for name in expand {
            let wanted = if name.starts_with("tma_") {
                name.clone()
            } else {
                format!("tma_{}", name.to_lowercase())
            };
            let Some(node) = level2.iter().find(|n| n.name == wanted) else {
                bail!(
                    "--nodes {name}: not a Level 2 node of model {}; its Level 2 nodes are {}",
                    self.name,
                    level2.iter().map(|n| n.name).collect::<Vec<_>>().join(", ")
                );
            };
            if !level3.iter().any(|n| n.parent == Some(node.name)) {
                bail!(
                    "--nodes {name}: model {} has no Level 3 nodes under it",
                    self.name
                );
            }
            parents.push(node.name);
        }
        // Level 3 is planned per thread, where `#smt_on` is off.
        let reads = self.node_inputs(false, false);
        let mut wanted: Vec<&'static str> = self.level2_events.to_vec();
        for node in level3
            .iter()
            .filter(|n| n.parent.is_some_and(|p| parents.contains(&p)))
        {
            if let Some((_, events)) = reads.iter().find(|(n, _)| *n == node.name) {
                wanted.extend(events.iter().copied());
            }
        }
        Ok(self
            .events
            .iter()
            .copied()
            .filter(|e| wanted.contains(e))
            .collect())
    }

    /// The nodes this model has down to `level`, in tree order.
    pub fn nodes(&self, level: u8) -> Vec<Node> {
        let has = |name: &str| self.nodes.contains(&name);
        let mut nodes: Vec<Node> = self
            .nodes
            .iter()
            .filter_map(|name| Node::named(name).map(|node| node.in_model(has)))
            .filter(|node| node.level <= level)
            .collect();
        nodes.sort_by_key(|n| n.order);
        nodes
    }

    /// The raw formula values (fractions of slots), by perf metric name.
    pub fn values(&self, inputs: &dyn Inputs) -> Evaluation {
        let (mut values, mut over) = (
            vec![0.0; self.nodes.len()],
            vec![false; self.thresholds.len()],
        );
        let counts = ByName {
            events: self.events,
            inputs,
        };
        (self.evaluate)(&counts, &mut values, &mut over);
        Evaluation {
            values: self.nodes.iter().copied().zip(values).collect(),
            over_threshold: self.thresholds.iter().copied().zip(over).collect(),
        }
    }

    /// The `nodes` outside [0, 1], each with the counts its formula reads (`reads`:
    /// [`Model::node_inputs`]) as `count` gives them: only counts that contradict each other
    /// give such a node (perf's formulas subtract measured counts).
    pub fn out_of_range(
        nodes: &[NodeValue],
        reads: &[(&'static str, Vec<&'static str>)],
        count: impl Fn(&str) -> Option<f64>,
    ) -> Vec<OutOfRange> {
        nodes
            .iter()
            .filter(|n| n.value.is_finite() && !(0.0..=1.0).contains(&n.value))
            .map(|n| {
                let events = reads
                    .iter()
                    .find(|(node, _)| *node == n.node.name)
                    .map_or(&[][..], |(_, events)| events.as_slice());
                let mut inputs: Vec<(String, f64)> = events
                    .iter()
                    .filter_map(|&event| Some((event.to_owned(), count(event)?)))
                    .collect();
                inputs.sort_by(|a, b| a.0.cmp(&b.0));
                inputs.dedup_by(|a, b| a.0 == b.0);
                OutOfRange {
                    node: n.node.name,
                    value: n.value,
                    inputs,
                }
            })
            .collect()
    }

    /// The buffers this model's formulas write into, with each value's node as this model has
    /// it and where its threshold verdict is: made once per binding (a counter set, a view),
    /// reused for every row evaluated with [`Model::evaluate_into`].
    pub fn scratch(&self) -> Scratch {
        let has = |name: &str| self.nodes.contains(&name);
        let table: Vec<(Option<Node>, Option<usize>)> = self
            .nodes
            .iter()
            .map(|&name| {
                let node = Node::named(name).map(|node| node.in_model(has));
                (node, self.thresholds.iter().position(|n| *n == name))
            })
            .collect();
        // Each value's parent among the values (a parent the model does not compute: none).
        let parents = table
            .iter()
            .map(|(node, _)| {
                let parent = (*node)?.parent?;
                table
                    .iter()
                    .position(|(n, _)| n.is_some_and(|n| n.name == parent))
            })
            .collect();
        let mut tree_order: Vec<usize> =
            (0..table.len()).filter(|&i| table[i].0.is_some()).collect();
        tree_order.sort_by_key(|&i| table[i].0.map(|n| n.order));
        Scratch {
            values: vec![0.0; self.nodes.len()],
            over: vec![false; self.thresholds.len()],
            node_over: vec![false; self.nodes.len()],
            table,
            parents,
            tree_order,
        }
    }

    /// The events each node's formula reads (every level) for `#smt_on` and `#core_wide` (the
    /// Haswell to Cascade Lake formulas read per-core events only with `#smt_on`, and estimate
    /// the core's clocks without `#core_wide`), found once per model and literals.
    pub fn node_inputs(&self, smt_on: bool, core_wide: bool) -> NodeInputs {
        /// A model's inputs per (`#smt_on`, `#core_wide`).
        type Key = (&'static str, bool, bool);
        static CACHE: OnceLock<Mutex<HashMap<Key, NodeInputs>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Mutex::default);
        let mut cache = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            cache
                .entry((self.name, smt_on, core_wide))
                .or_insert_with(|| Arc::new(self.find_inputs(smt_on, core_wide))),
        )
    }

    /// [`Model::node_inputs`], worked out: with every event counted but one, the nodes that
    /// come out unmeasured (NaN) read that one.
    fn find_inputs(&self, smt_on: bool, core_wide: bool) -> Vec<(&'static str, Vec<&'static str>)> {
        // Distinct, plausible counts: no division by zero, no node at a clamp.
        let all = |without: Option<&str>| {
            NamedCounts::new(
                self.events
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| Some(**e) != without)
                    .map(|(i, e)| ((*e).to_owned(), 1e9 + 7_919.0 * i as f64)),
                Literals {
                    slots: 8,
                    smt_on,
                    core_wide,
                    has_pmem: false,
                },
            )
        };
        let full = self.values(&all(None));
        let reads = |event: &str| {
            let values = self.values(&all(Some(event)));
            values
                .values
                .iter()
                .filter(|(name, value)| {
                    value.is_nan() && full.values.iter().any(|(n, v)| n == name && !v.is_nan())
                })
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
        };
        let mut inputs: Vec<(&'static str, Vec<&'static str>)> = full
            .values
            .iter()
            .map(|(name, _)| (*name, Vec::new()))
            .collect();
        for event in self.events {
            for node in reads(event) {
                if let Some((_, events)) = inputs.iter_mut().find(|(n, _)| *n == node) {
                    events.push(event);
                }
            }
        }
        inputs
    }

    /// Whether this model's values are perf's per-thread estimate under these literals: SMT
    /// on, counts that do not cover whole cores, formulas that estimate the core's clocks.
    pub fn is_estimate(&self, smt_on: bool, core_wide: bool) -> bool {
        self.per_thread_estimate && smt_on && !core_wide
    }

    /// The node values down to `max_level`, with thresholds and the bottleneck, from counts
    /// and literals by name.
    pub fn evaluate(&self, inputs: &dyn Inputs, max_level: u8) -> TopDown {
        let counts = ByName {
            events: self.events,
            inputs,
        };
        let mut nodes = Vec::new();
        let bottleneck = self.evaluate_into(&counts, max_level, &mut self.scratch(), &mut nodes);
        TopDown {
            nodes: nodes.into(),
            bottleneck,
            out_of_range: Vec::new(),
        }
    }

    /// [`Model::evaluate`] from counts by index (a counter set bound once: [`inputs::BoundCounts`]),
    /// the formulas writing into `scratch` ([`Model::scratch`] of this model, reused from row
    /// to row) and the nodes appended to `nodes` in tree order (a buffer many rows share, see
    /// [`NodeValues`]): no allocation once the buffers have grown, no lock, no name looked up.
    /// Returns the bottleneck among the appended nodes.
    pub fn evaluate_into(
        &self,
        counts: &dyn Counts,
        max_level: u8,
        scratch: &mut Scratch,
        nodes: &mut Vec<NodeValue>,
    ) -> Option<&'static str> {
        debug_assert_eq!(
            scratch.table.len(),
            self.nodes.len(),
            "another model's scratch"
        );
        scratch.values.fill(0.0);
        scratch.over.fill(false);
        (self.evaluate)(counts, &mut scratch.values, &mut scratch.over);
        let Scratch {
            values,
            over,
            node_over,
            table,
            parents,
            tree_order,
        } = scratch;
        for (i, &(node, over_at)) in table.iter().enumerate() {
            node_over[i] = node.is_some_and(|node| {
                over_at.map_or_else(|| node.default_over(values[i]), |at| over[at])
            });
        }
        // Tree order, the nodes down to `max_level`; the bottleneck by index (see
        // [`TopDown::bottleneck`]): the last of the deepest, largest ones, as `max_by` picks.
        let mut bottleneck: Option<(u8, f64, &'static str)> = None;
        for &i in tree_order.iter() {
            let Some(node) = table[i].0.filter(|node| node.level <= max_level) else {
                continue;
            };
            let value = values[i];
            nodes.push(NodeValue {
                node,
                value,
                run_fraction: 1.0,
                over_threshold: node_over[i],
                multiplexed_apart: false,
            });
            let under_over = match node.parent {
                None => true,
                Some(_) => parents[i].is_some_and(|p| node_over[p]),
            };
            if node_over[i] && value.is_finite() && under_over {
                let deeper = bottleneck.is_none_or(|(level, best, _)| {
                    node.level.cmp(&level).then(value.total_cmp(&best)).is_ge()
                });
                if deeper {
                    bottleneck = Some((node.level, value, node.name));
                }
            }
        }
        bottleneck.map(|(_, _, name)| name)
    }
}

/// The buffers a model's formulas write their values and verdicts into, kept from row to row,
/// and each value's node and threshold position ([`Model::scratch`]).
#[derive(Debug)]
pub struct Scratch {
    values: Vec<f64>,
    /// The formulas' threshold verdicts, by threshold.
    over: Vec<bool>,
    /// Each value's verdict (the formula's, else the node's default threshold).
    node_over: Vec<bool>,
    /// Each value's node as the model has it, and its threshold's index.
    table: Vec<(Option<Node>, Option<usize>)>,
    /// Each value's parent's index among the values.
    parents: Vec<Option<usize>>,
    /// The values' indices in tree order (values with a node only).
    tree_order: Vec<usize>,
}

impl Scratch {
    /// The most nodes one evaluation with it gives (every node of the model's tree).
    pub fn nodes(&self) -> usize {
        self.tree_order.len()
    }
}

/// Each node's input events, by node name ([`Model::node_inputs`]).
pub type NodeInputs = Arc<Vec<(&'static str, Vec<&'static str>)>>;

/// A node outside [0, 1]: only counts that contradict each other give one (perf's formulas
/// subtract measured counts), so it is flagged with the counts its formula reads.
#[derive(Clone, Debug, PartialEq)]
pub struct OutOfRange {
    /// The node's perf metric name.
    pub node: &'static str,
    /// Its value.
    pub value: f64,
    /// The counts (formula name, value) its formula reads, sorted by name.
    pub inputs: Vec<(String, f64)>,
}

/// One node's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeValue {
    /// Which node.
    pub node: Node,
    /// Fraction of pipeline slots, 0..1.
    pub value: f64,
    /// Over its threshold (perf's `MetricThreshold`, or the default for the node).
    pub over_threshold: bool,
    /// The lowest share of its enabled time any of its input counters was running (1.0: never
    /// multiplexed, or not known).
    pub run_fraction: f64,
    /// Its inputs were counted in counter groups the kernel multiplexed apart: each count is
    /// scaled by its own running time, but they need not cover the same moments (set by
    /// `topdown-user`'s view over a counter set).
    pub multiplexed_apart: bool,
}

/// The nodes of one evaluation, in tree order: a range of a buffer that many evaluations (a
/// window's rows) share, so a row's TopDown costs no allocation of its own. Reads as a slice.
#[derive(Clone, Default)]
pub struct NodeValues {
    all: Option<Arc<Vec<NodeValue>>>,
    start: u32,
    end: u32,
}

impl NodeValues {
    /// The nodes at `range` of `all`, a buffer shared with other evaluations (`None` where
    /// `range` is not in it).
    pub fn shared(all: &Arc<Vec<NodeValue>>, range: std::ops::Range<usize>) -> Option<Self> {
        all.get(range.clone())?;
        Some(Self {
            all: Some(Arc::clone(all)),
            start: u32::try_from(range.start).ok()?,
            end: u32::try_from(range.end).ok()?,
        })
    }
}

impl From<Vec<NodeValue>> for NodeValues {
    fn from(nodes: Vec<NodeValue>) -> Self {
        let end = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
        Self {
            all: Some(Arc::new(nodes)),
            start: 0,
            end,
        }
    }
}

impl std::ops::Deref for NodeValues {
    type Target = [NodeValue];
    fn deref(&self) -> &[NodeValue] {
        self.all
            .as_deref()
            .and_then(|all| all.get(self.start as usize..self.end as usize))
            .unwrap_or_default()
    }
}

impl<'a> IntoIterator for &'a NodeValues {
    type Item = &'a NodeValue;
    type IntoIter = std::slice::Iter<'a, NodeValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for NodeValues {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for NodeValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// TopDown nodes for one thread (or CPU, or file) and the bottleneck among them.
#[derive(Clone, Debug, PartialEq)]
pub struct TopDown {
    /// Nodes in tree order (each L1 node followed by its children).
    pub nodes: NodeValues,
    /// The deepest node over its threshold whose parent is over its own (toplev's `<==`).
    pub bottleneck: Option<&'static str>,
    /// Nodes outside [0, 1] and the counts their formulas read (filled where the counts are at
    /// hand: `topdown-user`'s view over a counter set).
    pub out_of_range: Vec<OutOfRange>,
}

impl TopDown {
    /// The value of the node with perf metric name `name`.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.nodes
            .iter()
            .find(|n| n.node.name == name)
            .map(|n| n.value)
    }

    /// The nodes whose inputs were counted in groups multiplexed apart
    /// ([`NodeValue::multiplexed_apart`]), in tree order.
    pub fn multiplexed_apart(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.nodes
            .iter()
            .filter(|n| n.multiplexed_apart)
            .map(|n| n.node.name)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Counts(HashMap<&'static str, f64>);

    impl Inputs for Counts {
        fn event(&self, name: &str) -> f64 {
            self.0.get(name).copied().unwrap_or(0.0)
        }
        fn literal(&self, _name: &str) -> f64 {
            0.0
        }
    }

    fn spr(fe: f64, bad: f64, ret: f64, be: f64, l2: [f64; 4]) -> Counts {
        let slots = 1e9;
        Counts(HashMap::from([
            ("TOPDOWN.SLOTS", slots),
            ("topdown-fe-bound", fe * slots),
            ("topdown-bad-spec", bad * slots),
            ("topdown-retiring", ret * slots),
            ("topdown-be-bound", be * slots),
            ("topdown-heavy-ops", l2[0] * slots),
            ("topdown-br-mispredict", l2[1] * slots),
            ("topdown-fetch-lat", l2[2] * slots),
            ("topdown-mem-bound", l2[3] * slots),
            ("INT_MISC.UOP_DROPPING", 0.0),
            ("INST_RETIRED.ANY", 1e9),
            ("CPU_CLK_UNHALTED.THREAD", 1e9),
        ]))
    }

    #[test]
    fn level_one_is_normalised_by_the_sum_of_the_four_metrics() {
        let model = Model::named("sapphirerapids").unwrap();
        // Metrics that do not sum to 1 (as PERF_METRICS' 8-bit fields do not) are normalised.
        let td = model.evaluate(&spr(0.2, 0.1, 0.3, 0.4 + 0.1, [0.1, 0.05, 0.1, 0.3]), 1);
        assert_eq!(td.nodes.len(), 4);
        assert!((td.value("tma_backend_bound").unwrap() - 0.5 / 1.1).abs() < 1e-12);
        let sum: f64 = td.nodes.iter().map(|n| n.value).sum();
        assert!((sum - 1.0).abs() < 1e-12, "L1 sums to 1: {sum}");
    }

    /// The bottleneck as its definition says it, by names: the deepest node over its
    /// threshold whose parent (if any) is over its own; the largest value among equally deep
    /// ones (the last in tree order among equal ones, as `max_by` picks).
    fn bottleneck_by_names(nodes: &[NodeValue]) -> Option<&'static str> {
        let over = |name: &str| {
            nodes
                .iter()
                .any(|n| n.node.name == name && n.over_threshold)
        };
        nodes
            .iter()
            .filter(|n| n.over_threshold && n.value.is_finite())
            .filter(|n| n.node.parent.is_none_or(over))
            .max_by(|a, b| {
                a.node
                    .level
                    .cmp(&b.node.level)
                    .then(a.value.total_cmp(&b.value))
            })
            .map(|n| n.node.name)
    }

    /// Every model, 300 sets of pseudo-random counts each (some events 0, some equal, so
    /// nodes come out NaN, clamped and tied), every level: the bottleneck found by index at
    /// evaluation is the one its definition names; the nodes come in tree order.
    #[test]
    fn the_bottleneck_by_index_is_the_one_its_definition_names() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut found = 0;
        for model in Model::all() {
            for round in 0..300 {
                let counts: HashMap<&'static str, f64> = model
                    .events
                    .iter()
                    .map(|&e| {
                        let value = match next() % 8 {
                            0 => 0.0,
                            1 => 1e9,
                            _ => (next() % 2_000_000_000) as f64,
                        };
                        (e, value)
                    })
                    .collect();
                let level = 1 + (round % 3) as u8;
                let td = model.evaluate(&Counts(counts), level);
                assert!(
                    td.nodes
                        .windows(2)
                        .all(|w| w[0].node.order < w[1].node.order)
                );
                assert_eq!(
                    td.bottleneck,
                    bottleneck_by_names(&td.nodes),
                    "{} level {level}",
                    model.name
                );
                found += usize::from(td.bottleneck.is_some());
            }
        }
        assert!(found > 100, "some rounds have a bottleneck: {found}");
    }

    #[test]
    fn bottleneck_is_the_deepest_node_over_threshold_under_a_parent_over_its_own() {
        let model = Model::named("sapphirerapids").unwrap();
        let td = model.evaluate(&spr(0.1, 0.05, 0.25, 0.6, [0.05, 0.02, 0.05, 0.5]), 2);
        assert_eq!(td.bottleneck, Some("tma_memory_bound"));
        assert!(td.value("tma_core_bound").unwrap() < 0.11);
        let l1_only = model.evaluate(&spr(0.1, 0.05, 0.25, 0.6, [0.05, 0.02, 0.05, 0.5]), 1);
        assert_eq!(l1_only.bottleneck, Some("tma_backend_bound"));
        // Backend under its threshold: its children cannot be the bottleneck.
        let td = model.evaluate(&spr(0.5, 0.1, 0.25, 0.15, [0.05, 0.02, 0.45, 0.14]), 2);
        assert_eq!(td.bottleneck, Some("tma_fetch_latency"));
    }

    #[test]
    fn e_core_resource_bound_hangs_under_backend_bound_where_there_is_no_aux() {
        for (model, parent) in [
            ("sierraforest", "tma_backend_bound"),
            ("crestmont", "tma_backend_bound"),
            ("tremont", "tma_backend_bound_aux"),
        ] {
            let nodes = Model::named(model).unwrap().nodes(2);
            let resource = nodes
                .iter()
                .find(|n| n.name == "tma_resource_bound")
                .unwrap_or_else(|| panic!("{model} has Resource_Bound"));
            assert_eq!(resource.parent, Some(parent), "{model}");
            assert!(nodes.iter().any(|n| n.name == parent), "{model}");
        }
    }

    #[test]
    fn drilling_down_adds_only_the_level_three_events_under_the_nodes_asked() {
        let model = Model::named("graniterapids").unwrap();
        let memory = model.drilldown_events(&["memory_bound".into()]).unwrap();
        // Level 2's events, and what L1/L2/L3/L3-miss/Store Bound read (GNR's formulas).
        for event in model.level2_events.iter().chain(&[
            "EXE_ACTIVITY.BOUND_ON_LOADS",
            "MEMORY_ACTIVITY.STALLS_L1D_MISS",
            "MEMORY_ACTIVITY.STALLS_L2_MISS",
            "MEMORY_ACTIVITY.STALLS_L3_MISS",
            "EXE_ACTIVITY.BOUND_ON_STORES",
        ]) {
            assert!(memory.contains(event), "{event}");
        }
        assert!(
            !memory.contains(&"ICACHE_DATA.STALLS"),
            "the frontend's L3 is not asked"
        );
        assert!(memory.len() < model.events.len());
        assert_eq!(
            model
                .drilldown_events(&["tma_memory_bound".into()])
                .unwrap(),
            memory
        );
        for (bad, says) in [
            ("retiring", "not a Level 2 node"),
            ("nope", "not a Level 2 node"),
        ] {
            let error = model
                .drilldown_events(&[bad.into()])
                .unwrap_err()
                .to_string();
            assert!(error.contains(says), "{error}");
        }
        let zen = Model::named("zen4").unwrap();
        let error = zen
            .drilldown_events(&["memory_bound".into()])
            .unwrap_err()
            .to_string();
        assert!(error.contains("no Level 3 nodes"), "{error}");
    }

    #[test]
    fn smt_decides_which_inputs_the_haswell_formulas_read() {
        // Bad Speculation: `4 * ((RECOVERY_CYCLES_ANY / 2) if #smt_on else RECOVERY_CYCLES)`.
        let model = Model::named("haswell").unwrap();
        let bad = |smt_on| {
            model
                .node_inputs(smt_on, smt_on)
                .iter()
                .find(|(n, _)| *n == "tma_bad_speculation")
                .unwrap()
                .1
                .clone()
        };
        assert!(bad(false).contains(&"INT_MISC.RECOVERY_CYCLES"));
        assert!(!bad(false).contains(&"INT_MISC.RECOVERY_CYCLES_ANY"));
        assert!(bad(true).contains(&"INT_MISC.RECOVERY_CYCLES_ANY"));
        assert!(!bad(true).contains(&"INT_MISC.RECOVERY_CYCLES"));
    }

    #[test]
    fn unknown_model_names_the_known_ones() {
        let error = Model::named("pentium").unwrap_err().to_string();
        assert!(error.contains("sapphirerapids"), "{error}");
        assert!(Model::all().count() >= 10);
    }
}
