//! The kernel half of topdown-bpf: programs and maps only, no policy.
//!
//! `sched_switch` charges this CPU's clock and counter deltas since the previous charge to the
//! outgoing thread (when only cgroups are reported, counters are read only where the cgroup
//! changes); `tick` does the same for the running thread from a per-CPU timer, so long slices
//! show up while they run. A thread's last switch (`prev_state` has `TASK_DEAD`) sends
//! its final totals to userspace and frees its slot; a thread charged in a new cgroup sends its
//! totals as it left the old one, so userspace charges each cgroup exactly. `sched_process_fork`
//! follows a command's descendants, `sched_process_exec` renames a thread at exec, and
//! `cgroup_rmdir` keeps the names of cgroups removed during the run. Every loss is counted in
//! the per-CPU state.
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod account;
mod c2c_filter;
mod cgroup_moves;
mod cgroup_names;
mod follow;
mod run_queue;
mod task;

use aya_ebpf::{
    macros::{btf_tracepoint, perf_event},
    programs::{BtfTracePointContext, PerfEventContext},
};
use task::{ProbedTask, Task, TaskFields as _};

/// `tp_btf/sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next)`
/// (5.18 added `unsigned int prev_state`, which is not read: the state comes from `prev`
/// itself, on every kernel). `current` is still `prev` here.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    if stops_at(Stage::Entry) {
        return 0;
    }
    let next = Task::from_arg(ctx.arg(2));
    // The scheduler's clock at this switch, where next's runtime starts.
    let next_start = next.exec_start();
    let prev = Task::from_arg(ctx.arg(1));
    // The CPU's state, looked up once for the whole switch.
    let Some(state) = account::cpu_state() else {
        return 0;
    };
    // A CPU not counted on (`--cpus`, isolcpus, nohz_full): this is all the program does.
    if state.skipped != 0 || stops_at(Stage::CpuState) {
        return 0;
    }
    let clocks = account::Clocks {
        runtime: prev.sum_exec_runtime(),
        // Where the scheduler has just ended prev's runtime.
        run_end: prev.exec_start(),
        next_start,
    };
    let switch = account::Switch {
        prev,
        next,
        prev_tid: prev.tid(),
        next_tid: next.tid(),
    };
    let read = if account::narrowed() {
        if !account::switch_watched(state, switch, next_start) {
            account::unwatched_switch(state, switch, clocks.now());
            return 0;
        }
        true
    } else {
        let reported = account::note_switch(state, switch.prev_tid, switch.next_tid);
        account::reads_at_switch(state, next, switch.next_tid, reported)
    };
    let end = if prev.is_dead() {
        account::SliceEnd::Exit
    } else {
        account::SliceEnd::Switch
    };
    if stops_at(Stage::Switch) {
        return 0;
    }
    account::charge_current(state, end, prev, Some(switch), clocks, read);
    0
}

/// Where the switch program stops early, for the benchmark that shows where its nanoseconds
/// go (`cargo xtask bench collector`): set by the loader, `u32::MAX` (run it whole) unless
/// `TOPDOWN_BPF_SWITCH_STOP` says otherwise. A known constant, so the verifier removes the
/// branches that cannot be taken.
#[unsafe(no_mangle)]
static SWITCH_STOP: u32 = u32::MAX;

/// The points the switch program can stop at, in the order it passes them.
#[derive(Clone, Copy)]
pub enum Stage {
    /// Nothing done: the cost of an empty program attached to `tp_btf/sched_switch`.
    Entry = 0,
    /// This CPU's state looked up.
    CpuState = 1,
    /// The switch noted: `next`'s and `prev`'s fields read.
    Switch = 2,
    /// The charge begun: the CPU's clock moved on, the switch counted.
    ChargeStart = 3,
    /// `prev`'s totals found in (or added to) the thread map.
    ThreadLookup = 4,
}

/// Whether the switch program stops at `stage` (only in the benchmark).
#[inline(always)]
pub fn stops_at(stage: Stage) -> bool {
    // SAFETY: a read-only global the loader sets before loading.
    unsafe { core::ptr::read_volatile(&SWITCH_STOP) == stage as u32 }
}

/// `tp_btf/sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *)`:
/// the current thread `p` has a new name.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    account::on_exec(Task::from_arg(ctx.arg(0)));
    0
}

/// A new task: processes forked by followed processes are followed too.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> i32 {
    follow::on_fork(&ctx);
    0
}

/// A task is freed, an RCU grace period after it was reaped: when it is a followed process's
/// leader, every thread of the process has switched out for the last time (each CPU passed a
/// switch since), so its tgid is no longer needed to charge them.
#[btf_tracepoint(function = "sched_process_free")]
pub fn sched_process_free(ctx: BtfTracePointContext) -> i32 {
    follow::on_free(&ctx);
    0
}

/// `tp_btf/sched_migrate_task(struct task_struct *p, int dest_cpu)`: a task moves to another
/// CPU; a queued one has just booked the wait it spent on the CPU it leaves, charged as waited
/// before a migration (kernels before 5.19).
#[btf_tracepoint(function = "sched_migrate_task")]
pub fn sched_migrate_task(ctx: BtfTracePointContext) -> i32 {
    account::on_migrate::<false>(Task::from_arg(ctx.arg(0)));
    0
}

/// The same tracepoint where the kernel has `bpf_map_lookup_percpu_elem` (5.19): the wait is
/// split over the history of the CPU it was spent on.
#[btf_tracepoint(function = "sched_migrate_task")]
pub fn sched_migrate_task_split(ctx: BtfTracePointContext) -> i32 {
    account::on_migrate::<true>(Task::from_arg(ctx.arg(0)));
    0
}

/// Threads moved to another cgroup: their cgroup is read again at their next charge.
#[btf_tracepoint(function = "cgroup_attach_task")]
pub fn cgroup_attach_task(_ctx: BtfTracePointContext) -> i32 {
    cgroup_moves::on_attach();
    0
}

/// A cgroup is being removed: its id and path go to userspace, so it keeps its name.
#[btf_tracepoint(function = "cgroup_rmdir")]
pub fn cgroup_rmdir(ctx: BtfTracePointContext) -> i32 {
    cgroup_names::on_rmdir(&ctx);
    0
}

/// Per-CPU timer (a cpu-clock sampling event): charges the running thread's slice so far.
#[perf_event]
pub fn tick(_ctx: PerfEventContext) -> i32 {
    let current = ProbedTask::current();
    if let Some(state) = account::cpu_state()
        && account::current_watched(state, current)
    {
        // The scheduler's latest update of the running task: the rest of its slice is charged
        // at its switch.
        let clocks = account::Clocks::at(current.exec_start(), current.sum_exec_runtime());
        account::charge_current(state, account::SliceEnd::Tick, current, None, clocks, true);
    }
    0
}

/// c2c: every memory sample of the per-CPU sampling events it is attached to.
#[perf_event]
pub fn c2c_filter(ctx: PerfEventContext) -> u32 {
    c2c_filter::filter(&ctx)
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
