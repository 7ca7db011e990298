//! The name of a cgroup being removed. (What cgroups are charged is summed in userspace from
//! their threads' records: nothing on the switch path is shared between CPUs.)

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
// SAFETY: repr(C), a u64 and a byte array whose length is a multiple of 8: no padding.
unsafe impl aya::Pod for CgroupRemoved {}

/// A cgroup2 id: the inode number of the cgroup's directory under the unified mount (what
/// `bpf_get_current_cgroup_id` returns). Its own type wherever it crosses from the kernel's
/// records to names, rows and series, so it is never taken for a count or another id.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CgroupId(pub u64);

impl core::fmt::Display for CgroupId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}
