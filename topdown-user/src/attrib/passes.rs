//! The passes of [`Attributor::window`] over one snapshot: the records the kernel sent, the
//! live-thread map, the records of threads the map did not hold, then what is gone, idle time
//! and the cgroups. Each pass adds to one [`Pass`]: the cgroups charged, each thread's latest
//! record and the rows.

use foldhash::{HashMap, HashMapExt as _, HashSet, HashSetExt as _};
use std::{collections::hash_map::Entry, time::Duration};

use topdown_common::{cgroup::CgroupId, thread::Tid};

use super::{
    Attributor, Kept, WARM_CHUNK,
    exited::ExitedThreads,
    rows_of,
    usage::{CgroupUsage, ThreadUsage},
};
use crate::collect::{Books, Snapshot};

/// One window's attribution under way.
pub(super) struct Pass<'s> {
    /// Counters per row.
    nr: usize,
    /// Every cgroup charged in the window, by id.
    cgroups: HashMap<CgroupId, CgroupUsage>,
    /// Each thread's latest record of this snapshot, in the order they were sent, and whether
    /// the map was read for its tid.
    latest: HashMap<Tid, (Books<'s>, bool)>,
    /// The window's thread rows.
    threads: Vec<ThreadUsage>,
    /// The tids of live threads kept, where the snapshot read every live thread (those not
    /// read are gone from the map); `None` where it read only those charged since the last.
    pub(super) kept: Option<HashSet<Tid>>,
}

impl<'s> Pass<'s> {
    /// Nothing attributed yet of `snapshot`, for `nr` counters.
    pub(super) fn new(nr: usize, snapshot: &Snapshot) -> Self {
        Self {
            nr,
            cgroups: HashMap::new(),
            latest: HashMap::new(),
            // A usage for each record and each live thread read (where the snapshot lists
            // the threads that ran, most are charged; a whole read reserves for every live
            // thread, untouched beyond those charged). Grown a push at a time, the vector was
            // reallocated a dozen times a window on a busy host, each a copy of 184-byte usages.
            threads: Vec::with_capacity(snapshot.live.len() + snapshot.records.len()),
            kept: snapshot
                .live_complete
                .then(|| HashSet::with_capacity(snapshot.live.len())),
        }
    }

    /// Charges cgroup `id` what the thread ran from `before` to `now`.
    fn charge(&mut self, id: CgroupId, before: Option<Books<'_>>, now: Books<'_>) {
        self.cgroup(id).charge(before, now);
    }

    /// Cgroup `id`'s usage in the window, made on its first charge.
    fn cgroup(&mut self, id: CgroupId) -> &mut CgroupUsage {
        let nr = self.nr;
        self.cgroups
            .entry(id)
            .or_insert_with(|| CgroupUsage::new(id, nr))
    }
}

impl Attributor {
    /// The records the kernel sent (a thread's totals as it left a cgroup, or its final ones),
    /// in the order sent: each charged to the cgroup it names, from the thread's previous
    /// record; exited threads' rows (beyond the hottest, folded per process).
    pub(super) fn charge_records<'s>(&mut self, pass: &mut Pass<'s>, snapshot: &'s Snapshot) {
        let nr = pass.nr;
        let mut exits = ExitedThreads::new(self.window_exit_rows);
        for record in snapshot.record_books() {
            let before = pass
                .latest
                .get(&record.tid())
                .map(|&(r, _)| r)
                .filter(|r| r.same_thread(&record))
                .or_else(|| Self::before(&self.live, &self.kept_splits, &record));
            pass.charge(record.cgroup(), before, record);
            pass.latest.insert(record.tid(), (record, false));
            if record.exited() && self.target.keeps(&record.header) {
                let usage = ThreadUsage::between(
                    Self::before(&self.live, &self.kept_splits, &record),
                    record,
                    nr,
                );
                self.exited.add(ThreadUsage::between(None, record, nr));
                exits.add(usage);
            }
        }
        pass.threads.extend(exits.into_rows());
    }

    /// The live-thread map as read: each thread that ran since its kept totals is charged to
    /// the cgroup it is in now, from its previous totals or from a record it sent (the later of
    /// the map value and the record is its latest), and gets a row.
    ///
    /// One lookup of a thread's kept totals per thread read (a host's worth of threads misses
    /// the cache at each). The threads are taken a chunk at a time, their kept totals looked up
    /// first in a loop of nothing else, so that the CPU overlaps those misses (one after
    /// another, each waits out the last: a profile at 100,000 threads had four fifths of the
    /// window's time there).
    pub(super) fn charge_live(&mut self, pass: &mut Pass<'_>, snapshot: &Snapshot) {
        let nr = pass.nr;
        let (live, splits, target) = (&mut self.live, &mut self.kept_splits, &self.target);
        for chunk in (0..snapshot.live.len()).step_by(WARM_CHUNK) {
            let chunk = chunk..(chunk + WARM_CHUNK).min(snapshot.live.len());
            let mut warm: [Option<&Kept>; WARM_CHUNK] = [None; WARM_CHUNK];
            for (now, warm) in snapshot.live[chunk.clone()].iter().zip(&mut warm) {
                *warm = live.get(&now.tid());
                if let Some(kept) = warm {
                    crate::prefetch::read(*kept);
                }
            }
            // Then their kept splits, where the kernel splits waits (248 bytes, a window cold:
            // a profile of 20,000 busy threads had half of `Behind::between`'s time on their
            // first touch), once the totals that name them are on their way.
            for kept in warm.iter().flatten() {
                if let Some(split) = kept.books(splits).split {
                    crate::prefetch::read(split);
                }
            }
            for at in chunk {
                let now = snapshot.live_books(at);
                let sent = match pass.latest.get_mut(&now.tid()) {
                    Some((record, read)) => {
                        *read = true;
                        Some(*record).filter(|r| r.same_thread(&now))
                    }
                    None => None,
                };
                let entry = live.entry(now.tid());
                let old = match &entry {
                    Entry::Occupied(slot) => Some(slot.get().books(splits)),
                    Entry::Vacant(_) => None,
                };
                // Most live threads on a large host did not run since the previous snapshot:
                // their totals are the ones kept, which stay (nothing to charge, no row, no
                // copy).
                if sent.is_none() && old.is_some_and(|old| old.unchanged_in(&now)) {
                    if let Some(kept) = pass.kept.as_mut() {
                        kept.insert(now.tid());
                    }
                    continue;
                }
                // The thread's previous totals (a record sent is the same thread, so they are
                // its too).
                let before = old.filter(|before| before.same_thread(&now));
                // With no record since, the row's usage is what its cgroup is charged: taken
                // once (a busy host's every thread comes here).
                let (newest, usage) = match sent {
                    // Died after the map was read: its final record is charged already.
                    Some(record) if record.exited() => continue,
                    // Left its cgroup after the map was read: the record is the later.
                    Some(record) if record.on_cpu_ns() > now.on_cpu_ns() => (record, None),
                    Some(record) => {
                        pass.charge(now.cgroup(), Some(record), now);
                        (now, None)
                    }
                    None => {
                        let usage = target
                            .keeps(&now.header)
                            .then(|| ThreadUsage::between(before, now, nr));
                        match &usage {
                            Some(usage) => pass.cgroup(now.cgroup()).charge_usage(usage),
                            None => pass.charge(now.cgroup(), before, now),
                        }
                        (now, usage)
                    }
                };
                let usage = usage.or_else(|| {
                    target
                        .keeps(&newest.header)
                        .then(|| ThreadUsage::between(before, newest, nr))
                });
                if let Some(usage) = usage.filter(|usage| !usage.is_idle()) {
                    pass.threads.push(ThreadUsage {
                        cgroup_id: now.cgroup(),
                        ..usage
                    });
                }
                Self::keep(entry, splits, newest, pass.kept.as_mut());
            }
        }
    }

    /// A thread that sent a record after the map was read and was not read from it (born, or
    /// listed as charged, after the read): the record is its latest.
    pub(super) fn charge_unread(&mut self, pass: &mut Pass<'_>) {
        for (record, read) in std::mem::take(&mut pass.latest).into_values() {
            if record.exited() || read {
                continue;
            }
            if self.target.keeps(&record.header) {
                let usage = ThreadUsage::between(
                    Self::before(&self.live, &self.kept_splits, &record),
                    record,
                    pass.nr,
                );
                if !usage.is_idle() {
                    pass.threads.push(usage);
                }
            }
            Self::keep(
                self.live.entry(record.tid()),
                &mut self.kept_splits,
                record,
                pass.kept.as_mut(),
            );
        }
    }

    /// Forgets the threads that are gone: where every live thread was read (`kept`), those
    /// not read (their final record was lost, counted by the kernel, or they were only ever
    /// charged to scratch space, map full, counted); else those whose final record came.
    pub(super) fn forget_gone(&mut self, kept: Option<HashSet<Tid>>, snapshot: &Snapshot) {
        if let Some(kept) = kept {
            let splits = &mut self.kept_splits;
            self.live.retain(|tid, gone| {
                let keep = kept.contains(tid);
                if !keep {
                    splits.release(gone.split);
                }
                keep
            });
        } else {
            for record in snapshot.records.iter().filter(|r| r.exited()) {
                if Self::before(&self.live, &self.kept_splits, record).is_some()
                    && let Some(gone) = self.live.remove(&record.tid())
                {
                    self.kept_splits.release(gone.split);
                }
            }
        }
    }

    /// Each CPU's idle time since the previous snapshot.
    pub(super) fn idle_since(&mut self, snapshot: &Snapshot) -> Vec<Duration> {
        let idle = snapshot
            .idle
            .iter()
            .enumerate()
            .map(|(cpu, now)| {
                let before = self.idle.get(cpu).copied().unwrap_or(Duration::ZERO);
                now.saturating_sub(before)
            })
            .collect();
        self.idle.clone_from(&snapshot.idle);
        idle
    }

    /// The window's thread and cgroup rows, silent events judged over them, the cgroups'
    /// charges added to the run's.
    pub(super) fn close(&mut self, pass: Pass<'_>) -> (Vec<ThreadUsage>, Vec<CgroupUsage>) {
        let mut threads = pass.threads;
        let mut cgroups: Vec<CgroupUsage> = pass
            .cgroups
            .into_values()
            .filter(|c| !c.is_empty())
            .collect();
        self.silence.judge(&mut rows_of(&mut threads, &mut cgroups));
        for usage in &cgroups {
            let run = self
                .cgroups
                .entry(usage.id)
                .or_insert_with(|| CgroupUsage::new(usage.id, pass.nr));
            run.absorb(usage);
            run.behind.bound_for_run();
        }
        (threads, cgroups)
    }
}
