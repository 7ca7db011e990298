//! Charging counter deltas to the thread that is on this CPU.
//!
//! The cost of this path is the product's price tag, so per charge: one lookup of this CPU's
//! state (readings, slot mask, idle, stats in one value), one lookup of the thread, the clock
//! for on-CPU time (no counter read), one `bpf_perf_event_read_value` per further counter of
//! the set, and nothing written that another CPU writes too. Cgroups are charged in userspace
//! from the threads' records; losses are only counted.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id, bpf_ktime_get_ns,
    },
    macros::map,
    maps::{HashMap, PerCpuArray, PerfEventArray, RingBuf},
};

use crate::follow;
use topdown_common::{
    MAX_COUNTERS,
    cpu::CpuState,
    reading::{Reading, Readings},
    stats::Stat,
    thread::{ThreadHeader, ThreadTotals, record_len},
};

/// Number of slots of the counter set (slot 0, the clock, included); set by the loader. Records
/// sent to userspace carry this many slots.
#[unsafe(no_mangle)]
static SET_SLOTS: u32 = 1;

/// Non-zero when only followed processes are charged (`-p`, `-t`, `-- CMD`): switches between
/// two other threads then cost one lookup. Set by the loader.
#[unsafe(no_mangle)]
static NARROW: u32 = 0;

/// Each CPU's state; set per CPU by the loader before the programs attach.
#[map]
static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU counters opened by userspace: slot `cpu * MAX_COUNTERS + i`.
#[map]
static COUNTERS: PerfEventArray<u32> = PerfEventArray::new(0);

/// Live threads' totals, by tid. Size set by the loader (`--max-threads`).
#[map]
static THREADS: HashMap<u32, ThreadTotals> = HashMap::with_max_entries(16384, 0);

/// Scratch space for a thread not (or no longer) in `THREADS`: too big for the BPF stack.
#[map]
static SCRATCH: PerCpuArray<ThreadTotals> = PerCpuArray::with_max_entries(1, 0);

/// Records about threads, each a [`ThreadHeader`] and the set's slots: final totals of threads
/// that died, and totals of threads as they left a cgroup.
#[map]
static THREAD_RECORDS: RingBuf = RingBuf::with_byte_size(4 * 1024 * 1024, 0);

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

/// This CPU's state.
#[inline(always)]
pub fn cpu_state() -> Option<&'static mut CpuState> {
    // SAFETY: a per-CPU value; programs on one CPU do not nest on these paths (the switch runs
    // with interrupts off, and the tick's perf_event program is not run while another BPF
    // program is active on the CPU).
    CPU_STATE.get_ptr_mut(0).map(|state| unsafe { &mut *state })
}

/// Counts one occurrence of `stat` on this CPU.
#[inline(always)]
pub fn count(stat: Stat) {
    if let Some(state) = cpu_state() {
        count_in(state, stat);
    }
}

#[inline(always)]
fn count_in(state: &mut CpuState, stat: Stat) {
    if let Some(slot) = state.stats.get_mut(stat as usize) {
        *slot += 1;
    }
}

/// Whether the loader narrowed charging to followed processes.
#[inline(always)]
pub fn narrowed() -> bool {
    // SAFETY: a read-only global the loader sets before loading.
    unsafe { core::ptr::read_volatile(&NARROW) != 0 }
}

/// At a switch on a narrowed collector: records whether `next` (thread `next_tid` of process
/// `next_tgid`) is watched, and tells whether `prev`, the thread now on this CPU, is. When
/// neither is, nothing else runs. When only `next` is, this CPU's readings are taken now, so its
/// slice is measured from its switch-in.
#[inline(always)]
pub fn switch_watched(next_tid: u32, next_tgid: u32) -> bool {
    let Some(state) = cpu_state() else {
        return false;
    };
    let prev_watched = watched_now(state);
    let next_watched = follow::is_followed(next_tgid);
    state.current = if next_watched {
        next_tid | CpuState::WATCHED
    } else {
        next_tid
    };
    if !prev_watched && next_watched {
        // SAFETY: helpers without arguments.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        read_counters(&mut Prev::of(state), cpu, None);
        // SAFETY: as above.
        state.last_ns = unsafe { bpf_ktime_get_ns() };
    }
    prev_watched
}

/// Whether the thread now on this CPU is watched: from the CPU's state when it is about this
/// thread, else from the followed set.
#[inline(always)]
fn watched_now(state: &CpuState) -> bool {
    let pid_tgid = bpf_get_current_pid_tgid();
    if state.current & !CpuState::WATCHED == pid_tgid as u32 {
        state.current & CpuState::WATCHED != 0
    } else {
        follow::is_followed((pid_tgid >> 32) as u32)
    }
}

/// Whether the thread now on this CPU is watched (always, when not narrowed).
#[inline(always)]
pub fn current_watched() -> bool {
    !narrowed() || cpu_state().is_some_and(|state| watched_now(state))
}

/// Charges this CPU's clock and counter deltas since its previous charge to the current
/// thread (or to the CPU's idle totals).
#[inline(always)]
pub fn charge_current(end: SliceEnd) {
    let Some(state) = cpu_state() else {
        return;
    };
    // SAFETY: helpers without arguments.
    let (now, cpu) = unsafe { (bpf_ktime_get_ns(), bpf_get_smp_processor_id()) };
    let slice = now.wrapping_sub(state.last_ns);
    state.last_ns = now;
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    if end == SliceEnd::Tick {
        count_in(state, Stat::Ticks);
    } else {
        count_in(state, Stat::Switches);
    }
    if tid == 0 {
        charge_clock(&mut state.idle, slice);
        let mut prev = Prev {
            slots: state.slots,
            readings: &mut state.prev,
            stats: &mut state.stats,
        };
        read_counters(&mut prev, cpu, Some(&mut state.idle));
        return;
    }
    let Some(totals) = totals_of(state, tid, (pid_tgid >> 32) as u32, now) else {
        return;
    };
    // SAFETY: this thread's slot (no other CPU runs it now) or this CPU's scratch slot.
    let totals = unsafe { &mut *totals };

    // SAFETY: a helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if totals.header.cgroup_id != cgroup_id {
        if totals.header.cgroup_id != 0 {
            // What it was charged in the cgroup it left; the slice ending now goes to the new.
            totals.header.flags |= ThreadHeader::FLAG_MOVED;
            send(state, totals);
            totals.header.flags &= !ThreadHeader::FLAG_MOVED;
        }
        totals.header.cgroup_id = cgroup_id;
    }
    charge_clock(&mut totals.charged, slice);
    read_counters(&mut Prev::of(state), cpu, Some(&mut totals.charged));
    totals.header.last_cpu = cpu;
    if end != SliceEnd::Tick {
        totals.header.switches += 1;
    }
    // The name is refreshed on ticks, the first switch and the last one, and at exec (see
    // `on_exec`), not on every switch.
    if (end != SliceEnd::Switch || totals.header.switches == 1)
        && let Ok(comm) = bpf_get_current_comm()
    {
        totals.header.comm = comm;
    }
    if end == SliceEnd::Exit {
        totals.header.flags |= ThreadHeader::FLAG_EXITED;
        send(state, totals);
        // Read before the slot is freed: another CPU may reuse it at once.
        let leader = tid == totals.header.tgid;
        // Absent when the map was full: the loss is already counted.
        let _ = THREADS.remove(&tid);
        if leader {
            follow::forget(tid);
        }
    }
}

/// A thread called exec: its name changes now, not at its next tick.
#[inline(always)]
pub fn on_exec() {
    let tid = bpf_get_current_pid_tgid() as u32;
    if let Some(totals) = THREADS.get_ptr_mut(&tid)
        && let Ok(comm) = bpf_get_current_comm()
    {
        // SAFETY: the current thread's own slot; it is running here, so no charge races.
        unsafe { (*totals).header.comm = comm };
    }
}

/// Sends `totals` as a record carrying the set's slots; a full ring is counted, never logged.
#[inline(always)]
fn send(state: &mut CpuState, totals: &ThreadTotals) {
    // SAFETY: a read-only global the loader sets before loading.
    let slots = unsafe { core::ptr::read_volatile(&SET_SLOTS) } as usize;
    let len = record_len(slots);
    if len > size_of::<ThreadTotals>() {
        return;
    }
    // SAFETY: `len` bytes from the start of a ThreadTotals, which has at least that many.
    let bytes =
        unsafe { core::slice::from_raw_parts((totals as *const ThreadTotals).cast::<u8>(), len) };
    if THREAD_RECORDS.output(bytes, 0).is_err() {
        count_in(state, Stat::RecordRingFull);
    }
}

/// The totals `tid` is charged to: its `THREADS` slot (created on first sight), or a scratch
/// slot when the map is full (the loss is counted).
#[inline(always)]
fn totals_of(state: &mut CpuState, tid: u32, tgid: u32, now: u64) -> Option<*mut ThreadTotals> {
    if let Some(totals) = THREADS.get_ptr_mut(&tid) {
        return Some(totals);
    }
    let scratch = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU scratch slot, not shared with another program run.
    unsafe {
        *scratch = ThreadTotals::new(tid, tgid);
        (*scratch).header.born_ns = now;
        if follow::is_followed(tgid) {
            (*scratch).header.flags = ThreadHeader::FLAG_FOLLOWED;
        }
    }
    // SAFETY: as above.
    match THREADS.insert(&tid, unsafe { &*scratch }, u64::from(BPF_NOEXIST)) {
        Ok(()) => THREADS.get_ptr_mut(&tid).or(Some(scratch)),
        Err(_) => {
            count_in(state, Stat::ThreadMapFull);
            Some(scratch)
        }
    }
}

/// Charges `slice` ns of clock to slot 0 of `charged`.
#[inline(always)]
fn charge_clock(charged: &mut Readings, slice: u64) {
    let clock = &mut charged.slots[0];
    clock.count += slice;
    clock.enabled_ns += slice;
    clock.running_ns += slice;
}

/// The parts of a CPU's state that reading its counters updates, borrowed apart from its idle
/// totals (which may be what is charged).
struct Prev<'a> {
    slots: u32,
    readings: &'a mut Readings,
    stats: &'a mut [u64; topdown_common::stats::NR_STATS as usize],
}

impl<'a> Prev<'a> {
    #[inline(always)]
    fn of(state: &'a mut CpuState) -> Self {
        Self {
            slots: state.slots,
            readings: &mut state.prev,
            stats: &mut state.stats,
        }
    }
}

/// Reads every counter this CPU has beyond the clock; adds the deltas since the previous
/// readings to `charged` when given, and makes the new readings the previous ones. A counter
/// that did not run during the slice charges nothing (counted).
#[inline(always)]
fn read_counters(prev: &mut Prev<'_>, cpu: u32, mut charged: Option<&mut Readings>) {
    let slots = prev.slots;
    if slots >> 1 == 0 {
        return;
    }
    let base = cpu * MAX_COUNTERS as u32;
    for i in 1..MAX_COUNTERS {
        if slots >> i == 0 {
            break;
        }
        if slots & (1 << i) == 0 {
            continue;
        }
        let Ok(now) = COUNTERS.read_value(base + i as u32) else {
            prev.stats[Stat::CounterReadError as usize] += 1;
            continue;
        };
        let last = &mut prev.readings.slots[i];
        let enabled = now.enabled_nanos.wrapping_sub(last.enabled_ns);
        let running = now.running_nanos.wrapping_sub(last.running_ns);
        let count = if running > 0 {
            now.counter.wrapping_sub(last.count)
        } else {
            0
        };
        *last = Reading {
            count: now.counter,
            enabled_ns: now.enabled_nanos,
            running_ns: now.running_nanos,
        };
        if let Some(charged) = charged.as_deref_mut() {
            if running == 0 && enabled > 0 {
                prev.stats[Stat::CounterNotRunning as usize] += 1;
            }
            let total = &mut charged.slots[i];
            total.count += count;
            total.enabled_ns += enabled;
            total.running_ns += running;
        }
    }
}
