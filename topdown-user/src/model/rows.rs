//! The per-thread rows every renderer draws: values computed once, sorted and cut once.

use std::{borrow::Cow, cmp::Ordering, str::FromStr, time::Duration};

use anyhow::{Result, bail};

pub use crate::attrib::named::{ThreadKey, Who};
use crate::{
    attrib::{
        Window,
        groups::{GroupBy, GroupOptions},
        named::Named,
        neighbours::Culprits,
        stalls::CpuStalls,
        usage::CounterValue,
    },
    model::verdict::Verdict,
    pmu::counter_set::CounterSet,
    tma::{TopDown, node::Node, view::TopdownView},
};

/// One line of a report: a thread, or a group of cgroups.
#[derive(Clone, Debug)]
pub struct Row {
    /// Whose line it is.
    pub who: Who,
    /// On-CPU time.
    pub on_cpu: Duration,
    /// On-CPU time over the window's wall time (1.0: one CPU busy all the window).
    pub cpu_share: f64,
    /// Time waiting in a run queue (runnable, not running); `None` where not measured.
    pub waited: Option<Duration>,
    /// That time over the window's wall time (1.0: one thread waiting all the window).
    pub wait_share: Option<f64>,
    /// Whom it waited behind (culprits named, the largest first) and its preemptions; `None`
    /// where not measured.
    pub behind: Option<Box<Culprits>>,
    /// CPU stalls (throttling, pressure) of a group's root cgroup, or of a thread's cgroup;
    /// `None` where they were not read.
    pub stalls: Option<CpuStalls>,
    /// What held it back: throttled, waiting for a CPU, or neither ([`Verdict::of`]).
    pub verdict: Verdict,
    /// Switches out.
    pub switches: u64,
    /// Every counter of the set, in slot order.
    pub counters: Vec<CounterValue>,
    /// TopDown per part of the view (one per core type), from this row's counts: only the
    /// nodes it measured; `None` for a part whose core type it never ran on.
    pub topdown: Vec<Option<TopDown>>,
    /// Lowest share of its enabled time any counter of the set was running (1.0: never
    /// multiplexed).
    pub run_fraction: f64,
    /// Where the row sits in a tree (the full-screen view's `t`); `None` in flat lists.
    pub tree: Option<TreeMark>,
}

impl Row {
    /// What held it back, for machine outputs: the verdict's words (`throttled`, `waiting for
    /// CPU behind batch-7f3a`), else TopDown's bottleneck node (its first core type's), else
    /// `None`.
    pub fn bottleneck(&self) -> Option<Cow<'_, str>> {
        self.verdict_words().or_else(|| {
            self.topdown
                .iter()
                .flatten()
                .find_map(|td| td.bottleneck)
                .map(Cow::Borrowed)
        })
    }

    /// The verdict's words (`None` for [`Verdict::Ran`]); a wait names its largest culprit
    /// where one is known: `waiting for CPU behind batch-7f3a`, or `behind its own threads`
    /// for a group that waited most behind itself.
    pub fn verdict_words(&self) -> Option<Cow<'_, str>> {
        let words = self.verdict.words()?;
        match self.behind.as_ref().and_then(|b| b.first()) {
            Some((culprit, _)) if self.verdict == Verdict::WaitingForCpu => {
                let itself = self.who.group().is_some_and(|g| g.label == culprit);
                Some(Cow::Owned(if itself {
                    format!("{words} behind its own threads")
                } else {
                    format!("{words} behind {culprit}")
                }))
            }
            _ => Some(Cow::Borrowed(words)),
        }
    }
}

/// A row's place in a tree: threads under their process, cgroups under their parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeMark {
    /// 0 for a root.
    pub depth: u8,
    /// Rows directly under it (a process's threads, a cgroup's children).
    pub children: usize,
    /// The last of its siblings.
    pub last: bool,
}

/// What to sort rows by (descending for numbers, ascending for ids and names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    /// On-CPU time (the default).
    #[default]
    OnCpu,
    /// Switches out.
    Switches,
    /// Time waiting in a run queue (rows where it was not measured last).
    Wait,
    /// The verdict: throttled rows first, then those waiting for a CPU, then the rest, each by
    /// TopDown's bottleneck.
    Verdict,
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
            "wait" | "run-delay" | "rundelay" => Self::Wait,
            "verdict" | "bottleneck" => Self::Verdict,
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
            let counters: Vec<&str> = set.names().collect();
            let counters = if counters.is_empty() {
                "this set has none".to_owned()
            } else {
                counters.join(", ")
            };
            bail!(
                "unknown sort field `{name}`: use oncpu, switches, tid, pid, comm, a TopDown node \
                 (tma_backend_bound, ...) or a counter ({counters})"
            );
        }
        Ok(())
    }
}

/// How rows are chosen; the default: threads by on-CPU time, all of them, no TopDown.
#[derive(Clone, Debug, Default)]
pub struct RowOptions {
    /// Sort order.
    pub sort: SortKey,
    /// Keep only the first N rows.
    pub top: Option<usize>,
    /// TopDown per row, when a TopDown set runs.
    pub topdown: Option<TopdownView>,
    /// Also show Level 2 nodes under their thresholds, and the raw counters.
    pub verbose: bool,
    /// After each table, whom each row waited behind (`--neighbours`).
    pub neighbours: bool,
    /// Rows of cgroups or containers instead of threads.
    pub group: Option<GroupOptions>,
}

impl RowOptions {
    /// Rows per cgroup or per container, or `None` for threads.
    pub fn group_by(&self) -> Option<GroupBy> {
        self.group.as_ref().map(|g| g.by)
    }

    /// What a row is called in titles: `threads`, `cgroups`, `containers`.
    pub fn noun(&self) -> &'static str {
        match self.group_by() {
            None => "threads",
            Some(GroupBy::Cgroup) => "cgroups",
            Some(GroupBy::Container) => "containers",
        }
    }
}

/// The rows of `window`'s `named` usage, sorted and cut; also how many there were before the
/// cut.
pub fn rows(
    window: &Window,
    named: impl IntoIterator<Item = Named>,
    set: &CounterSet,
    options: &RowOptions,
) -> (Vec<Row>, usize) {
    let wall_ns = window.length.as_nanos().max(1) as f64;
    let topdown = options.topdown.as_ref().map(|view| view.bind(set));
    let mut rows: Vec<Row> = named
        .into_iter()
        .map(
            |Named {
                 who,
                 switches,
                 on_cpu,
                 waited,
                 behind,
                 stalls,
                 counters,
             }| {
                Row {
                    who,
                    on_cpu,
                    cpu_share: on_cpu.as_nanos() as f64 / wall_ns,
                    waited,
                    wait_share: waited.map(|w| w.as_nanos() as f64 / wall_ns),
                    behind,
                    verdict: Verdict::of(on_cpu, waited, stalls.as_ref(), window.length),
                    stalls,
                    switches,
                    topdown: topdown
                        .as_ref()
                        .map_or_else(Vec::new, |view| view.of(&counters)),
                    run_fraction: counters
                        .iter()
                        .map(|v| v.reading.running_fraction())
                        .fold(1.0, f64::min),
                    counters,
                    tree: None,
                }
            },
        )
        .collect();
    sort(&mut rows, set, &options.sort);
    let total = rows.len();
    if let Some(top) = options.top {
        rows.truncate(top);
    }
    (rows, total)
}

/// Sorts `rows` by `key` (a counter of `set`, or a node), then by id and name.
pub fn sort(rows: &mut [Row], set: &CounterSet, key: &SortKey) {
    rows.sort_by(order(set, key));
}

/// Sorts `rows` in [`order`], each row's place computed once where the key is a number: the
/// sort then compares keys lying side by side, not rows scattered over memory (sorting 6,000
/// rows by reading them at every comparison was a tenth of a live read's time: BENCHMARKS.md).
pub fn sort_refs(rows: &mut Vec<&Row>, set: &CounterSet, key: &SortKey) {
    let counter = counter_index(set, key);
    // One number per row: the rank in the high half, the id (the first tie-breaker) in the
    // low; the name breaks what ties remain. `None` for a key that is not one number.
    let keyed: Option<Vec<(u128, &Row)>> = rows
        .iter()
        .map(|&row| {
            let rank = u128::from((rank(row, key, counter)? as u64) ^ (1 << 63));
            Some((rank << 64 | u128::from(row.who.id(false)), row))
        })
        .collect();
    let Some(mut keyed) = keyed else {
        let by = order(set, key);
        rows.sort_by(|a, b| by(a, b));
        return;
    };
    keyed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.who.name().cmp(b.1.who.name()))
    });
    rows.clear();
    rows.extend(keyed.into_iter().map(|(_, row)| row));
}

/// `row`'s place in `key`'s order as one number, smaller first, as [`compare`] orders rows;
/// `None` for keys that are not one number (the verdict, the name).
fn rank(row: &Row, key: &SortKey, counter: Option<usize>) -> Option<i64> {
    // Nanoseconds and switches past i64 (292 years of them) rank as its largest.
    let nanos = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    Some(match key {
        SortKey::OnCpu => -nanos(row.on_cpu),
        SortKey::Switches => -i64::try_from(row.switches).unwrap_or(i64::MAX),
        // Not measured: after every measured wait, as `Option`'s order puts it.
        SortKey::Wait => row.waited.map_or(i64::MAX, |w| -nanos(w)),
        // A cgroup id past i64 ranks as its largest; the id itself then orders it.
        SortKey::Tid => i64::try_from(row.who.id(false)).unwrap_or(i64::MAX),
        SortKey::Pid => i64::try_from(row.who.id(true)).unwrap_or(i64::MAX),
        // `!` reverses the order without overflow.
        SortKey::Counter(name) => !total_order(counter_value(row, name, counter)),
        SortKey::Verdict | SortKey::Comm => return None,
    })
}

/// `x` as an integer ordered as [`f64::total_cmp`] orders floats (its own bit trick).
const fn total_order(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// The slot of the counter `key` names in `set`, if it names one.
fn counter_index(set: &CounterSet, key: &SortKey) -> Option<usize> {
    match key {
        SortKey::Counter(name) => set.names().position(|n| n == name),
        _ => None,
    }
}

/// The value a row sorts by for a counter key: the counter's (`counter`: its slot), else the
/// TopDown node `name`'s largest over the row's core types; -inf where it has none.
fn counter_value(row: &Row, name: &str, counter: Option<usize>) -> f64 {
    match counter {
        Some(i) => row
            .counters
            .get(i)
            .and_then(CounterValue::scaled)
            .unwrap_or(f64::NEG_INFINITY),
        None => row
            .topdown
            .iter()
            .flatten()
            .filter_map(|td| td.value(name))
            .fold(f64::NEG_INFINITY, f64::max),
    }
}

/// The order [`sort`] sorts in.
pub fn order<'a>(set: &CounterSet, key: &'a SortKey) -> impl Fn(&Row, &Row) -> Ordering + 'a {
    let counter_index = counter_index(set, key);
    move |a: &Row, b: &Row| {
        compare(a, b, key, counter_index)
            .then_with(|| a.who.id(false).cmp(&b.who.id(false)))
            .then_with(|| a.who.name().cmp(b.who.name()))
    }
}

fn compare(a: &Row, b: &Row, key: &SortKey, counter: Option<usize>) -> Ordering {
    match key {
        SortKey::OnCpu => b.on_cpu.cmp(&a.on_cpu),
        SortKey::Switches => b.switches.cmp(&a.switches),
        SortKey::Wait => b.waited.cmp(&a.waited),
        SortKey::Verdict => a.verdict.cmp(&b.verdict).then_with(|| {
            let bottleneck = |r: &Row| r.topdown.iter().flatten().find_map(|td| td.bottleneck);
            bottleneck(a).cmp(&bottleneck(b))
        }),
        SortKey::Tid => a.who.id(false).cmp(&b.who.id(false)),
        SortKey::Pid => a.who.id(true).cmp(&b.who.id(true)),
        SortKey::Comm => a.who.name().cmp(b.who.name()),
        SortKey::Counter(name) => {
            counter_value(b, name, counter).total_cmp(&counter_value(a, name, counter))
        }
    }
}

#[cfg(test)]
mod tests {
    use topdown_common::cgroup::CgroupId;

    use std::time::Duration;

    use crate::attrib::{cgroups::CgroupNames, named::name};

    use super::*;
    use crate::{
        attrib::{stalls::CpuStalls, usage::ThreadUsage},
        collect::Stats,
        pmu::counter_set::CounterSet,
    };

    fn usage(tid: u32, ns: u64, switches: u64) -> ThreadUsage {
        ThreadUsage::clocked(tid, 1, CgroupId(1), ns, switches)
    }

    /// Every key's computed ranks sort rows exactly as the comparator does, ties (run time,
    /// switches, waits, process, tid) broken alike.
    #[test]
    fn sorting_by_computed_ranks_keeps_the_comparators_order() {
        let mut threads = (0..300u32)
            .map(|i| {
                let mut t = ThreadUsage::clocked(
                    1 + i % 150,
                    1 + i % 5,
                    CgroupId(1),
                    u64::from(i % 7) * 1_000,
                    u64::from(i % 3),
                );
                t.comm = ["b", "a", "c"][i as usize % 3].into();
                t.waited = Duration::from_nanos(u64::from(i % 4) * 10);
                t
            })
            .collect();
        let set = CounterSet::software(String::new());
        for waits_measured in [true, false] {
            let window = Window {
                start: Duration::ZERO,
                length: Duration::from_secs(1),
                threads,
                idle: vec![],
                cgroups: vec![],
                removed_cgroups: Vec::new(),
                stats: Stats::default(),
                waits_measured,
                neighbours_measured: false,
                stalls: std::collections::BTreeMap::new(),
            };
            let mut names = CgroupNames::at(None);
            let (mut all, _) = rows(
                &window,
                name(&window, &mut names, None),
                &set,
                &RowOptions::default(),
            );
            all.reverse();
            for key in ["oncpu", "switches", "wait", "tid", "pid", "comm", "verdict"]
                .into_iter()
                .chain(["tma_backend_bound"])
            {
                let key: SortKey = key.parse().unwrap();
                let mut expected: Vec<&Row> = all.iter().collect();
                let by = order(&set, &key);
                expected.sort_by(|a, b| by(a, b));
                let mut sorted: Vec<&Row> = all.iter().collect();
                sort_refs(&mut sorted, &set, &key);
                assert!(
                    sorted
                        .iter()
                        .zip(&expected)
                        .all(|(a, b)| std::ptr::eq(*a, *b)),
                    "{key:?}, waits measured: {waits_measured}"
                );
                assert_eq!(sorted.len(), expected.len());
            }
            threads = window.threads;
        }
    }

    #[test]
    fn total_order_ranks_floats_as_total_cmp_does() {
        let values = [
            f64::NEG_INFINITY,
            -2.5,
            -0.0,
            0.0,
            1e-300,
            3.0,
            f64::INFINITY,
            f64::NAN,
        ];
        for a in values {
            for b in values {
                assert_eq!(
                    total_order(a).cmp(&total_order(b)),
                    a.total_cmp(&b),
                    "{a} {b}"
                );
            }
        }
    }

    #[test]
    fn sorts_cuts_and_computes_cpu_share() {
        let window = Window {
            start: Duration::ZERO,
            length: Duration::from_secs(2),
            threads: vec![
                usage(1, 500_000_000, 9),
                usage(2, 2_000_000_000, 1),
                usage(3, 0, 4),
            ],
            idle: vec![],
            cgroups: vec![],
            removed_cgroups: Vec::new(),
            stats: Stats::default(),
            waits_measured: false,
            neighbours_measured: false,
            stalls: std::collections::BTreeMap::new(),
        };
        let set = CounterSet::software(String::new());
        let mut names = CgroupNames::at(None);
        let opts = RowOptions {
            sort: SortKey::OnCpu,
            top: Some(2),
            topdown: None,
            verbose: false,
            neighbours: false,
            group: None,
        };
        let (rows, total) = rows(&window, name(&window, &mut names, None), &set, &opts);
        assert_eq!(total, 3);
        let tids = |rows: &[Row]| -> Vec<u32> {
            rows.iter().map(|r| r.who.thread().unwrap().tid.0).collect()
        };
        assert_eq!(tids(&rows), [2, 1]);
        assert!((rows[0].cpu_share - 1.0).abs() < 1e-9);
        assert!((rows[1].cpu_share - 0.25).abs() < 1e-9);
        let by_switches = RowOptions {
            sort: "switches".parse().unwrap(),
            top: None,
            topdown: None,
            verbose: false,
            neighbours: false,
            group: None,
        };
        let (rows, _) = super::rows(&window, name(&window, &mut names, None), &set, &by_switches);
        assert_eq!(tids(&rows), [1, 3, 2]);
        assert!(SortKey::Counter("nope".into()).validate(&set).is_err());
        let error = SortKey::Counter("cpu-clock".into())
            .validate(&set)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("use oncpu") && error.contains("this set has none"),
            "{error}"
        );
        let mut tsc = set.clone();
        tsc.counters = crate::recording::fixtures::set().counters;
        assert!(SortKey::Counter("msr/tsc/".into()).validate(&tsc).is_ok());
    }

    /// A row's verdict takes its cgroup's throttling and its own wait; a thread row has no
    /// stall numbers of its own (its cgroup's are the group row's), and sorting by the verdict
    /// puts throttled rows first.
    #[test]
    fn verdicts_come_from_throttling_and_waits() {
        let ms = Duration::from_millis;
        let thread = |tid: u32, cgroup: u64, waited: u64| ThreadUsage {
            waited: ms(waited),
            ..ThreadUsage::clocked(tid, 1, CgroupId(cgroup), 100_000_000, 1)
        };
        let cgroup = |id: u64| crate::attrib::usage::CgroupUsage {
            on_cpu: ms(100),
            waited: ms(if id == 7 { 50 } else { 300 }),
            ..crate::attrib::usage::CgroupUsage::new(CgroupId(id), 0)
        };
        let held = CpuStalls {
            throttled: Some(ms(600)),
            nr_throttled: Some(6),
            ..CpuStalls::default()
        };
        let window = Window {
            start: Duration::ZERO,
            length: Duration::from_secs(1),
            threads: vec![thread(1, 7, 50), thread(2, 8, 300), thread(3, 8, 10)],
            idle: vec![],
            cgroups: vec![cgroup(7), cgroup(8)],
            removed_cgroups: Vec::new(),
            stats: Stats::default(),
            waits_measured: true,
            neighbours_measured: true,
            stalls: [("/a".to_owned(), held)].into(),
        };
        let set = CounterSet::software(String::new());
        let mut names = CgroupNames::at(None);
        names.learn(CgroupId(7), "/a".into());
        names.learn(CgroupId(8), "/b".into());
        let by_verdict = RowOptions {
            sort: "bottleneck".parse().unwrap(),
            ..RowOptions::default()
        };
        let (threads, _) = rows(&window, name(&window, &mut names, None), &set, &by_verdict);
        let verdicts: Vec<(u32, Verdict)> = threads
            .iter()
            .map(|r| (r.who.thread().unwrap().tid.0, r.verdict))
            .collect();
        assert_eq!(
            verdicts,
            [
                (1, Verdict::Throttled),
                (2, Verdict::WaitingForCpu),
                (3, Verdict::Ran)
            ]
        );
        assert_eq!(threads[0].bottleneck().as_deref(), Some("throttled"));
        assert_eq!(
            threads[2].bottleneck().as_deref(),
            None,
            "no TopDown: nothing to say"
        );
        let throttled = crate::model::columns::columns(&set)
            .into_iter()
            .find(|c| c.key == "throttled_ns")
            .unwrap();
        assert_eq!(
            throttled.value(&threads[0]),
            None,
            "the cgroup's, not the thread's"
        );
        let per_cgroup = RowOptions {
            group: Some(GroupOptions {
                by: GroupBy::Cgroup,
                rollup: false,
                keep: Vec::new(),
            }),
            ..by_verdict
        };
        let named = name(&window, &mut names, per_cgroup.group.as_ref());
        let (groups, _) = rows(&window, named, &set, &per_cgroup);
        assert_eq!(groups[0].who.group().unwrap().path, "/a");
        assert_eq!(groups[0].verdict, Verdict::Throttled);
        assert_eq!(
            throttled.value(&groups[0]),
            Some(crate::model::columns::Number::Int(600_000_000))
        );
        assert_eq!(
            groups[1].verdict,
            Verdict::WaitingForCpu,
            "/b waited 300 ms, ran 100"
        );
        assert_eq!(throttled.value(&groups[1]), None, "not read for /b");
    }
}
