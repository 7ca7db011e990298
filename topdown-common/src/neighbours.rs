//! Whom a thread waited behind: each CPU remembers its last slices (who held it, for how long),
//! and a wait that ended on that CPU is split over the slices it spans, walking back from its
//! end. The parts are charged to the waiting thread per culprit cgroup, so they add up to the
//! wait exactly, and whatever the history cannot cover is charged as not attributed, never
//! dropped. Plain functions over plain data: the kernel program runs them at every charge, and
//! the unit tests below run them here.

/// The culprit cgroups each thread keeps a slot of its own for; when all are taken, a new
/// culprit takes the slot charged least recently (in waits: every part of one wait is stamped
/// alike), and what that slot held moves to [`WaitRest::other_ns`]. So a culprit of every wait
/// keeps its slot while passing ones (kernel threads) take turns in the others. One comparison
/// a slot: the kernel's verifier walks every path of the split, at every part of a wait.
pub const BEHIND_SLOTS: usize = 4;

/// The culprit threads each thread keeps a slot of its own for, recycled the same way (what an
/// evicted thread's slot held is not kept: the threads' parts are a split of the cgroups', and
/// only the named ones are shown).
pub const BEHIND_THREADS: usize = 4;

/// How many of its latest slices each CPU remembers (a power of two).
pub const HISTORY_SLICES: usize = 8;

/// The culprit id of a CPU's idle task: no cgroup has id 0 (the root's is 1).
pub const IDLE: u64 = 0;

/// One culprit slot: whom (a cgroup id or a tid; 0: free), how long the thread waited behind
/// it since the slot was given to it, and when (in the thread's count of charged parts).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Culprit {
    /// The cgroup id or tid; 0 while the slot is free.
    pub id: u64,
    /// Nanoseconds waited behind it since it took the slot.
    pub ns: u64,
    /// [`WaitBehind::splits`] when it took the slot: a slot given to another culprit (or to
    /// the same one again) since a read has another, so userspace takes a delta only within
    /// one assignment.
    pub assigned: u32,
    /// [`WaitBehind::splits`] when it was last charged.
    pub last: u32,
}

impl Culprit {
    /// A free slot.
    pub const FREE: Self = Self {
        id: 0,
        ns: 0,
        assigned: 0,
        last: 0,
    };
}

/// Charges `ns` behind `id` in `slots` in wait `seq`: to its slot, else a free one, else the
/// one [`BEHIND_SLOTS`] says to give up, whose nanoseconds are returned (they leave the slots).
#[inline(always)]
fn charge_slot<const N: usize>(slots: &mut [Culprit; N], id: u64, ns: u64, seq: u32) -> u64 {
    // Its own slot or a free one: what nearly every charge finds, so nothing else is looked at.
    let mut i = 0;
    while i < N {
        if slots[i].id == id {
            slots[i].ns += ns;
            slots[i].last = seq;
            return 0;
        }
        if slots[i].id == 0 {
            slots[i] = Culprit {
                id,
                ns,
                assigned: seq,
                last: seq,
            };
            return 0;
        }
        i += 1;
    }
    // The slot to give up: the one charged least recently (every part of one wait carries the
    // same stamp, so a culprit of the latest wait is never given up for another of it).
    let mut give = 0;
    let mut oldest = seq.wrapping_sub(slots[0].last);
    let mut i = 1;
    while i < N {
        let age = seq.wrapping_sub(slots[i].last);
        if age > oldest {
            give = i;
            oldest = age;
        }
        i += 1;
    }
    let slot = &mut slots[give % N];
    let evicted = slot.ns;
    *slot = Culprit {
        id,
        ns,
        assigned: seq,
        last: seq,
    };
    evicted
}

/// The parts of a thread's waits no culprit slot holds, and its preemptions: what its split
/// keeps besides the slots, in the kernel's totals and in userspace's deltas alike.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitRest {
    /// Waited behind cgroups whose slot was given to another culprit since.
    pub other_ns: u64,
    /// Waited while the CPU ran its idle task (it was idle, or waking up for this thread).
    pub idle_ns: u64,
    /// Waited before the oldest slice the CPU remembered: not attributed.
    pub unknown_ns: u64,
    /// Waited on a CPU the thread was then moved away from (booked by the kernel at the
    /// migration): not attributed to that CPU's slices.
    pub migrated_ns: u64,
    /// Switches out while still runnable (the kernel's `nivcsw`, what `/proc/PID/status` calls
    /// `nonvoluntary_ctxt_switches`).
    pub preempted: u64,
    /// Of those, switches to a thread of another cgroup.
    pub preempted_by_other: u64,
}

impl WaitRest {
    /// Nothing charged.
    pub const ZERO: Self = Self {
        other_ns: 0,
        idle_ns: 0,
        unknown_ns: 0,
        migrated_ns: 0,
        preempted: 0,
        preempted_by_other: 0,
    };

    /// The nanoseconds of wait it holds.
    pub const fn ns(&self) -> u64 {
        self.other_ns + self.idle_ns + self.unknown_ns + self.migrated_ns
    }

    /// Its growth since `before`, part by part.
    pub const fn since(&self, before: &Self) -> Self {
        Self {
            other_ns: self.other_ns.saturating_sub(before.other_ns),
            idle_ns: self.idle_ns.saturating_sub(before.idle_ns),
            unknown_ns: self.unknown_ns.saturating_sub(before.unknown_ns),
            migrated_ns: self.migrated_ns.saturating_sub(before.migrated_ns),
            preempted: self.preempted.saturating_sub(before.preempted),
            preempted_by_other: self
                .preempted_by_other
                .saturating_sub(before.preempted_by_other),
        }
    }

    /// Adds `other`'s, part by part.
    pub const fn add(&mut self, other: &Self) {
        self.other_ns += other.other_ns;
        self.idle_ns += other.idle_ns;
        self.unknown_ns += other.unknown_ns;
        self.migrated_ns += other.migrated_ns;
        self.preempted += other.preempted;
        self.preempted_by_other += other.preempted_by_other;
    }
}

/// Where a thread's run-queue waits went, as charged in the kernel: the cgroup slots and the
/// rest's nanoseconds add up to the thread's `waited_ns`, to the nanosecond.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitBehind {
    /// The culprit cgroups with a slot.
    pub cgroups: [Culprit; BEHIND_SLOTS],
    /// The culprit threads with a slot (a split of the cgroups' parts).
    pub threads: [Culprit; BEHIND_THREADS],
    /// The rest of the waits, and the preemptions.
    pub rest: WaitRest,
    /// Waits split so far (wrapping): the slots' clock.
    pub splits: u32,
    /// Padding (explicit: the value is plain old data).
    pub pad: u32,
}

impl WaitBehind {
    /// Nothing charged.
    pub const ZERO: Self = Self {
        cgroups: [Culprit::FREE; BEHIND_SLOTS],
        threads: [Culprit::FREE; BEHIND_THREADS],
        rest: WaitRest::ZERO,
        splits: 0,
        pad: 0,
    };

    /// Starts charging the parts of one more wait.
    #[inline(always)]
    pub fn begin_split(&mut self) {
        self.splits = self.splits.wrapping_add(1);
    }

    /// Charges `ns` of wait behind thread `tid` of `cgroup` ([`IDLE`]: the idle task).
    #[inline(always)]
    pub fn charge(&mut self, cgroup: u64, tid: u32, ns: u64) {
        if cgroup == IDLE {
            self.rest.idle_ns += ns;
            return;
        }
        let evicted = charge_slot(&mut self.cgroups, cgroup, ns, self.splits);
        if evicted > 0 {
            self.rest.other_ns += evicted;
        }
        charge_slot(&mut self.threads, u64::from(tid), ns, self.splits);
    }

    /// Every nanosecond charged, attributed or not: the thread's charged wait.
    pub fn total_ns(&self) -> u64 {
        let mut sum = self.rest.ns();
        let mut i = 0;
        while i < BEHIND_SLOTS {
            sum += self.cgroups[i].ns;
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
    /// The holder's tid (0 for the idle task).
    pub tid: u32,
    /// Padding (explicit: the value is plain old data).
    pub pad: u32,
}

/// A CPU's latest slices, newest last, ending at its latest switch.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct History {
    /// A ring of slices; `next` is where the next one goes.
    pub slices: [Slice; HISTORY_SLICES],
    /// Index of the next slice to write.
    pub next: u32,
    /// Padding (explicit: the value is plain old data).
    pub pad: u32,
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
            tid: 0,
            pad: 0,
        }; HISTORY_SLICES],
        next: 0,
        pad: 0,
        switch_ns: 0,
    };

    /// Ends the running slice at `now` (a switch), held by thread `tid` of `cgroup_id`. The
    /// first switch only starts the clock.
    #[inline(always)]
    pub fn switch(&mut self, cgroup_id: u64, tid: u32, now: u64) {
        if self.switch_ns != 0 {
            let at = self.next as usize % HISTORY_SLICES;
            self.slices[at] = Slice {
                cgroup_id,
                ns: now.saturating_sub(self.switch_ns),
                tid,
                pad: 0,
            };
            self.next = (at as u32 + 1) % HISTORY_SLICES as u32;
        }
        self.switch_ns = now;
    }

    /// Splits a wait of `wait` ns that ended at the CPU's latest switch over the slices it
    /// spans, newest first, charging each part to `behind`; what the slices do not cover is
    /// charged as unknown.
    #[inline(always)]
    pub fn split(&self, wait: u64, behind: &mut WaitBehind) {
        behind.begin_split();
        // Most waits are one part: a thread woken during the newest slice, switched in as it
        // ended. That part is charged with no walk: in the kernel the walk's loop costs more
        // than the part (the compiler sets up every slot's address before it, on the stack).
        let newest = &self.slices[(self.next as usize + HISTORY_SLICES - 1) % HISTORY_SLICES];
        if wait <= newest.ns {
            behind.charge(newest.cgroup_id, newest.tid, wait);
            return;
        }
        self.walk(wait, behind);
    }

    /// Splits a wait of `wait` ns that ended while this CPU's running slice (begun at its
    /// latest switch) was `running_ns` long, held by thread `tid` of `cgroup_id`: the running
    /// slice takes its part first, then the slices before it as in [`History::split`]. For a
    /// wait the kernel booked as it moved the thread off this CPU, read from the CPU doing the
    /// move (which holds this CPU's run queue, so this CPU switches nothing meanwhile).
    #[inline(always)]
    pub fn split_running(
        &self,
        wait: u64,
        (cgroup_id, tid): (u64, u32),
        running_ns: u64,
        behind: &mut WaitBehind,
    ) {
        behind.begin_split();
        let part = if running_ns < wait { running_ns } else { wait };
        if part > 0 {
            behind.charge(cgroup_id, tid, part);
        }
        self.walk(wait - part, behind);
    }

    /// Charges `wait` ns over the ended slices, newest first; what they do not cover is
    /// unknown.
    #[inline(always)]
    fn walk(&self, wait: u64, behind: &mut WaitBehind) {
        let mut left = wait;
        let mut i = 0;
        // Slices not yet written hold 0 ns: they take no part, and the walk goes on to the end.
        while i < HISTORY_SLICES && left > 0 {
            let at = (self.next as usize + HISTORY_SLICES - 1 - i) % HISTORY_SLICES;
            let slice = &self.slices[at];
            let part = if slice.ns < left { slice.ns } else { left };
            if part > 0 {
                behind.charge(slice.cgroup_id, slice.tid, part);
                left -= part;
            }
            i += 1;
        }
        if left > 0 {
            behind.rest.unknown_ns += left;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_split_over_the_slices_it_spans_newest_first() {
        let mut history = History::EMPTY;
        history.switch(7, 70, 1_000); // starts the clock
        history.switch(7, 70, 1_300); // B: 300
        history.switch(IDLE, 0, 1_400); // idle: 100
        history.switch(9, 90, 2_000); // C: 600
        let mut behind = WaitBehind::ZERO;
        history.split(650, &mut behind);
        assert_eq!((behind.cgroups[0].id, behind.cgroups[0].ns), (9, 600));
        assert_eq!((behind.threads[0].id, behind.threads[0].ns), (90, 600));
        assert_eq!(behind.rest.idle_ns, 50);
        assert_eq!(behind.total_ns(), 650);
        // Within the newest slice (to its whole length): all of it behind that slice's holder.
        for wait in [400, 600] {
            let mut behind = WaitBehind::ZERO;
            history.split(wait, &mut behind);
            assert_eq!((behind.cgroups[0].id, behind.cgroups[0].ns), (9, wait));
            assert_eq!((behind.threads[0].id, behind.threads[0].ns), (90, wait));
            assert_eq!((behind.total_ns(), behind.splits), (wait, 1));
        }
        // Longer than all the history: the rest is unknown, never dropped.
        let mut behind = WaitBehind::ZERO;
        history.split(1_500, &mut behind);
        let slots: Vec<(u64, u64)> = behind.cgroups.iter().map(|c| (c.id, c.ns)).collect();
        assert_eq!(slots[..2], [(9, 600), (7, 300)]);
        assert_eq!((behind.rest.idle_ns, behind.rest.unknown_ns), (100, 500));
        assert_eq!(behind.total_ns(), 1_500);
    }

    #[test]
    fn a_wait_booked_at_a_migration_takes_the_running_slice_first() {
        let mut history = History::EMPTY;
        history.switch(7, 70, 1_000); // starts the clock
        history.switch(7, 70, 1_300); // B: 300
        history.switch(9, 90, 2_000); // C: 700; B's thread 71 runs since
        let mut behind = WaitBehind::ZERO;
        // Moved away 250 ns into 71's slice, after waiting 1_000: 250 behind 71, 700 behind
        // C, the last 50 of B's 300.
        history.split_running(1_000, (7, 71), 250, &mut behind);
        let parts: Vec<(u64, u64)> = behind.cgroups.iter().map(|c| (c.id, c.ns)).collect();
        assert_eq!(parts[..2], [(7, 250 + 50), (9, 700)]);
        let threads: Vec<(u64, u64)> = behind.threads.iter().map(|c| (c.id, c.ns)).collect();
        assert_eq!(threads[..3], [(71, 250), (90, 700), (70, 50)]);
        assert_eq!(behind.total_ns(), 1_000);
        // A wait inside the running slice is all its holder's; one longer than everything
        // remembered is unknown for the rest.
        let mut short = WaitBehind::ZERO;
        history.split_running(100, (IDLE, 0), 250, &mut short);
        assert_eq!((short.rest.idle_ns, short.total_ns()), (100, 100));
        let mut long = WaitBehind::ZERO;
        history.split_running(5_000, (7, 71), 250, &mut long);
        assert_eq!(long.rest.unknown_ns, 5_000 - 250 - 1_000);
        assert_eq!(long.total_ns(), 5_000);
    }

    #[test]
    fn the_ring_keeps_only_the_latest_slices() {
        let mut history = History::EMPTY;
        history.switch(1, 1, 10);
        for i in 0..(HISTORY_SLICES as u64 + 3) {
            history.switch(100 + i, 1000 + i as u32, 10 + 10 * (i + 1));
        }
        let mut behind = WaitBehind::ZERO;
        history.split(10_000, &mut behind);
        // Every remembered slice is 10 ns: 16 culprits in one wait, four slots, the rest moved
        // to other; what the ring forgot is unknown.
        assert!(behind.cgroups.iter().all(|c| c.ns == 10 && c.id >= 103));
        assert_eq!(
            behind.rest.other_ns,
            10 * (HISTORY_SLICES - BEHIND_SLOTS) as u64
        );
        assert_eq!(behind.rest.unknown_ns, 10_000 - 10 * HISTORY_SLICES as u64);
        assert_eq!(behind.total_ns(), 10_000);
    }

    #[test]
    fn steady_culprits_keep_their_slots_and_passing_ones_give_way() {
        let mut behind = WaitBehind::ZERO;
        let mut wait = |parts: &[(u64, u64)]| {
            behind.begin_split();
            for &(cgroup, ns) in parts {
                behind.charge(cgroup, cgroup as u32, ns);
            }
        };
        // Three hogs in every wait, a different kernel thread now and then.
        for round in 0..20u64 {
            wait(&[(1, 50), (2, 50), (3, 50)]);
            if round % 3 == 0 {
                wait(&[(1, 50), (100 + round, 2), (2, 50)]);
            }
        }
        let mut held: Vec<(u64, u64)> = behind.cgroups.iter().map(|c| (c.id, c.ns)).collect();
        held.sort_unstable();
        assert_eq!(held[..3], [(1, 1350), (2, 1350), (3, 1000)], "{held:?}");
        assert!(
            held[3].0 >= 100,
            "the fourth slot for passing ones: {held:?}"
        );
        // Passing ones gave way to each other; a hog never did.
        assert_eq!(behind.rest.other_ns, 2 * 6);
        assert_eq!(behind.total_ns(), 3 * 1000 + 7 * (50 + 2 + 50));
        // A culprit of the latest waits is not given up for a passing one however little it
        // holds; the least recent is, whatever it holds.
        let mut fresh = WaitBehind::ZERO;
        for cgroup in [1, 2, 3, 4] {
            fresh.begin_split();
            fresh.charge(cgroup, 0, if cgroup == 1 { 1_000 } else { 1 });
        }
        for _ in 0..4 {
            fresh.begin_split();
            for cgroup in [2, 3, 4] {
                fresh.charge(cgroup, 0, 1);
            }
        }
        fresh.begin_split();
        fresh.charge(9, 0, 5);
        assert_eq!(
            fresh.rest.other_ns, 1_000,
            "cgroup 1 had not been charged for a while"
        );
        assert!(fresh.cgroups.iter().any(|c| c.id == 9));
        // All charged in this very wait: the first slot gives way, what it held to other.
        let mut busy = WaitBehind::ZERO;
        busy.begin_split();
        for (cgroup, ns) in [(1, 100), (2, 5), (3, 50), (4, 60), (5, 7)] {
            busy.charge(cgroup, cgroup as u32, ns);
        }
        let held: Vec<u64> = busy.cgroups.iter().map(|c| c.id).collect();
        assert_eq!(held, [5, 2, 3, 4]);
        assert_eq!(busy.rest.other_ns, 100);
        assert_eq!(busy.total_ns(), 222);
    }

    #[test]
    fn an_empty_history_attributes_nothing() {
        let mut behind = WaitBehind::ZERO;
        History::EMPTY.split(42, &mut behind);
        assert_eq!(behind.rest.unknown_ns, 42);
        let mut started = History::EMPTY;
        started.switch(3, 30, 99);
        assert!(
            started.slices.iter().all(|s| s.ns == 0),
            "the first switch only starts the clock"
        );
    }
}
