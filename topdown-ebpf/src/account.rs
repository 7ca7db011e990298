//! Charging counter deltas to the thread that is on this CPU.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    EbpfContext,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id,
    },
    macros::map,
    maps::{HashMap, PerCpuArray, PerfEventArray, RingBuf},
};
use aya_log_ebpf::warn;

use crate::follow;
use topdown_common::{
    MAX_COUNTERS,
    cgroup::CgroupTotals,
    reading::Readings,
    stats::{NR_STATS, Stat},
    thread::ThreadTotals,
};

/// Which slots of the set this CPU reads (bit `i`: slot `i`); set per CPU by the loader.
/// Hybrid parts read their own core type's events, so a thread's P-core and E-core counts land
/// in different slots and are never mixed.
#[map]
static CPU_SLOTS: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU counters opened by userspace: slot `cpu * MAX_COUNTERS + i`.
#[map]
static COUNTERS: PerfEventArray<u32> = PerfEventArray::new(0);

/// This CPU's readings at its previous charge.
#[map]
static PREV_READINGS: PerCpuArray<Readings> = PerCpuArray::with_max_entries(1, 0);

/// Live threads' totals, by tid. Size set by the loader (`--max-threads`).
#[map]
static THREADS: HashMap<u32, ThreadTotals> = HashMap::with_max_entries(16384, 0);

/// Totals per cgroup2 id: each slice is charged to the cgroup its thread was in at the charge.
/// Size set by the loader (`--max-cgroups`).
#[map]
static CGROUPS: HashMap<u64, CgroupTotals> = HashMap::with_max_entries(4096, 0);

/// Scratch space to insert a new cgroup.
#[map]
static CGROUP_SCRATCH: PerCpuArray<CgroupTotals> = PerCpuArray::with_max_entries(1, 0);

/// Each CPU's idle task (tid 0), kept per CPU.
#[map]
static IDLE: PerCpuArray<ThreadTotals> = PerCpuArray::with_max_entries(1, 0);

/// Scratch space for a thread not (or no longer) in `THREADS`: too big for the BPF stack.
#[map]
static SCRATCH: PerCpuArray<ThreadTotals> = PerCpuArray::with_max_entries(1, 0);

/// Final totals of threads that died.
#[map]
static EXITS: RingBuf = RingBuf::with_byte_size(4 * 1024 * 1024, 0);

/// Loss and activity counters, indexed by [`Stat`].
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NR_STATS, 0);

/// Why the current slice ends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SliceEnd {
    /// Switched out; will run again.
    Switch,
    /// Still running: a tick charges what it used so far.
    Tick,
    /// Switched out for the last time: the thread is dead.
    Exit,
}

/// Counts one occurrence of `stat` on this CPU.
#[inline(always)]
pub fn count(stat: Stat) {
    if let Some(slot) = STATS.get_ptr_mut(stat as u32) {
        // SAFETY: per-CPU slot; BPF programs on one CPU do not nest here.
        unsafe { *slot += 1 };
    }
}

/// Charges this CPU's counter deltas since its previous charge to the current thread.
#[inline(always)]
pub fn charge_current<C: EbpfContext>(ctx: &C, end: SliceEnd) {
    let Some(prev) = PREV_READINGS.get_ptr_mut(0) else {
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(totals) = totals_of(ctx, tid, (pid_tgid >> 32) as u32) else {
        return;
    };
    // SAFETY: plain helpers without arguments.
    let (cpu, cgroup_id) = unsafe { (bpf_get_smp_processor_id(), bpf_get_current_cgroup_id()) };
    // SAFETY: all three point into map values valid for the duration of the program: this
    // CPU's readings, this thread's slot (no other CPU runs it now), and its cgroup's slot,
    // which other CPUs update too, only with atomic adds (`add_shared`).
    let (prev, totals, mut group) = unsafe {
        (
            &mut *prev,
            &mut *totals,
            cgroup_of(ctx, tid, cgroup_id).map(|group| &mut *group),
        )
    };
    add_deltas(
        cpu,
        prev,
        &mut totals.charged,
        group.as_deref_mut().map(|group| &mut group.charged),
    );

    totals.cgroup_id = cgroup_id;
    totals.last_cpu = cpu;
    if end != SliceEnd::Tick {
        totals.switches += 1;
        if let Some(group) = group {
            add_shared(&mut group.switches, 1);
        }
        count(Stat::Switches);
    } else {
        count(Stat::Ticks);
    }
    // The name is refreshed on ticks, the first switch and the last one, not on every switch.
    if (end != SliceEnd::Switch || totals.switches == 1)
        && let Ok(comm) = bpf_get_current_comm()
    {
        totals.comm = comm;
    }
    if end == SliceEnd::Exit && tid != 0 {
        totals.flags |= ThreadTotals::FLAG_EXITED;
        if EXITS.output(totals, 0).is_err() {
            count(Stat::ExitRingFull);
            warn!(
                ctx,
                "exit ring buffer full: final record of tid {} lost", tid
            );
        }
        // Read before the slot is freed: another CPU may reuse it at once.
        let leader = tid == totals.tgid;
        // Absent when the map was full: the loss is already counted.
        let _ = THREADS.remove(&tid);
        if leader {
            follow::forget(tid);
        }
    }
}

/// The totals `tid` is charged to: its `THREADS` slot (created on first sight), the CPU's idle
/// slot for tid 0, or a scratch slot when the map is full (the loss is counted).
#[inline(always)]
fn totals_of<C: EbpfContext>(ctx: &C, tid: u32, tgid: u32) -> Option<*mut ThreadTotals> {
    if tid == 0 {
        return IDLE.get_ptr_mut(0);
    }
    if let Some(totals) = THREADS.get_ptr_mut(&tid) {
        return Some(totals);
    }
    let scratch = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU scratch slot, not shared with another program run.
    unsafe {
        *scratch = ThreadTotals::new(tid, tgid);
        if follow::is_followed(tgid) {
            (*scratch).flags = ThreadTotals::FLAG_FOLLOWED;
        }
    }
    // SAFETY: as above.
    match THREADS.insert(&tid, unsafe { &*scratch }, u64::from(BPF_NOEXIST)) {
        Ok(()) => THREADS.get_ptr_mut(&tid).or(Some(scratch)),
        Err(_) => {
            count(Stat::ThreadMapFull);
            warn!(ctx, "thread map full: slice of tid {} not charged", tid);
            Some(scratch)
        }
    }
}

/// The totals of cgroup `id` (created on first sight); none for the idle task (charged to no
/// cgroup, and the most frequent: no lookup, no adds) and when the map is full (counted).
#[inline(always)]
fn cgroup_of<C: EbpfContext>(ctx: &C, tid: u32, id: u64) -> Option<*mut CgroupTotals> {
    if tid == 0 {
        return None;
    }
    if let Some(totals) = CGROUPS.get_ptr_mut(&id) {
        return Some(totals);
    }
    let scratch = CGROUP_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU scratch slot, not shared with another program run.
    unsafe { *scratch = CgroupTotals::new(id) };
    // SAFETY: as above. An error may mean another CPU created it first: look again.
    let _ = CGROUPS.insert(&id, unsafe { &*scratch }, u64::from(BPF_NOEXIST));
    let totals = CGROUPS.get_ptr_mut(&id);
    if totals.is_none() {
        count(Stat::CgroupMapFull);
        warn!(ctx, "cgroup map full: slice of cgroup {} not charged", id);
    }
    totals
}

/// Adds to a total other CPUs may be adding to at the same time (a cgroup's): one BPF atomic
/// add. (`AtomicU64::fetch_add` is missing on this target, which has no compare-and-swap.)
#[inline(always)]
fn add_shared(total: &mut u64, value: u64) {
    // SAFETY: `total` is a valid, aligned u64 in a map value; every writer adds atomically.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(total, value) };
}

/// Reads every counter this CPU has, adds the deltas since `prev` to `charged` (the thread's)
/// and `group` (its cgroup's, if it has one), and makes the new readings `prev`. A counter that
/// did not run during the slice charges nothing.
#[inline(always)]
fn add_deltas(
    cpu: u32,
    prev: &mut Readings,
    charged: &mut Readings,
    mut group: Option<&mut Readings>,
) {
    let slots = CPU_SLOTS.get(0).copied().unwrap_or(0);
    let base = cpu * MAX_COUNTERS as u32;
    for i in 0..MAX_COUNTERS {
        if slots >> i == 0 {
            break;
        }
        if slots & (1 << i) == 0 {
            continue;
        }
        let Ok(now) = COUNTERS.read_value(base + i as u32) else {
            count(Stat::CounterReadError);
            continue;
        };
        let enabled = now.enabled_nanos.wrapping_sub(prev.enabled_ns[i]);
        let running = now.running_nanos.wrapping_sub(prev.running_ns[i]);
        let delta = if running > 0 {
            now.counter.wrapping_sub(prev.counts[i])
        } else {
            if enabled > 0 {
                count(Stat::CounterNotRunning);
            }
            0
        };
        charged.counts[i] += delta;
        charged.enabled_ns[i] += enabled;
        charged.running_ns[i] += running;
        if let Some(group) = group.as_deref_mut() {
            add_shared(&mut group.counts[i], delta);
            add_shared(&mut group.enabled_ns[i], enabled);
            add_shared(&mut group.running_ns[i], running);
        }
        prev.counts[i] = now.counter;
        prev.enabled_ns[i] = now.enabled_nanos;
        prev.running_ns[i] = now.running_nanos;
    }
}
