//! TopDown's plan: which counters a model needs at a level, as a counter set encoded for this
//! machine's core PMU (TopDown reads `pmu`'s counter sets; `pmu` knows nothing of TopDown).
//!
//! PERF_METRICS events (`topdown-*`) go in one group led by `slots`, pinned, as the kernel
//! requires; every other event is its own group, so the kernel may multiplex it and its
//! enabled/running times scale it. Every event is resolved as `-e` resolves it: the PMU's sysfs
//! aliases (`slots`, `topdown-*`, Arm's events) and the CPU's generated event table.

use anyhow::{Context as _, Result, bail};

use super::Model;
use crate::pmu::{
    counter_set::{Counter, CounterSet},
    event_spec::EventResolver,
    event_table::EventTable,
    groups::{self, GroupPlan, Place},
    sysfs::SysRoot,
};

/// The PERF_METRICS members in the order perf opens them.
const METRICS_ORDER: [&str; 8] = [
    "topdown-retiring",
    "topdown-bad-spec",
    "topdown-fe-bound",
    "topdown-be-bound",
    "topdown-heavy-ops",
    "topdown-br-mispredict",
    "topdown-fetch-lat",
    "topdown-mem-bound",
];

/// The counter set that measures `model` down to `level` on core PMU `pmu_name`.
pub fn topdown_set(sys: &SysRoot, pmu_name: &str, model: &Model, level: u8) -> Result<CounterSet> {
    checked(
        build(sys, pmu_name, model, level, model.events_for_level(level))?,
        level,
    )
}

/// The Level 3 set of `model` on `pmu_name` that drills down only under the Level 2 nodes
/// `expand` (see [`Model::drilldown_events`]).
pub fn drilldown_set(
    sys: &SysRoot,
    pmu_name: &str,
    model: &Model,
    expand: &[String],
) -> Result<CounterSet> {
    let events = model.drilldown_events(expand)?;
    checked(build(sys, pmu_name, model, 3, &events)?, 3)
}

/// One core type of a hybrid CPU.
#[derive(Clone, Debug)]
pub struct HybridPart<'a> {
    /// Its core PMU (`cpu_core`, `cpu_atom`).
    pub pmu: &'a str,
    /// Its CPUs, as the PMU lists them (`None`: every CPU).
    pub cpus: Option<Vec<u32>>,
    /// Its TopDown model.
    pub model: Model,
}

/// The set for a hybrid part: each core type's counters, named
/// `{pmu}/{event}` and opened only on that type's CPUs (`parts`). With `nodes` (at Level 3),
/// each core type drills down under those of them its model has with
/// Level 3 nodes under them (E-core models mostly have none: their Level 2 then).
pub fn hybrid_topdown_set(
    sys: &SysRoot,
    parts: &[HybridPart<'_>],
    level: u8,
    nodes: &[String],
) -> Result<CounterSet> {
    let mut set = CounterSet::empty("topdown", String::new());
    let mut reasons = Vec::new();
    let mut drilled = false;
    for HybridPart { pmu, cpus, model } in parts {
        let events = if nodes.is_empty() {
            model.events_for_level(level).to_vec()
        } else {
            let own: Vec<String> = nodes
                .iter()
                .filter(|n| model.drilldown_events(std::slice::from_ref(*n)).is_ok())
                .cloned()
                .collect();
            drilled |= !own.is_empty();
            model.drilldown_events(&own)?
        };
        let part = build(sys, pmu, model, level, &events)?;
        let offset = set.counters.len();
        for mut counter in part.counters {
            counter.name = format!("{pmu}/{}", counter.name);
            counter.cpus.clone_from(cpus);
            counter.attr.leader = counter.attr.leader.map(|leader| leader + offset);
            set.counters.push(counter);
        }
        reasons.push(format!("{pmu}: model {}", model.name));
    }
    if let (false, Some(HybridPart { model, .. })) = (nodes.is_empty() || drilled, parts.first()) {
        // No core type has them: the first one's error says which nodes it has.
        model.drilldown_events(nodes)?;
    }
    set.reason = format!("hybrid, {}, level {level}", reasons.join("; "));
    checked(set, level)
}

fn checked(mut set: CounterSet, level: u8) -> Result<CounterSet> {
    if set.counters.len() > CounterSet::MAX {
        bail!(
            "TopDown level {level} needs {} counters per CPU here, more than the {} a per-thread \
             set holds: use a lower --td-level, drill down under fewer nodes \
             (--nodes), or `topdown-bpf analyze` on a perf stat recording",
            set.counters.len(),
            CounterSet::MAX
        );
    }
    set.name = "topdown";
    Ok(set)
}

fn build(
    sys: &SysRoot,
    pmu_name: &str,
    model: &Model,
    level: u8,
    events: &[&'static str],
) -> Result<CounterSet> {
    if sys.pmu(pmu_name)?.is_none() {
        bail!("this machine has no `{pmu_name}` PMU");
    }
    let resolver = EventResolver::new(sys, Some(pmu_name), EventTable::for_model(model.name))?;
    let counter = |formula: &str, perf: &str| -> Result<Counter> {
        let mut counter = resolver.resolve(perf).with_context(|| {
            format!(
                "model {} needs {formula}, which cannot be encoded here",
                model.name
            )
        })?;
        formula.clone_into(&mut counter.name);
        Ok(counter)
    };
    let mut set = CounterSet::empty("topdown", String::new());
    let metrics: Vec<&str> = METRICS_ORDER
        .iter()
        .copied()
        .filter(|m| events.contains(m))
        .collect();
    if !metrics.is_empty() {
        let leader = set.counters.len();
        let mut slots = counter("TOPDOWN.SLOTS", &format!("{pmu_name}/slots/"))?;
        slots.attr.pinned = true;
        set.counters.push(slots);
        for metric in &metrics {
            let mut member = counter(metric, &format!("{pmu_name}/{metric}/"))?;
            member.attr.leader = Some(leader);
            set.counters.push(member);
        }
    }
    // `cpu@NAME,cmask=1,edge@` (`cpu_core@...@` in hybrid models) is perf's
    // `cpu/NAME,cmask=1,edge/` on this core PMU.
    let spelled = |event: &str| match with_terms(event) {
        Some(inner) => format!("{pmu_name}/{inner}/"),
        None => event.to_owned(),
    };
    let rest: Vec<&'static str> = events
        .iter()
        .copied()
        .filter(|e| !metrics.contains(e) && !(*e == "TOPDOWN.SLOTS" && !metrics.is_empty()))
        .collect();
    // General-counter events in the groups the kernel can schedule (see `groups`); events on
    // fixed counters, and those the data gives no counters for, each on their own.
    let plan = level_groups(model, level, &rest);
    for group in &plan.groups {
        let leader = set.counters.len();
        for (i, event) in group.iter().enumerate() {
            let mut member = counter(event, &spelled(event))?;
            member.attr.leader = (i > 0).then_some(leader);
            set.counters.push(member);
        }
    }
    for &event in &rest {
        if !plan.groups.iter().flatten().any(|e| *e == event) {
            set.counters.push(counter(event, &spelled(event))?);
        }
    }
    set.reason = format!("model {}: {}, level {level}", model.name, model.description);
    Ok(set)
}

/// `NAME,cmask=1` of a formula's `pmu@NAME,cmask=1@` (any core PMU's name before the `@`).
fn with_terms(event: &str) -> Option<&str> {
    let (pmu, rest) = event.split_once('@')?;
    (!pmu.is_empty() && !pmu.contains('.'))
        .then(|| rest.strip_suffix('@'))
        .flatten()
}

/// The general-counter groups of `model` at `level` for `events` (the level's events less the
/// PERF_METRICS group): nodes in tree order, each with the events it reads, then the events
/// only thresholds read. Counter lists come from the model's event table; a model without one
/// (Arm) plans no groups.
pub fn level_groups(model: &Model, level: u8, events: &[&'static str]) -> GroupPlan {
    let Some(table) = EventTable::for_model(model.name) else {
        return GroupPlan::default();
    };
    let general = |event: &str| {
        let base =
            with_terms(event).map_or(event, |inner| inner.split(',').next().unwrap_or(inner));
        match Place::parse(table.counters(base)?)? {
            Place::General(mask) => Some(mask),
            Place::Fixed(_) => None,
        }
    };
    // Groups are planned for per-thread sets, where `#smt_on` is off (per-core sets of SMT
    // models count the `*_ANY` events too; they then fall to the events no node reads).
    let reads = model.node_inputs(false, false);
    let nodes: Vec<(&'static str, Vec<&'static str>)> = model
        .nodes(level)
        .iter()
        .filter_map(|node| {
            let (_, inputs) = reads.iter().find(|(n, _)| *n == node.name)?;
            Some((
                node.name,
                inputs
                    .iter()
                    .copied()
                    .filter(|e| events.contains(e))
                    .collect(),
            ))
        })
        .collect();
    let others: Vec<&'static str> = events
        .iter()
        .copied()
        .filter(|e| !nodes.iter().any(|(_, inputs)| inputs.contains(e)))
        .collect();
    groups::plan(&nodes, &others, general)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::{
        collect::perf_open::attr_for,
        pmu::{
            machine::Machine,
            topdown_model::{Selection, select},
        },
    };

    /// One opened counter as the tests see it: name, type, config, config1, pinned, leader.
    type Row = (String, u32, u64, u64, bool, Option<usize>);

    /// The set the machine gets for its first core PMU at `level`, as (name, type, config,
    /// config1, pinned, leader) per counter, checked through the exact perf_event_attr.
    fn attrs(machine: &str, pmu: &str, level: u8) -> Result<Vec<Row>> {
        let sys = SysRoot::fixture(machine);
        let m = Machine::read(&sys)?;
        let model = match select(&m.cpu, pmu, m.smt_active) {
            Selection::Model(name) => Model::named(name)?,
            other => bail!("{other:?}"),
        };
        let set = topdown_set(&sys, pmu, &model, level)?;
        Ok(set
            .counters
            .iter()
            .map(|c| {
                let attr = attr_for(&c.attr, c.attr.leader.is_none());
                assert_eq!(
                    attr.read_format, 0b11,
                    "{}: enabled and running times",
                    c.name
                );
                assert_eq!(
                    attr.disabled(),
                    u64::from(c.attr.leader.is_none()),
                    "{}",
                    c.name
                );
                // SAFETY: a plain u64 union member.
                let config1 = unsafe { attr.__bindgen_anon_3.config1 };
                (
                    c.name.clone(),
                    attr.type_,
                    attr.config,
                    config1,
                    attr.pinned() == 1,
                    c.attr.leader,
                )
            })
            .collect())
    }

    fn row(name: &str, ty: u32, config: u64, pinned: bool, leader: Option<usize>) -> Row {
        (name.to_owned(), ty, config, 0, pinned, leader)
    }

    #[test]
    fn sapphire_rapids_level_two_is_one_pinned_slots_group() {
        let got = attrs("sapphirerapids", "cpu", 2).unwrap();
        let mut want = vec![row("TOPDOWN.SLOTS", 4, 0x0400, true, None)];
        for (i, m) in METRICS_ORDER.iter().enumerate() {
            want.push(row(m, 4, 0x8000 + (i as u64) * 0x100, false, Some(0)));
        }
        // The one general-counter event leads its own group; fixed-counter events stand alone.
        want.push(row("INT_MISC.UOP_DROPPING", 4, 0x10ad, false, None));
        want.push(row("CPU_CLK_UNHALTED.THREAD", 4, 0x3c, false, None));
        want.push(row("INST_RETIRED.ANY", 4, 0xc0, false, None));
        assert_eq!(got, want);
        // Level 1 needs only the four L1 metrics: retiring's threshold looks at heavy
        // operations, but thresholds that reach deeper are left to Level 2.
        let l1: Vec<String> = attrs("sapphirerapids", "cpu", 1)
            .unwrap()
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(
            l1,
            [
                "TOPDOWN.SLOTS",
                "topdown-retiring",
                "topdown-bad-spec",
                "topdown-fe-bound",
                "topdown-be-bound",
                "INT_MISC.UOP_DROPPING"
            ]
        );
    }

    #[test]
    fn ice_lake_level_one_adds_recovery_cycles_with_cmask_and_edge() {
        let got = attrs("icelake", "cpu", 1).unwrap();
        let names: Vec<&str> = got.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "TOPDOWN.SLOTS",
                "topdown-retiring",
                "topdown-bad-spec",
                "topdown-fe-bound",
                "topdown-be-bound",
                "INT_MISC.UOP_DROPPING",
                "cpu@INT_MISC.RECOVERY_CYCLES,cmask=1,edge@"
            ]
        );
        let recovery = got.last().unwrap();
        assert_eq!(recovery.2, 0x0d | 0x01 << 8 | 1 << 18 | 1 << 24);
        assert_eq!(got[0], row("TOPDOWN.SLOTS", 4, 0x0400, true, None));
        // Both general-counter events are read by Bad Speculation: one group, UOP_DROPPING
        // leading.
        assert_eq!(got[5].5, None);
        assert_eq!(got[6].5, Some(5));
        // ICL Level 2: every event of the model once (22, slots included); the
        // general-counter events in groups of at most 8 (ICL's counters 0-7, some 0-3 only),
        // none pinned; each node's inputs in one group (no node split).
        let l2 = attrs("icelake", "cpu", 2).unwrap();
        assert_eq!(
            l2.len(),
            Model::named("icelake").unwrap().level2_events.len()
        );
        assert_eq!(l2.len(), 22);
        assert!(l2[5..].iter().all(|r| !r.4), "only slots is pinned");
        let mut sizes: HashMap<usize, usize> = HashMap::new();
        for (i, r) in l2.iter().enumerate().skip(5) {
            *sizes.entry(r.5.unwrap_or(i)).or_default() += 1;
        }
        assert!(sizes.values().all(|&n| n <= 8), "{sizes:?}");
        let model = Model::named("icelake").unwrap();
        let rest: Vec<&'static str> = model
            .level2_events
            .iter()
            .copied()
            .filter(|e| !e.starts_with("topdown-") && *e != "TOPDOWN.SLOTS")
            .collect();
        // Memory and Core Bound read INT_MISC.RECOVERY_CYCLES (through Backend Bound), already
        // in Bad Speculation's group of five, which has no room for their five more (8
        // counters): they are split, and said so when the groups are multiplexed.
        assert_eq!(
            level_groups(&model, 2, &rest).split,
            ["tma_memory_bound", "tma_core_bound"]
        );
        // More than a set holds is a clear error, never a dropped node.
        let mut set = CounterSet::software(String::new());
        let clock = CounterSet::software(String::new())
            .with_cpu_clock()
            .counters[0]
            .clone();
        set.counters.resize(CounterSet::MAX + 1, clock);
        let error = checked(set, 2).unwrap_err().to_string();
        assert!(
            error.contains("32 counters") && error.contains("more than the 31"),
            "{error}"
        );
    }

    #[test]
    fn alder_lake_cores_and_atoms_get_their_own_pmu_and_model() {
        let core = attrs("alderlake", "cpu_core", 1).unwrap();
        assert!(core.iter().all(|r| r.1 == 4), "cpu_core type 4: {core:?}");
        let atom = attrs("alderlake", "cpu_atom", 1).unwrap();
        // Frontend reads FE; Bad Speculation reads FE, BE and RET: one group led by FE. The
        // clock is a fixed counter, alone.
        let want = [
            row("TOPDOWN_FE_BOUND.ALL", 10, 0x71, false, None),
            row("TOPDOWN_BE_BOUND.ALL", 10, 0x74, false, Some(0)),
            row("TOPDOWN_RETIRING.ALL", 10, 0xc2, false, Some(0)),
            row("CPU_CLK_UNHALTED.CORE", 10, 0x3c, false, None),
        ];
        assert_eq!(atom, want);
        let machine = Machine::read(&SysRoot::fixture("alderlake")).unwrap();
        assert_eq!(
            machine.core_pmu("cpu_atom").unwrap().cpus.as_deref(),
            Some(&[16, 17, 18, 19, 20, 21, 22, 23][..])
        );
    }

    /// The Alder Lake fixture and its core types: PMU, CPUs, model.
    fn alder_lake_parts() -> (SysRoot, Vec<HybridPart<'static>>) {
        let sys = SysRoot::fixture("alderlake");
        let machine = Machine::read(&sys).unwrap();
        let parts = ["cpu_core", "cpu_atom"]
            .into_iter()
            .map(|pmu| {
                let Selection::Model(model) = select(&machine.cpu, pmu, true) else {
                    panic!("{pmu} has a model")
                };
                HybridPart {
                    pmu,
                    cpus: machine.core_pmu(pmu).unwrap().cpus.clone(),
                    model: Model::named(model).unwrap(),
                }
            })
            .collect();
        (sys, parts)
    }

    #[test]
    fn alder_lake_hybrid_set_keeps_core_types_in_their_own_slots() {
        let (sys, parts) = alder_lake_parts();
        let set = hybrid_topdown_set(&sys, &parts, 1, &[]).unwrap();
        let names: Vec<&str> = set.names().collect();
        assert_eq!(
            names,
            [
                "cpu_core/TOPDOWN.SLOTS",
                "cpu_core/topdown-retiring",
                "cpu_core/topdown-bad-spec",
                "cpu_core/topdown-fe-bound",
                "cpu_core/topdown-be-bound",
                "cpu_core/INT_MISC.UOP_DROPPING",
                "cpu_atom/TOPDOWN_FE_BOUND.ALL",
                "cpu_atom/TOPDOWN_BE_BOUND.ALL",
                "cpu_atom/TOPDOWN_RETIRING.ALL",
                "cpu_atom/CPU_CLK_UNHALTED.CORE",
            ]
        );
        assert!(set.counters[1..5].iter().all(|c| c.attr.leader == Some(0)));
        assert!(set.counters[0].attr.pinned);
        assert!(set.counters[6..].iter().all(|c| c.attr.pmu_type == 10));
        // The E-core group's leaders are moved past the P-core counters: FE leads at 6.
        let leaders: Vec<Option<usize>> = set.counters[6..].iter().map(|c| c.attr.leader).collect();
        assert_eq!(leaders, [None, Some(6), Some(6), None]);
        // P-cores read the on-CPU clock and the cpu_core slots, E-cores the clock and cpu_atom's.
        assert_eq!(set.slot_mask(0), 0b000_0111_1111);
        assert_eq!(set.slot_mask(16), 0b111_1000_0001);
    }

    /// Drilling down on a hybrid part (perf's adl-metrics.json): under core bound or memory
    /// bound, the P-cores (Golden Cove) add their Level 3 nodes' events while the E-cores
    /// (Gracemont) have no Level 3 under those nodes and keep their Level 2 (9): 25 counters
    /// fit. Under every Level 2 node, 47: more than a set holds, one line. A node no part has
    /// is an error in the first part's words.
    #[test]
    fn hybrid_parts_drill_down_where_their_model_has_the_node() {
        let (sys, parts) = alder_lake_parts();
        let set = hybrid_topdown_set(&sys, &parts, 3, &["core_bound".to_owned()]).unwrap();
        assert_eq!(set.counters.len(), 25);
        let atoms = set.names().filter(|n| n.starts_with("cpu_atom/")).count();
        assert_eq!(
            atoms,
            Model::named("alderlake_atom").unwrap().level2_events.len()
        );
        let memory = hybrid_topdown_set(&sys, &parts, 3, &["memory_bound".to_owned()]).unwrap();
        assert_eq!(memory.counters.len(), 25);
        let every: Vec<String> = [
            "memory_bound",
            "core_bound",
            "fetch_latency",
            "fetch_bandwidth",
        ]
        .map(str::to_owned)
        .to_vec();
        let error = hybrid_topdown_set(&sys, &parts, 3, &every)
            .unwrap_err()
            .to_string();
        assert!(error.contains("47 counters"), "{error}");
        let error = hybrid_topdown_set(&sys, &parts, 3, &["nope".to_owned()])
            .unwrap_err()
            .to_string();
        assert!(error.contains("not a Level 2 node"), "{error}");
    }

    #[test]
    fn skylake_sp_smt_decides_between_per_thread_and_per_core() {
        // The fixtures are model 0x55 stepping 4: Skylake-SP, perf's skx-metrics.json.
        // Encodings from SKX's event file (data/README.md lists them): the `*_ANY`
        // forms add AnyThread (bit 21); both branches of `... if #SMT_on else ...` are counted.
        // Per thread, perf's core clocks are `#core_wide < 1`'s estimate, which reads
        // ONE_THREAD_ACTIVE and REF_XCLK. Groups: those two with Frontend's IDQ event and the
        // recovery cycles (SKX's counters 0-3: four fit); Bad Speculation's uops with
        // RECOVERY_CYCLES_ANY (read with SMT on); then the fixed-counter clocks.
        let any = 1 << 21;
        let want = [
            row("CPU_CLK_UNHALTED.ONE_THREAD_ACTIVE", 4, 0x023c, false, None),
            row("CPU_CLK_UNHALTED.REF_XCLK", 4, 0x013c, false, Some(0)),
            row("IDQ_UOPS_NOT_DELIVERED.CORE", 4, 0x019c, false, Some(0)),
            row("INT_MISC.RECOVERY_CYCLES", 4, 0x010d, false, Some(0)),
            row("UOPS_ISSUED.ANY", 4, 0x010e, false, None),
            row("UOPS_RETIRED.RETIRE_SLOTS", 4, 0x02c2, false, Some(4)),
            row(
                "INT_MISC.RECOVERY_CYCLES_ANY",
                4,
                0x010d | any,
                false,
                Some(4),
            ),
            row("CPU_CLK_UNHALTED.THREAD", 4, 0x3c, false, None),
            row("CPU_CLK_UNHALTED.THREAD_ANY", 4, 0x3c | any, false, None),
        ];
        assert_eq!(attrs("skylake-smt-off", "cpu", 1).unwrap(), want);
        let on = attrs("skylake-smt-on", "cpu", 1).unwrap_err().to_string();
        assert!(on.contains("PerCoreOnly(\"skylakex\")"), "{on}");
        // Per-core mode: the same model with #smt_on, whose inputs count for the whole core.
        let smt = topdown_set(
            &SysRoot::fixture("skylake-smt-on"),
            "cpu",
            &Model::named("skylakex").unwrap(),
            1,
        )
        .unwrap();
        assert_eq!(smt.counters.len(), want.len());
        // Client Skylake keeps perf's own skylake formulas and the skylake_smt per-core model.
        assert_eq!(
            EventTable::for_model("skylake_smt").unwrap().name,
            "skylake"
        );
    }

    /// Level 1 of a family read from metrics: slots pinned, the four metrics in its group, and
    /// `first` (none where empty) alone.
    fn metric_rows(first: &str) -> Vec<Row> {
        let mut rows = vec![row("TOPDOWN.SLOTS", 4, 0x0400, true, None)];
        for (i, m) in METRICS_ORDER[..4].iter().enumerate() {
            rows.push(row(m, 4, 0x8000 + (i as u64) * 0x100, false, Some(0)));
        }
        rows.extend((!first.is_empty()).then(|| row(first, 4, 0x10ad, false, None)));
        rows
    }

    /// E-cores: every L1 node reads one TOPDOWN_* event and the clock. General-counter
    /// events in node order share one group (Frontend's leads where it is general); the
    /// clock and fixed-counter events (Skymont's FE and RET: fixed counters 5 and 6) stand
    /// alone after them, in name order.
    fn atom_rows(ty: u32, fe: u64, be: u64, ret: u64, names: [&str; 4]) -> Vec<Row> {
        let fixed = |config: u64| config >> 8 != 0 && config & 0xff == 0;
        let all = [
            (names[2], fe),
            (names[0], 0x73),
            (names[1], be),
            (names[3], ret),
        ];
        let mut rows = Vec::new();
        let mut leader = None;
        for (name, config) in all.iter().filter(|(_, c)| !fixed(*c)) {
            rows.push(row(name, ty, *config, false, leader));
            leader = leader.or(Some(0));
        }
        let mut alone: Vec<(&str, u64)> = all
            .iter()
            .copied()
            .filter(|(_, c)| fixed(*c))
            .chain([("CPU_CLK_UNHALTED.CORE", 0x3c)])
            .collect();
        alone.sort_unstable();
        rows.extend(alone.into_iter().map(|(n, c)| row(n, ty, c, false, None)));
        rows
    }

    /// A fixture, its core PMU, the model it selects and its Level 1 set.
    type Case = (&'static str, &'static str, &'static str, Vec<Row>);

    /// The families whose Level 1 reads metrics or TOPDOWN_* events (P-cores, E-cores).
    fn level_one_cases() -> Vec<Case> {
        let all_p = [
            "TOPDOWN_BAD_SPECULATION.ALL_P",
            "TOPDOWN_BE_BOUND.ALL_P",
            "TOPDOWN_FE_BOUND.ALL_P",
            "TOPDOWN_RETIRING.ALL_P",
        ];
        vec![
            (
                "graniterapids",
                "cpu",
                "graniterapids",
                metric_rows("INT_MISC.UOP_DROPPING"),
            ),
            ("lunarlake", "cpu_core", "lunarlake_core", metric_rows("")),
            (
                "lunarlake",
                "cpu_atom",
                "lunarlake_atom",
                atom_rows(
                    10,
                    0x0600,
                    0x02a4,
                    0x0700,
                    [
                        "TOPDOWN_BAD_SPECULATION.ALL_P",
                        "TOPDOWN_BE_BOUND.ALL_P",
                        "TOPDOWN_FE_BOUND.ALL",
                        "TOPDOWN_RETIRING.ALL",
                    ],
                ),
            ),
            (
                "meteorlake",
                "cpu_atom",
                "crestmont",
                atom_rows(10, 0x71, 0x74, 0x72, all_p),
            ),
            (
                "sierraforest",
                "cpu",
                "sierraforest",
                atom_rows(4, 0x71, 0x74, 0x72, all_p),
            ),
        ]
    }

    /// The families whose Level 1 reads plain events into general counters.
    fn level_one_event_cases() -> Vec<Case> {
        vec![
            (
                "tremont",
                "cpu",
                "tremont",
                // Tremont's four counters hold the four TOPDOWN_* events in node order.
                vec![
                    row("TOPDOWN_FE_BOUND.ALL", 4, 0x71, false, None),
                    row("TOPDOWN_BAD_SPECULATION.ALL", 4, 0x0673, false, Some(0)),
                    row("TOPDOWN_BE_BOUND.ALL", 4, 0x74, false, Some(0)),
                    row("TOPDOWN_RETIRING.ALL", 4, 0xc2, false, Some(0)),
                    row("CPU_CLK_UNHALTED.CORE", 4, 0x3c, false, None),
                ],
            ),
            (
                "haswell",
                "cpu",
                "haswell",
                // Grouped as on Skylake-SP (perf's per-thread core clocks, Frontend's event and
                // recovery cycles in four counters; Bad Speculation's uops with the SMT-only
                // RECOVERY_CYCLES_ANY; fixed clocks last).
                vec![
                    row("CPU_CLK_UNHALTED.ONE_THREAD_ACTIVE", 4, 0x023c, false, None),
                    row("CPU_CLK_UNHALTED.REF_XCLK", 4, 0x013c, false, Some(0)),
                    row("IDQ_UOPS_NOT_DELIVERED.CORE", 4, 0x019c, false, Some(0)),
                    // Haswell's recovery cycles are umask 0x03 (0x01 on Skylake-SP), cmask 1.
                    row(
                        "INT_MISC.RECOVERY_CYCLES",
                        4,
                        0x030d | 1 << 24,
                        false,
                        Some(0),
                    ),
                    row("UOPS_ISSUED.ANY", 4, 0x010e, false, None),
                    row("UOPS_RETIRED.RETIRE_SLOTS", 4, 0x02c2, false, Some(4)),
                    row(
                        "INT_MISC.RECOVERY_CYCLES_ANY",
                        4,
                        0x030d | 1 << 21 | 1 << 24,
                        false,
                        Some(4),
                    ),
                    row("CPU_CLK_UNHALTED.THREAD", 4, 0x3c, false, None),
                    row(
                        "CPU_CLK_UNHALTED.THREAD_ANY",
                        4,
                        0x3c | 1 << 21,
                        false,
                        None,
                    ),
                ],
            ),
            (
                "zen5",
                "cpu",
                "zen5",
                // Zen's six counters take every event: the six events are one group, in node
                // order (Frontend's, Bad Speculation's, Backend's, SMT contention's).
                vec![
                    row(
                        "de_no_dispatch_per_slot.no_ops_from_frontend",
                        4,
                        1 << 32 | 0x01 << 8 | 0xa0,
                        false,
                        None,
                    ),
                    row("ls_not_halted_cyc", 4, 0x76, false, Some(0)),
                    row("de_src_op_disp.all", 4, 0x07 << 8 | 0xaa, false, Some(0)),
                    row("ex_ret_ops", 4, 0xc1, false, Some(0)),
                    row(
                        "de_no_dispatch_per_slot.backend_stalls",
                        4,
                        1 << 32 | 0x1e << 8 | 0xa0,
                        false,
                        Some(0),
                    ),
                    row(
                        "de_no_dispatch_per_slot.smt_contention",
                        4,
                        1 << 32 | 0x60 << 8 | 0xa0,
                        false,
                        Some(0),
                    ),
                ],
            ),
        ]
    }

    /// One fixture machine of each family added from Intel's perfmon data, AMD's Zen 5 and
    /// Arm's Neoverse V3: the Level 1 set's exact attrs. Encodings are the data files' (code,
    /// umask; data/README.md lists most of them): AMD's event select bits 8-11 go to
    /// config bits 32-35; Intel's fixed-counter events are encoded as perf's jevents.py
    /// spells them (cycles 0x3c, instructions 0xc0); Skymont's fixed counters 5 and 6 keep
    /// the files' pseudo-encoding (event 0x00, umask = counter + 1), which perf does not rewrite.
    #[test]
    fn each_new_family_gets_its_level_one_events_encoded_from_the_data() {
        for (fixture, pmu, model, want) in
            level_one_cases().into_iter().chain(level_one_event_cases())
        {
            let sys = SysRoot::fixture(fixture);
            let machine = Machine::read(&sys).unwrap();
            assert_eq!(
                select(&machine.cpu, pmu, machine.smt_active),
                Selection::Model(model),
                "{fixture} {pmu}"
            );
            assert_eq!(attrs(fixture, pmu, 1).unwrap(), want, "{fixture} {pmu}");
        }
    }

    /// Level 3 needs more counters than a per-thread set holds: one line that says so.
    #[test]
    fn a_level_past_the_counters_is_one_line_that_says_so() {
        let deep = attrs("graniterapids", "cpu", 3).unwrap_err().to_string();
        assert!(
            deep.contains("level 3") && deep.contains("--nodes"),
            "{deep}"
        );
    }

    #[test]
    fn a_drilldown_under_memory_bound_fits_in_one_group() {
        // Drilling down under Memory Bound fits: slots and its 8 metrics, one group of the six
        // general-counter events (UOP_DROPPING and Memory Bound's five children's).
        let gnr = Model::named("graniterapids").unwrap();
        let drill = drilldown_set(
            &SysRoot::fixture("graniterapids"),
            "cpu",
            &gnr,
            &["memory_bound".into()],
        )
        .unwrap();
        let names: Vec<&str> = drill.names().collect();
        assert_eq!(names.len(), 9 + 6 + 1, "{names:?}");
        assert!(names.contains(&"MEMORY_ACTIVITY.STALLS_L3_MISS"));
        let group: Vec<Option<usize>> = drill.counters[9..15]
            .iter()
            .map(|c| c.attr.leader)
            .collect();
        assert_eq!(group, [None, Some(9), Some(9), Some(9), Some(9), Some(9)]);
    }

    #[test]
    fn tremont_level_two_reads_monuke_as_perf_encodes_it() {
        // Tremont's Level 2 reads TOPDOWN_BAD_SPECULATION.MONUKE
        // (Atom_TMA.csv), which Snow Ridge's event file keeps as a deprecated name of
        // FASTNUKE (0x73/0x02): encoded as perf does.
        let tremont = attrs("tremont", "cpu", 2).unwrap();
        let monuke = tremont
            .iter()
            .find(|r| r.0 == "TOPDOWN_BAD_SPECULATION.MONUKE")
            .unwrap();
        assert_eq!(monuke.2, 0x0273);
    }

    #[test]
    fn neoverse_v3_encodes_stall_frontend_flush_from_the_common_events() {
        // Neoverse V3 reads STALL_FRONTEND_FLUSH, which its sysfs does not list: encoded from
        // perf's common Arm events (0x8162), each event its own group.
        let v3 = attrs("neoverse-v3", "armv8_pmuv3_0", 1).unwrap();
        let flush = v3.iter().find(|r| r.0 == "stall_frontend_flush").unwrap();
        assert_eq!((flush.1, flush.2, flush.5), (8, 0x8162, None));
        assert_eq!(v3.len(), 7);
        assert!(v3.iter().all(|r| r.5.is_none() && !r.4), "{v3:?}");
    }

    /// The CPU table (docs/topdown.md) says how many general-counter groups each model's
    /// levels are opened as: it must say what the planner does.
    #[test]
    fn the_cpu_table_lists_each_models_groups_per_level() {
        let readme = include_str!("../../../docs/topdown.md");
        let table: Vec<&str> = readme
            .lines()
            .skip_while(|l| !l.starts_with("| CPU | model |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        let mut seen = 0;
        for line in table {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let models: Vec<&str> = cells[1].split('`').skip(1).step_by(2).collect();
            for name in models {
                let model = Model::named(name).unwrap();
                let counts: Vec<String> = (1..=3)
                    .map(|level| {
                        let rest: Vec<&'static str> = model
                            .events_for_level(level)
                            .iter()
                            .copied()
                            .filter(|e| !e.starts_with("topdown-") && *e != "TOPDOWN.SLOTS")
                            .collect();
                        level_groups(&model, level, &rest).groups.len().to_string()
                    })
                    .collect();
                // Models whose events name no counters (Arm) plan no groups.
                let expected = if counts.iter().any(|c| c != "0") {
                    counts.join(" / ")
                } else {
                    "- (one group per event)".to_owned()
                };
                assert_eq!(cells[4], expected, "CPU table row of {name}");
                seen += 1;
            }
        }
        assert_eq!(seen, Model::all().count(), "every model has a row");
    }

    #[test]
    fn zen4_and_neoverse_v1_and_goldmont() {
        let zen4 = attrs("zen4", "cpu", 1).unwrap();
        let backend = zen4
            .iter()
            .find(|r| r.0 == "de_no_dispatch_per_slot.backend_stalls")
            .unwrap();
        // EventCode 0x1a0: low byte in bits 0-7, high nibble in bits 32-35.
        assert_eq!(backend.2, 0xa0 | 0x1e << 8 | 1 << 32);
        assert_eq!(zen4.len(), 6);
        let v1 = attrs("neoverse-v1", "armv8_pmuv3_0", 1).unwrap();
        let stall = v1.iter().find(|r| r.0 == "stall_slot").unwrap();
        assert_eq!((stall.1, stall.2), (8, 0x3f));
        assert_eq!(v1.len(), 7);
        let machine = Machine::read(&SysRoot::fixture("neoverse-v1")).unwrap();
        assert_eq!(machine.core_pmu("armv8_pmuv3_0").unwrap().slots, Some(8));
        let goldmont = attrs("goldmont", "cpu", 1).unwrap();
        assert_eq!(
            goldmont,
            // Goldmont's four counters (0-3): Frontend's event, then Bad Speculation's three
            // join it; Backend's RESOURCE_FULL finds no room and leads a second group.
            [
                row("UOPS_NOT_DELIVERED.ANY", 4, 0x9c, false, None),
                row(
                    "ISSUE_SLOTS_NOT_CONSUMED.RECOVERY",
                    4,
                    0x02ca,
                    false,
                    Some(0)
                ),
                row("UOPS_ISSUED.ANY", 4, 0x0e, false, Some(0)),
                row("UOPS_RETIRED.ANY", 4, 0xc2, false, Some(0)),
                row(
                    "ISSUE_SLOTS_NOT_CONSUMED.RESOURCE_FULL",
                    4,
                    0x01ca,
                    false,
                    None
                ),
                row("CPU_CLK_UNHALTED.CORE", 4, 0x3c, false, None),
            ]
        );
    }

    #[test]
    fn a_vm_without_pmu_has_no_core_pmu_and_runs_the_software_set() {
        let sys = SysRoot::fixture("vm-no-pmu");
        let machine = Machine::read(&sys).unwrap();
        assert!(!machine.has_hardware_pmu());
        let set = CounterSet::for_machine(&sys).unwrap();
        assert!(set.counters.is_empty(), "{:?}", set.counters);
        assert!(set.reason.starts_with("no hardware PMU"));
    }
}
