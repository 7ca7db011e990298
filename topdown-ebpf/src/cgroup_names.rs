//! Names of cgroups removed during a run: userspace names live cgroups by walking the cgroup2
//! mount, but a cgroup removed between two walks would be left as a bare id.

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes},
    macros::map,
    maps::RingBuf,
    programs::BtfTracePointContext,
};
use topdown_common::{cgroup::CgroupRemoved, stats::Stat};

use crate::account::count;

/// Byte offset of `kn` in `struct cgroup`, from the kernel's BTF; set by the loader.
#[unsafe(no_mangle)]
pub(crate) static CGROUP_KN_OFFSET: u32 = 0;

/// Byte offset of `id` in `struct kernfs_node`, from the kernel's BTF; set by the loader.
#[unsafe(no_mangle)]
pub(crate) static KERNFS_NODE_ID_OFFSET: u32 = 0;

/// Byte offset of `root` in `struct cgroup`, from the kernel's BTF; set by the loader.
#[unsafe(no_mangle)]
static CGROUP_ROOT_OFFSET: u32 = 0;

/// Byte offset of `hierarchy_id` in `struct cgroup_root`, from the kernel's BTF; set by the
/// loader. The unified (cgroup2) hierarchy is number 0.
#[unsafe(no_mangle)]
static HIERARCHY_ID_OFFSET: u32 = 0;

/// Removed cgroups' ids and paths.
#[map]
static CGROUPS_REMOVED: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// `tp_btf/cgroup_rmdir(struct cgroup *cgrp, const char *path)`.
#[inline(always)]
pub fn on_rmdir(ctx: &BtfTracePointContext) {
    let cgroup: *const u8 = ctx.arg(0);
    let path: *const u8 = ctx.arg(1);
    // SAFETY: read-only globals the loader sets before loading.
    let (kn_offset, id_offset, root_offset, hierarchy_offset) = unsafe {
        (
            core::ptr::read_volatile(&CGROUP_KN_OFFSET) as usize,
            core::ptr::read_volatile(&KERNFS_NODE_ID_OFFSET) as usize,
            core::ptr::read_volatile(&CGROUP_ROOT_OFFSET) as usize,
            core::ptr::read_volatile(&HIERARCHY_ID_OFFSET) as usize,
        )
    };
    // v1 hierarchies number their cgroups on their own: only the unified one's ids are ours.
    // SAFETY: bpf_probe_read_kernel checks the addresses; cgroup is live during rmdir.
    let Ok(root) =
        (unsafe { bpf_probe_read_kernel(cgroup.wrapping_add(root_offset).cast::<usize>()) })
    else {
        return;
    };
    // SAFETY: as above.
    let hierarchy = unsafe {
        bpf_probe_read_kernel(
            (root as *const u8)
                .wrapping_add(hierarchy_offset)
                .cast::<i32>(),
        )
    };
    if hierarchy != Ok(0) {
        return;
    }
    // SAFETY: bpf_probe_read_kernel checks the addresses; cgroup is live during rmdir.
    let Ok(kn) = (unsafe { bpf_probe_read_kernel(cgroup.wrapping_add(kn_offset).cast::<usize>()) })
    else {
        return;
    };
    // SAFETY: as above.
    let Ok(id) =
        (unsafe { bpf_probe_read_kernel((kn as *const u8).wrapping_add(id_offset).cast::<u64>()) })
    else {
        return;
    };
    let Some(mut entry) = CGROUPS_REMOVED.reserve::<CgroupRemoved>(0) else {
        count(Stat::CgroupNameRingFull);
        return;
    };
    let record = entry.as_mut_ptr();
    // SAFETY: `record` points to a reserved, writable CgroupRemoved in the ring buffer.
    unsafe {
        (*record).id = id;
        (*record).path[0] = 0;
        let _ = bpf_probe_read_kernel_str_bytes(path, &mut (*record).path);
    }
    entry.submit(0);
}
