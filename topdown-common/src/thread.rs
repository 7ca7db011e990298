//! What the kernel has charged to one thread, and the records it sends about threads.

use crate::{
    neighbours::WaitBehind,
    reading::{Reading, Readings},
};

/// A thread id (the kernel's `pid`), in the initial pid namespace: its own type wherever it
/// crosses from the kernel's records to rows and outputs, so it is never taken for a process.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid(pub u32);

/// A process id (the kernel's `tgid`: its main thread's [`Tid`]).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pid(pub u32);

impl Pid {
    /// The process's main thread (its tid is the process id).
    pub const fn main_thread(self) -> Tid {
        Tid(self.0)
    }
}

impl core::fmt::Display for Tid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl core::fmt::Display for Pid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Length of a task's `comm`, as the kernel keeps it.
pub const COMM_LEN: usize = 16;

/// Who a thread is and what it was last seen doing: the fixed part of [`ThreadTotals`], and the
/// start of every [`ThreadTotals`] record sent to userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadHeader {
    /// Thread id (kernel `pid`), in the initial pid namespace.
    pub tid: u32,
    /// Process id (kernel `tgid`).
    pub tgid: u32,
    /// Scheduler clock (ns, its runqueue's `clock_task`) at the thread's first charge: with
    /// `tid`, names one thread even when the tid is reused later.
    pub born_ns: u64,
    /// cgroup2 id (the cgroup directory's inode number) its latest slice was charged to. In a
    /// [`ThreadHeader::FLAG_MOVED`] record: the cgroup it left.
    pub cgroup_id: u64,
    /// Times the thread was switched out.
    pub switches: u64,
    /// Nanoseconds it waited in a run queue (runnable, not running), as the kernel books them
    /// (`sched_info.run_delay`, added when the task is switched in), charged at its charges
    /// since the collector started; 0 where the kernel has no `sched_info`.
    pub waited_ns: u64,
    /// CPU of the latest charge.
    pub last_cpu: u32,
    /// [`ThreadHeader::FLAG_EXITED`], [`ThreadHeader::FLAG_FOLLOWED`], [`ThreadHeader::FLAG_MOVED`].
    pub flags: u32,
    /// Thread name as of the latest charge (NUL-padded).
    pub comm: [u8; COMM_LEN],
}

impl ThreadHeader {
    /// Set in the record sent when the thread died.
    pub const FLAG_EXITED: u32 = 1;
    /// The thread's process was in the kernel's `FOLLOWED` set when the thread was first
    /// charged: it descends from a process the user asked to follow (a command it ran).
    pub const FLAG_FOLLOWED: u32 = 2;
    /// Set in the record sent when the thread was first charged in another cgroup: its totals
    /// as of leaving `cgroup_id`, so userspace charges each cgroup its own share.
    pub const FLAG_MOVED: u32 = 4;
}

/// Cumulative totals charged to one thread since the collector started.
///
/// The kernel keeps one per live thread in a slot of the `THREADS` array (a free slot's tid is
/// 0; `THREAD_SLOTS` finds a tid's slot) and updates it at every switch-out of that thread and at every collector tick while it runs; the first
/// charge in each `LIST_EPOCH` puts its tid on the `CHARGED` list, so userspace reads only the
/// threads that ran (see the kernel's `account::list`). Records about
/// a thread (it died, it changed cgroup) go to userspace through the `THREAD_RECORDS` ring
/// buffer as the header and the split followed by only the set's slots ([`record_len`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadTotals {
    /// Who, where, how often.
    pub header: ThreadHeader,
    /// Whom its waits (`header.waited_ns`) were spent behind, and its preemptions; all zero
    /// when the loader turned neighbours off. Apart from the header, so userspace copies it
    /// only where the split is on; sent in records between the header and the slots.
    pub behind: WaitBehind,
    /// Sums of the per-slice counter deltas.
    pub charged: Readings,
    /// The kernel's count of cgroup moves when `header.cgroup_id` was last read (not sent in
    /// records).
    pub cgroup_moves: u64,
    /// The task's `se.sum_exec_runtime` at its latest charge (0 before the first; not sent in
    /// records): each charge adds its growth since.
    pub runtime_ns: u64,
    /// The task's `sched_info.run_delay` at its latest switch out (not sent in records): each
    /// switch out adds its growth since to `header.waited_ns` (a tick charges no wait).
    pub run_delay_ns: u64,
    /// The `LIST_EPOCH` in which the thread's tid was last put on the `CHARGED` list (not sent
    /// in records): listed once per epoch, at its first charge in it.
    pub listed_epoch: u64,
    /// The task's `nivcsw` (involuntary switches out) at its latest charge (not sent in
    /// records): each charge adds its growth since to `behind.rest.preempted`.
    pub nivcsw: u64,
}

impl ThreadTotals {
    /// Nothing charged yet to thread `tid` of process `tgid`.
    pub const fn new(tid: u32, tgid: u32) -> Self {
        Self {
            header: ThreadHeader {
                tid,
                tgid,
                born_ns: 0,
                cgroup_id: 0,
                switches: 0,
                waited_ns: 0,
                last_cpu: 0,
                flags: 0,
                comm: [0; COMM_LEN],
            },
            behind: WaitBehind::ZERO,
            charged: Readings::ZERO,
            cgroup_moves: 0,
            runtime_ns: 0,
            run_delay_ns: 0,
            listed_epoch: 0,
            nivcsw: 0,
        }
    }
}

/// One entry of the kernel's `CHARGED` list: a thread's tid, its slot in `THREADS`, and the low
/// 32 bits of the `LIST_EPOCH` it was listed in, which tell userspace whether it was listed
/// before or after the epoch it just advanced (see `collect::listing` in the loader).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedThread {
    /// The thread listed.
    pub tid: u32,
    /// The low 32 bits of the epoch it was listed in.
    pub epoch: u32,
    /// Its slot in `THREADS` (its totals are there while its tid is).
    pub slot: u32,
}

/// Where a record's (and [`ThreadTotals`]') split begins: right after the header.
pub const RECORD_BEHIND_AT: usize = size_of::<ThreadHeader>();

/// Where a record's counter slots begin: after the header and the split, as in
/// [`ThreadTotals`] (a record is the first [`record_len`] bytes of one).
pub const RECORD_SLOTS_AT: usize = RECORD_BEHIND_AT + size_of::<WaitBehind>();

const _: () = assert!(core::mem::offset_of!(ThreadTotals, behind) == RECORD_BEHIND_AT);
const _: () = assert!(core::mem::offset_of!(ThreadTotals, charged) == RECORD_SLOTS_AT);

/// Bytes of a thread record carrying the first `slots` counter slots (at most all of them).
pub const fn record_len(slots: usize) -> usize {
    let slots = if slots > crate::MAX_COUNTERS {
        crate::MAX_COUNTERS
    } else {
        slots
    };
    RECORD_SLOTS_AT + slots * size_of::<Reading>()
}

#[cfg(feature = "user")]
// SAFETY: repr(C); u32 pairs, u64s and a 16-byte array: no padding.
unsafe impl aya::Pod for ThreadTotals {}
