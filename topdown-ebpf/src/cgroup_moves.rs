//! When to read a thread's cgroup: only after some thread may have changed cgroup.
//!
//! Reading the cgroup id at every switch costs a helper call and three dependent loads; threads
//! almost never move. `tp_btf/cgroup_attach_task` fires after a migration to another cgroup has
//! completed (the thread's `css_set` already switched), and bumps a global count of moves. Each
//! thread keeps the count as of its latest cgroup read; the switch path reads the cgroup again
//! only when the count changed. The count is read before the cgroup id, so a move that
//! completes in between is seen at the thread's next charge. Ticks read the cgroup id anyway,
//! which bounds what a move the tracepoint does not report could charge to the old cgroup (on
//! CPUs that reorder loads, a count seen before the thread's new cgroup; or a kernel path that
//! moves threads without the tracepoint): one tick period of the thread's run time.

use core::{
    intrinsics::{AtomicOrdering, atomic_xadd},
    sync::atomic::AtomicU64,
};

/// Moves to another cgroup seen since the programs were loaded: written only when a thread is
/// moved, so the cache line it sits in stays shared by every CPU's switch path.
static MOVES: AtomicU64 = AtomicU64::new(0);

/// The count of moves so far: read before the cgroup id it vouches for. A plain load (the BPF
/// target has no acquire load before BPF v4): x86 keeps loads in order; elsewhere the tick's
/// read bounds the rare reordering (see the module's note). The backend cannot lower even a
/// relaxed atomic load, hence the volatile one.
#[inline(always)]
pub fn moves() -> u64 {
    // SAFETY: an aligned u64, only ever written by the atomic add below.
    unsafe { core::ptr::read_volatile(MOVES.as_ptr()) }
}

/// A thread (or a whole thread group) was moved to another cgroup.
#[inline(always)]
pub fn on_attach() {
    // An atomic add (the BPF target has no `fetch_add`): concurrent moves on two CPUs must
    // both change the count, or a thread could keep a count that a later move left unchanged.
    // SAFETY: an aligned u64 that is only ever written by this atomic add.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(MOVES.as_ptr(), 1) };
}
