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
