//! Per-thread usage over a window of time: what the kernel charged, as deltas.

use std::time::Duration;

use compact_str::CompactString;
use topdown_common::{
    cgroup::CgroupId,
    reading::Reading,
    thread::{Pid, Tid},
};

use super::neighbours::Behind;
use crate::{
    collect::{Books, ThreadRecord},
    pmu::counter_set::CounterSet,
};

/// One counter over a window: the kernel's reading of it (a delta: [`Reading::since`]), and
/// whether its event counts at all on this PMU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterValue {
    /// What was counted, over how long the counter was enabled and running while this thread
    /// ran.
    pub reading: Reading,
    /// The event does not count on this PMU (it read 0 while cycles ran: see
    /// [`crate::collect::calibration`]): its count of 0 is no measurement.
    pub silent: bool,
}

impl CounterValue {
    /// A value as read: `count` over `enabled_ns`, `running_ns` of it on a counter.
    pub const fn new(count: u64, enabled_ns: u64, running_ns: u64) -> Self {
        Self::of(Reading {
            count,
            enabled_ns,
            running_ns,
        })
    }

    /// A window's value from the kernel's reading.
    pub const fn of(reading: Reading) -> Self {
        Self {
            reading,
            silent: false,
        }
    }

    /// The count scaled to the whole enabled time ([`Reading::scaled`]); `None` when there is
    /// no count: never running, or an event this PMU does not count. Never a 0 made of either.
    pub fn scaled(&self) -> Option<f64> {
        if self.silent {
            return None;
        }
        self.reading.scaled()
    }

    /// Whether there is no count: never running, or an event this PMU does not count.
    pub const fn not_counted(&self) -> bool {
        self.silent || self.reading.never_ran()
    }

    /// Whether the counter was enabled and never running.
    pub const fn never_ran(&self) -> bool {
        self.reading.never_ran()
    }

    /// Adds a later or another row's value: a sum is silent only if every part with enabled
    /// time was (one part that counted makes the others' zeros counts of an event that counts).
    pub const fn add(&mut self, other: &Self) {
        if other.reading.enabled_ns > 0 || other.silent {
            self.silent = if self.reading.enabled_ns > 0 || self.silent {
                self.silent && other.silent
            } else {
                other.silent
            };
        }
        self.reading = self.reading.plus(other.reading);
    }
}

/// Adds `$from`'s sums to `$to`'s: the switches, on-CPU time, run-queue wait, its split over
/// culprits and counters that a thread's row and a cgroup's usage both hold, added alike
/// wherever one usage is added to another.
macro_rules! add_sums {
    ($to:expr, $from:expr) => {{
        $to.switches += $from.switches;
        $to.on_cpu += $from.on_cpu;
        $to.waited += $from.waited;
        $to.behind.add(&$from.behind);
        add_counters(&mut $to.counters, &$from.counters);
    }};
}

/// What one thread used over a window (or, folded, several exited threads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadUsage {
    /// Thread id; 0 for a row of folded threads.
    pub tid: Tid,
    /// Process id; 0 for a row folding several processes.
    pub pid: Pid,
    /// Thread name; for folded rows, what they hold (`(exited threads: 12)`). Inline up to 24
    /// bytes (a kernel thread name has 15 at most): a row's copy allocates nothing.
    pub comm: CompactString,
    /// cgroup2 id at the latest charge.
    pub cgroup_id: CgroupId,
    /// Switches out in the window.
    pub switches: u64,
    /// Time on a CPU in the window (the kernel's clock slot: the scheduler's runtime).
    pub on_cpu: Duration,
    /// Time waiting in a run queue charged in the window (see [`crate::attrib::Window`]'s
    /// `waits_measured`).
    pub waited: Duration,
    /// Whom those waits were spent behind, and its preemptions (see
    /// [`crate::attrib::Window`]'s `neighbours_measured`).
    pub behind: Behind,
    /// One value per counter of the set, in the set's order.
    pub counters: Vec<CounterValue>,
    /// The thread died (in this window, or in the run for run totals).
    pub exited: bool,
    /// How many exited threads this row folds (0 for one thread's own row).
    pub folded: u64,
}

/// The split between two of a thread's books ([`Behind::between`]); nothing compared where
/// neither holds one (every thread with the split off, where comparing its zeros cost a busy
/// host about 0.2 ms an interval at 20,000 threads).
fn behind_between(before: Option<Books<'_>>, now: Books<'_>) -> Behind {
    if now.split.is_none() && before.is_none_or(|b| b.split.is_none()) {
        return Behind::default();
    }
    Behind::between(before.map(|t| t.split()), now.split())
}

impl ThreadUsage {
    /// `now` minus `before` (a zero-charged thread when `before` is `None`), for `nr` counters.
    pub fn between(before: Option<Books<'_>>, now: Books<'_>, nr: usize) -> Self {
        let before_slots = before.map(|t| t.record.slots.as_slice());
        Self {
            tid: now.tid(),
            pid: now.pid(),
            comm: comm_string(&now.header.comm),
            cgroup_id: now.cgroup(),
            switches: now
                .header
                .switches
                .saturating_sub(before.map_or(0, |t| t.header.switches)),
            on_cpu: clock_delta(before_slots, &now.slots),
            waited: waited_delta(before.as_deref(), &now),
            behind: behind_between(before, now),
            counters: deltas(before_slots, &now.slots, nr),
            exited: now.exited(),
            folded: 0,
        }
    }

    /// On-CPU nanoseconds, as the kernel's books (schedstat, `cpu.stat`) count them.
    pub fn on_cpu_ns(&self) -> u64 {
        duration_ns(self.on_cpu)
    }

    /// Whether nothing at all was charged in the window.
    pub fn is_idle(&self) -> bool {
        self.switches == 0
            && self.on_cpu.is_zero()
            && self
                .counters
                .iter()
                .all(|c| c.reading.count == 0 && c.reading.enabled_ns == 0)
    }

    /// Adds the same thread's usage over a later window: its switches and counters, its
    /// latest cgroup, its exit.
    pub fn add(&mut self, later: &Self) {
        add_sums!(self, later);
        self.cgroup_id = later.cgroup_id;
        self.exited |= later.exited;
        self.folded += later.folded;
    }

    /// Adds `other`'s usage to this row (which then folds one more thread, or `other`'s).
    pub fn absorb(&mut self, other: &Self) {
        add_sums!(self, other);
        self.folded += other.folded.max(1);
    }
}

/// What one cgroup's threads used over a window (the cgroup itself, not its descendants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupUsage {
    /// cgroup2 id.
    pub id: CgroupId,
    /// Switches out of its threads in the window.
    pub switches: u64,
    /// Its threads' time on a CPU in the window.
    pub on_cpu: Duration,
    /// Its threads' time waiting in a run queue, charged in the window.
    pub waited: Duration,
    /// Whom its threads' waits were spent behind, and their preemptions.
    pub behind: Behind,
    /// One value per counter of the set, in the set's order.
    pub counters: Vec<CounterValue>,
}

#[cfg(test)]
impl ThreadUsage {
    /// A live thread named `t<tid>` (tests): `ns` on a CPU (the software set: no counters),
    /// `switches` switches out.
    pub fn clocked(tid: u32, pid: u32, cgroup_id: CgroupId, ns: u64, switches: u64) -> Self {
        Self {
            tid: Tid(tid),
            pid: Pid(pid),
            comm: format!("t{tid}").into(),
            cgroup_id,
            switches,
            on_cpu: Duration::from_nanos(ns),
            waited: Duration::ZERO,
            behind: Behind::default(),
            counters: Vec::new(),
            exited: false,
            folded: 0,
        }
    }
}

impl CgroupUsage {
    /// Nothing charged yet to cgroup `id`, for `nr` counters.
    pub fn new(id: CgroupId, nr: usize) -> Self {
        Self {
            id,
            switches: 0,
            on_cpu: Duration::ZERO,
            waited: Duration::ZERO,
            behind: Behind::default(),
            counters: vec![CounterValue::default(); nr],
        }
    }

    /// Charges a thread's usage between two of its records.
    pub fn charge(&mut self, before: Option<Books<'_>>, now: Books<'_>) {
        self.switches += now
            .header
            .switches
            .saturating_sub(before.map_or(0, |t| t.header.switches));
        let before_slots = before.map(|t| t.record.slots.as_slice());
        self.on_cpu += clock_delta(before_slots, &now.slots);
        self.waited += waited_delta(before.as_deref(), &now);
        self.behind.add(&behind_between(before, now));
        let delta = deltas(before_slots, &now.slots, self.counters.len());
        add_counters(&mut self.counters, &delta);
    }

    /// Charges a thread's usage, already taken between two of its records: what
    /// [`CgroupUsage::charge`] of the same records adds, without taking it again.
    pub fn charge_usage(&mut self, usage: &ThreadUsage) {
        add_sums!(self, usage);
    }

    /// On-CPU nanoseconds, as the kernel's books (`cpu.stat`) count them.
    pub fn on_cpu_ns(&self) -> u64 {
        duration_ns(self.on_cpu)
    }

    /// Whether nothing was charged.
    pub fn is_empty(&self) -> bool {
        self.switches == 0 && self.on_cpu_ns() == 0
    }

    /// Adds `other`'s usage to this one (a roll-up or a container's cgroups).
    pub fn absorb(&mut self, other: &Self) {
        add_sums!(self, other);
    }
}

/// Nanoseconds of `d`, saturating (585 years).
pub fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Adds `theirs` to `mine`, counter by counter (`mine` grows to `theirs`' length).
pub fn add_counters(mine: &mut Vec<CounterValue>, theirs: &[CounterValue]) {
    if mine.len() < theirs.len() {
        mine.resize(theirs.len(), CounterValue::default());
    }
    for (mine, theirs) in mine.iter_mut().zip(theirs) {
        mine.add(theirs);
    }
}

/// The run-queue delay charged between two records (`before`: none when `None`).
fn waited_delta(before: Option<&ThreadRecord>, now: &ThreadRecord) -> Duration {
    let before = before.map_or(0, |t| t.header.waited_ns);
    Duration::from_nanos(now.header.waited_ns.saturating_sub(before))
}

/// The clock's growth between two records' kernel slots (`before`: zero when `None`).
pub fn clock_delta(before: Option<&[Reading]>, now: &[Reading]) -> Duration {
    let at = |slots: &[Reading]| slots.get(CounterSet::CLOCK_SLOT).map_or(0, |r| r.count);
    Duration::from_nanos(at(now).saturating_sub(before.map_or(0, at)))
}

/// `now` minus `before` (zero when `None`) for the set's first `nr` counters, from records'
/// kernel slots ([`CounterSet::kernel_slot`]). A slot a record does not carry counts as zero.
pub fn deltas(before: Option<&[Reading]>, now: &[Reading], nr: usize) -> Vec<CounterValue> {
    let at = |slots: &[Reading], i: usize| {
        slots
            .get(CounterSet::kernel_slot(i))
            .copied()
            .unwrap_or(Reading::ZERO)
    };
    (0..nr)
        .map(|i| {
            let old = before.map_or(Reading::ZERO, |b| at(b, i));
            CounterValue::of(at(now, i).since(old))
        })
        .collect()
}

fn comm_string(comm: &[u8]) -> CompactString {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    // Names are valid UTF-8 but for a rare few: the lossy conversion costs 100 ns a row.
    std::str::from_utf8(&comm[..end]).map_or_else(
        |_| CompactString::from_utf8_lossy(&comm[..end]),
        CompactString::new,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(tid: u32, ns: u64, switches: u64) -> ThreadRecord {
        let mut t = topdown_common::thread::ThreadTotals::new(tid, 7);
        t.charged.slots[0] = Reading {
            count: ns,
            enabled_ns: ns,
            running_ns: ns,
        };
        t.header.switches = switches;
        t.header.comm[..4].copy_from_slice(b"work");
        ThreadRecord::from_totals(&t, 1)
    }

    #[test]
    fn window_is_the_difference_of_cumulative_totals() {
        let before = totals(42, 1_000, 3);
        let now = totals(42, 5_500, 10);
        let usage = ThreadUsage::between(Some(Books::unsplit(&before)), Books::unsplit(&now), 0);
        assert_eq!(usage.on_cpu_ns(), 4_500);
        assert_eq!(usage.switches, 7);
        assert_eq!(usage.comm, "work");
        assert_eq!(usage.pid, Pid(7));
        assert!(usage.counters.is_empty(), "the clock is no counter");
        let fresh = ThreadUsage::between(None, Books::unsplit(&now), 0);
        assert_eq!(fresh.on_cpu_ns(), 5_500);
    }

    #[test]
    fn names_are_read_up_to_their_nul_and_invalid_bytes_replaced() {
        let mut t = topdown_common::thread::ThreadTotals::new(9, 9);
        t.header.comm = *b"fifteen-bytes-x\0";
        let full = ThreadUsage::between(None, Books::unsplit(&ThreadRecord::from_totals(&t, 1)), 0);
        assert_eq!(full.comm, "fifteen-bytes-x");
        t.header.comm = [0; 16];
        t.header.comm[..4].copy_from_slice(&[b'a', 0xff, b'b', 0]);
        let invalid =
            ThreadUsage::between(None, Books::unsplit(&ThreadRecord::from_totals(&t, 1)), 0);
        assert_eq!(invalid.comm, "a\u{fffd}b");
    }

    /// Waits are the growth of the kernel's cumulative `waited_ns` between records, for the
    /// thread and for its cgroup, and sum across windows and folded rows.
    #[test]
    fn waits_are_deltas_for_threads_and_their_cgroups() {
        let mut before = totals(42, 1_000, 3);
        before.header.waited_ns = 700;
        let mut now = totals(42, 5_500, 10);
        now.header.waited_ns = 2_000;
        let usage = ThreadUsage::between(Some(Books::unsplit(&before)), Books::unsplit(&now), 0);
        assert_eq!(usage.waited, Duration::from_nanos(1_300));
        assert_eq!(
            ThreadUsage::between(None, Books::unsplit(&now), 0).waited,
            Duration::from_nanos(2_000)
        );
        let mut cgroup = CgroupUsage::new(CgroupId(1), 0);
        cgroup.charge(None, Books::unsplit(&before));
        cgroup.charge(Some(Books::unsplit(&before)), Books::unsplit(&now));
        assert_eq!(cgroup.waited, Duration::from_nanos(2_000));
        let mut sum = usage.clone();
        sum.add(&usage);
        sum.absorb(&usage);
        assert_eq!(sum.waited, Duration::from_nanos(3 * 1_300));
    }

    #[test]
    fn multiplexed_counts_scale_to_enabled_time() {
        let value = CounterValue::new(100, 1_000, 250);
        assert!((value.scaled().unwrap() - 400.0).abs() < 1e-9);
        assert!((value.reading.running_fraction() - 0.25).abs() < 1e-9);
        let never = CounterValue::default();
        assert!((never.reading.running_fraction() - 1.0).abs() < 1e-9);
        assert_eq!(never.scaled(), Some(0.0), "never enabled: nothing to count");
        // Enabled, never running: not counted, never 0.
        let crowded_out = CounterValue::new(0, 1_000, 0);
        assert_eq!(crowded_out.scaled(), None);
    }

    /// A sum is silent only when every part with enabled time was: one part that counted
    /// makes the event one that counts, and the others' zeros counts.
    #[test]
    fn a_sum_is_silent_only_if_every_part_was() {
        let silent = CounterValue {
            silent: true,
            ..CounterValue::new(0, 10, 10)
        };
        let counted = CounterValue::new(4, 10, 10);
        let mut sum = CounterValue::default();
        sum.add(&silent);
        assert!(sum.silent && sum.scaled().is_none());
        sum.add(&CounterValue::default());
        assert!(sum.silent, "a part never enabled changes nothing");
        sum.add(&counted);
        assert!(!sum.silent);
        assert_eq!(sum.scaled(), Some(4.0));
        assert_eq!((sum.reading.enabled_ns, sum.reading.running_ns), (20, 20));
    }
}
