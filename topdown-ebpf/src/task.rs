//! Fields of `struct task_struct` read from the kernel's memory at offsets the loader takes
//! from the kernel's BTF. `tp_btf` programs get typed task pointers ([`Task`]), so the verifier
//! turns each read into one fault-safe load instead of a helper call; the tick's running task
//! ([`ProbedTask`]) is read with `bpf_probe_read_kernel`, which every kernel from 5.10 has
//! (`bpf_get_current_task_btf` came in 5.11).
//!
//! Every load is at a non-negative offset from the task pointer plus a loader-set offset:
//! Linux 6.1's x86-64 JIT guards fault-safe loads with `add off; jnc`, which a negative
//! instruction offset always trips, so such a load reads 0 there (fixed in 6.2 by "bpf, x86:
//! Improve PROBE_MEM runtime load check"). Each field therefore has its own offset global
//! (`pid` is never read as "4 before `tgid`"), and the kernel matrix (`cargo xtask test`) boots
//! Debian's 6.1 to prove it.

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use topdown_common::thread::COMM_LEN;

/// Byte offset of `pid` (the thread id) in `struct task_struct`. Set by the loader.
#[unsafe(no_mangle)]
static TASK_PID_OFFSET: u32 = 0;

/// Byte offset of `tgid` in `struct task_struct`. Set by the loader.
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u32 = 0;

/// Byte offset of the task's state in `struct task_struct`: `__state` (an `unsigned int`, since
/// Linux 5.14) or `state` (a `long` before; its low 32 bits on little-endian hosts). Set by the
/// loader.
#[unsafe(no_mangle)]
static TASK_STATE_OFFSET: u32 = 0;

/// Byte offset of `se.exec_start` in `struct task_struct`. Set by the loader.
#[unsafe(no_mangle)]
static TASK_EXEC_START_OFFSET: u32 = 0;

/// Byte offset of `se.sum_exec_runtime` in `struct task_struct`. Set by the loader.
#[unsafe(no_mangle)]
static TASK_SUM_EXEC_RUNTIME_OFFSET: u32 = 0;

/// Byte offset of `sched_info.run_delay` in `struct task_struct`; 0 where the kernel has no
/// `sched_info` (it is never at offset 0). Set by the loader.
#[unsafe(no_mangle)]
static TASK_RUN_DELAY_OFFSET: u32 = 0;

/// Byte offset of `comm` in `struct task_struct`. Set by the loader.
#[unsafe(no_mangle)]
static TASK_COMM_OFFSET: u32 = 0;

/// Byte offset of `cgroups` (its `struct css_set *`) in `struct task_struct`. Set by the
/// loader.
#[unsafe(no_mangle)]
static TASK_CGROUPS_OFFSET: u32 = 0;

/// Byte offset of `dfl_cgrp` (the unified hierarchy's `struct cgroup *`) in `struct css_set`.
/// Set by the loader.
#[unsafe(no_mangle)]
static CSS_SET_DFL_CGRP_OFFSET: u32 = 0;

/// Byte offsets of `nvcsw` and `nivcsw` (its voluntary and involuntary switches out) in
/// `struct task_struct`. Set by the loader.
#[unsafe(no_mangle)]
static TASK_NVCSW_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_NIVCSW_OFFSET: u32 = 0;

/// `TASK_DEAD` in the task's state: set by `do_task_dead` before the task's last switch, and
/// never cleared.
const TASK_DEAD: u32 = 0x80;

/// How a task's memory is read: the fields every program needs, from [`TaskFields::u32_at`]
/// and [`TaskFields::u64_at`].
pub trait TaskFields: Copy {
    /// The `u32` at `offset` bytes into the task; 0 when unreadable.
    fn u32_at(self, offset: usize) -> u32;
    /// The `u64` at `offset` bytes into the task; 0 when unreadable.
    fn u64_at(self, offset: usize) -> u64;

    /// The task's thread id (kernel `pid`); 0 when unreadable.
    #[inline(always)]
    fn tid(self) -> u32 {
        self.u32_at(offset(&TASK_PID_OFFSET))
    }

    /// The task's process id (kernel `tgid`); 0 when unreadable.
    #[inline(always)]
    fn tgid(self) -> u32 {
        self.u32_at(offset(&TASK_TGID_OFFSET))
    }

    /// Whether the task is dead: at `sched_switch`, this is its last switch. Read from the
    /// task, not the tracepoint's `prev_state` argument, which `tp_btf/sched_switch` has only
    /// since Linux 5.18.
    #[inline(always)]
    fn is_dead(self) -> bool {
        self.u32_at(offset(&TASK_STATE_OFFSET)) & TASK_DEAD != 0
    }

    /// `se.exec_start`: the scheduler's clock (its runqueue's `clock_task`, ns) when the task's
    /// run time was last brought up to date. At `sched_switch` the scheduler has just set it
    /// for `next` (every class does, in `set_next_task`), so it is the clock of the switch;
    /// while a task runs, it is the time of the scheduler's latest update (its tick).
    #[inline(always)]
    fn exec_start(self) -> u64 {
        self.u64_at(offset(&TASK_EXEC_START_OFFSET))
    }

    /// `se.sum_exec_runtime`: the task's runtime (ns) as the scheduler booked it (what
    /// `schedstat`, `cpu.stat` and `getrusage` add up), as of its latest update.
    #[inline(always)]
    fn sum_exec_runtime(self) -> u64 {
        self.u64_at(offset(&TASK_SUM_EXEC_RUNTIME_OFFSET))
    }

    /// `sched_info.run_delay`: the time (ns) the task has waited in a run queue, runnable and
    /// not running, as the scheduler booked it: a wait is added when it ends, at the task's
    /// switch in (after the `sched_switch` tracepoint, so `next`'s latest wait is not in yet,
    /// and a switched-out `prev`'s is). `None` where the kernel has no `sched_info`.
    #[inline(always)]
    fn run_delay(self) -> Option<u64> {
        match offset(&TASK_RUN_DELAY_OFFSET) {
            0 => None,
            at => Some(self.u64_at(at)),
        }
    }

    /// `comm`, the task's name: two loads, where `bpf_get_current_comm` is a helper call that
    /// copies it byte by byte (~100 ns of a short thread's one switch). Read without the
    /// kernel's lock, as that helper does: a rename racing with the read may mix two names;
    /// the kernel pads names with NULs since Linux 5.9 (`strscpy_pad`), and userspace cuts
    /// at the first NUL either way.
    #[inline(always)]
    fn comm(self) -> [u8; COMM_LEN] {
        // `comm` is a char array, read as two 8-byte halves.
        let at = offset(&TASK_COMM_OFFSET);
        let (low, high) = (self.u64_at(at), self.u64_at(at + 8));
        let mut comm = [0; COMM_LEN];
        comm[..8].copy_from_slice(&low.to_ne_bytes());
        comm[8..].copy_from_slice(&high.to_ne_bytes());
        comm
    }

    /// How many times the task was switched out while still runnable (`nivcsw`: preempted, or
    /// yielding); at `sched_switch`, `prev`'s count includes this switch when it is one.
    #[inline(always)]
    fn involuntary_switches(self) -> u64 {
        self.u64_at(offset(&TASK_NIVCSW_OFFSET))
    }

    /// How many times the task was switched out (`nvcsw + nivcsw`): at `sched_switch`, `prev`'s
    /// count includes this switch (`__schedule` bumps it before the tracepoint), so 1 means
    /// it never switched out before.
    #[inline(always)]
    fn switches_out(self) -> u64 {
        self.u64_at(offset(&TASK_NVCSW_OFFSET))
            .wrapping_add(self.u64_at(offset(&TASK_NIVCSW_OFFSET)))
    }
}

/// A `struct task_struct *` the verifier knows as one (a typed `tp_btf` argument).
#[derive(Clone, Copy)]
pub struct Task(*const u8);

impl Task {
    /// The task a `tp_btf` program got as an argument.
    #[inline(always)]
    pub fn from_arg(task: *const u8) -> Self {
        Self(task)
    }

    /// The address of the task's cgroup in the unified hierarchy (`cgroups->dfl_cgrp`, what
    /// `bpf_get_current_cgroup_id` starts from): two dependent loads, for any task, and enough
    /// to tell whether two tasks share a cgroup. 0 when unreadable. Read under the RCU read
    /// lock the scheduler holds; a task being moved may show either cgroup.
    #[inline(always)]
    pub fn cgroup_address(self) -> u64 {
        let css_set = self.css_set() as *const u8;
        // SAFETY: as in `u64_at`: the loaded `css_set` pointer is typed by BTF too, so this
        // load is checked and fault-safe the same way.
        unsafe {
            core::ptr::read_volatile(
                css_set
                    .wrapping_add(offset(&CSS_SET_DFL_CGRP_OFFSET))
                    .cast::<u64>(),
            )
        }
    }

    /// Whether the task shares `other`'s cgroup in the unified hierarchy: one load each where
    /// they share their set of cgroups (`cgroups`, a `css_set`: the same cgroup in every
    /// hierarchy), two more where they do not.
    #[inline(always)]
    pub fn shares_cgroup(self, other: Self) -> bool {
        self.css_set() == other.css_set() || self.cgroup_address() == other.cgroup_address()
    }

    /// The address of the task's set of cgroups (`cgroups`, a `struct css_set`).
    #[inline(always)]
    fn css_set(self) -> u64 {
        self.u64_at(offset(&TASK_CGROUPS_OFFSET))
    }

    /// The id of the task's cgroup in the unified hierarchy (`dfl_cgrp->kn->id`, what
    /// `bpf_get_current_cgroup_id` returns for the current task): four dependent loads the
    /// verifier checks, cheaper than the helper call. 0 when unreadable.
    #[inline(always)]
    pub fn cgroup_id(self) -> u64 {
        let cgroup = self.cgroup_address() as *const u8;
        // SAFETY: as in `cgroup_address`: each loaded pointer is typed by BTF (`struct cgroup`,
        // then `struct kernfs_node`), so each load is checked and fault-safe.
        unsafe {
            let kn = core::ptr::read_volatile(
                cgroup
                    .wrapping_add(offset(&crate::cgroup_names::CGROUP_KN_OFFSET))
                    .cast::<u64>(),
            ) as *const u8;
            core::ptr::read_volatile(
                kn.wrapping_add(offset(&crate::cgroup_names::KERNFS_NODE_ID_OFFSET))
                    .cast::<u64>(),
            )
        }
    }
}

impl TaskFields for Task {
    #[inline(always)]
    fn u32_at(self, offset: usize) -> u32 {
        // SAFETY: as in `u64_at`.
        unsafe { core::ptr::read_volatile(self.0.wrapping_add(offset).cast::<u32>()) }
    }

    #[inline(always)]
    fn u64_at(self, offset: usize) -> u64 {
        // SAFETY: a typed task pointer plus a member offset from BTF: the verifier checks the
        // access and makes it a fault-safe load (0 on a fault).
        unsafe { core::ptr::read_volatile(self.0.wrapping_add(offset).cast::<u64>()) }
    }
}

/// The task running on this CPU, as an untyped address read with `bpf_probe_read_kernel`: a
/// helper call per field, for the tick (once per CPU per tick period, never at a switch).
#[derive(Clone, Copy)]
pub struct ProbedTask(*const u8);

impl ProbedTask {
    /// The task running on this CPU.
    #[inline(always)]
    pub fn current() -> Self {
        // SAFETY: a helper without arguments; it returns the task's address.
        Self(unsafe { bpf_get_current_task() } as *const u8)
    }
}

impl TaskFields for ProbedTask {
    #[inline(always)]
    fn u32_at(self, offset: usize) -> u32 {
        // SAFETY: bpf_probe_read_kernel checks the address (an error reads 0).
        unsafe { bpf_probe_read_kernel(self.0.wrapping_add(offset).cast::<u32>()) }.unwrap_or(0)
    }

    #[inline(always)]
    fn u64_at(self, offset: usize) -> u64 {
        // SAFETY: as above.
        unsafe { bpf_probe_read_kernel(self.0.wrapping_add(offset).cast::<u64>()) }.unwrap_or(0)
    }
}

/// A member offset the loader set (a read-only global).
#[inline(always)]
pub(crate) fn offset(global: &'static u32) -> usize {
    // SAFETY: a read-only global the loader sets before loading.
    unsafe { core::ptr::read_volatile(global) as usize }
}
