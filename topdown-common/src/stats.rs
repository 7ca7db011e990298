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
    /// A counter's count for a slice was refused as one no CPU can make: more than
    /// [`MAX_COUNT_PER_NS`] per nanosecond it ran, or less than it read before (a wrapped or
    /// reset hardware counter). That slice is charged as if the counter had been multiplexed
    /// out (its enabled time, no count and no running time), so the thread's value is scaled
    /// from its other slices, never made of the refused count.
    CounterImpossible = 11,
}

/// Number of [`Stat`] slots.
pub const NR_STATS: u32 = 12;

/// The most events a counter can count per nanosecond it ran, on any CPU: the fastest core
/// events count at most a few dozen a cycle (occupancy events such as outstanding requests;
/// TopDown slots and dispatched micro-operations count at most 12), no core clocks above
/// 7 GHz, and 64 x 7 = 448 leaves more than a factor of two. A 32-bit PMU counter's wrap
/// counted twice (2^31 at once) is refused in any slice shorter than 2 ms.
pub const MAX_COUNT_PER_NS: u64 = 1024;

/// Whether `count` events in `running_ns` nanoseconds on a counter is a count a CPU can
/// make (see [`MAX_COUNT_PER_NS`]). A count that went backwards arrives here as a wrapped
/// difference near 2^64 and is refused too.
#[inline(always)]
pub const fn possible_count(count: u64, running_ns: u64) -> bool {
    let most = if running_ns > u64::MAX / MAX_COUNT_PER_NS {
        u64::MAX
    } else {
        running_ns * MAX_COUNT_PER_NS
    };
    count <= most
}

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
        Self::CounterImpossible,
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
                | Self::CounterImpossible
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
            Self::CounterImpossible => "counts refused as impossible",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_32_bit_counter_is_impossible_in_a_short_slice_and_real_counts_are_not() {
        // A 6-wide core at 6 GHz counting every slot for 3 ms: possible.
        assert!(possible_count(6 * 6 * 3_000_000, 3_000_000));
        // The bound itself is possible, one more is not.
        assert!(possible_count(1_000 * MAX_COUNT_PER_NS, 1_000));
        assert!(!possible_count(1_000 * MAX_COUNT_PER_NS + 1, 1_000));
        // A 32-bit counter's wrap counted as 2^31 over a 1 ms slice, and a count that went
        // back by one (the wrapped difference).
        assert!(!possible_count((1 << 31) + 12_602_269, 1_000_000));
        assert!(!possible_count(u64::MAX, 1_000_000));
        // Nothing counted is always possible, and a huge running time cannot overflow.
        assert!(possible_count(0, 0));
        assert!(possible_count(u64::MAX, u64::MAX));
    }

    #[test]
    fn every_stat_is_listed_once_in_index_order_with_its_own_name() {
        for (i, stat) in Stat::ALL.iter().enumerate() {
            assert_eq!(*stat as usize, i);
        }
        let mut names: Vec<_> = Stat::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NR_STATS as usize);
    }
}
