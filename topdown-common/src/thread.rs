//! What the kernel has charged to one thread (or to one CPU's idle task).

use crate::reading::Readings;

/// Length of a task's `comm`, as the kernel keeps it.
pub const COMM_LEN: usize = 16;

/// Cumulative totals charged to one thread since the collector started.
///
/// The kernel keeps one per live thread in the `THREADS` hash map (key: tid) and updates it
/// at every switch-out of that thread and at every collector tick while it runs; when the
/// thread dies its final totals go to userspace through the `EXITS` ring buffer and the map
/// slot is freed. Idle time is kept per CPU in `IDLE` with `tid == 0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadTotals {
    /// Thread id (kernel `pid`), in the initial pid namespace.
    pub tid: u32,
    /// Process id (kernel `tgid`).
    pub tgid: u32,
    /// cgroup2 id (the cgroup directory's inode number) as of the latest charge.
    pub cgroup_id: u64,
    /// Times the thread was switched out.
    pub switches: u64,
    /// CPU of the latest charge.
    pub last_cpu: u32,
    /// [`ThreadTotals::FLAG_EXITED`], [`ThreadTotals::FLAG_FOLLOWED`].
    pub flags: u32,
    /// Thread name as of the latest charge (NUL-padded).
    pub comm: [u8; COMM_LEN],
    /// Sums of the per-slice counter deltas.
    pub charged: Readings,
}

impl ThreadTotals {
    /// Set in the record sent when the thread died.
    pub const FLAG_EXITED: u32 = 1;
    /// The thread's process was in the kernel's `FOLLOWED` set when the thread was first
    /// charged: it descends from a process the user asked to follow (a command it ran).
    pub const FLAG_FOLLOWED: u32 = 2;

    /// Nothing charged yet to thread `tid` of process `tgid`.
    pub const fn new(tid: u32, tgid: u32) -> Self {
        Self {
            tid,
            tgid,
            cgroup_id: 0,
            switches: 0,
            last_cpu: 0,
            flags: 0,
            comm: [0; COMM_LEN],
            charged: Readings::ZERO,
        }
    }
}

#[cfg(feature = "user")]
// SAFETY: repr(C); fields are laid out without padding (u32 pairs, u64s, a 16-byte array).
unsafe impl aya::Pod for ThreadTotals {}
