//! What the kernel programs could not do, counted per CPU so nothing is lost silently.

/// Index into the per-CPU `STATS` array. Every loss the kernel side can suffer has one.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    /// A slice could not be charged: the `THREADS` map was full.
    ThreadMapFull = 0,
    /// A thread record (a dead thread's final totals, or a thread's totals as it left a
    /// cgroup) could not be sent: the `THREAD_RECORDS` ring buffer was full.
    RecordRingFull = 1,
    /// `bpf_perf_event_read_value` failed for a counter (missing or foreign-CPU event).
    CounterReadError = 2,
    /// A counter was enabled but not running during a slice (multiplexed out): its count
    /// for that slice was not charged.
    CounterNotRunning = 3,
    /// Context switches seen (not a loss: lets userspace check the others against a total).
    Switches = 4,
    /// Collector ticks that charged a running thread's slice so far.
    Ticks = 5,
    /// A followed process forked a child that could not be followed: `FOLLOWED` was full.
    FollowMapFull = 6,
    /// A removed cgroup's name could not be sent: the `CGROUPS_REMOVED` ring buffer was full.
    CgroupNameRingFull = 7,
    /// Charges whose thread was not the one the CPU's last reported switch went to (not a
    /// loss): the kernel reports some threads switched to and never switched out (on these
    /// VMs, PID 1's tokio workers). The thread's time stays exact (its own runtime), but the
    /// counter deltas since the CPU's previous charge include the unreported thread's share.
    SwitchesUnreported = 8,
    /// Times a CPU read its set's counters (not a loss; a set of on-CPU time alone reads
    /// none): every charge reads them, except a switch between two threads of one cgroup when
    /// only cgroups are reported. Counters read = this times the set's counters beyond the
    /// clock.
    CounterReads = 9,
    /// A thread charged since the last read could not be listed: the `CHARGED` ring buffer
    /// was full (not a loss: the next read then reads the whole thread map).
    ChargedListFull = 10,
}

/// Number of [`Stat`] slots.
pub const NR_STATS: u32 = 11;

impl Stat {
    /// Every stat, in index order.
    pub const ALL: [Self; NR_STATS as usize] = [
        Self::ThreadMapFull,
        Self::RecordRingFull,
        Self::CounterReadError,
        Self::CounterNotRunning,
        Self::Switches,
        Self::Ticks,
        Self::FollowMapFull,
        Self::CgroupNameRingFull,
        Self::SwitchesUnreported,
        Self::CounterReads,
        Self::ChargedListFull,
    ];

    /// Whether a non-zero value of this stat means lost or uncharged data.
    pub const fn is_loss(self) -> bool {
        matches!(
            self,
            Self::ThreadMapFull
                | Self::RecordRingFull
                | Self::CounterReadError
                | Self::CounterNotRunning
                | Self::FollowMapFull
                | Self::CgroupNameRingFull
        )
    }

    /// Name shown to the user.
    pub const fn name(self) -> &'static str {
        match self {
            Self::ThreadMapFull => "thread map full",
            Self::RecordRingFull => "thread record ring full",
            Self::CounterReadError => "counter read errors",
            Self::CounterNotRunning => "counter not running",
            Self::Switches => "context switches",
            Self::Ticks => "ticks",
            Self::FollowMapFull => "follow map full",
            Self::CgroupNameRingFull => "cgroup name ring full",
            Self::SwitchesUnreported => "switches the kernel did not report",
            Self::CounterReads => "counter set reads",
            Self::ChargedListFull => "charged thread list full",
        }
    }
}
