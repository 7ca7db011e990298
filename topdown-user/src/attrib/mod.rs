//! Turns the kernel's cumulative per-thread totals into usage per window and per run, for the
//! threads the user asked about.

pub mod cgroups;
pub mod containers;
pub mod cores;
pub mod groups;
pub mod target;
pub mod usage;

use std::{collections::HashMap, time::Duration};

use topdown_common::{cgroup::CgroupTotals, thread::ThreadTotals};

use self::{
    target::Target,
    usage::{CgroupUsage, CounterValue, ThreadUsage},
};
use crate::collect::{Snapshot, Stats};

/// Usage over one window of time.
#[derive(Clone, Debug)]
pub struct Window {
    /// Seconds from the start of collection to the window's start.
    pub start: Duration,
    /// Length of the window.
    pub length: Duration,
    /// Reported threads that ran (or died) in the window.
    pub threads: Vec<ThreadUsage>,
    /// Idle on-CPU clock per CPU.
    pub idle: Vec<CounterValue>,
    /// Every cgroup charged in the window (each for itself, not its descendants).
    pub cgroups: Vec<CgroupUsage>,
    /// Kernel-side losses and activity since collection started.
    pub stats: Stats,
}

/// Keeps the previous snapshot's totals to turn the next one into deltas.
#[derive(Debug)]
pub struct Attributor {
    nr_counters: usize,
    target: Target,
    /// Latest cumulative totals of live, reported threads.
    live: HashMap<u32, ThreadTotals>,
    /// Final totals of reported threads that died.
    exited: Vec<ThreadTotals>,
    /// Idle totals per CPU at the previous snapshot.
    idle: Vec<ThreadTotals>,
    /// cgroup totals at the previous snapshot, by id.
    cgroups: HashMap<u64, CgroupTotals>,
    /// Final totals of removed cgroups whose kernel entries were freed.
    retired: Vec<CgroupTotals>,
    started: Option<std::time::Instant>,
    last: Option<std::time::Instant>,
}

impl Attributor {
    /// Attributes a set of `nr_counters` counters to the threads `target` keeps.
    pub fn new(nr_counters: usize, target: Target) -> Self {
        Self {
            nr_counters,
            target,
            live: HashMap::new(),
            exited: Vec::new(),
            idle: Vec::new(),
            cgroups: HashMap::new(),
            retired: Vec::new(),
            started: None,
            last: None,
        }
    }

    /// Marks the start of collection (before the first snapshot).
    pub fn start(&mut self, at: std::time::Instant) {
        self.started = Some(at);
        self.last = Some(at);
    }

    /// Usage since the previous snapshot (or since [`Attributor::start`]).
    pub fn window(&mut self, snapshot: &Snapshot) -> Window {
        let started = *self.started.get_or_insert(snapshot.at);
        let last = self.last.replace(snapshot.at).unwrap_or(started);
        let mut threads = Vec::new();
        let mut still_live = HashMap::with_capacity(self.live.len());
        for now in &snapshot.live {
            if !self.target.keeps(now) {
                continue;
            }
            let usage = ThreadUsage::between(self.live.get(&now.tid), now, self.nr_counters);
            if !usage.is_idle() {
                threads.push(usage);
            }
            still_live.insert(now.tid, *now);
        }
        for dead in &snapshot.exited {
            if !self.target.keeps(dead) {
                continue;
            }
            threads.retain(|t| t.tid != dead.tid);
            threads.push(ThreadUsage::between(
                self.live.get(&dead.tid),
                dead,
                self.nr_counters,
            ));
            still_live.remove(&dead.tid);
            self.exited.push(*dead);
        }
        self.live = still_live;

        let idle = snapshot
            .idle
            .iter()
            .enumerate()
            .map(|(cpu, now)| {
                ThreadUsage::between(self.idle.get(cpu), now, self.nr_counters)
                    .counters
                    .first()
                    .copied()
                    .unwrap_or_default()
            })
            .collect();
        self.idle.clone_from(&snapshot.idle);
        let cgroups = snapshot
            .cgroups
            .iter()
            .map(|now| CgroupUsage::between(self.cgroups.get(&now.id), now, self.nr_counters))
            .filter(|usage| usage.switches > 0 || usage.on_cpu_ns() > 0)
            .collect();
        self.cgroups = snapshot.cgroups.iter().map(|c| (c.id, *c)).collect();
        Window {
            start: last.duration_since(started),
            length: snapshot.at.duration_since(last),
            threads,
            idle,
            cgroups,
            stats: snapshot.stats,
        }
    }

    /// Keeps the final totals of the removed cgroups `ids` (as of the latest window) for the
    /// run's totals, so that their kernel entries can be freed; returns the ids it kept.
    pub fn retire_cgroups(&mut self, ids: impl IntoIterator<Item = u64>) -> Vec<u64> {
        ids.into_iter()
            .filter_map(|id| self.cgroups.remove(&id))
            .map(|totals| {
                self.retired.push(totals);
                totals.id
            })
            .collect()
    }

    /// Usage over the whole run so far, exited threads included. Call after
    /// [`Attributor::window`] for the latest snapshot.
    pub fn run_totals(&self, snapshot: &Snapshot) -> Window {
        let started = self.started.unwrap_or(snapshot.at);
        let threads = self
            .live
            .values()
            .chain(&self.exited)
            .map(|totals| ThreadUsage::between(None, totals, self.nr_counters))
            .filter(|usage| !usage.is_idle())
            .collect();
        let idle = self
            .idle
            .iter()
            .map(|now| {
                ThreadUsage::between(None, now, self.nr_counters)
                    .counters
                    .first()
                    .copied()
                    .unwrap_or_default()
            })
            .collect();
        let cgroups = self
            .cgroups
            .values()
            .chain(&self.retired)
            .map(|now| CgroupUsage::between(None, now, self.nr_counters))
            .filter(|usage| usage.switches > 0 || usage.on_cpu_ns() > 0)
            .collect();
        Window {
            start: Duration::ZERO,
            length: snapshot.at.duration_since(started),
            threads,
            idle,
            cgroups,
            stats: snapshot.stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::attrib::target::Target;

    fn totals(tid: u32, tgid: u32, ns: u64, exited: bool) -> ThreadTotals {
        let mut t = ThreadTotals::new(tid, tgid);
        t.charged.counts[0] = ns;
        t.charged.enabled_ns[0] = ns;
        t.charged.running_ns[0] = ns;
        t.switches = 1;
        if exited {
            t.flags = ThreadTotals::FLAG_EXITED;
        }
        t
    }

    fn snapshot(at: Instant, live: Vec<ThreadTotals>, exited: Vec<ThreadTotals>) -> Snapshot {
        Snapshot {
            at,
            live,
            exited,
            idle: vec![],
            cgroups: vec![],
            removed_cgroups: vec![],
            stats: Stats::default(),
        }
    }

    #[test]
    fn windows_are_deltas_and_exits_are_kept_for_the_run() {
        let t0 = Instant::now();
        let mut attrib = Attributor::new(1, Target::Pids(vec![10]));
        attrib.start(t0);
        let s1 = snapshot(
            t0 + Duration::from_secs(1),
            vec![
                totals(10, 10, 100, false),
                totals(11, 10, 50, false),
                totals(99, 99, 7, false),
            ],
            vec![],
        );
        let w1 = attrib.window(&s1);
        assert_eq!(w1.threads.len(), 2, "pid 99 is filtered out");
        assert_eq!(w1.length, Duration::from_secs(1));

        let s2 = snapshot(
            t0 + Duration::from_secs(2),
            vec![totals(10, 10, 300, false)],
            vec![totals(11, 10, 80, true)],
        );
        let w2 = attrib.window(&s2);
        let by_tid = |w: &Window, tid| w.threads.iter().find(|t| t.tid == tid).cloned().unwrap();
        assert_eq!(by_tid(&w2, 10).on_cpu_ns(), 200);
        let dead = by_tid(&w2, 11);
        assert_eq!(dead.on_cpu_ns(), 30);
        assert!(dead.exited);
        assert_eq!(w2.start, Duration::from_secs(1));

        let run = attrib.run_totals(&s2);
        assert_eq!(by_tid(&run, 10).on_cpu_ns(), 300);
        assert_eq!(by_tid(&run, 11).on_cpu_ns(), 80);
        assert_eq!(run.length, Duration::from_secs(2));
    }
}
