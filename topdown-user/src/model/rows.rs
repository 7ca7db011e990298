//! The per-thread rows every renderer draws: values computed once, sorted and cut once.

use std::{borrow::Cow, time::Duration};

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
    model::{
        sort::{SortKey, sort},
        verdict::Verdict,
    },
    pmu::counter_set::CounterSet,
    tma::view::{BatchRow, BoundView, RowTopDown, TopdownView},
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
    pub topdown: RowTopDown,
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
/// cut. Only the model makes rows: every output takes them from a window's
/// [`super::frame::Frame`], which makes each grouping's once.
pub(in crate::model) fn rows(
    window: &Window,
    named: impl IntoIterator<Item = Named>,
    set: &CounterSet,
    options: &RowOptions,
) -> (Vec<Row>, usize) {
    let wall_ns = window.length.as_nanos().max(1) as f64;
    let topdown = options.topdown.as_ref().map(|view| view.bind(set));
    // Each row's TopDown is evaluated into one batch for all of them, handed out once done.
    let mut batch_rows = Vec::new();
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
                if let Some(view) = &topdown {
                    batch_rows.push(view.evaluate(&counters));
                }
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
                    topdown: RowTopDown::default(),
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
    hand_out(topdown, batch_rows, &mut rows);
    sort(&mut rows, set, &options.sort);
    let total = rows.len();
    if let Some(top) = options.top {
        rows.truncate(top);
    }
    (rows, total)
}

/// Gives each of `rows` its TopDown from `view`'s batch, their places `at` in the order they
/// were evaluated (nothing without a view).
pub(in crate::model) fn hand_out<'r>(
    view: Option<BoundView<'_>>,
    at: Vec<BatchRow>,
    rows: impl IntoIterator<Item = &'r mut Row>,
) {
    let Some(view) = view else {
        return;
    };
    let batch = view.finish();
    for (row, at) in rows.into_iter().zip(at) {
        row.topdown = batch.row(at);
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
        pmu::counter_set::CounterSet,
    };

    fn usage(tid: u32, ns: u64, switches: u64) -> ThreadUsage {
        ThreadUsage::clocked(tid, 1, CgroupId(1), ns, switches)
    }

    #[test]
    fn sorts_cuts_and_computes_cpu_share() {
        let window = Window {
            length: Duration::from_secs(2),
            threads: vec![
                usage(1, 500_000_000, 9),
                usage(2, 2_000_000_000, 1),
                usage(3, 0, 4),
            ],
            ..Window::default()
        };
        let set = CounterSet::software(String::new());
        let mut names = CgroupNames::at(None);
        let opts = RowOptions {
            sort: SortKey::ON_CPU,
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
        assert!(SortKey::Field("nope".into()).validate(&set).is_err());
        let error = SortKey::Field("cpu-clock".into())
            .validate(&set)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("use a column (on_cpu_ns, cpu_percent,")
                && error.contains("this set has none"),
            "{error}"
        );
        let mut tsc = set.clone();
        tsc.counters = crate::recording::fixtures::set().counters;
        assert!(SortKey::Field("msr/tsc/".into()).validate(&tsc).is_ok());
    }

    /// Rows with TopDown, evaluated into one batch and then sorted: each row carries the
    /// TopDown of its own counts (as evaluated alone), whatever its place after the sort.
    #[test]
    fn each_sorted_row_carries_the_topdown_of_its_own_counts() {
        let recording = crate::recording::fixtures::topdown_recording();
        let set = &recording.set;
        let view = recording.topdown.clone().unwrap();
        // Level 1 counts a little different per thread (retiring grows with the tid), their
        // on-CPU time growing with it too, so sorting by it reverses the rows.
        let threads: Vec<ThreadUsage> = (1..=40u32)
            .map(|tid| {
                let ns = 1_000_000 * u64::from(tid);
                ThreadUsage {
                    counters: [4000, 600 + 10 * u64::from(tid), 200, 400, 2400, 0]
                        .iter()
                        .map(|&raw| CounterValue::new(raw * ns / 1000, ns, ns))
                        .collect(),
                    ..usage(tid, ns, 1)
                }
            })
            .collect();
        let window = Window {
            length: Duration::from_secs(1),
            threads,
            ..Window::default()
        };
        let mut names = CgroupNames::at(None);
        for sort in [SortKey::ON_CPU, "switches".parse().unwrap()] {
            let opts = RowOptions {
                sort,
                topdown: Some(view.clone()),
                ..RowOptions::default()
            };
            let (rows, _) = rows(&window, name(&window, &mut names, None), set, &opts);
            assert_eq!(rows.len(), 40);
            let mut retiring = Vec::new();
            for row in &rows {
                let alone = view.of(set, &row.counters);
                assert_eq!(&*row.topdown, &*alone);
                retiring.push(row.topdown[0].as_ref().unwrap().value("tma_retiring"));
            }
            retiring.dedup();
            assert_eq!(retiring.len(), 40, "every row its own");
            let first = rows[0].who.thread().unwrap().tid.0;
            assert_eq!(first, if opts.sort == SortKey::ON_CPU { 40 } else { 1 });
        }
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
            length: Duration::from_secs(1),
            threads: vec![thread(1, 7, 50), thread(2, 8, 300), thread(3, 8, 10)],
            cgroups: vec![cgroup(7), cgroup(8)],
            waits_measured: true,
            neighbours_measured: true,
            stalls: [("/a".to_owned(), held)].into(),
            ..Window::default()
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
