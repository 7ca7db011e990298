//! Counter readings as `bpf_perf_event_read_value` returns them, for a whole counter set.

use crate::MAX_COUNTERS;

/// Cumulative values of every counter of a set: the count, and the nanoseconds the counter was
/// enabled and running (they differ when the kernel multiplexes the counter).
///
/// Used twice: as this CPU's previous readings (raw counter values) and as a thread's charged
/// totals (sums of per-slice deltas).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readings {
    /// Counter values, one per counter of the set.
    pub counts: [u64; MAX_COUNTERS],
    /// Nanoseconds each counter was enabled.
    pub enabled_ns: [u64; MAX_COUNTERS],
    /// Nanoseconds each counter was actually counting.
    pub running_ns: [u64; MAX_COUNTERS],
}

impl Readings {
    /// All counters at zero.
    pub const ZERO: Self = Self {
        counts: [0; MAX_COUNTERS],
        enabled_ns: [0; MAX_COUNTERS],
        running_ns: [0; MAX_COUNTERS],
    };
}

#[cfg(feature = "user")]
// SAFETY: repr(C), only u64 arrays, no padding.
unsafe impl aya::Pod for Readings {}
