//! Following a command's descendants: processes forked by a followed process are followed too,
//! so `topdown-bpf -- CMD` reports every process CMD starts, however short-lived.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::map,
    maps::{Array, HashMap},
    programs::BtfTracePointContext,
};
use topdown_common::stats::Stat;

use crate::{
    account::count,
    task::{Task, TaskFields as _},
};

/// Followed processes (tgid). The loader adds the command it starts.
#[map]
static FOLLOWED: HashMap<u32, u8> = HashMap::with_max_entries(65536, 0);

/// A thread of the loader's (tid; 0 for none) whose forks are followed while it starts a
/// command: the command is followed from its first instruction, and the loader's own threads
/// never are.
#[map]
static SPAWNER: Array<u32> = Array::with_max_entries(1, 0);

/// Non-zero once the loader follows anything (set before its first `FOLLOWED` or `SPAWNER`
/// entry): until then, a thread's first charge and every fork skip the `FOLLOWED` lookup (an
/// array read the verifier inlines instead of a hash lookup: ~5 ns per switch run during
/// thread churn, BENCHMARKS.md).
#[map]
static FOLLOWING: Array<u32> = Array::with_max_entries(1, 0);

/// Whether process `tgid` is followed.
#[inline(always)]
pub fn is_followed(tgid: u32) -> bool {
    // SAFETY: the value is a plain u8 and only its presence is used.
    following() && unsafe { FOLLOWED.get(&tgid) }.is_some()
}

/// Whether anything may be followed.
#[inline(always)]
fn following() -> bool {
    FOLLOWING.get(0).is_some_and(|&on| on != 0)
}

/// `tp_btf/sched_process_free(struct task_struct *p)`: a freed leader's process is forgotten.
/// Not at the leader's exit: its other threads may still run (and be switched in) after the
/// leader's last switch, and each switch in looks up whether the thread's process is followed.
#[inline(always)]
pub fn on_free(ctx: &BtfTracePointContext) {
    let task = Task::from_arg(ctx.arg(0));
    let tgid = task.tgid();
    if tgid != 0 && task.tid() == tgid {
        // Absent for processes that were never followed.
        let _ = FOLLOWED.remove(&tgid);
    }
}

/// `tp_btf/sched_process_fork(struct task_struct *parent, struct task_struct *child)`; the
/// parent is `current`.
#[inline(always)]
pub fn on_fork(ctx: &BtfTracePointContext) {
    if !following() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let parent_tgid = (pid_tgid >> 32) as u32;
    let spawner = SPAWNER.get(0).copied().unwrap_or(0);
    if !(spawner != 0 && spawner == pid_tgid as u32) && !is_followed(parent_tgid) {
        return;
    }
    let child_tgid = Task::from_arg(ctx.arg(1)).tgid();
    if child_tgid != 0 && child_tgid != parent_tgid && FOLLOWED.insert(&child_tgid, &1, 0).is_err()
    {
        count(Stat::FollowMapFull);
    }
}
