//! The per-thread rows every renderer draws: values computed once, sorted and cut once.

use std::{cmp::Ordering, str::FromStr};

use anyhow::{Result, bail};

use crate::{
    attrib::{Window, cgroups::CgroupNames, usage::CounterValue},
    pmu::counter_set::CounterSet,
    tma::{Model, TopDown, inputs::NamedCounts, node::Node},
};

/// One thread's line in a report.
#[derive(Clone, Debug)]
pub struct Row {
    /// Thread id.
    pub tid: u32,
    /// Process id.
    pub pid: u32,
    /// Thread name.
    pub comm: String,
    /// cgroup path (or `cgroup:<id>` if it could not be named).
    pub cgroup: String,
    /// cgroup2 id.
    pub cgroup_id: u64,
    /// On-CPU nanoseconds.
    pub on_cpu_ns: u64,
    /// On-CPU time as a share of the window's wall time, in percent of one CPU.
    pub cpu_percent: f64,
    /// Switches out.
    pub switches: u64,
    /// Every counter of the set, in slot order.
    pub counters: Vec<CounterValue>,
    /// The thread died.
    pub exited: bool,
    /// TopDown per part of the view (one per core type), from this thread's counts: only the
    /// nodes it measured; `None` for a part whose core type it never ran on.
    pub topdown: Vec<Option<TopDown>>,
    /// Lowest share of its enabled time any counter of the set was running (1.0: never
    /// multiplexed).
    pub run_fraction: f64,
}

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
                (!td.nodes.is_empty()).then_some(td)
            })
            .collect()
    }
}

/// What to sort rows by (descending for numbers, ascending for ids and names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// On-CPU time (the default).
    OnCpu,
    /// Switches out.
    Switches,
    /// Thread id.
    Tid,
    /// Process id.
    Pid,
    /// Thread name.
    Comm,
    /// A counter of the set, or a TopDown node (`tma_backend_bound`), by name.
    Counter(String),
}

impl FromStr for SortKey {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "oncpu" | "on-cpu" | "cpu" | "time" => Self::OnCpu,
            "switches" => Self::Switches,
            "tid" => Self::Tid,
            "pid" => Self::Pid,
            "comm" => Self::Comm,
            other => Self::Counter(other.to_owned()),
        })
    }
}

impl SortKey {
    /// Checks a counter name against the set.
    pub fn validate(&self, set: &CounterSet) -> Result<()> {
        if let Self::Counter(name) = self
            && !set.names().any(|n| n == name)
            && Node::named(name).is_none()
        {
            bail!(
                "unknown sort field `{name}`: use oncpu, switches, tid, pid, comm, a TopDown node \
                 (tma_backend_bound, ...) or a counter ({})",
                set.names().collect::<Vec<_>>().join(", ")
            );
        }
        Ok(())
    }
}

/// How rows are chosen.
#[derive(Clone, Debug)]
pub struct RowOptions {
    /// Sort order.
    pub sort: SortKey,
    /// Keep only the first N rows.
    pub top: Option<usize>,
    /// TopDown per row, when a TopDown set runs.
    pub topdown: Option<TopdownView>,
    /// Also show Level 2 nodes under their thresholds, and the raw counters.
    pub verbose: bool,
}

/// The rows of `window`, sorted and cut; also how many threads there were before the cut.
pub fn rows(
    window: &Window,
    set: &CounterSet,
    cgroups: &mut CgroupNames,
    options: &RowOptions,
) -> (Vec<Row>, usize) {
    cgroups.allow_rescan();
    let wall_ns = window.length.as_nanos().max(1) as f64;
    let mut rows: Vec<Row> = window
        .threads
        .iter()
        .map(|usage| Row {
            tid: usage.tid,
            pid: usage.pid,
            comm: usage.comm.clone(),
            cgroup: cgroups.name(usage.cgroup_id),
            cgroup_id: usage.cgroup_id,
            on_cpu_ns: usage.on_cpu_ns(),
            cpu_percent: usage.on_cpu_ns() as f64 * 100.0 / wall_ns,
            switches: usage.switches,
            counters: usage.counters.clone(),
            exited: usage.exited,
            topdown: options
                .topdown
                .as_ref()
                .map_or_else(Vec::new, |view| view.of(set, &usage.counters)),
            run_fraction: usage
                .counters
                .iter()
                .skip(1)
                .map(CounterValue::running_fraction)
                .fold(1.0, f64::min),
        })
        .collect();
    let counter_index = match &options.sort {
        SortKey::Counter(name) => set.names().position(|n| n == name),
        _ => None,
    };
    rows.sort_by(|a, b| compare(a, b, &options.sort, counter_index).then(a.tid.cmp(&b.tid)));
    let total = rows.len();
    if let Some(top) = options.top {
        rows.truncate(top);
    }
    (rows, total)
}

fn compare(a: &Row, b: &Row, key: &SortKey, counter: Option<usize>) -> Ordering {
    match key {
        SortKey::OnCpu => b.on_cpu_ns.cmp(&a.on_cpu_ns),
        SortKey::Switches => b.switches.cmp(&a.switches),
        SortKey::Tid => a.tid.cmp(&b.tid),
        SortKey::Pid => a.pid.cmp(&b.pid),
        SortKey::Comm => a.comm.cmp(&b.comm),
        SortKey::Counter(name) => {
            let value = |r: &Row| match counter {
                Some(i) => r.counters.get(i).map_or(0.0, CounterValue::scaled),
                None => r
                    .topdown
                    .iter()
                    .flatten()
                    .filter_map(|td| td.value(name))
                    .fold(f64::NEG_INFINITY, f64::max),
            };
            value(b).total_cmp(&value(a))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{
        attrib::usage::ThreadUsage,
        collect::Stats,
        pmu::{counter_set::CounterSet, sysfs::SysRoot},
    };

    fn usage(tid: u32, ns: u64, switches: u64) -> ThreadUsage {
        ThreadUsage {
            tid,
            pid: 1,
            comm: format!("t{tid}"),
            cgroup_id: 1,
            switches,
            counters: vec![CounterValue {
                raw: ns,
                enabled_ns: ns,
                running_ns: ns,
            }],
            exited: false,
        }
    }

    #[test]
    fn sorts_cuts_and_computes_cpu_percent() {
        let window = Window {
            start: Duration::ZERO,
            length: Duration::from_secs(2),
            threads: vec![
                usage(1, 500_000_000, 9),
                usage(2, 2_000_000_000, 1),
                usage(3, 0, 4),
            ],
            idle: vec![],
            stats: Stats::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let set = CounterSet::software(&SysRoot::at(dir.path()), String::new()).unwrap();
        let mut names = CgroupNames::at(None);
        let opts = RowOptions {
            sort: SortKey::OnCpu,
            top: Some(2),
            topdown: None,
            verbose: false,
        };
        let (rows, total) = rows(&window, &set, &mut names, &opts);
        assert_eq!(total, 3);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [2, 1]);
        assert!((rows[0].cpu_percent - 100.0).abs() < 1e-9);
        assert!((rows[1].cpu_percent - 25.0).abs() < 1e-9);
        let by_switches = RowOptions {
            sort: "switches".parse().unwrap(),
            top: None,
            topdown: None,
            verbose: false,
        };
        let (rows, _) = super::rows(&window, &set, &mut names, &by_switches);
        assert_eq!(rows.iter().map(|r| r.tid).collect::<Vec<_>>(), [1, 3, 2]);
        assert!(SortKey::Counter("nope".into()).validate(&set).is_err());
        assert!(SortKey::Counter("cpu-clock".into()).validate(&set).is_ok());
    }
}
