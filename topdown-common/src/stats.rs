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
    /// [`MAX_CYCLES_PER_NS`] per nanosecond it ran for a counter of cycles,
    /// [`MAX_COUNT_PER_NS`] for any other, or less than it read before (a wrapped or
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

/// The most a counter of cycles can count per nanosecond it ran: such events (`cycles`,
/// `CPU_CLK_UNHALTED.*`, `CPU_CYCLES`, `*_CYCLES` events that count cycles with a condition)
/// count at most once a cycle of a core clock, and no core clocks above 7 GHz. A 32-bit
/// counter's wrap counted twice (2^31 at once) is refused in any slice shorter than 268 ms,
/// so in every slice the collector's 10 ms tick leaves.
pub const MAX_CYCLES_PER_NS: u64 = 8;

/// Whether `count` events in `running_ns` nanoseconds on a counter that counts at most
/// `most_per_ns` a nanosecond is a count a CPU can make ([`MAX_COUNT_PER_NS`],
/// [`MAX_CYCLES_PER_NS`]; a larger bound counts as [`MAX_COUNT_PER_NS`]). A count that went
/// backwards arrives here as a wrapped difference near 2^64 and is refused too. Running times
/// past 2^53 ns (104 days: no slice runs that long; a wrapped one does) count as 2^53, so the
/// bound, at most 2^63, is a plain multiplication: the BPF target has no 128-bit one to check
/// an overflow with, and a division per counter read would cost more than the rest of it.
#[inline(always)]
pub const fn possible_count(count: u64, running_ns: u64, most_per_ns: u64) -> bool {
    const LONGEST_NS: u64 = 1 << 53;
    let running_ns = if running_ns < LONGEST_NS {
        running_ns
    } else {
        LONGEST_NS
    };
    let most_per_ns = if most_per_ns < MAX_COUNT_PER_NS {
        most_per_ns
    } else {
        MAX_COUNT_PER_NS
    };
    count <= running_ns.wrapping_mul(most_per_ns)
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
        let any = MAX_COUNT_PER_NS;
        // A 6-wide core at 6 GHz counting every slot for 3 ms: possible.
        assert!(possible_count(6 * 6 * 3_000_000, 3_000_000, any));
        // The bound itself is possible, one more is not.
        assert!(possible_count(1_000 * any, 1_000, any));
        assert!(!possible_count(1_000 * any + 1, 1_000, any));
        // A 32-bit counter's wrap counted as 2^31 over a 1 ms slice, and a count that went
        // back by one (the wrapped difference).
        assert!(!possible_count((1 << 31) + 12_602_269, 1_000_000, any));
        assert!(!possible_count(u64::MAX, 1_000_000, any));
        // Nothing counted is always possible; a huge running time cannot overflow, and a bound
        // above any event's is any event's.
        assert!(possible_count(0, 0, any));
        assert!(possible_count(1 << 63, u64::MAX, any));
        assert!(!possible_count((1 << 63) + 1, u64::MAX, any));
        assert!(!possible_count(1_000 * any + 1, 1_000, u64::MAX));
    }

    #[test]
    fn a_wrap_of_cycles_is_impossible_in_any_slice_a_tick_leaves() {
        let cycles = MAX_CYCLES_PER_NS;
        // The arm64 guest's case: 2^31 + 12.6 million cycles over a 38.5 ms slice passes the
        // bound of any event, not the bound of cycles.
        let seen = (1 << 31) + 12_602_269;
        assert!(possible_count(seen, 38_500_000, MAX_COUNT_PER_NS));
        assert!(!possible_count(seen, 38_500_000, cycles));
        // A 7 GHz core's cycles over a 10 ms tick's slice are possible; the wrap in the
        // longest slice the bound refuses it in (268 ms) is not.
        assert!(possible_count(7 * 10_000_000, 10_000_000, cycles));
        assert!(!possible_count(1 << 31, 268_000_000, cycles));
        // A bound of nothing refuses every count but none.
        assert!(possible_count(0, 1_000, 0));
        assert!(!possible_count(1, 1_000, 0));
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
