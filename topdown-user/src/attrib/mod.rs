//! Turns the kernel's cumulative per-thread totals into usage per window and per run, for the
//! threads the user asked about.

pub mod cgroups;
pub mod containers;
pub mod cores;
pub mod exited;
pub mod groups;
pub mod named;
pub mod neighbours;
mod passes;
pub mod silence;
pub mod stalls;
pub mod target;
pub mod usage;

// Keyed by tids and cgroup ids, looked up several times per thread read: foldhash, not
// SipHash (a tenth of a read's time at 30,000 threads; BENCHMARKS.md).
use foldhash::{HashMap, HashMapExt as _, HashSet};
use std::{
    collections::{BTreeMap, hash_map::Entry},
    time::Duration,
};
use topdown_common::cgroup::CgroupId;
use topdown_common::neighbours::WaitBehind;
use topdown_common::thread::{Pid, Tid};

use self::{
    exited::ExitedThreads,
    passes::Pass,
    silence::Silence,
    target::Target,
    usage::{CgroupUsage, CounterValue, ThreadUsage},
};
use crate::collect::{Books, Snapshot, Stats, ThreadRecord};

/// How many threads read [`Attributor::window`] warms the cache for at a time: enough misses
/// to overlap, few enough that their kept totals stay in the first-level cache.
const WARM_CHUNK: usize = 16;

/// How many exited threads keep their own row in the run's totals (the hottest); the others
/// fold into per-process rows. See [`ExitedThreads`].
pub const EXITED_ROWS: usize = 500;

/// How a window holds the threads that exited in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WindowExits {
    /// As the run's totals do: the hottest keep their own rows, the rest fold per process
    /// (see [`ExitedThreads`]), so churn cannot flood a window.
    #[default]
    Fold,
    /// Every exited thread its own row (`--every-exit`).
    Each,
}

/// Usage over one window of time.
#[derive(Clone, Debug, Default)]
pub struct Window {
    /// Seconds from the start of collection to the window's start.
    pub start: Duration,
    /// Length of the window.
    pub length: Duration,
    /// Reported threads that ran (or died) in the window.
    pub threads: Vec<ThreadUsage>,
    /// Each CPU's idle time (its idle task's time on it), by CPU number.
    pub idle: Vec<Duration>,
    /// Every cgroup charged in the window (each for itself, not its descendants).
    pub cgroups: Vec<CgroupUsage>,
    /// cgroups the kernel reported removed (rmdir) since the previous window; a thread's last
    /// charges to one may still come in the next window. (A recording does not keep them: its
    /// windows have none; their names are in the file.)
    pub removed_cgroups: Vec<CgroupId>,
    /// Kernel-side losses and activity since collection started.
    pub stats: Stats,
    /// Whether rows' `waited` is measured (the kernel has `sched_info`; a recording made
    /// before waits were written has none): where not, it is 0 and no number.
    pub waits_measured: bool,
    /// Whether rows' `behind` is measured (waits are, and the kernel split them over
    /// neighbours: not with `--no-neighbours`, nor in a recording made before they were
    /// written): where not, it is empty and no number.
    pub neighbours_measured: bool,
    /// CPU stalls the kernel booked in the window per cgroup path (throttling, pressure), for
    /// the cgroups charged and their ancestors ([`stalls::StallReader`]); empty where they
    /// were not read (a thread view, a recording made before they were written).
    pub stalls: BTreeMap<String, stalls::CpuStalls>,
}

impl Window {
    /// The counters (slots of the set) that some thread's row has as never running: enabled
    /// while it ran, never on a counter (another PMU user held the counters, or the kernel
    /// never scheduled the event while that thread ran).
    pub fn never_running(&self) -> Vec<usize> {
        self.slots_where(CounterValue::never_ran)
    }

    /// The counters (slots of the set) whose events this PMU does not count (see
    /// [`crate::collect::calibration`]), as the window's rows say.
    pub fn silent(&self) -> Vec<usize> {
        self.slots_where(|v| v.silent)
    }

    fn slots_where(&self, is: impl Fn(&CounterValue) -> bool) -> Vec<usize> {
        let rows = self
            .threads
            .iter()
            .map(|t| &t.counters)
            .chain(self.cgroups.iter().map(|c| &c.counters));
        let mut slots: Vec<usize> = rows
            .flat_map(|values| {
                values
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| is(v))
                    .map(|(i, _)| i)
            })
            .collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    /// Consecutive `windows` as one: each thread (by tid, pid and name) and cgroup summed, a
    /// process's folded exited threads in one row, idle summed per CPU, the kernel-side counts
    /// of the last, the removed cgroups of all. Rows keep their first window's order; a thread
    /// keeps its latest cgroup. `None` for no windows.
    pub fn merge(windows: &[Self]) -> Option<Self> {
        let (first, last) = (windows.first()?, windows.last()?);
        let mut threads: Vec<ThreadUsage> = Vec::new();
        let mut thread_at: HashMap<(Tid, Pid, &str), usize> = HashMap::new();
        let mut cgroups: Vec<CgroupUsage> = Vec::new();
        let mut cgroup_at: HashMap<CgroupId, usize> = HashMap::new();
        let mut idle: Vec<Duration> = Vec::new();
        for window in windows {
            for thread in &window.threads {
                // A fold's name says how many it holds: it is the process's fold in any window.
                let name = if thread.folded > 0 { "" } else { &thread.comm };
                let key = (thread.tid, thread.pid, name);
                if let Some(&at) = thread_at.get(&key) {
                    let row = &mut threads[at];
                    row.add(thread);
                    if row.folded > 0 {
                        row.comm = exited::fold_name(row.pid, row.folded).into();
                    }
                } else {
                    thread_at.insert(key, threads.len());
                    threads.push(thread.clone());
                }
            }
            for cgroup in &window.cgroups {
                if let Some(&at) = cgroup_at.get(&cgroup.id) {
                    cgroups[at].absorb(cgroup);
                } else {
                    cgroup_at.insert(cgroup.id, cgroups.len());
                    cgroups.push(cgroup.clone());
                }
            }
            if idle.len() < window.idle.len() {
                idle.resize(window.idle.len(), Duration::ZERO);
            }
            for (sum, cpu) in idle.iter_mut().zip(&window.idle) {
                *sum += *cpu;
            }
        }
        Some(Self {
            start: first.start,
            length: (last.start + last.length).saturating_sub(first.start),
            threads,
            idle,
            cgroups,
            removed_cgroups: windows
                .iter()
                .flat_map(|w| w.removed_cgroups.iter().copied())
                .collect(),
            stats: last.stats,
            waits_measured: windows.iter().all(|w| w.waits_measured),
            neighbours_measured: windows.iter().all(|w| w.neighbours_measured),
            stalls: windows.iter().fold(BTreeMap::new(), |mut sum, w| {
                for (path, stalls) in &w.stalls {
                    sum.entry(path.clone())
                        .or_insert_with(stalls::CpuStalls::default)
                        .add(stalls);
                }
                sum
            }),
        })
    }
}

/// A live thread's latest totals as the attributor keeps them: its record, and where the
/// kernel splits waits the place of its split in [`KeptSplits`].
#[derive(Clone, Debug)]
struct Kept {
    record: ThreadRecord,
    split: u32,
}

/// No split kept.
const NO_SPLIT: u32 = u32::MAX;

impl Kept {
    /// The totals as books to take a usage from.
    fn books<'a>(&'a self, splits: &'a KeptSplits) -> Books<'a> {
        Books {
            record: &self.record,
            split: splits.all.get(self.split as usize),
        }
    }
}

/// The kept threads' splits, in one array of their own (filled only where the kernel splits
/// waits), each at the place its thread's [`Kept`] names; places of forgotten threads reused.
#[derive(Debug, Default)]
struct KeptSplits {
    all: Vec<WaitBehind>,
    free: Vec<u32>,
}

impl KeptSplits {
    /// Keeps `split` at `*at`, given a place first where it has none; a split all zero takes
    /// no place (none reads as all zero): a quiet host's never-queued threads hold none.
    fn set(&mut self, at: &mut u32, split: Option<&WaitBehind>) {
        let Some(split) = split else {
            return;
        };
        if *at == NO_SPLIT {
            if *split == WaitBehind::ZERO {
                return;
            }
            *at = self.free.pop().unwrap_or_else(|| {
                self.all.push(WaitBehind::ZERO);
                u32::try_from(self.all.len() - 1).unwrap_or(NO_SPLIT)
            });
        }
        if let Some(kept) = self.all.get_mut(*at as usize) {
            *kept = *split;
        }
    }

    /// Gives place `at` back.
    fn release(&mut self, at: u32) {
        if at != NO_SPLIT {
            self.free.push(at);
        }
    }
}

/// Keeps the previous snapshot's totals to turn the next one into deltas, for threads and for
/// the cgroups they ran in.
#[derive(Debug)]
pub struct Attributor {
    nr_counters: usize,
    target: Target,
    /// Latest totals of every live thread, reported or not (its cgroup is charged from them).
    live: HashMap<Tid, Kept>,
    /// The live threads' splits, where the kernel splits waits.
    kept_splits: KeptSplits,
    /// Reported threads that died, for the run's totals.
    exited: ExitedThreads,
    /// How many exited threads keep their own rows in a window (the rest fold per process).
    window_exit_rows: usize,
    /// Idle totals per CPU at the previous snapshot.
    idle: Vec<Duration>,
    /// What every cgroup was charged since the start, by id.
    cgroups: HashMap<CgroupId, CgroupUsage>,
    /// Final totals of removed cgroups no longer tracked (none when they are not kept:
    /// [`Attributor::forget_removed_cgroups`]).
    retired: Vec<CgroupUsage>,
    /// Whether removed cgroups' totals are kept for the run's totals.
    keep_removed: bool,
    /// cgroups removed as of the previous snapshot: retired after this one, when their last
    /// charges are in.
    removed_before: Vec<CgroupId>,
    started: Option<std::time::Instant>,
    last: Option<std::time::Instant>,
    /// Which events do not count on this PMU, so far.
    silence: Silence,
}

impl Attributor {
    /// Attributes a set of `nr_counters` counters to the threads `target` keeps.
    pub fn new(nr_counters: usize, target: Target) -> Self {
        Self::with_exited_rows(nr_counters, target, EXITED_ROWS, WindowExits::Fold)
    }

    /// As [`Attributor::new`], keeping `rows` exited threads' own rows in the run's totals, and
    /// in each window as `exits` says.
    pub fn with_exited_rows(
        nr_counters: usize,
        target: Target,
        rows: usize,
        exits: WindowExits,
    ) -> Self {
        Self {
            nr_counters,
            target,
            live: HashMap::new(),
            kept_splits: KeptSplits::default(),
            exited: ExitedThreads::new(rows),
            window_exit_rows: match exits {
                WindowExits::Fold => rows,
                WindowExits::Each => usize::MAX,
            },
            idle: Vec::new(),
            cgroups: HashMap::new(),
            retired: Vec::new(),
            keep_removed: true,
            removed_before: Vec::new(),
            started: None,
            last: None,
            silence: Silence::new(nr_counters),
        }
    }

    /// Marks the events in `slots` silent: they read 0 while the PMU counted others (the
    /// calibration at start). Their values are not counted in every window, and in the run's
    /// totals, until the first window in which any row counts one: from then on it counts.
    pub fn set_silent(&mut self, slots: &[usize]) {
        self.silence.set(slots);
    }

    /// Drops removed cgroups' totals instead of keeping them for [`Attributor::run_totals`]: a
    /// long-running session that never reports the run's totals (`serve`) then holds live
    /// cgroups only, however many come and go.
    pub fn forget_removed_cgroups(&mut self) {
        self.keep_removed = false;
    }

    /// Marks the start of collection (before the first snapshot).
    pub fn start(&mut self, at: std::time::Instant) {
        self.started = Some(at);
        self.last = Some(at);
    }

    /// The previous totals of the thread `record` is about, if it is the same thread.
    fn before<'a>(
        live: &'a HashMap<Tid, Kept>,
        splits: &'a KeptSplits,
        record: &ThreadRecord,
    ) -> Option<Books<'a>> {
        live.get(&record.tid())
            .map(|kept| kept.books(splits))
            .filter(|before| before.same_thread(record))
    }

    /// Keeps `books` as its thread's latest totals in `entry` (its tid's), in place of the
    /// previous ones (their slots' memory reused), and notes its tid in `kept` where the
    /// snapshot was read whole.
    fn keep(
        entry: Entry<'_, Tid, Kept>,
        splits: &mut KeptSplits,
        books: Books<'_>,
        kept: Option<&mut HashSet<Tid>>,
    ) {
        let at = match entry {
            Entry::Occupied(slot) => {
                let kept = slot.into_mut();
                kept.record.clone_from(books.record);
                &mut kept.split
            }
            Entry::Vacant(slot) => {
                &mut slot
                    .insert(Kept {
                        record: books.record.clone(),
                        split: NO_SPLIT,
                    })
                    .split
            }
        };
        splits.set(at, books.split);
        if let Some(kept) = kept {
            kept.insert(books.tid());
        }
    }

    /// Usage since the previous snapshot (or since [`Attributor::start`]). A snapshot that
    /// read only the threads charged since the previous one ([`Snapshot::live_complete`] unset)
    /// leaves the other threads' totals as they were.
    ///
    /// A thread's cgroup is charged segment by segment: from its previous totals to each record
    /// it sent (the totals as it left a cgroup, or its final ones), each to the cgroup the
    /// record names, then to its map value, charged to the cgroup it is in now. The map is read
    /// before the records are drained, so a record can be newer than the map value: the later
    /// of the two is the thread's latest.
    pub fn window(&mut self, snapshot: &Snapshot) -> Window {
        let started = *self.started.get_or_insert(snapshot.at);
        let last = self.last.replace(snapshot.at).unwrap_or(started);
        let mut pass = Pass::new(self.nr_counters, snapshot);
        self.charge_records(&mut pass, snapshot);
        self.charge_live(&mut pass, snapshot);
        self.charge_unread(&mut pass);
        self.forget_gone(pass.kept.take(), snapshot);
        let idle = self.idle_since(snapshot);
        let (threads, cgroups) = self.close(pass);
        let removed_cgroups: Vec<CgroupId> =
            snapshot.removed_cgroups.iter().map(|(id, _)| *id).collect();
        let retiring = std::mem::replace(&mut self.removed_before, removed_cgroups.clone());
        self.retire_cgroups(retiring);
        Window {
            start: last.duration_since(started),
            length: snapshot.at.duration_since(last),
            threads,
            idle,
            cgroups,
            removed_cgroups,
            stats: snapshot.stats,
            waits_measured: snapshot.waits_measured,
            neighbours_measured: snapshot.neighbours_measured,
            stalls: std::collections::BTreeMap::new(),
        }
    }

    /// Stops tracking the removed cgroups `ids` (their last charges are in: they were removed
    /// a snapshot ago), keeping their final totals for the run's totals where they are kept:
    /// memory then holds live cgroups only, however many come and go.
    fn retire_cgroups(&mut self, ids: Vec<CgroupId>) {
        for id in ids {
            if let Some(totals) = self.cgroups.remove(&id)
                && self.keep_removed
            {
                self.retired.push(totals);
            }
        }
    }

    /// Usage over the whole run so far, exited threads included (beyond [`EXITED_ROWS`], folded
    /// per process). Call after [`Attributor::window`] for the latest snapshot.
    pub fn run_totals(&self, snapshot: &Snapshot) -> Window {
        let started = self.started.unwrap_or(snapshot.at);
        let mut threads: Vec<ThreadUsage> = self
            .live
            .values()
            .filter(|kept| self.target.keeps(&kept.record.header))
            .map(|kept| ThreadUsage::between(None, kept.books(&self.kept_splits), self.nr_counters))
            .chain(self.exited.rows())
            .filter(|usage| !usage.is_idle())
            .collect();
        let idle = self.idle.clone();
        let mut cgroups: Vec<CgroupUsage> = self
            .cgroups
            .values()
            .chain(&self.retired)
            .filter(|usage| !usage.is_empty())
            .cloned()
            .collect();
        self.silence.mark(&mut rows_of(&mut threads, &mut cgroups));
        Window {
            start: Duration::ZERO,
            length: snapshot.at.duration_since(started),
            threads,
            idle,
            cgroups,
            removed_cgroups: Vec::new(),
            stats: snapshot.stats,
            waits_measured: snapshot.waits_measured,
            neighbours_measured: snapshot.neighbours_measured,
            stalls: std::collections::BTreeMap::new(),
        }
    }
}

/// Every row's counter values: the threads', then the cgroups'.
fn rows_of<'a>(
    threads: &'a mut [ThreadUsage],
    cgroups: &'a mut [CgroupUsage],
) -> Vec<&'a mut [CounterValue]> {
    threads
        .iter_mut()
        .map(|t| t.counters.as_mut_slice())
        .chain(cgroups.iter_mut().map(|c| c.counters.as_mut_slice()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    /// A kept split takes a place at its thread's first split, keeps it while the thread
    /// lives (written over in place, all zero included), and a forgotten thread's place goes to
    /// the next thread, whose split replaces the old one whole; a thread never split takes none.
    #[test]
    fn kept_splits_take_places_only_where_split_and_reuse_forgotten_ones() {
        let mut splits = KeptSplits::default();
        let mut split = WaitBehind::ZERO;
        split.rest.idle_ns = 5;
        let (mut a, mut b, mut calm) = (NO_SPLIT, NO_SPLIT, NO_SPLIT);
        splits.set(&mut a, Some(&split));
        split.rest.idle_ns = 7;
        splits.set(&mut b, Some(&split));
        splits.set(&mut calm, None);
        let mut quiet = NO_SPLIT;
        splits.set(&mut quiet, Some(&WaitBehind::ZERO));
        assert_eq!((a, b, calm, quiet), (0, 1, NO_SPLIT, NO_SPLIT));
        split.rest.idle_ns = 9;
        splits.set(&mut a, Some(&split));
        assert_eq!((a, splits.all[0].rest.idle_ns, splits.all.len()), (0, 9, 2));
        splits.release(a);
        splits.release(calm);
        let mut c = NO_SPLIT;
        split.rest.idle_ns = 11;
        splits.set(&mut c, Some(&split));
        assert_eq!((c, splits.all.len()), (0, 2), "the forgotten place, reused");
        assert_eq!(splits.all[0], split);
        assert_eq!(splits.all[1].rest.idle_ns, 7, "the others' untouched");
        splits.set(&mut c, Some(&WaitBehind::ZERO));
        assert_eq!(
            (c, splits.all[0]),
            (0, WaitBehind::ZERO),
            "a place, once taken, is kept"
        );
    }

    use topdown_common::{
        reading::Reading,
        thread::{ThreadHeader, ThreadTotals},
    };

    use super::*;
    use crate::attrib::target::Target;

    /// Thread `tid` of `tgid` in cgroup `cgroup` with `ns` on-CPU and `switches` switches.
    fn record(
        tid: u32,
        tgid: u32,
        cgroup: u64,
        ns: u64,
        switches: u64,
        flags: u32,
    ) -> ThreadRecord {
        let mut t = ThreadTotals::new(tid, tgid);
        t.charged.slots[0] = Reading {
            count: ns,
            enabled_ns: ns,
            running_ns: ns,
        };
        t.header.switches = switches;
        t.header.cgroup_id = cgroup;
        t.header.flags = flags;
        t.header.born_ns = u64::from(tid) * 7;
        ThreadRecord::from_totals(&t, 1)
    }

    fn totals(tid: u32, tgid: u32, ns: u64, exited: bool) -> ThreadRecord {
        let flags = if exited { ThreadHeader::FLAG_EXITED } else { 0 };
        record(tid, tgid, 1, ns, 1, flags)
    }

    fn snapshot(at: Instant, live: Vec<ThreadRecord>, records: Vec<ThreadRecord>) -> Snapshot {
        Snapshot {
            at,
            live,
            live_splits: vec![],
            live_complete: true,
            records,
            record_splits: vec![],
            idle: vec![],
            removed_cgroups: vec![],
            stats: Stats::default(),
            waits_measured: false,
            neighbours_measured: false,
        }
    }

    /// A snapshot that read only the threads listed as charged since the previous one.
    fn listed(at: Instant, live: Vec<ThreadRecord>, records: Vec<ThreadRecord>) -> Snapshot {
        Snapshot {
            live_complete: false,
            ..snapshot(at, live, records)
        }
    }

    fn on_cpu(window: &Window, cgroup: u64) -> u64 {
        window
            .cgroups
            .iter()
            .find(|c| c.id == CgroupId(cgroup))
            .map_or(0, CgroupUsage::on_cpu_ns)
    }

    /// Events the calibration found silent are not counted, in every row of every window and
    /// of the run's totals, until a window in which some row counts one: from then on it
    /// counts, in later windows and in the totals.
    #[test]
    fn silent_events_are_not_counted_until_some_row_counts_them() {
        let thread = |tid: u32, ns: u64, events: u64| {
            let mut t = ThreadTotals::new(tid, 1);
            t.charged.slots[0] = Reading {
                count: ns,
                enabled_ns: ns,
                running_ns: ns,
            };
            t.charged.slots[1] = Reading {
                count: events,
                enabled_ns: ns,
                running_ns: ns,
            };
            t.header.switches = 1;
            t.header.cgroup_id = 1;
            ThreadRecord::from_totals(&t, 2)
        };
        let t0 = Instant::now();
        let second = std::time::Duration::from_secs(1);
        // One counter (kernel slot 1, after the clock's).
        let mut attrib = Attributor::new(1, Target::All);
        attrib.set_silent(&[0]);
        attrib.start(t0);
        let first = snapshot(
            t0 + second,
            vec![thread(5, 1_000, 0), thread(6, 2_000, 0)],
            vec![],
        );
        let window = attrib.window(&first);
        assert_eq!(window.silent(), [0]);
        let values = window
            .threads
            .iter()
            .map(|t| (t.on_cpu, &t.counters))
            .chain(window.cgroups.iter().map(|c| (c.on_cpu, &c.counters)));
        for (on_cpu, values) in values {
            assert_eq!(values.len(), 1);
            assert!(values[0].silent && values[0].scaled().is_none());
            assert!(
                !on_cpu.is_zero(),
                "on-CPU time is measured, silent events or not"
            );
        }
        assert_eq!(attrib.run_totals(&first).silent(), [0]);

        let later = snapshot(
            t0 + 2 * second,
            vec![thread(5, 3_000, 0), thread(6, 4_000, 9)],
            vec![],
        );
        let window = attrib.window(&later);
        assert!(window.silent().is_empty(), "thread 6 counted 9");
        let five = window.threads.iter().find(|t| t.tid == Tid(5)).unwrap();
        assert_eq!(five.counters[0].scaled(), Some(0.0), "a 0 that is a count");
        assert!(attrib.run_totals(&later).silent().is_empty());
    }

    /// Churn cannot flood a window: past the hottest `cap` exits, a process's exited threads
    /// fold into one row, and processes past `cap` into one more, every nanosecond kept; with
    /// `WindowExits::Each` every exit keeps its row. Merged windows keep one fold per process.
    #[test]
    fn a_windows_exits_fold_per_process_past_the_hottest() {
        let exits: Vec<ThreadRecord> = (1..=40u32)
            .map(|tid| {
                let pid = 1000 + tid % 4;
                record(
                    tid,
                    pid,
                    1,
                    u64::from(tid) * 10,
                    1,
                    ThreadHeader::FLAG_EXITED,
                )
            })
            .collect();
        let total: u64 = (1..=40u64).map(|tid| tid * 10).sum();
        let t0 = Instant::now();
        let window_of = |exits_kind| {
            let mut attrib = Attributor::with_exited_rows(0, Target::All, 3, exits_kind);
            attrib.start(t0);
            let live = vec![record(7000, 7000, 1, 5, 1, 0)];
            attrib.window(&snapshot(t0, live, exits.clone()))
        };

        let window = window_of(WindowExits::Fold);
        let dead: Vec<&ThreadUsage> = window.threads.iter().filter(|t| t.exited).collect();
        let own: Vec<u32> = dead
            .iter()
            .filter(|t| t.folded == 0)
            .map(|t| t.tid.0)
            .collect();
        assert_eq!(own, [40, 39, 38], "the hottest, hottest first");
        let folds: Vec<(u32, u64)> = dead
            .iter()
            .filter(|t| t.folded > 0)
            .map(|t| (t.pid.0, t.folded))
            .collect();
        // Three processes get folds (cap 3), the fourth's threads go to the rest.
        assert_eq!(folds.len(), 4, "{folds:?}");
        assert_eq!(folds.iter().map(|(_, n)| n).sum::<u64>(), 37);
        assert!(dead.len() <= 2 * 3 + 1, "the bound RowBounds writes down");
        assert_eq!(dead.iter().map(|t| t.on_cpu_ns()).sum::<u64>(), total);
        assert!(
            dead.iter()
                .filter(|t| t.folded > 0)
                .all(|t| t.tid == Tid(0) && t.comm == exited::fold_name(t.pid, t.folded))
        );
        assert!(
            window.threads.iter().any(|t| t.tid == Tid(7000)),
            "the live one"
        );

        let each = window_of(WindowExits::Each);
        assert_eq!(each.threads.iter().filter(|t| t.exited).count(), 40);
        assert!(each.threads.iter().all(|t| t.folded == 0));

        // The same process's folds in two windows merge into one row, renamed for both.
        let merged = Window::merge(&[window.clone(), window]).unwrap();
        let folds: Vec<&ThreadUsage> = merged.threads.iter().filter(|t| t.folded > 0).collect();
        assert_eq!(folds.len(), 4, "{folds:?}");
        assert_eq!(folds.iter().map(|t| t.folded).sum::<u64>(), 74);
        assert!(
            folds
                .iter()
                .all(|t| t.comm == exited::fold_name(t.pid, t.folded))
        );
    }

    #[test]
    fn merged_windows_are_the_windows_of_the_whole_span() {
        let t0 = Instant::now();
        let mut attrib = Attributor::new(0, Target::All);
        attrib.start(t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        let windows = [
            attrib.window(&snapshot(at(100), vec![record(1, 1, 5, 100, 1, 0)], vec![])),
            attrib.window(&snapshot(
                at(200),
                vec![record(1, 1, 6, 300, 4, 0), record(2, 1, 5, 50, 1, 0)],
                vec![],
            )),
            attrib.window(&snapshot(
                at(300),
                vec![record(2, 1, 5, 70, 2, 0)],
                vec![record(1, 1, 6, 350, 5, ThreadHeader::FLAG_EXITED)],
            )),
        ];
        let merged = Window::merge(&windows).unwrap();
        assert_eq!(
            (merged.start, merged.length),
            (Duration::ZERO, Duration::from_millis(300))
        );
        let one = &merged.threads[0];
        assert_eq!((one.tid.0, one.on_cpu_ns(), one.switches), (1, 350, 5));
        assert!(one.exited, "it died in the last window");
        assert_eq!(one.cgroup_id, CgroupId(6), "its latest cgroup");
        let two = &merged.threads[1];
        assert_eq!((two.tid.0, two.on_cpu_ns(), two.switches), (2, 70, 2));
        assert_eq!(
            on_cpu(&merged, 5) + on_cpu(&merged, 6),
            420,
            "every charge, once"
        );
        assert!(Window::merge(&[]).is_none());
    }

    #[test]
    fn windows_are_deltas_and_exits_are_kept_for_the_run() {
        let t0 = Instant::now();
        let mut attrib = Attributor::new(0, Target::Pids(vec![10]));
        attrib.start(t0);
        let s1 = snapshot(
            t0 + Duration::from_secs(1),
            vec![
                totals(10, 10, 100, false),
                totals(11, 10, 50, false),
                totals(99, 99, 7, false),
            ],
            vec![],
        );
        let w1 = attrib.window(&s1);
        assert_eq!(w1.threads.len(), 2, "pid 99 is filtered out");
        assert_eq!(w1.length, Duration::from_secs(1));
        assert_eq!(on_cpu(&w1, 1), 157, "every thread's cgroup is charged");

        let s2 = snapshot(
            t0 + Duration::from_secs(2),
            vec![totals(10, 10, 300, false)],
            vec![totals(11, 10, 80, true)],
        );
        let w2 = attrib.window(&s2);
        let by_tid = |w: &Window, tid| w.threads.iter().find(|t| t.tid == tid).cloned().unwrap();
        assert_eq!(by_tid(&w2, Tid(10)).on_cpu_ns(), 200);
        let dead = by_tid(&w2, Tid(11));
        assert_eq!(dead.on_cpu_ns(), 30);
        assert!(dead.exited);
        assert_eq!(w2.start, Duration::from_secs(1));
        assert_eq!(on_cpu(&w2, 1), 230);

        let run = attrib.run_totals(&s2);
        assert_eq!(by_tid(&run, Tid(10)).on_cpu_ns(), 300);
        assert_eq!(by_tid(&run, Tid(11)).on_cpu_ns(), 80);
        assert_eq!(run.length, Duration::from_secs(2));
        assert_eq!(run.cgroups[0].on_cpu_ns(), 387);
    }

    /// A thread that did not run between two snapshots keeps its totals (no row, nothing
    /// charged); when it runs again it is charged from them; a new thread under the same tid
    /// with the same totals is a new thread, charged whole.
    #[test]
    fn threads_that_did_not_run_keep_their_totals_until_they_run() {
        let t0 = Instant::now();
        let mut attrib = Attributor::new(0, Target::All);
        attrib.start(t0);
        let first = attrib.window(&snapshot(t0, vec![record(5, 5, 7, 100, 1, 0)], vec![]));
        assert_eq!(first.threads[0].on_cpu_ns(), 100);
        for _ in 0..3 {
            let idle = attrib.window(&snapshot(t0, vec![record(5, 5, 7, 100, 1, 0)], vec![]));
            assert!(
                idle.threads.is_empty() && idle.cgroups.is_empty(),
                "{idle:?}"
            );
        }
        let ran = attrib.window(&snapshot(t0, vec![record(5, 5, 7, 150, 2, 0)], vec![]));
        assert_eq!(
            (ran.threads[0].on_cpu_ns(), ran.threads[0].switches),
            (50, 1)
        );
        assert_eq!(on_cpu(&ran, 7), 50);
        let mut reborn = record(5, 5, 7, 150, 2, 0);
        reborn.header.born_ns += 1;
        let new = attrib.window(&snapshot(t0, vec![reborn], vec![]));
        assert_eq!(
            new.threads[0].on_cpu_ns(),
            150,
            "a new thread under the same tid"
        );
        assert_eq!(
            on_cpu(&attrib.run_totals(&snapshot(t0, vec![], vec![])), 7),
            150 + 150
        );
    }

    /// Threads read over many of the chunks the attributor warms the cache for: each that ran is
    /// charged its own delta once, those that did not run get no row, and a new thread under a
    /// reused tid is charged whole, wherever a chunk starts or ends.
    #[test]
    fn threads_read_across_chunks_are_each_charged_their_own_delta() {
        let t0 = Instant::now();
        let mut attrib = Attributor::new(0, Target::All);
        attrib.start(t0);
        let count = 3 * WARM_CHUNK as u32 + 5;
        let first: Vec<ThreadRecord> = (1..=count)
            .map(|tid| record(tid, 1, 7, 10 * u64::from(tid), 1, 0))
            .collect();
        let w1 = attrib.window(&snapshot(t0, first, vec![]));
        assert_eq!(w1.threads.len(), count as usize);
        // Every third thread ran for `tid` ns more; the others are read unchanged; tid 17 is a
        // new thread.
        let second: Vec<ThreadRecord> = (1..=count)
            .map(|tid| {
                let ns = 10 * u64::from(tid);
                let mut now = if tid % 3 == 0 {
                    record(tid, 1, 7, ns + u64::from(tid), 2, 0)
                } else {
                    record(tid, 1, 7, ns, 1, 0)
                };
                if tid == 17 {
                    now.header.born_ns += 1;
                }
                now
            })
            .collect();
        let w2 = attrib.window(&listed(t0 + Duration::from_secs(1), second, vec![]));
        let mut charged: Vec<(u32, u64)> = w2
            .threads
            .iter()
            .map(|t| (t.tid.0, t.on_cpu_ns()))
            .collect();
        charged.sort_unstable();
        let mut expected: Vec<(u32, u64)> = (1..=count)
            .filter(|tid| tid % 3 == 0)
            .map(|tid| (tid, u64::from(tid)))
            .chain([(17, 170)])
            .collect();
        expected.sort_unstable();
        assert_eq!(charged, expected);
        let sum: u64 = expected.iter().map(|&(_, ns)| ns).sum();
        assert_eq!(
            on_cpu(&w2, 7),
            sum,
            "the cgroup is charged what its threads were"
        );
    }

    /// A removed cgroup's charges up to the window after its removal are in the run's totals
    /// (its threads' last records can come a window late); then it is retired: its totals kept
    /// for the run, or forgotten by a session that never reports them.
    #[test]
    fn removed_cgroups_are_retired_a_window_later_kept_or_forgotten() {
        let t0 = Instant::now();
        for keep in [true, false] {
            let mut attrib = Attributor::new(0, Target::All);
            if !keep {
                attrib.forget_removed_cgroups();
            }
            attrib.start(t0);
            attrib.window(&snapshot(t0, vec![record(5, 5, 7, 100, 1, 0)], vec![]));
            let mut removal = snapshot(t0, vec![record(5, 5, 7, 150, 2, 0)], vec![]);
            removal.removed_cgroups = vec![(CgroupId(7), "/gone".into())];
            let w = attrib.window(&removal);
            assert_eq!(w.removed_cgroups, [CgroupId(7)]);
            // The thread's last record comes a window late: charged in that window.
            let late = snapshot(
                t0,
                vec![],
                vec![record(5, 5, 7, 180, 3, ThreadHeader::FLAG_EXITED)],
            );
            let w = attrib.window(&late);
            assert_eq!((on_cpu(&w, 7), w.removed_cgroups.len()), (30, 0));
            // Then retired: its totals kept for the run, or gone.
            let expected = if keep { 180 } else { 0 };
            assert_eq!(
                on_cpu(&attrib.run_totals(&late), 7),
                expected,
                "keep: {keep}"
            );
            let after = snapshot(t0, vec![], vec![]);
            attrib.window(&after);
            assert_eq!(
                on_cpu(&attrib.run_totals(&after), 7),
                expected,
                "keep: {keep}"
            );
        }
    }

    /// A live thread's row and its share of its cgroup are taken once: each cgroup's usage is
    /// what charging it its threads' records adds (the road every other record takes), with
    /// waits split over culprits and a counter, over two windows.
    #[test]
    fn a_cgroup_is_charged_what_its_threads_rows_hold() {
        use topdown_common::neighbours::Culprit;
        let thread = |tid: u32, cgroup: u64, grown: u64| {
            let mut t = ThreadTotals::new(tid, 1);
            let ns = 1_000 * grown;
            t.charged.slots[0] = Reading {
                count: ns,
                enabled_ns: ns,
                running_ns: ns,
            };
            t.charged.slots[1] = Reading {
                count: 3 * ns,
                enabled_ns: ns,
                running_ns: ns / 2,
            };
            t.header.switches = grown;
            t.header.cgroup_id = cgroup;
            t.header.waited_ns = 300 * grown;
            t.behind.cgroups[0] = Culprit {
                id: 40 + u64::from(tid),
                ns: 200 * grown,
                assigned: 1,
                last: 1,
            };
            t.behind.threads[0] = Culprit {
                id: 400 + u64::from(tid),
                ns: 200 * grown,
                assigned: 1,
                last: 1,
            };
            t.behind.rest.idle_ns = 100 * grown;
            t.behind.rest.preempted = grown;
            (ThreadRecord::from_totals(&t, 2), t.behind)
        };
        let t0 = Instant::now();
        let mut attrib = Attributor::new(1, Target::All);
        attrib.start(t0);
        fn books((record, split): &(ThreadRecord, WaitBehind)) -> Books<'_> {
            Books {
                record,
                split: Some(split),
            }
        }
        let mut before: Vec<(ThreadRecord, WaitBehind)> = Vec::new();
        for grown in [1, 3] {
            let now = vec![
                thread(5, 7, grown),
                thread(6, 7, grown * 2),
                thread(9, 8, grown),
            ];
            let mut live = snapshot(t0, now.iter().map(|(r, _)| r.clone()).collect(), vec![]);
            live.live_splits = now.iter().map(|(_, split)| *split).collect();
            live.waits_measured = true;
            live.neighbours_measured = true;
            let window = attrib.window(&live);
            for id in [7, 8] {
                let mut expected = CgroupUsage::new(CgroupId(id), 1);
                for now in now.iter().filter(|(r, _)| r.cgroup() == CgroupId(id)) {
                    let was = before.iter().find(|(b, _)| b.tid() == now.0.tid());
                    expected.charge(was.map(books), books(now));
                }
                let charged = window
                    .cgroups
                    .iter()
                    .find(|c| c.id == CgroupId(id))
                    .unwrap();
                assert_eq!(charged, &expected, "cgroup {id}, window of growth {grown}");
            }
            let seven = window.cgroups.iter().find(|c| c.id == CgroupId(7)).unwrap();
            // Threads 5 and 6 grew by 1 and 2 (first window), by 2 and 4 (second) units.
            let units = if grown == 1 { 3 } else { 6 };
            assert_eq!(seven.waited.as_nanos(), 300 * units);
            assert_eq!(seven.behind.rest.idle_ns, 100 * units as u64);
            assert_eq!(seven.behind.by.len(), 2, "each thread's own culprit");
            before = now;
        }
    }

    #[test]
    fn a_thread_that_moves_charges_each_cgroup_its_own_time() {
        let moved = ThreadHeader::FLAG_MOVED;
        let t0 = Instant::now();
        let mut attrib = Attributor::new(0, Target::All);
        attrib.start(t0);
        attrib.window(&snapshot(t0, vec![record(5, 5, 1, 100, 2, 0)], vec![]));

        // Moved from 1 to 2 before the map was read: 100..150 to 1, 150..400 to 2.
        let w = attrib.window(&snapshot(
            t0,
            vec![record(5, 5, 2, 400, 9, 0)],
            vec![record(5, 5, 1, 150, 4, moved)],
        ));
        assert_eq!((on_cpu(&w, 1), on_cpu(&w, 2)), (50, 250));
        assert_eq!(w.threads[0].on_cpu_ns(), 300);
        assert_eq!(
            w.threads[0].cgroup_id,
            CgroupId(2),
            "the thread is shown where it is now"
        );

        // Moved from 2 to 3 after the map was read (record newer than the map value): all of
        // 400..600 was in 2; the next window starts from the record.
        let w = attrib.window(&snapshot(
            t0,
            vec![record(5, 5, 2, 500, 10, 0)],
            vec![record(5, 5, 2, 600, 11, moved)],
        ));
        assert_eq!((on_cpu(&w, 2), on_cpu(&w, 3)), (200, 0));
        assert_eq!(w.threads[0].on_cpu_ns(), 200);
        let w = attrib.window(&snapshot(t0, vec![record(5, 5, 3, 650, 12, 0)], vec![]));
        assert_eq!((on_cpu(&w, 2), on_cpu(&w, 3)), (0, 50));
        let run = attrib.run_totals(&snapshot(t0, vec![], vec![]));
        let sum: u64 = run.cgroups.iter().map(CgroupUsage::on_cpu_ns).sum();
        assert_eq!(sum, 650, "nothing lost or counted twice");
    }

    #[test]
    fn exits_after_the_map_read_and_reused_tids_are_each_counted_once() {
        let t0 = Instant::now();
        let mut attrib = Attributor::new(0, Target::All);
        attrib.start(t0);
        attrib.window(&snapshot(t0, vec![totals(8, 8, 100, false)], vec![]));
        // Still in the map when it was read, dead by the time records were drained.
        let w = attrib.window(&snapshot(
            t0,
            vec![totals(8, 8, 150, false)],
            vec![totals(8, 8, 170, true)],
        ));
        assert_eq!(w.threads.len(), 1, "{:?}", w.threads);
        assert_eq!(w.threads[0].on_cpu_ns(), 70);
        assert!(w.threads[0].exited);
        assert_eq!(on_cpu(&w, 1), 70);

        // A new thread with the same tid: a different birth, so nothing is subtracted.
        let mut reborn = totals(8, 8, 30, false);
        reborn.header.born_ns += 1;
        let w = attrib.window(&snapshot(t0, vec![reborn], vec![]));
        assert_eq!(w.threads[0].on_cpu_ns(), 30);
        assert_eq!(on_cpu(&w, 1), 30);
    }

    /// Snapshots of only the threads charged since the previous one: a thread not read keeps
    /// its totals (no row, in the run's totals), a dead one leaves, and a thread known only by
    /// a record sent after the map was read (born and moved to another cgroup in between) is
    /// charged from that record once, not again from zero when it is next read.
    #[test]
    fn reads_of_the_threads_charged_keep_the_others_and_drop_the_dead() {
        let t0 = Instant::now();
        let mut attrib = Attributor::new(0, Target::All);
        attrib.start(t0);
        let first = attrib.window(&snapshot(
            t0,
            vec![
                totals(1, 1, 100, false),
                totals(2, 1, 200, false),
                totals(3, 1, 300, false),
            ],
            vec![],
        ));
        assert_eq!(on_cpu(&first, 1), 600);

        let second = attrib.window(&listed(
            t0,
            vec![totals(1, 1, 150, false)],
            vec![totals(2, 1, 250, true)],
        ));
        let rows: Vec<(u32, u64, bool)> = second
            .threads
            .iter()
            .map(|t| (t.tid.0, t.on_cpu_ns(), t.exited))
            .collect();
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert!(
            rows.contains(&(1, 50, false)) && rows.contains(&(2, 50, true)),
            "{rows:?}"
        );
        assert_eq!(on_cpu(&second, 1), 100);

        // Thread 4, born after the map was read, moved from cgroup 1 to 2: its record is all
        // that is known of it in this snapshot.
        let moved = record(4, 1, 1, 40, 1, ThreadHeader::FLAG_MOVED);
        let third = attrib.window(&listed(t0, vec![totals(3, 1, 330, false)], vec![moved]));
        assert_eq!(on_cpu(&third, 1), 30 + 40);
        let four = third.threads.iter().find(|t| t.tid == Tid(4));
        assert_eq!(
            four.map(ThreadUsage::on_cpu_ns),
            Some(40),
            "{:?}",
            third.threads
        );

        let fourth = attrib.window(&listed(t0, vec![record(4, 1, 2, 60, 2, 0)], vec![]));
        assert_eq!(
            on_cpu(&fourth, 2),
            20,
            "charged from its record, not from zero"
        );
        assert_eq!(fourth.threads.len(), 1);

        let run_totals = attrib.run_totals(&listed(t0, vec![], vec![]));
        let mut run: Vec<(u32, u64, bool)> = run_totals
            .threads
            .iter()
            .map(|t| (t.tid.0, t.on_cpu_ns(), t.exited))
            .collect();
        run.sort_unstable();
        assert_eq!(
            run,
            [
                (1, 150, false),
                (2, 250, true),
                (3, 330, false),
                (4, 60, false)
            ],
            "threads not read since keep their totals; the dead one is kept as exited"
        );
        assert_eq!(
            on_cpu(&run_totals, 1) + on_cpu(&run_totals, 2),
            150 + 250 + 330 + 60
        );

        // A whole read drops a thread gone from the map without a record (a lost one).
        attrib.window(&snapshot(t0, vec![totals(1, 1, 150, false)], vec![]));
        let after = attrib.run_totals(&snapshot(t0, vec![], vec![]));
        let live: Vec<u32> = after
            .threads
            .iter()
            .filter(|t| !t.exited)
            .map(|t| t.tid.0)
            .collect();
        assert_eq!(live, [1]);
    }
}
