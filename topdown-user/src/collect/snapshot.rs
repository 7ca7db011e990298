//! What one read of the kernel's books returns.

use std::time::Instant;

use topdown_common::{
    cgroup::CgroupTotals,
    stats::{NR_STATS, Stat},
    thread::ThreadTotals,
};

/// Cumulative totals as of one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When it was read.
    pub at: Instant,
    /// Live threads' totals since the collector started (one entry per tid).
    pub live: Vec<ThreadTotals>,
    /// Final totals of threads that died since the previous snapshot.
    pub exited: Vec<ThreadTotals>,
    /// Each CPU's idle task, by CPU number.
    pub idle: Vec<ThreadTotals>,
    /// Every cgroup charged since the collector started (removed ones included).
    pub cgroups: Vec<CgroupTotals>,
    /// Ids and paths of cgroups removed since the previous snapshot.
    pub removed_cgroups: Vec<(u64, String)>,
    /// Loss and activity counters, summed over CPUs.
    pub stats: Stats,
}

/// The kernel side's loss and activity counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats([u64; NR_STATS as usize]);

impl Stats {
    /// The value of one counter.
    pub const fn get(&self, stat: Stat) -> u64 {
        self.0[stat as usize]
    }

    /// Sets one counter.
    pub const fn set(&mut self, stat: Stat, value: u64) {
        self.0[stat as usize] = value;
    }

    /// Every counter that records a loss, with its value.
    pub fn losses(&self) -> impl Iterator<Item = (Stat, u64)> + '_ {
        Stat::ALL
            .into_iter()
            .filter(|stat| stat.is_loss())
            .map(|stat| (stat, self.get(stat)))
    }

    /// Whether anything was lost.
    pub fn lost_anything(&self) -> bool {
        self.losses().any(|(_, value)| value > 0)
    }
}
