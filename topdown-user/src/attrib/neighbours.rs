//! Whom run-queue waits were spent behind, per window: the kernel's split of each thread's
//! waits over the cgroups that held its CPU meanwhile ([`topdown_common::neighbours`]), as
//! deltas per thread and sums per cgroup, then named the way rows are (container, cgroup path)
//! and cut to the top [`TOP_CULPRITS`] and the rest.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt as _};
use smallvec::SmallVec;
use topdown_common::{
    cgroup::CgroupId,
    neighbours::{BEHIND_SLOTS, WaitBehind},
};

use super::{cgroups::CgroupNames, containers::Owner, groups::GroupBy};

/// How many culprits a row names (largest first); the rest are summed as `other`. Machine
/// outputs and the exporter keep the same bound, so a cgroup has at most this many `behind`
/// series plus `other`, `idle` and `unattributed`.
pub const TOP_CULPRITS: usize = 3;

/// Where a thread's or a cgroup's run-queue waits went over a window, and its preemptions. The
/// parts add up to the row's wait ([`Behind::total_ns`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Behind {
    /// Nanoseconds waited behind each culprit cgroup (one entry per cgroup, in no order).
    pub by: SmallVec<[(CgroupId, u64); BEHIND_SLOTS]>,
    /// Waited behind cgroups the kernel kept no slot for (a thread keeps
    /// [`BEHIND_SLOTS`] for its life).
    pub other_ns: u64,
    /// Waited while the CPU ran its idle task (idle, or waking up for the thread).
    pub idle_ns: u64,
    /// Waited before the oldest slice the CPU remembered: not attributed.
    pub unknown_ns: u64,
    /// Waited on a CPU the thread was then moved away from: not attributed.
    pub migrated_ns: u64,
    /// Switches out while still runnable.
    pub preempted: u64,
    /// Of those, switches to a thread of another cgroup.
    pub preempted_by_other: u64,
}

impl Behind {
    /// The kernel's `now` minus `before` (none: a thread first seen), slot by slot: a slot
    /// keeps its cgroup for the thread's life.
    pub fn between(before: Option<&WaitBehind>, now: &WaitBehind) -> Self {
        let zero = WaitBehind::ZERO;
        let before = before.unwrap_or(&zero);
        let by = (0..BEHIND_SLOTS)
            .filter(|&i| now.cgroups[i] != 0)
            .filter_map(|i| {
                let was = if before.cgroups[i] == now.cgroups[i] {
                    before.ns[i]
                } else {
                    0
                };
                let ns = now.ns[i].saturating_sub(was);
                (ns > 0).then_some((CgroupId(now.cgroups[i]), ns))
            })
            .collect();
        Self {
            by,
            other_ns: now.other_ns.saturating_sub(before.other_ns),
            idle_ns: now.idle_ns.saturating_sub(before.idle_ns),
            unknown_ns: now.unknown_ns.saturating_sub(before.unknown_ns),
            migrated_ns: now.migrated_ns.saturating_sub(before.migrated_ns),
            preempted: now.preempted.saturating_sub(before.preempted),
            preempted_by_other: now
                .preempted_by_other
                .saturating_sub(before.preempted_by_other),
        }
    }

    /// Adds `other`'s (a later window, another thread of the cgroup, a child cgroup).
    pub fn add(&mut self, other: &Self) {
        for &(id, ns) in &other.by {
            match self.by.iter_mut().find(|(mine, _)| *mine == id) {
                Some((_, mine)) => *mine += ns,
                None => self.by.push((id, ns)),
            }
        }
        self.other_ns += other.other_ns;
        self.idle_ns += other.idle_ns;
        self.unknown_ns += other.unknown_ns;
        self.migrated_ns += other.migrated_ns;
        self.preempted += other.preempted;
        self.preempted_by_other += other.preempted_by_other;
    }

    /// Every nanosecond of wait, attributed or not.
    pub fn total_ns(&self) -> u64 {
        self.by.iter().map(|(_, ns)| ns).sum::<u64>()
            + self.other_ns
            + self.idle_ns
            + self.unknown_ns
            + self.migrated_ns
    }
}

/// A row's waits with their culprits named, largest first: what every output shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Culprits {
    /// The named culprits, at most [`TOP_CULPRITS`], largest first (ties by name).
    pub top: SmallVec<[(Arc<str>, u64); TOP_CULPRITS]>,
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
        for part in parts {
            for (name, ns) in &part.top {
                match named.iter_mut().find(|(n, _)| n == name) {
                    Some((_, total)) => *total += ns,
                    None => named.push((name.clone(), *ns)),
                }
            }
            sum.other_ns += part.other_ns;
            sum.idle_ns += part.idle_ns;
            sum.unattributed_ns += part.unattributed_ns;
            sum.preempted += part.preempted;
            sum.preempted_by_other += part.preempted_by_other;
        }
        sum.other_ns += cut(&mut named);
        sum.top = named.into_iter().collect();
        sum
    }

    /// The largest culprit and its share of the whole wait (`None`: nothing attributed).
    pub fn first(&self) -> Option<(&str, f64)> {
        let (name, ns) = self.top.first()?;
        let total = self.total_ns();
        (total > 0).then(|| (&**name, *ns as f64 / total as f64))
    }
}

/// Sorts `named` largest first (ties by name) and cuts it to the top [`TOP_CULPRITS`];
/// returns what the cut culprits waited.
fn cut(named: &mut SmallVec<[(Arc<str>, u64); 8]>) -> u64 {
    named.sort_by(|(a, x), (b, y)| y.cmp(x).then_with(|| a.cmp(b)));
    let rest = named.iter().skip(TOP_CULPRITS).map(|(_, ns)| ns).sum();
    named.truncate(TOP_CULPRITS);
    rest
}

/// Names culprit cgroups as rows of `by` are named (threads: by container): a container's key
/// (`docker:1a2b3c4d5e6f`, `nginx.service`), else the cgroup's path; each id named once.
pub struct CulpritNames {
    by: Option<GroupBy>,
    named: HashMap<CgroupId, Arc<str>>,
}

impl CulpritNames {
    /// Culprits named for rows grouped `by` (`None`: thread rows).
    pub fn new(by: Option<GroupBy>) -> Self {
        Self {
            by,
            named: HashMap::new(),
        }
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
        Culprits {
            top: named.into_iter().collect(),
            other_ns: behind.other_ns + rest,
            idle_ns: behind.idle_ns,
            unattributed_ns: behind.unknown_ns + behind.migrated_ns,
            preempted: behind.preempted,
            preempted_by_other: behind.preempted_by_other,
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

    fn kernel(slots: &[(u64, u64)], other: u64) -> WaitBehind {
        let mut behind = WaitBehind::ZERO;
        for (i, &(cgroup, ns)) in slots.iter().enumerate() {
            behind.cgroups[i] = cgroup;
            behind.ns[i] = ns;
        }
        behind.other_ns = other;
        behind
    }

    #[test]
    fn deltas_are_taken_slot_by_slot_and_sums_merge_by_cgroup() {
        let before = kernel(&[(5, 100), (6, 50)], 7);
        let now = kernel(&[(5, 130), (6, 50), (9, 20)], 10);
        let delta = Behind::between(Some(&before), &now);
        assert_eq!(delta.by.as_slice(), [(CgroupId(5), 30), (CgroupId(9), 20)]);
        assert_eq!(delta.other_ns, 3);
        assert_eq!(delta.total_ns(), 53);
        // A reused tid's slot holding another cgroup is all new.
        let reused = kernel(&[(8, 40)], 0);
        assert_eq!(
            Behind::between(Some(&before), &reused).by.as_slice(),
            [(CgroupId(8), 40)]
        );
        let mut sum = delta.clone();
        sum.add(&Behind::between(None, &kernel(&[(9, 5), (11, 1)], 0)));
        assert_eq!(
            sum.by.as_slice(),
            [(CgroupId(5), 30), (CgroupId(9), 25), (CgroupId(11), 1)]
        );
        assert_eq!(sum.total_ns(), 53 + 6);
    }

    #[test]
    fn culprits_keep_the_top_and_sum_the_rest_and_every_part_adds_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut names = CgroupNames::at(Some(dir.path().to_path_buf()));
        for (id, path) in [(2, "/a"), (3, "/b"), (4, "/c"), (5, "/d")] {
            names.learn(CgroupId(id), path.into());
        }
        let behind = Behind {
            by: [(2, 10), (3, 40), (4, 30), (5, 30)]
                .into_iter()
                .map(|(id, ns)| (CgroupId(id), ns))
                .collect(),
            other_ns: 5,
            idle_ns: 3,
            unknown_ns: 2,
            migrated_ns: 1,
            ..Behind::default()
        };
        let culprits = CulpritNames::new(Some(GroupBy::Cgroup)).culprits(&behind, &mut names);
        let top: Vec<(&str, u64)> = culprits.top.iter().map(|(n, ns)| (&**n, *ns)).collect();
        assert_eq!(top, [("/b", 40), ("/c", 30), ("/d", 30)], "ties by name");
        assert_eq!(culprits.other_ns, 5 + 10);
        assert_eq!(culprits.unattributed_ns, 3);
        assert_eq!(culprits.total_ns(), behind.total_ns());
        let (first, share) = culprits.first().unwrap();
        assert_eq!(first, "/b");
        assert!((share - 40.0 / 121.0).abs() < 1e-12);
        assert_eq!(Culprits::default().first(), None);
    }
}
