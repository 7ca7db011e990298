//! Rows as a tree (the full-screen view's `t`): each process with more than one thread gets a
//! row of its own, the sum of its threads, with its threads under it; cgroups sit under their
//! nearest ancestor among the rows (every ancestor, with `--rollup`). Siblings keep the sort;
//! containers stay a flat list.

use std::{collections::HashMap, time::Duration};
use topdown_common::cgroup::CgroupId;
use topdown_common::thread::{Pid, Tid};

use super::{
    rows::{Row, RowOptions, ThreadKey, TreeMark, Who, hand_out},
    sort::order,
    verdict::Verdict,
};
use crate::{
    attrib::{
        neighbours::Culprits,
        usage::{CounterValue, add_counters},
    },
    pmu::counter_set::CounterSet,
    tma::view::RowTopDown,
};

/// `rows` (sorted, filtered) arranged as a tree; `reverse` reverses every level's order.
pub fn arrange(rows: Vec<Row>, set: &CounterSet, options: &RowOptions, reverse: bool) -> Vec<Row> {
    match rows.first().map(|r| &r.who) {
        Some(Who::Thread(_)) => processes(rows, set, options, reverse),
        Some(Who::Group { group, .. }) if group.path.starts_with('/') && is_cgroups(&rows) => {
            cgroups(rows, reverse)
        }
        _ => rows,
    }
}

fn is_cgroups(rows: &[Row]) -> bool {
    rows.iter().all(|r| {
        matches!(&r.who, Who::Group { by, .. } if *by == crate::attrib::groups::GroupBy::Cgroup)
    })
}

/// Threads under a row per process (the sum of its threads), for processes with several.
fn processes(rows: Vec<Row>, set: &CounterSet, options: &RowOptions, reverse: bool) -> Vec<Row> {
    let topdown = options.topdown.as_ref().map(|view| view.bind(set));
    let mut by_pid: HashMap<Pid, Vec<Row>> = HashMap::new();
    let mut pids = Vec::new();
    for row in rows {
        let pid = row.who.thread().map_or(Pid(0), |t| t.pid);
        by_pid
            .entry(pid)
            .or_insert_with(|| {
                pids.push(pid);
                Vec::new()
            })
            .push(row);
    }
    // Process rows' TopDown is evaluated into one batch, handed out once all are made.
    let mut batch_rows = Vec::new();
    let mut tops: Vec<(Row, Vec<Row>)> = pids
        .into_iter()
        .filter_map(|pid| by_pid.remove(&pid))
        .map(|threads| match threads.len() {
            1 => (threads.into_iter().next(), Vec::new()),
            _ => {
                let head = process_row(&threads, set);
                if let Some(view) = &topdown {
                    batch_rows.push(view.evaluate(&head.counters));
                }
                (Some(head), threads)
            }
        })
        .filter_map(|(head, threads)| Some((head?, threads)))
        .collect();
    // The process rows, in the order they were evaluated (those with several threads).
    let heads = tops
        .iter_mut()
        .filter(|(_, threads)| !threads.is_empty())
        .map(|(head, _)| head);
    hand_out(topdown, batch_rows, heads);
    // Processes in the sort's order of their own rows; threads keep the order they came in.
    let by = order(set, &options.sort);
    tops.sort_by(|a, b| by(&a.0, &b.0));
    if reverse {
        tops.reverse();
    }
    let mut out = Vec::new();
    for (head, mut threads) in tops {
        out.push(head);
        if reverse {
            threads.reverse();
        }
        let count = threads.len();
        out.extend(threads.into_iter().enumerate().map(|(i, mut row)| {
            row.tree = Some(TreeMark {
                depth: 1,
                children: 0,
                last: i + 1 == count,
            });
            row
        }));
    }
    out
}

/// A process's row: its threads summed, named as its main thread (or its first thread).
/// Its TopDown is left to the caller (evaluated with its other process rows).
fn process_row(threads: &[Row], set: &CounterSet) -> Row {
    let first = threads[0]
        .who
        .thread()
        .cloned()
        .unwrap_or_else(|| ThreadKey {
            tid: Tid(0),
            pid: Pid(0),
            comm: compact_str::CompactString::default(),
            cgroup: "".into(),
            cgroup_id: CgroupId(0),
            exited: false,
            folded: 0,
        });
    let main = threads
        .iter()
        .filter_map(|r| r.who.thread())
        .find(|t| t.tid == t.pid.main_thread())
        .unwrap_or(&first);
    let mut counters = vec![CounterValue::default(); set.counters.len()];
    for row in threads {
        add_counters(&mut counters, &row.counters);
    }
    let on_cpu: Duration = threads.iter().map(|r| r.on_cpu).sum();
    let waited: Option<Duration> = threads.iter().map(|r| r.waited).sum();
    Row {
        who: Who::Thread(ThreadKey {
            tid: main.pid.main_thread(),
            exited: threads
                .iter()
                .all(|r| r.who.thread().is_some_and(|t| t.exited)),
            folded: 0,
            ..main.clone()
        }),
        on_cpu,
        cpu_share: threads.iter().map(|r| r.cpu_share).sum(),
        waited,
        wait_share: threads.iter().map(|r| r.wait_share).sum(),
        behind: threads
            .iter()
            .map(|r| r.behind.as_deref())
            .collect::<Option<Vec<_>>>()
            .map(|parts| Box::new(Culprits::sum(parts))),
        // Throttled when all its threads were (their cgroups); waiting when, summed, they
        // waited longer than they ran.
        verdict: if threads.iter().all(|r| r.verdict == Verdict::Throttled) {
            Verdict::Throttled
        } else if waited.is_some_and(|w| w > on_cpu) {
            Verdict::WaitingForCpu
        } else {
            Verdict::Ran
        },
        stalls: None,
        switches: threads.iter().map(|r| r.switches).sum(),
        topdown: RowTopDown::default(),
        run_fraction: threads.iter().map(|r| r.run_fraction).fold(1.0, f64::min),
        counters,
        tree: Some(TreeMark {
            depth: 0,
            children: threads.len(),
            last: false,
        }),
    }
}

/// cgroups under their nearest ancestor among the rows, siblings in the rows' order.
fn cgroups(rows: Vec<Row>, reverse: bool) -> Vec<Row> {
    let path = |row: &Row| match &row.who {
        Who::Group { group, .. } => group.path.clone(),
        Who::Thread(t) => t.cgroup.to_string(),
    };
    let paths: Vec<String> = rows.iter().map(path).collect();
    let index: HashMap<&str, usize> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_str(), i))
        .collect();
    // The nearest ancestor among the rows: `/a/b/c` looks for `/a/b`, `/a`, then `/`.
    let parent_of = |p: &str| -> Option<usize> {
        let mut at = p;
        loop {
            let cut = at.rfind('/')?;
            if at == "/" {
                return None;
            }
            at = if cut == 0 { "/" } else { &at[..cut] };
            if let Some(&i) = index.get(at) {
                return Some(i);
            }
        }
    };
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    let mut roots = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        match parent_of(p).filter(|&parent| parent != i) {
            Some(parent) => children[parent].push(i),
            None => roots.push(i),
        }
    }
    // Rows come sorted; siblings keep that order, reversed when asked.
    if reverse {
        roots.reverse();
        for list in &mut children {
            list.reverse();
        }
    }
    let mut slots: Vec<Option<Row>> = rows.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    let mut stack: Vec<(usize, u8, bool)> = roots
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &r)| (r, 0, i == 0))
        .collect();
    while let Some((i, depth, last)) = stack.pop() {
        let Some(mut row) = slots[i].take() else {
            continue;
        };
        row.tree = Some(TreeMark {
            depth,
            children: children[i].len(),
            last,
        });
        out.push(row);
        let below = &children[i];
        stack.extend(
            below
                .iter()
                .rev()
                .enumerate()
                .map(|(k, &c)| (c, depth.saturating_add(1), k == 0)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrib::{
        containers::Owner,
        groups::{Group, GroupBy},
        usage::CgroupUsage,
    };

    fn values(ms: u64) -> (Duration, f64, Vec<CounterValue>) {
        let ns = ms * 1_000_000;
        let value = CounterValue::new(ns, ns, ns);
        (Duration::from_millis(ms), ms as f64 / 1000.0, vec![value])
    }

    fn thread(tid: u32, pid: u32, ms: u64) -> Row {
        let (on_cpu, cpu_share, counters) = values(ms);
        Row {
            who: Who::Thread(ThreadKey {
                tid: Tid(tid),
                pid: Pid(pid),
                comm: format!("t{tid}").into(),
                cgroup: "/".into(),
                cgroup_id: CgroupId(1),
                exited: false,
                folded: 0,
            }),
            on_cpu,
            cpu_share,
            waited: None,
            behind: Default::default(),
            wait_share: None,
            verdict: crate::model::verdict::Verdict::Ran,
            stalls: None,
            switches: 2,
            counters,
            topdown: RowTopDown::default(),
            run_fraction: 1.0,
            tree: None,
        }
    }

    fn cgroup(path: &str, ms: u64) -> Row {
        let (on_cpu, cpu_share, counters) = values(ms);
        Row {
            who: Who::Group {
                by: GroupBy::Cgroup,
                group: Box::new(Group {
                    label: path.into(),
                    path: path.into(),
                    id: CgroupId(1),
                    owner: Owner::of(path),
                    usage: CgroupUsage::new(CgroupId(1), 1),
                }),
            },
            on_cpu,
            cpu_share,
            waited: None,
            behind: Default::default(),
            wait_share: None,
            verdict: crate::model::verdict::Verdict::Ran,
            stalls: None,
            switches: 1,
            counters,
            topdown: RowTopDown::default(),
            run_fraction: 1.0,
            tree: None,
        }
    }

    /// `(tid or path, depth, children, last)` per row.
    fn shape(rows: &[Row]) -> Vec<(String, u8, usize, bool)> {
        rows.iter()
            .map(|r| {
                let name = match &r.who {
                    Who::Thread(t) => t.tid.to_string(),
                    Who::Group { group, .. } => group.path.clone(),
                };
                let mark = r.tree.unwrap_or(TreeMark {
                    depth: 9,
                    children: 9,
                    last: false,
                });
                (name, mark.depth, mark.children, mark.last)
            })
            .collect()
    }

    fn s(name: &str, depth: u8, children: usize, last: bool) -> (String, u8, usize, bool) {
        (name.to_owned(), depth, children, last)
    }

    #[test]
    fn threads_go_under_a_row_that_sums_their_process() {
        let set = CounterSet::software(String::new());
        // Sorted by on-CPU time, as rows come: 11 (50 ms), 20 (30 ms), 10 (5 ms).
        let rows = vec![thread(11, 10, 50), thread(20, 20, 30), thread(10, 10, 5)];
        let tree = arrange(rows.clone(), &set, &RowOptions::default(), false);
        assert_eq!(
            shape(&tree),
            [
                s("10", 0, 2, false),
                s("11", 1, 0, false),
                s("10", 1, 0, true),
                s("20", 9, 9, false)
            ],
            "process 10 (55 ms) first, its threads under it; the lone thread stays a plain row"
        );
        assert_eq!(tree[0].on_cpu, Duration::from_millis(55));
        assert!((tree[0].cpu_share - 0.055).abs() < 1e-9);
        assert_eq!(
            (tree[0].switches, tree[0].counters[0].reading.count),
            (4, 55_000_000)
        );
        assert_eq!(
            tree[0].who.thread().unwrap().comm,
            "t10",
            "named as its main thread"
        );

        let reversed = arrange(rows, &set, &RowOptions::default(), true);
        assert_eq!(
            shape(&reversed),
            [
                s("20", 9, 9, false),
                s("10", 0, 2, false),
                s("10", 1, 0, false),
                s("11", 1, 0, true)
            ]
        );
    }

    /// Process rows get the TopDown of their summed counts (evaluated together, handed out
    /// after): each its own, whatever the sort does with them; lone threads keep theirs.
    #[test]
    fn process_rows_carry_the_topdown_of_their_summed_counts() {
        let recording = crate::recording::fixtures::topdown_recording();
        let (set, view) = (&recording.set, recording.topdown.clone().unwrap());
        // Level 1 counts that differ per thread (retiring grows with the tid).
        let with_counts = |tid: u32, pid: u32, ms: u64| {
            let ns = ms * 1_000_000;
            let counters: Vec<CounterValue> = [4000, 500 + 20 * u64::from(tid), 200, 400, 2400, 0]
                .iter()
                .map(|&raw| CounterValue::new(raw * ns / 1000, ns, ns))
                .collect();
            Row {
                topdown: view.of(set, &counters),
                counters,
                ..thread(tid, pid, ms)
            }
        };
        let rows = vec![
            with_counts(31, 30, 70),
            with_counts(11, 10, 50),
            with_counts(20, 20, 30),
            with_counts(30, 30, 20),
            with_counts(10, 10, 5),
            with_counts(32, 30, 1),
        ];
        let options = RowOptions {
            topdown: Some(view.clone()),
            ..RowOptions::default()
        };
        for reverse in [false, true] {
            let tree = arrange(rows.clone(), set, &options, reverse);
            let heads: Vec<&Row> = tree
                .iter()
                .filter(|r| r.tree.is_some_and(|t| t.depth == 0))
                .collect();
            assert_eq!(heads.len(), 2);
            let retiring: Vec<f64> = heads
                .iter()
                .map(|head| {
                    assert_eq!(&*head.topdown, &*view.of(set, &head.counters));
                    head.topdown[0]
                        .as_ref()
                        .unwrap()
                        .value("tma_retiring")
                        .unwrap()
                })
                .collect();
            assert!(retiring[0] != retiring[1], "{retiring:?}");
            for row in tree.iter().filter(|r| r.tree.is_none_or(|t| t.depth == 1)) {
                assert_eq!(&*row.topdown, &*view.of(set, &row.counters));
            }
        }
    }

    #[test]
    fn cgroups_nest_under_their_nearest_ancestor_among_the_rows() {
        let set = CounterSet::software(String::new());
        let rows = vec![
            cgroup("/a/b", 40),
            cgroup("/", 30),
            cgroup("/c", 20),
            cgroup("/a/b/x/d", 10),
            cgroup("/a", 5),
            cgroup("cgroup:99", 1),
        ];
        let tree = arrange(rows, &set, &RowOptions::default(), false);
        assert_eq!(
            shape(&tree),
            [
                s("/", 0, 2, false),
                s("/c", 1, 0, false),
                s("/a", 1, 1, true),
                s("/a/b", 2, 1, true),
                s("/a/b/x/d", 3, 0, true),
                s("cgroup:99", 0, 0, true),
            ],
            "siblings in the rows' order (/c ran more than /a); /a/b/x/d under /a/b, the \
             nearest ancestor there is; a cgroup without a path is a root"
        );
    }
}
