//! Whom a thread waited behind: each CPU remembers its last slices (who held it, for how long),
//! and a wait that ended on that CPU is split over the slices it spans, walking back from its
//! end. The parts are charged to the waiting thread per culprit cgroup, so they add up to the
//! wait exactly, and whatever the history cannot cover is charged as not attributed, never
//! dropped. Plain functions over plain data: the kernel program runs them at every charge, and
//! the unit tests below run them here.

/// The culprit cgroups each thread keeps a slot of its own for, first come first served for the
/// thread's life; a wait behind any other cgroup is charged to [`WaitBehind::other_ns`].
pub const BEHIND_SLOTS: usize = 4;

/// How many of its latest slices each CPU remembers (a power of two).
pub const HISTORY_SLICES: usize = 16;

/// The culprit id of a CPU's idle task: no cgroup has id 0 (the root's is 1).
pub const IDLE: u64 = 0;

/// Where a thread's run-queue waits went, as charged in the kernel: the sum of every part is
/// the thread's `waited_ns`, to the nanosecond.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitBehind {
    /// The culprits' cgroup ids (0: slot free). A slot, once taken, keeps its cgroup for the
    /// thread's life, so userspace takes deltas slot by slot.
    pub cgroups: [u64; BEHIND_SLOTS],
    /// Nanoseconds waited behind each slot's cgroup.
    pub ns: [u64; BEHIND_SLOTS],
    /// Waited behind cgroups that found no free slot.
    pub other_ns: u64,
    /// Waited while the CPU ran its idle task (it was idle, or waking up for this thread).
    pub idle_ns: u64,
    /// Waited before the oldest slice the CPU remembered: not attributed.
    pub unknown_ns: u64,
    /// Waited on a CPU the thread was then moved away from (booked by the kernel at the
    /// migration): not attributed to that CPU's slices.
    pub migrated_ns: u64,
    /// Switches out while still runnable (the kernel's `nivcsw`, what `/proc/PID/sched` calls
    /// `nr_involuntary_switches`).
    pub preempted: u64,
    /// Of those, switches to a thread of another cgroup.
    pub preempted_by_other: u64,
}

impl WaitBehind {
    /// Nothing charged.
    pub const ZERO: Self = Self {
        cgroups: [0; BEHIND_SLOTS],
        ns: [0; BEHIND_SLOTS],
        other_ns: 0,
        idle_ns: 0,
        unknown_ns: 0,
        migrated_ns: 0,
        preempted: 0,
        preempted_by_other: 0,
    };

    /// Charges `ns` of wait behind `cgroup` ([`IDLE`]: the idle task).
    #[inline(always)]
    pub fn charge(&mut self, cgroup: u64, ns: u64) {
        if cgroup == IDLE {
            self.idle_ns += ns;
            return;
        }
        let mut i = 0;
        while i < BEHIND_SLOTS {
            if self.cgroups[i] == cgroup {
                self.ns[i] += ns;
                return;
            }
            if self.cgroups[i] == 0 {
                self.cgroups[i] = cgroup;
                self.ns[i] = ns;
                return;
            }
            i += 1;
        }
        self.other_ns += ns;
    }

    /// Every nanosecond charged, attributed or not: the thread's charged wait.
    pub fn total_ns(&self) -> u64 {
        let mut sum = self.other_ns + self.idle_ns + self.unknown_ns + self.migrated_ns;
        let mut i = 0;
        while i < BEHIND_SLOTS {
            sum += self.ns[i];
            i += 1;
        }
        sum
    }
}

/// One slice of a CPU's time: who held it, for how long.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// The holder's cgroup id ([`IDLE`] for the idle task).
    pub cgroup_id: u64,
    /// Its length on the scheduler's clock (ns).
    pub ns: u64,
}

/// A CPU's latest slices, newest last, ending at its latest switch.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct History {
    /// A ring of slices; `next` is where the next one goes.
    pub slices: [Slice; HISTORY_SLICES],
    /// Index of the next slice to write.
    pub next: u32,
    /// How many slices are held (at most [`HISTORY_SLICES`]).
    pub len: u32,
    /// Scheduler clock (ns) of the CPU's latest switch, where the running slice began; 0
    /// before the first.
    pub switch_ns: u64,
}

impl History {
    /// Nothing remembered.
    pub const EMPTY: Self = Self {
        slices: [Slice {
            cgroup_id: 0,
            ns: 0,
        }; HISTORY_SLICES],
        next: 0,
        len: 0,
        switch_ns: 0,
    };

    /// Ends the running slice at `now` (a switch), held by `cgroup_id`. The first switch only
    /// starts the clock.
    #[inline(always)]
    pub fn switch(&mut self, cgroup_id: u64, now: u64) {
        if self.switch_ns != 0 {
            let at = self.next as usize % HISTORY_SLICES;
            self.slices[at] = Slice {
                cgroup_id,
                ns: now.saturating_sub(self.switch_ns),
            };
            self.next = (at as u32 + 1) % HISTORY_SLICES as u32;
            if (self.len as usize) < HISTORY_SLICES {
                self.len += 1;
            }
        }
        self.switch_ns = now;
    }

    /// Splits a wait of `wait` ns that ended at the CPU's latest switch over the slices it
    /// spans, newest first, charging each part to `behind`; what the slices do not cover is
    /// charged as unknown.
    #[inline(always)]
    pub fn split(&self, wait: u64, behind: &mut WaitBehind) {
        let mut left = wait;
        let mut i = 0;
        while i < HISTORY_SLICES {
            if left == 0 || i >= self.len as usize {
                break;
            }
            let at = (self.next as usize + HISTORY_SLICES - 1 - i) % HISTORY_SLICES;
            let slice = self.slices[at];
            let part = if slice.ns < left { slice.ns } else { left };
            if part > 0 {
                behind.charge(slice.cgroup_id, part);
            }
            left -= part;
            i += 1;
        }
        behind.unknown_ns += left;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_split_over_the_slices_it_spans_newest_first() {
        let mut history = History::EMPTY;
        history.switch(7, 1_000); // starts the clock
        history.switch(7, 1_300); // B: 300
        history.switch(IDLE, 1_400); // idle: 100
        history.switch(9, 2_000); // C: 600
        let mut behind = WaitBehind::ZERO;
        history.split(650, &mut behind);
        assert_eq!((behind.cgroups[0], behind.ns[0]), (9, 600));
        assert_eq!(behind.idle_ns, 50);
        assert_eq!(behind.total_ns(), 650);
        // Longer than all the history: the rest is unknown, never dropped.
        let mut behind = WaitBehind::ZERO;
        history.split(1_500, &mut behind);
        assert_eq!(behind.ns[..2], [600, 300]);
        assert_eq!(behind.cgroups[..2], [9, 7]);
        assert_eq!((behind.idle_ns, behind.unknown_ns), (100, 500));
        assert_eq!(behind.total_ns(), 1_500);
    }

    #[test]
    fn the_ring_keeps_only_the_latest_slices_and_slots_overflow_to_other() {
        let mut history = History::EMPTY;
        history.switch(1, 10);
        for i in 0..(HISTORY_SLICES as u64 + 3) {
            history.switch(100 + i, 10 + 10 * (i + 1));
        }
        assert_eq!(history.len as usize, HISTORY_SLICES);
        let mut behind = WaitBehind::ZERO;
        history.split(10_000, &mut behind);
        // Every remembered slice is 10 ns: 16 of them, four culprits with a slot each.
        assert_eq!(behind.ns, [10; BEHIND_SLOTS]);
        let newest = 100 + HISTORY_SLICES as u64 + 2;
        assert_eq!(behind.cgroups[0], newest);
        assert_eq!(behind.other_ns, 10 * (HISTORY_SLICES - BEHIND_SLOTS) as u64);
        assert_eq!(behind.unknown_ns, 10_000 - 10 * HISTORY_SLICES as u64);
        assert_eq!(behind.total_ns(), 10_000);
        // A slot, once taken, keeps its cgroup.
        behind.charge(newest, 5);
        assert_eq!((behind.cgroups[0], behind.ns[0]), (newest, 15));
    }

    #[test]
    fn an_empty_history_attributes_nothing() {
        let mut behind = WaitBehind::ZERO;
        History::EMPTY.split(42, &mut behind);
        assert_eq!(behind.unknown_ns, 42);
        let mut started = History::EMPTY;
        started.switch(3, 99);
        assert_eq!(started.len, 0, "the first switch only starts the clock");
    }
}
