//! Following a command's descendants: processes forked by a followed process are followed too,
//! so `topdown-bpf -- CMD` reports every process CMD starts, however short-lived.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::map,
    maps::HashMap,
    programs::BtfTracePointContext,
};
use topdown_common::stats::Stat;

use crate::account::count;

/// Byte offset of `tgid` in `struct task_struct`, from the kernel's BTF; set by the loader.
#[unsafe(no_mangle)]
static TASK_TGID_OFFSET: u32 = 0;

/// Followed processes (tgid). The loader adds the command it starts.
#[map]
static FOLLOWED: HashMap<u32, u8> = HashMap::with_max_entries(65536, 0);

/// Whether process `tgid` is followed.
#[inline(always)]
pub fn is_followed(tgid: u32) -> bool {
    // SAFETY: the value is a plain u8 and only its presence is used.
    unsafe { FOLLOWED.get(&tgid) }.is_some()
}

/// A followed process's leader died: its live threads keep their flag, its tgid is freed.
#[inline(always)]
pub fn forget(tgid: u32) {
    // Absent for processes that were never followed.
    let _ = FOLLOWED.remove(&tgid);
}

/// `tp_btf/sched_process_fork(struct task_struct *parent, struct task_struct *child)`; the
/// parent is `current`.
#[inline(always)]
pub fn on_fork(ctx: &BtfTracePointContext) {
    let parent_tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !is_followed(parent_tgid) {
        return;
    }
    let child: *const u8 = ctx.arg(1);
    // SAFETY: a read-only global the loader sets before loading.
    let offset = unsafe { core::ptr::read_volatile(&TASK_TGID_OFFSET) } as usize;
    // SAFETY: bpf_probe_read_kernel checks the address; child is a live task_struct.
    let Ok(child_tgid) =
        (unsafe { bpf_probe_read_kernel(child.wrapping_add(offset).cast::<u32>()) })
    else {
        return;
    };
    if child_tgid != parent_tgid && FOLLOWED.insert(&child_tgid, &1, 0).is_err() {
        count(Stat::FollowMapFull);
    }
}
