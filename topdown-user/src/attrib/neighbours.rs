//! Whom run-queue waits were spent behind, per window: the kernel's split of each thread's
//! waits over the cgroups that held its CPU meanwhile ([`topdown_common::neighbours`]), as
//! deltas per thread and sums per cgroup, then named the way rows are (container, cgroup path)
//! and cut to the top [`TOP_CULPRITS`] and the rest.

use std::sync::Arc;

use compact_str::CompactString;
use foldhash::{HashMap, HashMapExt as _};
use smallvec::SmallVec;
use topdown_common::{
    cgroup::CgroupId,
    neighbours::{BEHIND_SLOTS, BEHIND_THREADS, WaitBehind, WaitRest},
    thread::Tid,
};

use super::{cgroups::CgroupNames, containers::Owner, groups::GroupBy, usage::ThreadUsage};

/// How many culprits a row names (largest first); the rest are summed as `other`. Machine
/// outputs and the exporter keep the same bound, so a cgroup has at most this many `behind`
/// series plus `other`, `idle` and `unattributed`.
pub const TOP_CULPRITS: usize = 3;

/// Where a thread's or a cgroup's run-queue waits went over a window, and its preemptions. The
/// parts add up to the row's wait ([`BehindParts::total_ns`]). Held out of line, and only where
/// something was split: most of a window's threads have nothing (none waited, or the split is
/// off), and a busy host's 20,000 usages a window each carrying the parts inline cost the
/// attributor four times the cache misses (BENCHMARKS.md, session 38). Reads as its parts
/// (empty when there are none); a write makes them.
#[derive(Clone, Debug, Default)]
pub struct Behind(Option<Box<BehindParts>>);

/// No parts: what an empty [`Behind`] reads as.
static NO_PARTS: std::sync::LazyLock<BehindParts> = std::sync::LazyLock::new(BehindParts::default);

impl std::ops::Deref for Behind {
    type Target = BehindParts;
    fn deref(&self) -> &BehindParts {
        self.0.as_deref().unwrap_or(&NO_PARTS)
    }
}

impl std::ops::DerefMut for Behind {
    fn deref_mut(&mut self) -> &mut BehindParts {
        self.0.get_or_insert_with(Box::default)
    }
}

impl PartialEq for Behind {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Behind {}

impl From<BehindParts> for Behind {
    fn from(parts: BehindParts) -> Self {
        Self(Some(Box::new(parts)))
    }
}

/// The parts of a [`Behind`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BehindParts {
    /// Nanoseconds waited behind each culprit cgroup (one entry per cgroup, in no order).
    pub by: SmallVec<[(CgroupId, u64); BEHIND_SLOTS]>,
    /// Nanoseconds waited behind each culprit thread the kernel kept a slot for (a split of
    /// the cgroups' parts; one entry per thread, in no order).
    pub threads: SmallVec<[(Tid, u64); BEHIND_THREADS]>,
    /// The rest of the waits (other, idle, unattributed), and the preemptions; `other_ns`
    /// holds the cgroups whose kernel slot went to another culprit before it was read (a
    /// thread keeps [`BEHIND_SLOTS`], given to its latest culprits).
    pub rest: WaitRest,
    /// Where each culprit sits in `by` and `threads` once they are long (a cgroup's sum over
    /// its threads, a run's over its windows), so [`BehindParts::add`] looks each up once.
    pub index: ListIndex,
}

/// How many culprit cgroups and threads a total kept for the whole run (a cgroup's, a fold of
/// exited threads') names at least: its lists are cut back to this many, the largest, whenever
/// they reach twice as many, so its memory does not grow with the host's churn of threads and
/// containers over a long run.
pub const RUN_CULPRITS: usize = 64;

/// Lists at least this long are looked up through a [`ListIndex`]; shorter ones (a thread's:
/// at most the kernel's slots) are walked.
const INDEX_FROM: usize = 16;

/// Where each id sits in a [`Behind`]'s long lists: adding a cgroup's threads' culprits walked
/// every culprit the cgroup had for each (with 20,000 busy threads in one cgroup, a third of the
/// tool's time). It only mirrors the lists, so two are always equal.
///
/// Each map is made the first time its list is long: a thread's never is, and a map made is a
/// seed drawn, for each of a busy host's thousands of threads twice a window.
#[derive(Clone, Debug, Default)]
pub struct ListIndex {
    by: Option<Box<HashMap<CgroupId, usize>>>,
    threads: Option<Box<HashMap<Tid, usize>>>,
}

impl PartialEq for ListIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ListIndex {}

/// Adds `ns` to `id`'s entry of `list`, or a new entry: by `index` once the list is long (the
/// index caught up with what was pushed without it).
fn add_to<K: Copy + Eq + std::hash::Hash, const N: usize>(
    list: &mut SmallVec<[(K, u64); N]>,
    index: &mut Option<Box<HashMap<K, usize>>>,
    id: K,
    ns: u64,
) where
    [(K, u64); N]: smallvec::Array<Item = (K, u64)>,
{
    if list.len() < INDEX_FROM {
        match list.iter_mut().find(|(mine, _)| *mine == id) {
            Some((_, mine)) => *mine += ns,
            None => list.push((id, ns)),
        }
        return;
    }
    let index = index.get_or_insert_with(Box::default);
    if index.len() != list.len() {
        index.clear();
        index.extend(list.iter().enumerate().map(|(at, &(id, _))| (id, at)));
    }
    match index.get(&id) {
        Some(&at) => list[at].1 += ns,
        None => {
            index.insert(id, list.len());
            list.push((id, ns));
        }
    }
}

impl Behind {
    /// Its parts, where anything was split (`None`: nothing), for a loop that asks for them
    /// ahead (see [`crate::prefetch`]).
    pub fn parts(&self) -> Option<&BehindParts> {
        self.0.as_deref()
    }

    /// The kernel's `now` minus `before` (none: a thread first seen), slot by slot: within one
    /// assignment of a slot, its growth; a slot given to a culprit since, all it holds. The
    /// kernel moves an evicted cgroup slot's whole value to `other_ns`, of which the part seen
    /// at `before` was counted then: it is taken out again, so the parts add up to the wait's
    /// growth.
    pub fn between(before: Option<&WaitBehind>, now: &WaitBehind) -> Self {
        let zero = WaitBehind::ZERO;
        let before = before.unwrap_or(&zero);
        // Nothing split since (a thread that did not wait, every thread with neighbours off):
        // nothing to take apart.
        if before == now {
            return Self::default();
        }
        let mut recounted = 0;
        let mut by = SmallVec::new();
        for (was, is) in before.cgroups.iter().zip(&now.cgroups) {
            let same = was.id == is.id && was.assigned == is.assigned;
            if was.id != 0 && !same {
                recounted += was.ns;
            }
            let ns = if same {
                is.ns.saturating_sub(was.ns)
            } else {
                is.ns
            };
            if is.id != 0 && ns > 0 {
                by.push((CgroupId(is.id), ns));
            }
        }
        let threads = before
            .threads
            .iter()
            .zip(&now.threads)
            .filter_map(|(was, is)| {
                let same = was.id == is.id && was.assigned == is.assigned;
                let ns = if same {
                    is.ns.saturating_sub(was.ns)
                } else {
                    is.ns
                };
                (is.id != 0 && ns > 0).then_some((Tid(is.id as u32), ns))
            })
            .collect();
        let mut rest = now.rest.since(&before.rest);
        rest.other_ns = rest.other_ns.saturating_sub(recounted);
        Self::from(BehindParts {
            by,
            threads,
            rest,
            index: ListIndex::default(),
        })
    }

    /// Adds `other`'s (a later window, another thread of the cgroup, a child cgroup); nothing
    /// is made where it has nothing.
    pub fn add(&mut self, other: &Self) {
        if let Some(other) = &other.0 {
            (**self).add(other);
        }
    }

    /// Bounds a total kept for the whole run ([`BehindParts::bound_for_run`]).
    pub fn bound_for_run(&mut self) {
        if let Some(parts) = &mut self.0 {
            parts.bound_for_run();
        }
    }
}

impl BehindParts {
    /// Adds `other`'s (a later window, another thread of the cgroup, a child cgroup).
    pub fn add(&mut self, other: &Self) {
        for &(id, ns) in &other.by {
            add_to(&mut self.by, &mut self.index.by, id, ns);
        }
        for &(tid, ns) in &other.threads {
            add_to(&mut self.threads, &mut self.index.threads, tid, ns);
        }
        self.rest.add(&other.rest);
    }

    /// Every nanosecond of wait, attributed or not.
    pub fn total_ns(&self) -> u64 {
        self.by.iter().map(|(_, ns)| ns).sum::<u64>() + self.rest.ns()
    }

    /// Bounds a total kept for the whole run: a list of twice [`RUN_CULPRITS`] entries is cut
    /// to the largest [`RUN_CULPRITS`] (ties by id). The cut cgroups' nanoseconds move to
    /// `other_ns`, so the parts still add up to the wait; the cut threads' leave the named
    /// split (threads only split the cgroups' parts: they are the culprits' unnamed rest). A
    /// culprit cut and seen again counts from then on, as a kernel slot given to another
    /// culprit and back does.
    pub fn bound_for_run(&mut self) {
        if self.by.len() >= 2 * RUN_CULPRITS {
            self.rest.other_ns += keep_largest(&mut self.by);
            self.index.by = None;
        }
        if self.threads.len() >= 2 * RUN_CULPRITS {
            keep_largest(&mut self.threads);
            self.index.threads = None;
        }
    }
}

/// Cuts `list` to its largest [`RUN_CULPRITS`] entries (ties by id); returns what the cut ones
/// held.
fn keep_largest<K: Copy + Ord, const N: usize>(list: &mut SmallVec<[(K, u64); N]>) -> u64
where
    [(K, u64); N]: smallvec::Array<Item = (K, u64)>,
{
    let largest_first = |(a, x): &(K, u64), (b, y): &(K, u64)| y.cmp(x).then_with(|| a.cmp(b));
    if list.len() <= RUN_CULPRITS {
        list.sort_unstable_by(largest_first);
        return 0;
    }
    // The largest in front (in no order), then only those sorted: a busy cgroup's thousands of
    // culprit threads are never sorted whole.
    list.select_nth_unstable_by(RUN_CULPRITS - 1, largest_first);
    let cut = list.iter().skip(RUN_CULPRITS).map(|(_, ns)| ns).sum();
    list.truncate(RUN_CULPRITS);
    list.sort_unstable_by(largest_first);
    cut
}

/// A row's waits with their culprits named, largest first: what every output shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Culprits {
    /// The named culprits, at most [`TOP_CULPRITS`], largest first (ties by name).
    pub top: SmallVec<[(Arc<str>, u64); TOP_CULPRITS]>,
    /// The culprit threads (`comm/tid`), at most [`TOP_CULPRITS`], largest first: a split of
    /// the culprits' parts, not more wait. A name fits a `CompactString` inline (a comm, `/`
    /// and a tid): a busy host names 20,000 culprit threads a window, and shared names cost an
    /// allocation, a map entry and a free each.
    pub threads: SmallVec<[(CompactString, u64); TOP_CULPRITS]>,
    /// Waited behind any other culprit (named ones past the top, and cgroups the kernel kept
    /// no slot for).
    pub other_ns: u64,
    /// Waited while the CPU was idle or waking up.
    pub idle_ns: u64,
    /// Not attributed: before what the CPU's history covered, or on a CPU the thread was then
    /// moved away from.
    pub unattributed_ns: u64,
    /// Switches out while still runnable.
    pub preempted: u64,
    /// Of those, switches to a thread of another cgroup.
    pub preempted_by_other: u64,
}

impl Culprits {
    /// What the named culprit threads do not hold of the culprits' time (threads beyond the
    /// top, and those whose kernel slot went to another before it was read).
    pub fn other_threads_ns(&self) -> u64 {
        let culprits = self.top.iter().map(|(_, ns)| ns).sum::<u64>() + self.other_ns;
        let named = self.threads.iter().map(|(_, ns)| ns).sum::<u64>();
        culprits.saturating_sub(named)
    }

    /// Every nanosecond of wait the parts hold: the row's wait.
    pub fn total_ns(&self) -> u64 {
        self.top.iter().map(|(_, ns)| ns).sum::<u64>()
            + self.other_ns
            + self.idle_ns
            + self.unattributed_ns
    }

    /// Several rows' culprits as one (a process of threads), cut to the top again: a culprit
    /// past one row's top is in its `other` and stays there.
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a Self>) -> Self {
        let mut sum = Self::default();
        let mut named: SmallVec<[(Arc<str>, u64); 8]> = SmallVec::new();
        let mut threads: SmallVec<[(CompactString, u64); 8]> = SmallVec::new();
        for part in parts {
            merge(&mut named, &part.top);
            merge(&mut threads, &part.threads);
            sum.other_ns += part.other_ns;
            sum.idle_ns += part.idle_ns;
            sum.unattributed_ns += part.unattributed_ns;
            sum.preempted += part.preempted;
            sum.preempted_by_other += part.preempted_by_other;
        }
        sum.other_ns += cut(&mut named);
        cut(&mut threads);
        sum.top = named.into_iter().collect();
        sum.threads = threads.into_iter().collect();
        sum
    }

    /// The largest culprit and its share of the whole wait (`None`: nothing attributed).
    pub fn first(&self) -> Option<(&str, f64)> {
        let (name, ns) = self.top.first()?;
        let total = self.total_ns();
        (total > 0).then(|| (&**name, *ns as f64 / total as f64))
    }
}

/// Adds `parts` into `named`, by name.
fn merge<N: Clone + PartialEq>(named: &mut SmallVec<[(N, u64); 8]>, parts: &[(N, u64)]) {
    for (name, ns) in parts {
        match named.iter_mut().find(|(n, _)| n == name) {
            Some((_, total)) => *total += ns,
            None => named.push((name.clone(), *ns)),
        }
    }
}

/// Sorts `named` largest first (ties by name) and cuts it to the top [`TOP_CULPRITS`];
/// returns what the cut culprits waited.
fn cut<N: Ord>(named: &mut SmallVec<[(N, u64); 8]>) -> u64 {
    named.sort_by(|(a, x), (b, y)| y.cmp(x).then_with(|| a.cmp(b)));
    let rest = named.iter().skip(TOP_CULPRITS).map(|(_, ns)| ns).sum();
    named.truncate(TOP_CULPRITS);
    rest
}

/// The least time among the top [`TOP_CULPRITS`] of `threads` (0 when fewer).
fn top_least(threads: &[(Tid, u64)]) -> u64 {
    if threads.len() <= TOP_CULPRITS {
        return 0;
    }
    let mut top = [0u64; TOP_CULPRITS];
    for &(_, ns) in threads {
        // `top` stays sorted, largest first.
        if ns > top[TOP_CULPRITS - 1] {
            let at = top.iter().position(|&t| ns > t).unwrap_or(TOP_CULPRITS - 1);
            top.copy_within(at..TOP_CULPRITS - 1, at + 1);
            top[at] = ns;
        }
    }
    top[TOP_CULPRITS - 1]
}

/// Names culprit cgroups as rows of `by` are named (threads: by container): a container's key
/// (`docker:1a2b3c4d5e6f`, `nginx.service`), else the cgroup's path; each id named once. Names
/// culprit threads `comm/tid` from the window's threads (`tid N` for one it does not have),
/// indexing them the first time a culprit thread is named.
pub struct CulpritNames<'w> {
    by: Option<GroupBy>,
    named: HashMap<CgroupId, Arc<str>>,
    threads: &'w [ThreadUsage],
    index: Option<HashMap<Tid, usize>>,
}

impl<'w> CulpritNames<'w> {
    /// Culprits named for rows grouped `by` (`None`: thread rows), culprit threads from
    /// `threads`.
    pub fn new(by: Option<GroupBy>, threads: &'w [ThreadUsage]) -> Self {
        Self {
            by,
            named: HashMap::new(),
            threads,
            index: None,
        }
    }

    fn thread_name(&mut self, tid: Tid) -> CompactString {
        let threads = self.threads;
        let index = self.index.get_or_insert_with(|| {
            let mut index = HashMap::with_capacity(threads.len());
            index.extend(
                threads
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.folded == 0)
                    .map(|(i, t)| (t.tid, i)),
            );
            index
        });
        // Pieces, not `write!` (its machinery was most of the cost of naming a busy host's
        // culprits).
        let mut text = CompactString::const_new("");
        match index.get(&tid) {
            Some(&i) => {
                text.push_str(&threads[i].comm);
                text.push('/');
            }
            None => text.push_str("tid "),
        }
        text.push_str(itoa::Buffer::new().format(tid.0));
        text
    }

    /// `behind`'s culprits named, cut to the top [`TOP_CULPRITS`].
    pub fn culprits(&mut self, behind: &Behind, names: &mut CgroupNames) -> Culprits {
        let mut named: SmallVec<[(Arc<str>, u64); 8]> = SmallVec::new();
        for &(id, ns) in &behind.by {
            let name = self.name(id, names);
            match named.iter_mut().find(|(n, _)| *n == name) {
                Some((_, total)) => *total += ns,
                None => named.push((name, ns)),
            }
        }
        let rest = cut(&mut named);
        // Only the threads that can make the top are named (a cgroup's sum holds thousands):
        // each thread has its own name, so the top by time is the top of those holding at
        // least the top's least time, ties included.
        let least = top_least(&behind.threads);
        let mut threads: SmallVec<[(CompactString, u64); 8]> = behind
            .threads
            .iter()
            .filter(|&&(_, ns)| ns >= least)
            .map(|&(tid, ns)| (self.thread_name(tid), ns))
            .collect();
        cut(&mut threads);
        Culprits {
            top: named.into_iter().collect(),
            threads: threads.into_iter().collect(),
            other_ns: behind.rest.other_ns + rest,
            idle_ns: behind.rest.idle_ns,
            unattributed_ns: behind.rest.unknown_ns + behind.rest.migrated_ns,
            preempted: behind.rest.preempted,
            preempted_by_other: behind.rest.preempted_by_other,
        }
    }

    fn name(&mut self, id: CgroupId, names: &mut CgroupNames) -> Arc<str> {
        if let Some(name) = self.named.get(&id) {
            return name.clone();
        }
        let path = names.name(id);
        let name = match self.by {
            Some(GroupBy::Cgroup) => path,
            _ => Owner::of(&path).key().map_or(path, Arc::from),
        };
        self.named.insert(id, name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A usage with nothing split (no wait, or the split off) holds a pointer's worth for it
    /// and makes nothing, summed or not; one with a split holds it, and sums add it up.
    #[test]
    fn nothing_split_costs_a_pointer_and_no_allocation() {
        assert_eq!(size_of::<Behind>(), size_of::<usize>());
        let mut kernel = WaitBehind::ZERO;
        let ((), made) = crate::allocations::count(|| {
            let mut sum = Behind::default();
            for _ in 0..1_000 {
                sum.add(&Behind::between(Some(&kernel), &kernel));
                sum.add(&Behind::between(None, &kernel));
            }
            sum.bound_for_run();
            assert_eq!(sum, Behind::default());
            assert_eq!((sum.total_ns(), sum.by.len()), (0, 0));
        });
        assert_eq!(made, 0);
        kernel.begin_split();
        kernel.charge(5, 105, 40);
        let split = Behind::between(None, &kernel);
        let mut sum = Behind::default();
        sum.add(&split);
        sum.add(&split);
        assert_eq!(sum.by.as_slice(), [(CgroupId(5), 80)]);
        assert_eq!(sum.total_ns(), 80);
        assert_ne!(sum, Behind::default());
    }

    #[test]
    fn deltas_are_taken_within_a_slots_assignment_and_add_up_to_the_waits_growth() {
        let mut kernel = WaitBehind::ZERO;
        // One wait each.
        let charge = |kernel: &mut WaitBehind, cgroup: u64, tid: u32, ns: u64| {
            kernel.begin_split();
            kernel.charge(cgroup, tid, ns);
        };
        for (cgroup, ns) in [(5, 100), (6, 50), (7, 1), (8, 1)] {
            charge(&mut kernel, cgroup, cgroup as u32 + 100, ns);
        }
        for _ in 0..4 {
            charge(&mut kernel, 5, 105, 0);
        }
        let before = kernel;
        // 5 grows; then 9 comes, taking the least-holding slot not charged lately (7's), 10
        // takes 8's and is charged again; 6 still has its slot.
        for (cgroup, ns) in [(5, 30), (9, 20), (10, 4), (10, 4), (6, 2)] {
            charge(&mut kernel, cgroup, cgroup as u32 + 100, ns);
        }
        let delta = Behind::between(Some(&before), &kernel);
        let mut by: Vec<(u64, u64)> = delta.by.iter().map(|&(id, ns)| (id.0, ns)).collect();
        by.sort_unstable();
        assert_eq!(by, [(5, 30), (6, 2), (9, 20), (10, 8)]);
        assert_eq!(
            delta.rest.other_ns, 0,
            "6's and 7's and 8's moves were counted before"
        );
        assert_eq!(
            delta.total_ns(),
            kernel.total_ns() - before.total_ns(),
            "the parts add up to the growth"
        );
        let mut threads: Vec<u32> = delta.threads.iter().map(|&(tid, _)| tid.0).collect();
        threads.sort_unstable();
        assert_eq!(threads, [105, 106, 109, 110]);
        // What was charged between two reads and evicted before the second is other.
        let before = kernel;
        for (cgroup, ns) in [(11, 3), (12, 3), (13, 3), (14, 3), (15, 3)] {
            charge(&mut kernel, cgroup, 1, ns);
        }
        let delta = Behind::between(Some(&before), &kernel);
        assert_eq!(delta.total_ns(), 15);
        assert_eq!(delta.rest.other_ns, 3, "11's part, evicted by 15 unread");
        // A thread first seen: everything.
        assert_eq!(Behind::between(None, &kernel).total_ns(), kernel.total_ns());
    }

    #[test]
    fn sums_merge_by_cgroup_and_thread() {
        let part = |by: &[(u64, u64)], threads: &[(u32, u64)]| {
            Behind::from(BehindParts {
                by: by.iter().map(|&(id, ns)| (CgroupId(id), ns)).collect(),
                threads: threads.iter().map(|&(t, ns)| (Tid(t), ns)).collect(),
                ..BehindParts::default()
            })
        };
        let mut sum = part(&[(5, 30), (9, 20)], &[(1, 10)]);
        sum.add(&part(&[(9, 5), (11, 1)], &[(1, 2), (2, 3)]));
        assert_eq!(
            sum.by.as_slice(),
            [(CgroupId(5), 30), (CgroupId(9), 25), (CgroupId(11), 1)]
        );
        assert_eq!(sum.threads.as_slice(), [(Tid(1), 12), (Tid(2), 3)]);
        assert_eq!(sum.total_ns(), 56);
    }

    /// A cgroup's sum over thousands of threads' parts (past [`INDEX_FROM`], looked up by
    /// index): every culprit once, in the order first seen, with what every part gave it, as
    /// the walk of a short list adds them.
    #[test]
    fn long_sums_merge_through_the_index_as_short_ones_do() {
        let mut sum = Behind::default();
        let mut expected: Vec<(Tid, u64)> = Vec::new();
        let mut by_expected: Vec<(CgroupId, u64)> = Vec::new();
        for i in 0..3_000u32 {
            let (tid, cgroup) = (Tid(i * 7 % 1_009), CgroupId(u64::from(i % 40)));
            let part = Behind::from(BehindParts {
                by: [(cgroup, 2)].into_iter().collect(),
                threads: [(tid, u64::from(i))].into_iter().collect(),
                ..BehindParts::default()
            });
            sum.add(&part);
            match expected.iter_mut().find(|(t, _)| *t == tid) {
                Some((_, ns)) => *ns += u64::from(i),
                None => expected.push((tid, u64::from(i))),
            }
            match by_expected.iter_mut().find(|(c, _)| *c == cgroup) {
                Some((_, ns)) => *ns += 2,
                None => by_expected.push((cgroup, 2)),
            }
            if i == 1_500 {
                // A copy of a long sum carries on as the sum does.
                let copy = sum.clone();
                assert_eq!(copy, sum);
            }
        }
        assert_eq!(sum.threads.as_slice(), expected.as_slice());
        assert_eq!(sum.by.as_slice(), by_expected.as_slice());
        assert_eq!(sum.threads.len(), 1_009);
    }

    /// A run's total over a churning host (a new culprit cgroup and thread in every window, a
    /// steady one beside them): its lists stay under twice [`RUN_CULPRITS`], the parts still
    /// add up to every nanosecond waited, and the steady culprit keeps its whole sum.
    #[test]
    fn a_run_total_keeps_its_largest_culprits_and_every_nanosecond() {
        let mut run = Behind::default();
        let mut waited = 0;
        for window in 0..10_000u64 {
            let part = Behind::from(BehindParts {
                by: [(CgroupId(1), 50), (CgroupId(100 + window), 1 + window % 7)]
                    .into_iter()
                    .collect(),
                threads: [(Tid(1), 50), (Tid(100 + window as u32), 1 + window % 7)]
                    .into_iter()
                    .collect(),
                rest: WaitRest {
                    idle_ns: 2,
                    ..WaitRest::ZERO
                },
                ..BehindParts::default()
            });
            waited += part.total_ns();
            run.add(&part);
            run.bound_for_run();
            assert!(run.by.len() < 2 * RUN_CULPRITS && run.threads.len() < 2 * RUN_CULPRITS);
        }
        assert_eq!(
            run.total_ns(),
            waited,
            "every nanosecond is still in a part"
        );
        let steady = |list: &[(u64, u64)]| list.iter().find(|(id, _)| *id == 1).map(|p| p.1);
        let by: Vec<(u64, u64)> = run.by.iter().map(|(c, ns)| (c.0, *ns)).collect();
        let threads: Vec<(u64, u64)> = run
            .threads
            .iter()
            .map(|(t, ns)| (u64::from(t.0), *ns))
            .collect();
        assert_eq!(steady(&by), Some(50 * 10_000));
        assert_eq!(steady(&threads), Some(50 * 10_000));
        assert!(
            run.rest.other_ns > 0,
            "the cut cgroups' parts moved to other"
        );
        // Adding to a cut list finds its entries again (the index was rebuilt).
        run.add(&Behind::from(BehindParts {
            by: [(CgroupId(1), 5)].into_iter().collect(),
            ..BehindParts::default()
        }));
        assert_eq!(run.by.iter().filter(|(c, _)| c.0 == 1).count(), 1);
    }

    /// A cgroup's sum names only the threads that can make its top: the same top, ties at its
    /// edge by name, as naming every culprit thread and cutting would give.
    #[test]
    fn a_long_list_of_culprit_threads_names_the_same_top_as_naming_all() {
        let mut names = CgroupNames::at(None);
        let mut seed = 7u64;
        for case in 0..200 {
            let threads: SmallVec<[(Tid, u64); BEHIND_THREADS]> = (0..1 + case % 40)
                .map(|i| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    // Few distinct times, so the top's edge often ties.
                    (Tid(1 + i * 13 % 997), 1 + (seed >> 60) % 5)
                })
                .collect();
            let behind = Behind::from(BehindParts {
                threads,
                ..BehindParts::default()
            });
            let mut all: Vec<(String, u64)> = behind
                .threads
                .iter()
                .map(|&(tid, ns)| (format!("tid {tid}"), ns))
                .collect();
            all.sort_by(|(a, x), (b, y)| y.cmp(x).then_with(|| a.cmp(b)));
            all.truncate(TOP_CULPRITS);
            let named = CulpritNames::new(None, &[]).culprits(&behind, &mut names);
            let named: Vec<(String, u64)> = named
                .threads
                .iter()
                .map(|(name, ns)| (name.to_string(), *ns))
                .collect();
            assert_eq!(named, all, "{:?}", behind.threads);
        }
    }

    #[test]
    fn culprits_keep_the_top_and_sum_the_rest_and_every_part_adds_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut names = CgroupNames::at(Some(dir.path().to_path_buf()));
        for (id, path) in [(2, "/a"), (3, "/b"), (4, "/c"), (5, "/d")] {
            names.learn(CgroupId(id), path.into());
        }
        let behind = Behind::from(BehindParts {
            by: [(2, 10), (3, 40), (4, 30), (5, 30)]
                .into_iter()
                .map(|(id, ns)| (CgroupId(id), ns))
                .collect(),
            threads: [(Tid(7), 60), (Tid(8), 20)].into_iter().collect(),
            rest: WaitRest {
                other_ns: 5,
                idle_ns: 3,
                unknown_ns: 2,
                migrated_ns: 1,
                ..WaitRest::ZERO
            },
            ..BehindParts::default()
        });
        let hog = ThreadUsage::clocked(7, 7, CgroupId(3), 100, 1);
        let culprits = CulpritNames::new(Some(GroupBy::Cgroup), std::slice::from_ref(&hog))
            .culprits(&behind, &mut names);
        let top: Vec<(&str, u64)> = culprits.top.iter().map(|(n, ns)| (&**n, *ns)).collect();
        assert_eq!(top, [("/b", 40), ("/c", 30), ("/d", 30)], "ties by name");
        assert_eq!(culprits.other_ns, 5 + 10);
        assert_eq!(culprits.unattributed_ns, 3);
        assert_eq!(culprits.total_ns(), behind.total_ns());
        let threads: Vec<(&str, u64)> =
            culprits.threads.iter().map(|(n, ns)| (&**n, *ns)).collect();
        assert_eq!(
            threads,
            [("t7/7", 60), ("tid 8", 20)],
            "named from the window's threads"
        );
        assert_eq!(
            culprits.other_threads_ns(),
            115 - 80,
            "the culprits' time no thread names"
        );
        let (first, share) = culprits.first().unwrap();
        assert_eq!(first, "/b");
        assert!((share - 40.0 / 121.0).abs() < 1e-12);
        assert_eq!(Culprits::default().first(), None);
    }
}
