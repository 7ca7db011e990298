//! Exited threads, in rows bounded by what a report shows, not by how many threads exited: the
//! hottest `cap` threads keep their own rows; the others fold into one row per process, and
//! processes beyond `cap` into one row, so there are at most `2 * cap + 1` rows. Every
//! nanosecond stays. The run's totals keep one of these for the whole run, and each window one
//! for the threads that exited in it (so churn cannot flood interval output).

use std::{
    cmp::{Ordering, Reverse},
    collections::{BinaryHeap, HashMap},
};
use topdown_common::thread::{Pid, Tid};

use super::usage::ThreadUsage;

/// A thread's row, ordered by on-CPU time (then tid, for a total order).
#[derive(Debug)]
struct ByOnCpu(ThreadUsage);

impl Ord for ByOnCpu {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.0.on_cpu_ns(), self.0.tid).cmp(&(other.0.on_cpu_ns(), other.0.tid))
    }
}

impl PartialOrd for ByOnCpu {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for ByOnCpu {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for ByOnCpu {}

/// Exited threads' usage (over the run, or over a window).
#[derive(Debug)]
pub struct ExitedThreads {
    cap: usize,
    /// The hottest exited threads, coldest on top.
    threads: BinaryHeap<Reverse<ByOnCpu>>,
    /// Threads beyond `cap`, folded per process.
    processes: HashMap<Pid, ThreadUsage>,
    /// Processes beyond `cap`, folded into one row.
    others: Option<ThreadUsage>,
}

impl ExitedThreads {
    /// Keeps at most `cap` threads' own rows and `cap` process rows (at least 1 each).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            threads: BinaryHeap::new(),
            processes: HashMap::new(),
            others: None,
        }
    }

    /// Adds a thread that died.
    pub fn add(&mut self, thread: ThreadUsage) {
        self.threads.push(Reverse(ByOnCpu(thread)));
        if self.threads.len() > self.cap
            && let Some(Reverse(ByOnCpu(coldest))) = self.threads.pop()
        {
            self.fold(coldest);
        }
    }

    fn fold(&mut self, thread: ThreadUsage) {
        let pid = thread.pid;
        let row = if self.processes.contains_key(&pid) || self.processes.len() < self.cap {
            self.processes
                .entry(pid)
                .or_insert_with(|| folded_row(pid, &thread))
        } else {
            self.others
                .get_or_insert_with(|| folded_row(Pid(0), &thread))
        };
        row.absorb(&thread);
        // A fold lives for the run, whatever number of threads it takes.
        row.behind.bound_for_run();
    }

    /// Every row: threads, then per-process folds, then the rest, each fold named for how many
    /// threads it holds.
    pub fn rows(&self) -> impl Iterator<Item = ThreadUsage> + '_ {
        let folds = self.processes.values().chain(&self.others).map(|row| {
            let mut row = row.clone();
            row.comm = fold_name(row.pid, row.folded).into();
            row
        });
        self.threads
            .iter()
            .map(|Reverse(ByOnCpu(thread))| thread.clone())
            .chain(folds)
    }

    /// Every row, hottest threads first, then the folds by pid, then the rest (a window's
    /// exits: nothing cloned).
    pub fn into_rows(self) -> impl Iterator<Item = ThreadUsage> {
        let mut processes: Vec<ThreadUsage> = self.processes.into_values().collect();
        processes.sort_unstable_by_key(|row| row.pid);
        let threads = self
            .threads
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(ByOnCpu(t))| t);
        threads.chain(processes).chain(self.others).map(|mut row| {
            if row.folded > 0 {
                row.comm = fold_name(row.pid, row.folded).into();
            }
            row
        })
    }
}

/// The name of a row folding `folded` exited threads of process `pid` (0: of several).
pub fn fold_name(pid: Pid, folded: u64) -> String {
    if pid == Pid(0) {
        format!("(exited threads of other processes: {folded})")
    } else {
        format!("(exited threads: {folded})")
    }
}

/// An empty exited row for process `pid`, ready to absorb threads.
fn folded_row(pid: Pid, like: &ThreadUsage) -> ThreadUsage {
    ThreadUsage {
        tid: Tid(0),
        pid,
        comm: compact_str::CompactString::default(),
        cgroup_id: like.cgroup_id,
        switches: 0,
        on_cpu: std::time::Duration::ZERO,
        waited: std::time::Duration::ZERO,
        behind: Default::default(),
        counters: vec![Default::default(); like.counters.len()],
        exited: true,
        folded: 0,
    }
}

#[cfg(test)]
mod tests {
    use topdown_common::cgroup::CgroupId;

    use super::*;
    use crate::attrib::usage::CounterValue;

    fn thread(tid: u32, pid: u32, ns: u64) -> ThreadUsage {
        ThreadUsage {
            tid: Tid(tid),
            pid: Pid(pid),
            comm: format!("t{tid}").into(),
            cgroup_id: CgroupId(1),
            switches: 1,
            on_cpu: std::time::Duration::from_nanos(ns),
            waited: std::time::Duration::ZERO,
            behind: Default::default(),
            counters: vec![CounterValue::new(ns, ns, ns)],
            exited: true,
            folded: 0,
        }
    }

    #[test]
    fn hottest_keep_their_rows_and_the_rest_fold_without_losing_time() {
        let mut exited = ExitedThreads::new(2);
        let mut total = 0;
        for tid in 1..=10u32 {
            let pid = 100 + tid % 3;
            let ns = u64::from(tid) * 1000;
            total += ns;
            exited.add(thread(tid, pid, ns));
        }
        let rows: Vec<ThreadUsage> = exited.rows().collect();
        let own: Vec<u32> = rows
            .iter()
            .filter(|r| r.folded == 0)
            .map(|r| r.tid.0)
            .collect();
        assert_eq!(own.len(), 2);
        assert!(own.contains(&10) && own.contains(&9), "{own:?}");
        let folds: Vec<&ThreadUsage> = rows.iter().filter(|r| r.folded > 0).collect();
        assert_eq!(folds.len(), 3, "two processes, then the others: {folds:?}");
        assert_eq!(folds.iter().map(|r| r.folded).sum::<u64>(), 8);
        assert!(
            folds
                .iter()
                .any(|r| r.pid == Pid(0) && r.comm.contains("other processes"))
        );
        assert_eq!(rows.iter().map(ThreadUsage::on_cpu_ns).sum::<u64>(), total);
        assert_eq!(rows.iter().map(|r| r.switches).sum::<u64>(), 10);
    }
}
