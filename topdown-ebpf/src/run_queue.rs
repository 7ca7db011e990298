//! The run queue a task is queued on (`struct rq`), read from the task's own fields: what the
//! CPU moving a queued task to another CPU needs to know about the CPU it leaves (its number,
//! its clock, who runs there). Reached through `se.cfs_rq->rq` (the kernel's
//! `CONFIG_FAIR_GROUP_SCHED`, which every distribution kernel has: systemd's cpu controller
//! needs it); the loader leaves the offsets 0 where the kernel's BTF lacks them, and nothing is
//! read then.

use crate::task::{Task, TaskFields as _, offset};

/// Byte offset of `se.cfs_rq` (its `struct cfs_rq *`) in `struct task_struct`. Set by the
/// loader; 0 where the kernel has no `cfs_rq.rq` to go on with.
#[unsafe(no_mangle)]
static TASK_CFS_RQ_OFFSET: u32 = 0;

/// Byte offset of `rq` (its `struct rq *`) in `struct cfs_rq`. Set by the loader.
#[unsafe(no_mangle)]
static CFS_RQ_RQ_OFFSET: u32 = 0;

/// Byte offset of `curr` (the running task) in `struct rq`. Set by the loader.
#[unsafe(no_mangle)]
static RQ_CURR_OFFSET: u32 = 0;

/// Byte offset of `clock_task` in `struct rq`. Set by the loader.
#[unsafe(no_mangle)]
static RQ_CLOCK_TASK_OFFSET: u32 = 0;

/// Byte offset of `cpu` in `struct rq`. Set by the loader.
#[unsafe(no_mangle)]
static RQ_CPU_OFFSET: u32 = 0;

/// A `struct rq *` the verifier knows as one (loaded from a typed pointer).
#[derive(Clone, Copy)]
pub struct RunQueue(*const u8);

impl RunQueue {
    /// The run queue `task` is on: the one of the CPU it is leaving, at `sched_migrate_task`
    /// (the kernel moves its queue pointers after the tracepoint). `None` where the offsets are
    /// not set or the pointer is null.
    #[inline(always)]
    pub fn of(task: Task) -> Option<Self> {
        let at = offset(&TASK_CFS_RQ_OFFSET);
        if at == 0 {
            return None;
        }
        let cfs_rq = task.u64_at(at) as *const u8;
        if cfs_rq.is_null() {
            return None;
        }
        // SAFETY: `cfs_rq` is typed by BTF (`struct cfs_rq *`): the verifier checks the load
        // and makes it fault-safe.
        let rq = unsafe {
            core::ptr::read_volatile(cfs_rq.wrapping_add(offset(&CFS_RQ_RQ_OFFSET)).cast::<u64>())
        } as *const u8;
        (!rq.is_null()).then_some(Self(rq))
    }

    /// The CPU it belongs to.
    #[inline(always)]
    pub fn cpu(self) -> u32 {
        // SAFETY: a typed `struct rq *` plus a member offset from BTF: a checked, fault-safe
        // load.
        unsafe {
            core::ptr::read_volatile(self.0.wrapping_add(offset(&RQ_CPU_OFFSET)).cast::<u32>())
        }
    }

    /// Its task clock (`clock_task`, ns), as of its latest update: the clock of `se.exec_start`
    /// and of the CPU's history.
    #[inline(always)]
    pub fn clock_task(self) -> u64 {
        // SAFETY: as in `cpu`.
        unsafe {
            core::ptr::read_volatile(
                self.0
                    .wrapping_add(offset(&RQ_CLOCK_TASK_OFFSET))
                    .cast::<u64>(),
            )
        }
    }

    /// The task running on it; `None` when the pointer is null.
    #[inline(always)]
    pub fn curr(self) -> Option<Task> {
        // SAFETY: as in `cpu`; the loaded pointer is typed by BTF (`struct task_struct *`).
        let curr = unsafe {
            core::ptr::read_volatile(self.0.wrapping_add(offset(&RQ_CURR_OFFSET)).cast::<u64>())
        } as *const u8;
        (!curr.is_null()).then(|| Task::from_arg(curr))
    }
}
