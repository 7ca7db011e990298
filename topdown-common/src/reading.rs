//! Counter readings as `bpf_perf_event_read_value` returns them, for a whole counter set.

use crate::MAX_COUNTERS;

/// One counter's cumulative value and the nanoseconds it was enabled and running (they differ
/// when the kernel multiplexes the counter). Kept together so that one slot is one place in
/// memory, and so that a record can carry only the first `n` slots of a set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// Counter value (events, cycles or nanoseconds).
    pub count: u64,
    /// Nanoseconds the counter was enabled.
    pub enabled_ns: u64,
    /// Nanoseconds it was actually counting.
    pub running_ns: u64,
}

impl Reading {
    /// Nothing counted.
    pub const ZERO: Self = Self {
        count: 0,
        enabled_ns: 0,
        running_ns: 0,
    };

    /// A reading as `read(2)` of a perf event with both times returns it:
    /// `[count, enabled ns, running ns]` (also how a recording writes one).
    pub const fn from_values(values: [u64; 3]) -> Self {
        Self {
            count: values[0],
            enabled_ns: values[1],
            running_ns: values[2],
        }
    }

    /// `[count, enabled ns, running ns]`.
    pub const fn values(self) -> [u64; 3] {
        [self.count, self.enabled_ns, self.running_ns]
    }

    /// What was counted since `before`, a reading of the same counter: each field's
    /// difference, 0 where a field went back (a counter reset, or a reading of a thread
    /// that was re-created under the same id).
    #[must_use]
    pub const fn since(self, before: Self) -> Self {
        Self {
            count: self.count.saturating_sub(before.count),
            enabled_ns: self.enabled_ns.saturating_sub(before.enabled_ns),
            running_ns: self.running_ns.saturating_sub(before.running_ns),
        }
    }

    /// The count scaled to the whole enabled time, as perf scales multiplexed counters
    /// (`count * enabled / running`); `None` when the counter was enabled and never running
    /// (perf's `<not counted>`: another user held the PMU, or its group could not be
    /// scheduled): never a 0 made of it. (User space only: the kernel side has no floats.)
    #[cfg(feature = "user")]
    pub fn scaled(self) -> Option<f64> {
        if self.never_ran() {
            return None;
        }
        if self.running_ns >= self.enabled_ns {
            return Some(self.count as f64);
        }
        Some(self.count as f64 * self.enabled_ns as f64 / self.running_ns as f64)
    }

    /// Whether the counter was enabled and never running.
    pub const fn never_ran(self) -> bool {
        self.enabled_ns > 0 && self.running_ns == 0
    }

    /// Fraction of the enabled time the counter was running (1.0 when never enabled).
    #[cfg(feature = "user")]
    pub fn running_fraction(self) -> f64 {
        if self.enabled_ns == 0 {
            return 1.0;
        }
        self.running_ns as f64 / self.enabled_ns as f64
    }

    /// The sum of two readings (two slices, two CPUs of a core), saturating.
    #[must_use]
    pub const fn plus(self, other: Self) -> Self {
        Self {
            count: self.count.saturating_add(other.count),
            enabled_ns: self.enabled_ns.saturating_add(other.enabled_ns),
            running_ns: self.running_ns.saturating_add(other.running_ns),
        }
    }
}

/// Cumulative values of every counter slot of a set.
///
/// Used twice: as this CPU's previous readings (raw counter values) and as a thread's charged
/// totals (sums of per-slice deltas). Slot 0 is the on-CPU clock, which the kernel program
/// takes from the clock at each charge (no counter read): enabled and running equal its count.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readings {
    /// One reading per slot.
    pub slots: [Reading; MAX_COUNTERS],
}

impl Readings {
    /// All counters at zero.
    pub const ZERO: Self = Self {
        slots: [Reading::ZERO; MAX_COUNTERS],
    };
}

#[cfg(feature = "user")]
// SAFETY: repr(C), only u64s, no padding.
unsafe impl aya::Pod for Readings {}
