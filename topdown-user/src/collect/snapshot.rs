//! What one read of the kernel's books returns.

use std::time::Instant;

use smallvec::SmallVec;

use topdown_common::{
    cgroup::CgroupId,
    neighbours::WaitBehind,
    reading::Reading,
    stats::{NR_STATS, Stat},
    thread::{Pid, RECORD_BEHIND_AT, RECORD_SLOTS_AT, ThreadHeader, ThreadTotals, Tid},
};

/// What the kernel says about one thread: who it is, and its cumulative totals for the set's
/// slots only (a map value or a ring-buffer record, decoded once here).
#[derive(Debug, PartialEq, Eq)]
pub struct ThreadRecord {
    /// Who, where, how often; flags say whether it died or left a cgroup.
    pub header: ThreadHeader,
    /// Cumulative readings, one per slot of the set.
    pub slots: Slots,
}

/// A thread's readings, one per slot of the set: the software set's one slot (the clock) is
/// held inline, so the records of a host's worth of threads are not each a pointer to a
/// separate allocation (kept for every live thread, read at every charge); larger sets'
/// slots are allocated as a `Vec`'s would be.
pub type Slots = SmallVec<[Reading; 1]>;

impl Clone for ThreadRecord {
    fn clone(&self) -> Self {
        Self {
            header: self.header,
            slots: self.slots.clone(),
        }
    }

    /// Reuses the slots' memory: the attributor keeps each thread's latest record this way.
    fn clone_from(&mut self, source: &Self) {
        self.header = source.header;
        self.slots.clone_from(&source.slots);
    }
}

impl ThreadRecord {
    /// The cgroup the thread was last charged in.
    pub const fn cgroup(&self) -> CgroupId {
        CgroupId(self.header.cgroup_id)
    }

    /// The first `nr` slots of a kernel map value.
    pub fn from_totals(totals: &ThreadTotals, nr: usize) -> Self {
        Self {
            header: totals.header,
            slots: SmallVec::from_slice(
                &totals.charged.slots[..nr.min(totals.charged.slots.len())],
            ),
        }
    }

    /// Decodes a ring-buffer record: a [`ThreadHeader`], the thread's split of its waits, then
    /// `nr` slots; the record and the split. `None` when it is too short.
    pub fn decode(bytes: &[u8], nr: usize) -> Option<(Self, WaitBehind)> {
        if bytes.len() < topdown_common::thread::record_len(nr) {
            return None;
        }
        // SAFETY: the length was checked; ThreadHeader and WaitBehind are plain old data (any
        // bytes are valid), the split at its offset before the slots.
        let (header, split) = unsafe {
            (
                bytes.as_ptr().cast::<ThreadHeader>().read_unaligned(),
                bytes[RECORD_BEHIND_AT..]
                    .as_ptr()
                    .cast::<WaitBehind>()
                    .read_unaligned(),
            )
        };
        let slots = bytes[RECORD_SLOTS_AT..]
            .as_chunks::<{ size_of::<Reading>() }>()
            .0
            .iter()
            .take(nr)
            .map(|chunk| {
                // SAFETY: a whole Reading's bytes; it is plain old data.
                unsafe { chunk.as_ptr().cast::<Reading>().read_unaligned() }
            })
            .collect();
        Some((Self { header, slots }, split))
    }

    /// Thread id.
    pub const fn tid(&self) -> Tid {
        Tid(self.header.tid)
    }

    /// Process id.
    pub const fn pid(&self) -> Pid {
        Pid(self.header.tgid)
    }

    /// Whether this is the same thread as `other` (a tid can be reused by a later thread).
    pub const fn same_thread(&self, other: &Self) -> bool {
        self.header.tid == other.header.tid && self.header.born_ns == other.header.born_ns
    }

    /// On-CPU nanoseconds charged so far (slot 0): grows with every charge, so of two records
    /// of one thread the one with more is the later.
    pub fn on_cpu_ns(&self) -> u64 {
        self.slots.first().map_or(0, |slot| slot.count)
    }

    /// Whether `now`, a later reading of the same map entry, holds nothing new: the same
    /// thread, in the same cgroup, nothing charged since (every slot and the switches equal).
    pub fn unchanged_in(&self, now: &Self) -> bool {
        self.same_thread(now)
            && self.header.switches == now.header.switches
            && self.header.waited_ns == now.header.waited_ns
            && self.header.cgroup_id == now.header.cgroup_id
            && self.slots == now.slots
    }

    /// Whether this is the thread's final record.
    pub const fn exited(&self) -> bool {
        self.header.flags & ThreadHeader::FLAG_EXITED != 0
    }
}

/// A thread's record and its split of its waits, wherever each is held (a snapshot keeps the
/// splits apart from the records, the attributor beside its kept totals): what a usage is taken
/// between. Reads as the record.
#[derive(Clone, Copy, Debug)]
pub struct Books<'a> {
    /// Its header and slots.
    pub record: &'a ThreadRecord,
    /// Whom its waits were spent behind, and its preemptions; `None` where the kernel does not
    /// split waits (read as all zero).
    pub split: Option<&'a WaitBehind>,
}

impl<'a> Books<'a> {
    /// `record` with no split (the kernel did not split its waits).
    pub const fn unsplit(record: &'a ThreadRecord) -> Self {
        Self {
            record,
            split: None,
        }
    }

    /// Its split (all zero where there is none).
    pub fn split(&self) -> &'a WaitBehind {
        self.split.unwrap_or(&WaitBehind::ZERO)
    }
}

impl std::ops::Deref for Books<'_> {
    type Target = ThreadRecord;

    fn deref(&self) -> &ThreadRecord {
        self.record
    }
}

/// Cumulative totals as of one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When it was read.
    pub at: Instant,
    /// Live threads' totals since the collector started (one entry per tid), read from the
    /// kernel's map before `records` were drained: the threads charged since the previous
    /// snapshot (and some charged just before it), or every live thread when
    /// [`Snapshot::live_complete`].
    pub live: Vec<ThreadRecord>,
    /// Each live thread's split of its waits ([`WaitBehind`], 248 bytes), by its place in
    /// `live`: read only where the kernel splits waits (empty otherwise), and held apart so a
    /// record of a host's worth of threads with the split off is its header and slots alone.
    pub live_splits: Vec<WaitBehind>,
    /// Whether `live` holds every live thread: a thread not in it is gone from the map. When
    /// not, a live thread not in it was not charged since the previous snapshot.
    pub live_complete: bool,
    /// Records sent since the previous snapshot, in the order they were sent: threads that
    /// died, and threads as they left a cgroup.
    pub records: Vec<ThreadRecord>,
    /// Each record's split, by its place in `records` (empty where the kernel does not split
    /// waits).
    pub record_splits: Vec<WaitBehind>,
    /// Each CPU's idle task's time on it so far (its clock slot), by CPU number; empty when the
    /// collector is narrowed to some processes (idle is not measured then).
    pub idle: Vec<std::time::Duration>,
    /// Ids and paths of cgroups removed since the previous snapshot.
    pub removed_cgroups: Vec<(CgroupId, String)>,
    /// Loss and activity counters, summed over CPUs.
    pub stats: Stats,
    /// Whether the kernel side reads run-queue delay (`ThreadHeader::waited_ns`): this kernel
    /// has `sched_info`.
    pub waits_measured: bool,
    /// Whether the kernel side splits waits over neighbours and counts preemptions
    /// (`ThreadTotals::behind`, in [`Snapshot::live_splits`]): waits are measured and `--no-neighbours` was not given.
    pub neighbours_measured: bool,
}

impl Snapshot {
    /// Live thread `at`'s record and split.
    pub fn live_books(&self, at: usize) -> Books<'_> {
        Books {
            record: &self.live[at],
            split: self.live_splits.get(at),
        }
    }

    /// The records sent, each with its split, in the order sent.
    pub fn record_books(&self) -> impl Iterator<Item = Books<'_>> {
        self.records.iter().enumerate().map(|(at, record)| Books {
            record,
            split: self.record_splits.get(at),
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use topdown_common::thread::record_len;

    #[test]
    fn records_carry_the_header_the_split_and_only_the_sets_slots() {
        let mut totals = ThreadTotals::new(7, 5);
        totals.header.flags = ThreadHeader::FLAG_EXITED;
        totals.header.waited_ns = 900;
        totals.behind.begin_split();
        totals.behind.charge(42, 420, 600);
        totals.behind.rest.idle_ns = 300;
        totals.behind.rest.preempted = 2;
        for (i, slot) in totals.charged.slots.iter_mut().enumerate() {
            slot.count = 100 + i as u64;
            slot.enabled_ns = 200 + i as u64;
            slot.running_ns = 300 + i as u64;
        }
        // SAFETY: viewing a plain-old-data value's bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const totals).cast::<u8>(), size_of::<ThreadTotals>())
        };
        let (record, split) = ThreadRecord::decode(&bytes[..record_len(3)], 3).unwrap();
        assert_eq!(
            split, totals.behind,
            "the split, between the header and the slots"
        );
        assert_eq!(split.total_ns(), 900);
        assert_eq!(record.tid(), Tid(7));
        assert!(record.exited() && record.header.flags & ThreadHeader::FLAG_MOVED == 0);
        assert_eq!(record.slots.len(), 3);
        assert_eq!(record.slots[2].count, 102);
        assert_eq!(record.slots[2].running_ns, 302);
        assert_eq!(record, ThreadRecord::from_totals(&totals, 3));
        assert!(
            ThreadRecord::decode(&bytes[..record_len(3) - 1], 3).is_none(),
            "a short record is refused"
        );
    }
}
