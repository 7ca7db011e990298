//! TopDown over a counter set's values: which model reads which counters (one part per core
//! type on hybrid parts), at which level, with which literals.

use std::{cell::RefCell, collections::HashMap, ops::Range, sync::Arc};

use crate::{
    attrib::usage::CounterValue,
    pmu::counter_set::CounterSet,
    tma::{
        Model, NodeInputs, NodeValue, NodeValues, OutOfRange, Scratch, TopDown,
        inputs::{BoundCounts, Literals},
    },
};

/// The Level 1 nodes every model has, which split the pipeline's slots between them.
const SLOT_SPLIT: [&str; 4] = [
    "tma_frontend_bound",
    "tma_bad_speculation",
    "tma_backend_bound",
    "tma_retiring",
];

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
    /// perf's `#core_wide`: the counts cover whole cores (per-core mode, counted on every
    /// CPU); per-thread counts are not, and with SMT on the Haswell to Cascade Lake formulas
    /// then estimate the core's clocks.
    pub core_wide: bool,
    /// perf's `#has_pmem`: the measured machine has persistent memory.
    pub has_pmem: bool,
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
            core_wide: false,
            has_pmem: false,
        }
    }

    /// The literals its formulas take.
    pub fn literals(&self) -> Literals {
        Literals {
            slots: self.slots,
            smt_on: self.smt_on,
            core_wide: self.core_wide,
            has_pmem: self.has_pmem,
        }
    }

    /// Whether its TopDown is perf's per-thread estimate (SMT on, per-thread counts, a model
    /// whose formulas estimate the core's clocks): tables and JSON say so.
    pub fn is_estimate(&self) -> bool {
        self.parts
            .iter()
            .any(|p| p.model.is_estimate(self.smt_on, self.core_wide))
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
    /// for a part where no node could be computed (it never ran on that core type's PMU). For
    /// many rows, [`TopdownView::bind`] once, [`BoundView::evaluate`] each row and
    /// [`BoundView::finish`] the batch.
    pub fn of(&self, set: &CounterSet, counters: &[CounterValue]) -> RowTopDown {
        let bound = self.bind(set);
        let row = bound.evaluate(counters);
        bound.finish().row(row)
    }

    /// This view over `set`'s counters: which slot each formula name is, and which slots each
    /// node reads, found once for every row evaluated with it.
    pub fn bind<'a>(&'a self, set: &'a CounterSet) -> BoundView<'a> {
        let parts = self
            .parts
            .iter()
            .map(|part| {
                let index: HashMap<&str, usize> = set
                    .counters
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| Some((c.name.strip_prefix(part.prefix.as_str())?, i)))
                    .collect();
                let slots = part
                    .model
                    .events
                    .iter()
                    .map(|e| index.get(e).copied())
                    .collect();
                let node_inputs = part.model.node_inputs(self.smt_on, self.core_wide);
                // Nodes as this model has them (a Level 3 node may hang elsewhere in its tree).
                let nodes = part.model.nodes(3);
                let order = |name: &str| nodes.iter().find(|n| n.name == name).map(|n| n.order);
                let mut reads: Vec<(u16, Vec<usize>)> = node_inputs
                    .iter()
                    .filter_map(|(node, events)| {
                        let slots = events.iter().filter_map(|e| index.get(e).copied());
                        Some((order(node)?, slots.collect()))
                    })
                    .collect();
                reads.sort_by_key(|(order, _)| *order);
                BoundPart {
                    index,
                    slots,
                    scratch: RefCell::new(part.model.scratch()),
                    node_inputs,
                    reads,
                    slot_split: SLOT_SPLIT.map(order),
                }
            })
            .collect();
        BoundView {
            view: self,
            values: RefCell::new(Vec::with_capacity(set.counters.len())),
            batch: RefCell::default(),
            groups: set
                .counters
                .iter()
                .enumerate()
                .map(|(i, c)| c.attr.leader.unwrap_or(i))
                .collect(),
            parts,
        }
    }
}

/// A [`TopdownView`] bound to a counter set ([`TopdownView::bind`]): rows are evaluated into
/// one batch ([`BoundView::evaluate`]), which [`BoundView::finish`] hands out.
pub struct BoundView<'a> {
    view: &'a TopdownView,
    /// A row's counters scaled, kept from row to row.
    values: RefCell<Vec<Option<f64>>>,
    /// The rows evaluated so far.
    batch: RefCell<Pending>,
    /// Each slot's counter group: its leader's slot, its own when it leads.
    groups: Vec<usize>,
    parts: Vec<BoundPart<'a>>,
}

/// One part's binding: formula names to slots, the model's events to slots, nodes to the events
/// and slots they read; the buffers its formulas write into, reused from row to row.
struct BoundPart<'a> {
    index: HashMap<&'a str, usize>,
    slots: Vec<Option<usize>>,
    scratch: RefCell<Scratch>,
    node_inputs: NodeInputs,
    /// The slots each node reads, by the node's place in tree order (sorted by it).
    reads: Vec<(u16, Vec<usize>)>,
    /// The four Level 1 nodes that split the slots, by their place in tree order.
    slot_split: [Option<u16>; 4],
}

/// The rows a [`BoundView`] has evaluated, before they are shared: their nodes in buffers of
/// [`CHUNK_BYTES`] (rows after rows; a window's in one buffer would be tens of megabytes, whose
/// pages the system maps afresh each window, where chunks of this size are reused from the
/// heap), each part's TopDown with its range of one.
#[derive(Default)]
struct Pending {
    chunks: Vec<Vec<NodeValue>>,
    parts: Vec<Option<PendingPart>>,
}

/// The size of a buffer of rows' nodes: under the system allocator's threshold for mapping
/// memory of its own (glibc's is 128 KiB at first).
const CHUNK_BYTES: usize = 64 * 1024;

impl Pending {
    /// The buffer the next row's nodes go to, with room for `most` more.
    fn chunk(&mut self, most: usize) -> (usize, &mut Vec<NodeValue>) {
        let full = self
            .chunks
            .last()
            .is_none_or(|chunk| chunk.capacity() - chunk.len() < most);
        if full {
            let nodes = (CHUNK_BYTES / size_of::<NodeValue>()).max(most);
            self.chunks.push(Vec::with_capacity(nodes));
        }
        let at = self.chunks.len() - 1;
        (at, &mut self.chunks[at])
    }
}

/// One part's TopDown of one row, its nodes a range of one of [`Pending::chunks`].
struct PendingPart {
    chunk: usize,
    nodes: Range<usize>,
    bottleneck: Option<&'static str>,
    out_of_range: Vec<OutOfRange>,
}

/// One row's place in a batch: its parts' range of the batch's TopDowns.
#[derive(Clone, Copy, Debug)]
pub struct BatchRow(u32, u32);

/// The TopDowns of the rows one [`BoundView`] evaluated: their nodes in shared buffers and one
/// list of TopDowns for all of them, so a row's TopDown costs no allocation of its own.
#[derive(Debug, Default)]
pub struct Batch {
    parts: Vec<Option<TopDown>>,
}

impl Batch {
    /// The TopDown per part of `row`, one of this batch's.
    pub fn row(self: &Arc<Self>, row: BatchRow) -> RowTopDown {
        RowTopDown {
            batch: Some(Arc::clone(self)),
            start: row.0,
            end: row.1,
        }
    }
}

/// A row's TopDown per part of the view (one per core type): `None` for a part whose core type
/// it never ran on. Reads as a slice; empty where no TopDown is measured. Its TopDowns live in
/// the [`Batch`] of the rows they were evaluated with.
#[derive(Clone, Debug, Default)]
pub struct RowTopDown {
    batch: Option<Arc<Batch>>,
    start: u32,
    end: u32,
}

impl std::ops::Deref for RowTopDown {
    type Target = [Option<TopDown>];
    fn deref(&self) -> &[Option<TopDown>] {
        self.batch
            .as_deref()
            .and_then(|batch| batch.parts.get(self.start as usize..self.end as usize))
            .unwrap_or_default()
    }
}

impl<'a> IntoIterator for &'a RowTopDown {
    type Item = &'a Option<TopDown>;
    type IntoIter = std::slice::Iter<'a, Option<TopDown>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<Vec<Option<TopDown>>> for RowTopDown {
    /// TopDowns made one at a time (tests, a single count): a batch of their own.
    fn from(parts: Vec<Option<TopDown>>) -> Self {
        let end = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        Self {
            batch: Some(Arc::new(Batch { parts })),
            start: 0,
            end,
        }
    }
}

impl BoundView<'_> {
    /// Evaluates a row's TopDown per part from its counters (one per slot of the bound set)
    /// into this view's batch; its place there, for the batch [`BoundView::finish`] returns.
    /// The nodes go into buffers shared by many rows: no allocation per row (but for nodes
    /// outside [0, 1], which carry their inputs' names).
    pub fn evaluate(&self, counters: &[CounterValue]) -> BatchRow {
        // A counter enabled but never running (its group never got the PMU) has no count: the
        // nodes that read it are not computed, never computed from a 0.
        let mut values = self.values.borrow_mut();
        values.clear();
        values.extend(counters.iter().map(CounterValue::scaled));
        let values = &*values;
        let literals = self.view.literals();
        let mut batch = self.batch.borrow_mut();
        let first = batch.parts.len();
        for (part, bound) in self.view.parts.iter().zip(&self.parts) {
            let most = bound.scratch.borrow().nodes();
            let (chunk, nodes) = batch.chunk(most);
            let counts = BoundCounts {
                slots: &bound.slots,
                values,
                literals,
            };
            let start = nodes.len();
            let mut bottleneck = part.model.evaluate_into(
                &counts,
                self.view.level,
                &mut bound.scratch.borrow_mut(),
                nodes,
            );
            retain_from(nodes, start, |n| n.value.is_finite());
            let td = &mut nodes[start..];
            // The four Level 1 nodes split the slots: with one of them not computed (an
            // input not counted), no node can be said to be the bottleneck.
            let computed = |order: &Option<u16>| td.iter().any(|n| Some(n.node.order) == *order);
            if !bound.slot_split.iter().all(computed) {
                bottleneck = None;
            }
            // Each node's run %: the least its own inputs ran (a multiplexed counter is
            // scaled by its own enabled/running time; a node is only as sure as its least
            // measured input).
            let running = |slot: usize| counters.get(slot).map(|v| v.reading.running_fraction());
            for node in td.iter_mut() {
                let Ok(at) = bound
                    .reads
                    .binary_search_by_key(&node.node.order, |(order, _)| *order)
                else {
                    continue;
                };
                let slots = &bound.reads[at].1;
                node.run_fraction = slots.iter().filter_map(|&s| running(s)).fold(1.0, f64::min);
                // Inputs that ran only part of the time, in different groups: scaled each
                // on its own, not measured over the same moments.
                let mut groups = slots
                    .iter()
                    .filter(|&&s| running(s).is_some_and(|r| r < 1.0))
                    .filter_map(|&s| self.groups.get(s).copied());
                if let Some(first) = groups.next()
                    && groups.any(|group| group != first)
                {
                    node.multiplexed_apart = true;
                }
            }
            // Values stay as the formulas give them; those outside [0, 1] are flagged with
            // the counts behind them.
            let count = |event: &str| {
                let slot = *bound.index.get(event)?;
                values.get(slot).copied().flatten()
            };
            let out_of_range = Model::out_of_range(td, &bound.node_inputs, count);
            let part = (!td.is_empty()).then_some(PendingPart {
                chunk,
                nodes: start..nodes.len(),
                bottleneck,
                out_of_range,
            });
            batch.parts.push(part);
        }
        BatchRow(index(first), index(batch.parts.len()))
    }

    /// The rows evaluated, their nodes in shared buffers.
    pub fn finish(self) -> Arc<Batch> {
        let Pending { chunks, parts } = self.batch.into_inner();
        let chunks: Vec<Arc<Vec<NodeValue>>> = chunks.into_iter().map(Arc::new).collect();
        let parts = parts
            .into_iter()
            .map(|part| {
                let part = part?;
                Some(TopDown {
                    nodes: NodeValues::shared(chunks.get(part.chunk)?, part.nodes)?,
                    bottleneck: part.bottleneck,
                    out_of_range: part.out_of_range,
                })
            })
            .collect();
        Arc::new(Batch { parts })
    }
}

/// An index into a batch (which never holds 4 G entries: a window's rows times parts).
fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// Keeps, of `nodes[start..]`, those `keep` says, in order.
fn retain_from(nodes: &mut Vec<NodeValue>, start: usize, keep: impl Fn(&NodeValue) -> bool) {
    let mut kept = start;
    for i in start..nodes.len() {
        if keep(&nodes[i]) {
            nodes.swap(kept, i);
            kept += 1;
        }
    }
    nodes.truncate(kept);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        pmu::{
            counter_set::{Counter, EventAttr, Unit},
            sysfs::SysRoot,
        },
        tma::plan::topdown_set,
    };

    /// The leaders of the Ice Lake Level 2 set's two groups of general counters (the ones the
    /// kernel multiplexes), in slot order.
    fn multiplexed_leaders(set: &CounterSet) -> Vec<usize> {
        let leaders: Vec<usize> = (0..set.counters.len())
            .filter(|&i| {
                let c = &set.counters[i];
                c.attr.leader.is_none()
                    && !c.attr.pinned
                    && set.counters.iter().any(|m| m.attr.leader == Some(i))
            })
            .collect();
        assert_eq!(leaders.len(), 2, "two multiplexed groups");
        leaders
    }

    /// Ice Lake Level 2 on its fixture: the general-counter events are two groups the kernel
    /// multiplexes (8 counters, 15 events), slots and its metrics are pinned, fixed counters
    /// run all the time. Synthetic readings whose true counts are known: each group counted
    /// half of the thread's time (raw = true x running / enabled). Scaled back, every node
    /// equals its value from the true counts; Memory and Core Bound, whose inputs are in both
    /// groups, are said to be multiplexed apart; no other node is.
    #[test]
    fn multiplexed_groups_scale_back_per_thread_and_nodes_across_them_are_marked() {
        let model = Model::named("icelake").unwrap();
        let set = topdown_set(&SysRoot::fixture("icelake"), "cpu", &model, 2).unwrap();
        let enabled = 2_000_000_000u64;
        // True counts: distinct and plausible (slots well above every metric).
        let truth: Vec<u64> = (0..set.counters.len())
            .map(|i| match set.counters[i].name.as_str() {
                "TOPDOWN.SLOTS" => 40_000_000_000,
                name if name.starts_with("topdown-") => 5_000_000_000 + i as u64 * 1_000_000,
                _ => 300_000_000 + i as u64 * 7_919_000,
            })
            .collect();
        // Group leaders among the general counters, in slot order: the first runs the first
        // half, the second the second half; everything else all the time.
        let leaders = multiplexed_leaders(&set);
        let running = |i: usize| {
            let group = set.counters[i].attr.leader.unwrap_or(i);
            if leaders.contains(&group) {
                enabled / 2
            } else {
                enabled
            }
        };
        let measured: Vec<CounterValue> = truth
            .iter()
            .enumerate()
            .map(|(i, &count)| {
                CounterValue::new(
                    (u128::from(count) * u128::from(running(i)) / u128::from(enabled)) as u64,
                    enabled,
                    running(i),
                )
            })
            .collect();
        let exact: Vec<CounterValue> = truth
            .iter()
            .map(|&count| CounterValue::new(count, enabled, enabled))
            .collect();
        let view = TopdownView::single(model, 2, 5, false);
        let scaled = view.of(&set, &measured)[0].clone().unwrap();
        let true_td = view.of(&set, &exact)[0].clone().unwrap();
        assert!(true_td.nodes.len() >= 12);
        for node in &true_td.nodes {
            let back = scaled.value(node.node.name).unwrap();
            assert!(
                (back - node.value).abs() <= 1e-9 * node.value.abs().max(1.0),
                "{}: {back} vs {}",
                node.node.name,
                node.value
            );
        }
        assert_eq!(
            scaled.multiplexed_apart().collect::<Vec<_>>(),
            ["tma_memory_bound", "tma_core_bound"]
        );
        assert_eq!(
            true_td.multiplexed_apart().count(),
            0,
            "nothing multiplexed"
        );
        let run = |name: &str| {
            scaled
                .nodes
                .iter()
                .find(|n| n.node.name == name)
                .unwrap()
                .run_fraction
        };
        assert!((run("tma_memory_bound") - 0.5).abs() < 1e-12);
        assert!(
            (run("tma_frontend_bound") - 0.5).abs() < 1e-12,
            "UOP_DROPPING's group"
        );

        // The second group never got the PMU: the nodes reading it are not computed (no value
        // from a count of 0); the others still equal their true values.
        let starved: Vec<CounterValue> = measured
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let group = set.counters[i].attr.leader.unwrap_or(i);
                if group == leaders[1] {
                    CounterValue {
                        silent: value.silent,
                        ..CounterValue::new(0, value.reading.enabled_ns, 0)
                    }
                } else {
                    *value
                }
            })
            .collect();
        let partial = view.of(&set, &starved)[0].clone().unwrap();
        assert_eq!(partial.value("tma_memory_bound"), None);
        assert_eq!(partial.value("tma_heavy_operations"), None);
        assert_eq!(
            partial.value("tma_retiring"),
            true_td.value("tma_retiring"),
            "PERF_METRICS nodes are pinned"
        );
    }

    /// A window's rows evaluated into one batch: each row's TopDown is the one it gets
    /// evaluated alone (nodes not computed left out, multiplexed ones marked, run fractions),
    /// and the batch allocates a buffer per many rows, never per row.
    #[test]
    fn rows_evaluated_in_one_batch_are_each_their_own_and_allocate_nothing_per_row() {
        let model = Model::named("icelake").unwrap();
        let set = topdown_set(&SysRoot::fixture("icelake"), "cpu", &model, 2).unwrap();
        let leaders = multiplexed_leaders(&set);
        let group = |i: usize| set.counters[i].attr.leader.unwrap_or(i);
        // Rows of distinct, plausible counts (slots well above every metric: no node out of
        // range); every third row's second group never ran (the nodes reading it are not
        // computed), every other row's groups ran half the time each (nodes reading both are
        // multiplexed apart).
        let enabled = 1_000_000_000u64;
        let rows: Vec<Vec<CounterValue>> = (0..2_000u64)
            .map(|row| {
                (0..set.counters.len())
                    .map(|i| {
                        let running = match (leaders.iter().position(|&l| l == group(i)), row) {
                            (Some(1), row) if row % 3 == 0 => 0,
                            (Some(_), row) if row % 2 == 1 => enabled / 2,
                            _ => enabled,
                        };
                        let truth = match set.counters[i].name.as_str() {
                            "TOPDOWN.SLOTS" => 40_000_000_000,
                            name if name.starts_with("topdown-") => 5_000_000_000 + i as u64,
                            _ => 300_000_000 + i as u64 * 7_919_000,
                        } / 100
                            * (100 + row % 50);
                        let raw = u128::from(truth) * u128::from(running) / u128::from(enabled);
                        CounterValue::new(raw as u64, enabled, running)
                    })
                    .collect()
            })
            .collect();
        let view = TopdownView::single(model, 2, 5, false);
        let bound = view.bind(&set);
        let _ = bound.evaluate(&rows[0]);
        let (at, allocations) = crate::allocations::count(|| {
            let at: Vec<BatchRow> = rows[1..].iter().map(|c| bound.evaluate(c)).collect();
            (at, bound.finish())
        });
        let (at, batch) = at;
        // A buffer of nodes per ~70 rows (64 KiB of ~13 nodes of 72 bytes), shared as one
        // `Arc` each, and the list of parts growing: 64 for these 1,999 rows, where a `Vec`
        // per row and part made two per row.
        assert!(
            allocations < rows.len() / 20,
            "{allocations} allocations for {} rows",
            rows.len() - 1
        );
        let (mut marked, mut short) = (0, 0);
        for (counters, at) in rows[1..].iter().zip(at) {
            let alone = view.of(&set, counters);
            let batched = batch.row(at);
            assert_eq!(&*batched, &*alone);
            let td = batched[0].as_ref().unwrap();
            assert!(td.out_of_range.is_empty(), "{:?}", td.out_of_range);
            marked += usize::from(td.multiplexed_apart().count() > 0);
            short += usize::from(td.value("tma_memory_bound").is_none());
        }
        // Rows 1, 3, 5, ... ran multiplexed; rows 3, 6, 9, ... never ran the second group.
        assert_eq!(
            (marked, short),
            (1_000 - 333, 666),
            "{marked} marked, {short} short"
        );
    }

    /// `#has_pmem` is the measured machine's, carried by the view (and the recording), never
    /// read from the machine that evaluates: Sapphire Rapids' `tma_dram_bound` takes persistent
    /// memory's share out only where the view says it had some.
    #[test]
    fn persistent_memory_comes_from_the_view() {
        let model = Model::named("sapphirerapids").unwrap();
        let mut set = CounterSet::software("test".into());
        let mut counts = Vec::new();
        for (i, event) in model.events.iter().enumerate() {
            set.counters.push(Counter {
                name: (*event).to_owned(),
                unit: Unit::Events,
                attr: EventAttr::default(),
                cpus: None,
            });
            // Distinct, plausible counts; the PMM loads many, so pmm_bound is not 0.
            let raw = if event.contains("PMM") {
                50_000_000
            } else {
                1_000_000_000 + 7_919 * i as u64
            };
            counts.push(CounterValue::new(raw, 1_000, 1_000));
        }
        let mut view = TopdownView::single(model, 3, 6, false);
        let dram = |view: &TopdownView| {
            view.of(&set, &counts)[0]
                .as_ref()
                .and_then(|td| td.value("tma_dram_bound"))
                .unwrap()
        };
        let without = dram(&view);
        view.has_pmem = true;
        let with = dram(&view);
        assert!(with < without, "pmm's share taken out: {with} vs {without}");
    }
}
