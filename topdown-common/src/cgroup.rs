//! What the kernel has charged to one cgroup, and the name of a cgroup being removed.

use crate::reading::Readings;

/// Cumulative totals charged to one cgroup2 cgroup since the collector started.
///
/// The kernel keeps one per cgroup in the `CGROUPS` hash map (key: cgroup id) and charges each
/// slice to the cgroup the thread was in when the slice was charged: a thread that moves is
/// charged to each cgroup for its own time. Only the cgroup itself, never its ancestors: roll-ups
/// are done in userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupTotals {
    /// cgroup2 id (the cgroup directory's inode number).
    pub id: u64,
    /// Times one of its threads was switched out.
    pub switches: u64,
    /// Sums of the per-slice counter deltas of its threads.
    pub charged: Readings,
}

impl CgroupTotals {
    /// Nothing charged yet to cgroup `id`.
    pub const fn new(id: u64) -> Self {
        Self {
            id,
            switches: 0,
            charged: Readings::ZERO,
        }
    }
}

/// Longest cgroup path (relative to the cgroup2 root) a [`CgroupRemoved`] record holds.
pub const CGROUP_PATH_LEN: usize = 240;

/// Sent when a cgroup directory is removed, so cgroups deleted during a run keep their names.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupRemoved {
    /// cgroup2 id.
    pub id: u64,
    /// Path from the cgroup2 root (`/a/b`), NUL-terminated (cut at [`CGROUP_PATH_LEN`]).
    pub path: [u8; CGROUP_PATH_LEN],
}

#[cfg(feature = "user")]
// SAFETY: repr(C), u64s and u64 arrays, no padding.
unsafe impl aya::Pod for CgroupTotals {}

#[cfg(feature = "user")]
// SAFETY: repr(C), a u64 and a byte array whose length is a multiple of 8: no padding.
unsafe impl aya::Pod for CgroupRemoved {}
