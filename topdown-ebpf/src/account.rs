//! Charging counter deltas to the thread that is on this CPU.
//!
//! The cost of this path is the product's price tag, so per charge: one lookup of this CPU's
//! state (readings, slot mask, idle, stats in one value), one lookup of the thread, one
//! `bpf_perf_event_read_value` per counter of the set beyond on-CPU time (none at a switch
//! within one cgroup when only cgroups are reported, see [`reads_at_switch`]), and nothing
//! written that another CPU writes too. On-CPU time is the scheduler's own clock, read from the
//! task (no clock or counter read); the cgroup id is read only after a move (see
//! `cgroup_moves`).
//! Cgroups are charged in userspace from the threads' records; losses are only counted.

use aya_ebpf::{
    bindings::{BPF_F_MMAPABLE, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
        bpf_map_lookup_percpu_elem,
    },
    macros::map,
    maps::{Array, PerCpuArray, PerfEventArray, RingBuf, Stack},
};

use crate::{
    cgroup_moves, follow,
    run_queue::RunQueue,
    task::{Task, TaskFields},
};
use topdown_common::{
    MAX_COUNTERS,
    cpu::CpuState,
    neighbours::{IDLE, WaitBehind},
    reading::{Reading, Readings},
    stats::{MAX_COUNT_PER_NS, Stat, possible_count},
    thread::{ListedThread, ThreadHeader, ThreadTotals, record_len},
};

/// Number of slots of the counter set (slot 0, the clock, included); set by the loader. Records
/// sent to userspace carry this many slots.
#[unsafe(no_mangle)]
static SET_SLOTS: u32 = 1;

/// The most each slot's counter can count per nanosecond it ran ([`possible_count`]): set by
/// the loader from the set's events (`MAX_CYCLES_PER_NS` for counters of cycles); a count
/// above it is refused.
#[unsafe(no_mangle)]
static SLOT_MOST_PER_NS: [u64; MAX_COUNTERS] = [MAX_COUNT_PER_NS; MAX_COUNTERS];

/// Non-zero when only followed processes are charged (`-p`, `-t`, `-- CMD`): switches between
/// two other threads then cost one lookup. Set by the loader.
#[unsafe(no_mangle)]
static NARROW: u32 = 0;

/// Non-zero when only cgroups are reported (`serve`, `--per-cgroup` and `--per-container`
/// without a view of threads): a switch between two threads of one cgroup reads no counter.
/// Set by the loader.
#[unsafe(no_mangle)]
static CGROUP_ONLY: u32 = 0;

/// Non-zero when waits are split over whoever held the CPU during them and preemptions are
/// counted (the default; `--no-neighbours` leaves it 0). Set by the loader.
#[unsafe(no_mangle)]
static NEIGHBOURS: u32 = 0;

/// Each CPU's state; set per CPU by the loader before the programs attach.
#[map]
static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU counters opened by userspace: slot `cpu * MAX_COUNTERS + i`.
#[map]
static COUNTERS: PerfEventArray<u32> = PerfEventArray::new(0);

/// Live threads' totals, one slot each (a free slot's tid is 0). Userspace maps it read-only
/// and copies a thread's totals out of its slot without a system call (Linux 5.5 has mmap-able
/// arrays). Size set by the loader (`--max-threads`).
#[map]
static THREADS: Array<ThreadTotals> = Array::with_max_entries(16384, BPF_F_MMAPABLE);

/// Each live thread's slot in [`THREADS`] plus one (0: none), indexed by tid. Sized by the
/// loader from `kernel.pid_max` and the highest tid alive: a tid beyond it (`pid_max` raised
/// since) is charged to scratch space and counted as a full map. Only the CPU running a thread
/// writes its entry, so it needs no lock.
#[map]
static THREAD_SLOTS: Array<u32> = Array::with_max_entries(32768, 0);

/// The free slots of [`THREADS`], filled by the loader (slot 0 on top). A thread takes one at
/// its first charge and gives it back at its exit; a stack, so the slots in use stay the lowest
/// ones (each CPU's [`CpuState::slots_high`] bounds them) and a whole read scans only those.
/// Linux 5.10 has no atomic fetch-and-add in BPF, so slots cannot be handed out by a counter.
#[map]
static FREE_SLOTS: Stack<u32> = Stack::with_max_entries(16384, 0);

/// Scratch space for a thread not (or no longer) in `THREADS`: too big for the BPF stack.
#[map]
static SCRATCH: PerCpuArray<ThreadTotals> = PerCpuArray::with_max_entries(1, 0);

/// Records about threads, each a [`ThreadHeader`] and the set's slots: final totals of threads
/// that died, and totals of threads as they left a cgroup.
#[map]
static THREAD_RECORDS: RingBuf = RingBuf::with_byte_size(RECORDS_BYTES, 0);

/// The record ring's size.
const RECORDS_BYTES: u32 = 4 * 1024 * 1024;

/// The threads charged since userspace last read this list ([`ListedThread`]: tid, epoch, slot):
/// each thread's first charge in a [`LIST_EPOCH`] puts it here once, so a read costs per thread
/// that ran, not per live thread. Sized by the loader from `--max-threads`; when full, the
/// thread is not stamped (it tries again at its next charge) and the failure is counted, and
/// userspace reads the whole map at its next read.
#[map]
static CHARGED: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

/// The current epoch of [`CHARGED`]: userspace advances it before each read, so every thread
/// charged after that is listed again. Starts at 1 (set by the loader; new totals hold 0).
#[map]
static LIST_EPOCH: Array<u64> = Array::with_max_entries(1, 0);

/// Records are sent without waking the reader, which drains the ring on its own timer (every
/// 100 ms: a wakeup per record cost a thread's exit more than the rest of its accounting);
/// past this much waiting data the reader is woken at once, long before the ring fills.
const RECORDS_WAKE_AT: u64 = RECORDS_BYTES as u64 / 4;

/// Where a charge's run time ends and the CPU's next charge starts, on the scheduler's clock
/// (`se.exec_start` values, see [`crate::task::Task::exec_start`]), and the current task's
/// runtime as the scheduler booked it.
#[derive(Clone, Copy)]
pub struct Clocks {
    /// The current task's `se.sum_exec_runtime`: at a switch, `prev`'s, just brought up to
    /// date; at a tick, as of the scheduler's latest update. A thread is charged its growth
    /// since its previous charge, so its time is the scheduler's own even across switches the
    /// tracepoint does not report (some threads are switched to and never reported switching
    /// out; the next switch on that CPU names another `prev`).
    pub runtime: u64,
    /// The end of the current task's runtime as the scheduler booked it: at a switch, `prev`'s
    /// `se.exec_start`, just brought up to date; at a tick, its latest update. Unused for the
    /// idle task, whose runtime the scheduler does not keep.
    pub run_end: u64,
    /// Where the CPU's next charge starts: at a switch, `next`'s `se.exec_start`, the switch's
    /// clock; at a tick, `run_end`. Later than `run_end` when the scheduler balanced load
    /// between the two with the clock running (newly idle balancing): that time is in no
    /// task's runtime, and the collector leaves it out too.
    pub next_start: u64,
}

impl Clocks {
    /// The clock of this charge: the later of the two (the idle task's `se.exec_start` is set
    /// at its switch in only since Linux 6.8, so `next_start` may be stale when `next` is
    /// idle; `run_end` is then the switch's clock).
    #[inline(always)]
    pub fn now(self) -> u64 {
        self.run_end.max(self.next_start)
    }

    /// A tick's: the running task's runtime as of the scheduler's latest update (`run_end`
    /// on its clock, `runtime` in its total).
    #[inline(always)]
    pub fn at(run_end: u64, runtime: u64) -> Self {
        Self {
            runtime,
            run_end,
            next_start: run_end,
        }
    }
}

/// The two threads of a switch, for what only a switch tells (whom `prev` was preempted by),
/// and their tids, read once for the whole switch (each read of a task's field is a checked
/// load: on x86 the JIT guards it with about ten instructions).
#[derive(Clone, Copy)]
pub struct Switch {
    /// The thread switched out (the one charged).
    pub prev: Task,
    /// The thread switched in.
    pub next: Task,
    /// `prev`'s tid.
    pub prev_tid: u32,
    /// `next`'s tid.
    pub next_tid: u32,
}

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

/// Whether waits are split over the CPU's history and preemptions counted.
#[inline(always)]
pub fn neighbours() -> bool {
    // SAFETY: a read-only global the loader sets before loading.
    unsafe { core::ptr::read_volatile(&NEIGHBOURS) != 0 }
}

/// At a switch on a narrowed collector whose `prev` is not watched (no charge follows), at
/// scheduler clock `now`: the CPU's history still ends `prev`'s slice, held by its cgroup, so
/// a watched thread's wait is split over every thread that ran. The cgroup comes from `prev`'s
/// own fields, not the helper: this runs at every switch of the host (session 30: 143 -> 103
/// ns a narrowed run, BENCHMARKS.md).
#[inline(always)]
pub fn unwatched_switch(state: &mut CpuState, switch: Switch, now: u64) {
    if !neighbours() {
        return;
    }
    let Switch { prev, prev_tid, .. } = switch;
    let cgroup = if prev_tid == 0 {
        IDLE
    } else {
        prev.cgroup_id()
    };
    state.history.switch(cgroup, prev_tid, now);
}

/// Whether the loader narrowed charging to followed processes.
#[inline(always)]
pub fn narrowed() -> bool {
    // SAFETY: a read-only global the loader sets before loading.
    unsafe { core::ptr::read_volatile(&NARROW) != 0 }
}

/// At a switch from `prev` to `next` on a narrowed collector, where `next` starts at
/// scheduler clock `now`: records whether `next` is watched, and tells whether `prev` is. When
/// neither is, nothing else runs. When only `next` is, this CPU's readings are taken now, so
/// its slice is measured from its switch-in.
#[inline(always)]
pub fn switch_watched(state: &mut CpuState, switch: Switch, now: u64) -> bool {
    let Switch {
        prev,
        next,
        prev_tid,
        next_tid,
    } = switch;
    let prev_watched = watched(state, prev, prev_tid);
    let next_watched = follow::is_followed(next.tgid());
    state.current = if next_watched {
        next_tid | CpuState::WATCHED
    } else {
        next_tid
    };
    if !prev_watched && next_watched {
        // SAFETY: helpers without arguments.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        read_counters(&mut Prev::of(state), cpu, None);
        state.last_ns = now;
    }
    prev_watched
}

/// Whether `task`, the thread now on this CPU, is watched: from the CPU's state when it is
/// about this thread, else (a switch the kernel did not report, counted) from the followed set.
#[inline(always)]
fn watched(state: &mut CpuState, task: impl TaskFields, tid: u32) -> bool {
    if state.current & !CpuState::WATCHED == tid {
        state.current & CpuState::WATCHED != 0
    } else {
        count_unreported(state);
        follow::is_followed(task.tgid())
    }
}

/// At a switch on a collector that is not narrowed: counts a switch the kernel did not report
/// when `prev_tid` is not the thread this CPU last switched to, and remembers `next_tid`.
/// Tells whether the switch to `prev` was reported.
#[inline(always)]
pub fn note_switch(state: &mut CpuState, prev_tid: u32, next_tid: u32) -> bool {
    let reported = state.current == prev_tid;
    if !reported {
        count_unreported(state);
    }
    state.current = next_tid;
    reported
}

/// Whether a switch to `next` (thread `next_tid`) reads the counters: always, unless only
/// cgroups are reported and `next` is in the cgroup whose threads ran since the last read
/// (`state.group`), no thread changed cgroup since, and the switch to `prev` was `reported`
/// (else another thread ran unseen). Remembers `next`'s cgroup (0 for the idle task, whose
/// counts are kept apart).
#[inline(always)]
pub fn reads_at_switch(state: &mut CpuState, next: Task, next_tid: u32, reported: bool) -> bool {
    // SAFETY: a read-only global the loader sets before loading.
    if unsafe { core::ptr::read_volatile(&CGROUP_ONLY) } == 0 {
        return true;
    }
    let group = if next_tid == 0 {
        0
    } else {
        next.cgroup_address()
    };
    let moves = cgroup_moves::moves();
    let same = reported && group == state.group && moves == state.group_moves;
    state.group = group;
    state.group_moves = moves;
    !same
}

/// Counts a switch the kernel did not report, once the CPU is measuring (before its first
/// charge, its state names no thread yet).
#[inline(always)]
fn count_unreported(state: &mut CpuState) {
    if state.last_ns != 0 {
        count_in(state, Stat::SwitchesUnreported);
    }
}

/// Whether `task`, the thread now on this CPU, is watched (always, when not narrowed).
#[inline(always)]
pub fn current_watched(state: &mut CpuState, task: impl TaskFields) -> bool {
    !narrowed() || watched(state, task, task.tid())
}

/// Charges this CPU's run time (on the scheduler's clock, see [`Clocks`]) and counter deltas
/// since its previous charge to `task`, the thread on this CPU (or to the CPU's idle totals).
/// A CPU's first charge only starts its measurement: the loader cannot read the scheduler's
/// clock, so nothing before it is charged. Without `read`, the counters' deltas stay pending
/// for the CPU's next charge (see [`reads_at_switch`]).
#[inline(always)]
pub fn charge_current(
    state: &mut CpuState,
    end: SliceEnd,
    task: impl TaskFields,
    switch: Option<Switch>,
    clocks: Clocks,
    read: bool,
) {
    // SAFETY: a helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let neighbours = neighbours();
    if state.last_ns == 0 {
        read_counters(&mut Prev::of(state), cpu, None);
        state.last_ns = clocks.now();
        if neighbours {
            if let Some(switch) = switch {
                unwatched_switch(state, switch, clocks.now());
            } else if state.history.switch_ns == 0 {
                state.history.switch_ns = clocks.now();
            }
        }
        return;
    }
    let tid = match switch {
        Some(switch) => switch.prev_tid,
        None => task.tid(),
    };
    // The runqueue's clock never goes back, and a task's runtime is brought up to date at or
    // after its switch-in: the saturation only guards against a kernel that breaks that.
    let end_ns = if tid == 0 {
        clocks.next_start
    } else {
        clocks.run_end
    };
    let slice = end_ns.saturating_sub(state.last_ns);
    let now = state.last_ns.max(clocks.now());
    state.last_ns = now;
    if end == SliceEnd::Tick {
        count_in(state, Stat::Ticks);
        state.tick_ns = now;
        // The running thread is not the one the CPU last switched to: a switch the kernel did
        // not report (a narrowed collector has counted it already, and only ticks watched
        // threads).
        if state.current & !CpuState::WATCHED != tid {
            state.current = if narrowed() {
                tid | CpuState::WATCHED
            } else {
                count_unreported(state);
                tid
            };
        }
    } else {
        count_in(state, Stat::Switches);
    }
    if end != SliceEnd::Tick && crate::stops_at(crate::Stage::ChargeStart) {
        return;
    }
    if tid == 0 {
        charge_clock(&mut state.idle, slice);
        if end != SliceEnd::Tick && neighbours {
            state.history.switch(IDLE, 0, now);
        }
        if read {
            let mut prev = Prev {
                slots: state.slots,
                readings: &mut state.prev,
                stats: &mut state.stats,
            };
            read_counters(&mut prev, cpu, Some(&mut state.idle));
        }
        return;
    }
    let Some((totals, slot)) = totals_of(state, task, tid, &clocks, now, end) else {
        return;
    };
    if end != SliceEnd::Tick && crate::stops_at(crate::Stage::ThreadLookup) {
        return;
    }
    // SAFETY: this thread's slot (no other CPU runs it now) or this CPU's scratch slot.
    let totals = unsafe { &mut *totals };

    let moves = cgroup_moves::moves();
    if end == SliceEnd::Tick || totals.cgroup_moves != moves {
        totals.cgroup_moves = moves;
        // SAFETY: a helper without arguments.
        let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
        if totals.header.cgroup_id != cgroup_id {
            // What it was charged in the cgroup it left; the slice ending now goes to the new.
            totals.header.flags |= ThreadHeader::FLAG_MOVED;
            send(state, totals);
            totals.header.flags &= !ThreadHeader::FLAG_MOVED;
            totals.header.cgroup_id = cgroup_id;
        }
    }
    // A thread's first charge is the CPU's slice, or its whole runtime when shorter (a thread
    // born since the collector started: exact even when its switch in went unreported); after
    // that, its runtime's growth.
    let first = totals.runtime_ns == 0;
    let ran = if first {
        slice.min(clocks.runtime)
    } else {
        clocks.runtime.saturating_sub(totals.runtime_ns)
    };
    totals.runtime_ns = clocks.runtime;
    // Waits the same way: at the first charge, the whole run-queue delay of a thread whose whole
    // runtime is this slice (it first ran since this CPU began measuring), none of one that ran
    // before (its earlier waits are not the collector's); after that, its growth.
    let born_here = first && clocks.runtime <= slice;
    let delay = task.run_delay();
    if let Some(delay) = delay
        && end == SliceEnd::Tick
    {
        // Waits are charged at switches, where they are split: a tick only sets a thread's
        // starting point at its first charge (none for one born here: its switch out charges
        // its whole wait). The split is then in one program, which the verifier walks once.
        if first && !born_here {
            totals.run_delay_ns = delay;
        }
    } else if let Some(delay) = delay {
        let waited = if !first {
            delay.saturating_sub(totals.run_delay_ns)
        } else if born_here {
            delay
        } else {
            0
        };
        totals.header.waited_ns += waited;
        totals.run_delay_ns = delay;
        // The wait ended as the thread was switched in, where the CPU's history ends: only
        // this thread ran here since.
        if waited > 0 && neighbours {
            state.history.split(waited, &mut totals.behind);
        }
    }
    if neighbours {
        count_preemptions(totals, task, switch, first, born_here);
    }
    charge_clock(&mut totals.charged, ran);
    if let Some(slot) = slot
        && end != SliceEnd::Exit
    {
        list(state, totals, slot);
    }
    if read {
        read_counters(&mut Prev::of(state), cpu, Some(&mut totals.charged));
    }
    totals.header.last_cpu = cpu;
    if end != SliceEnd::Tick {
        totals.header.switches += 1;
        if neighbours {
            state.history.switch(totals.header.cgroup_id, tid, now);
        }
    }
    // The name is refreshed on ticks, the first switch and the last one, and at exec (see
    // `on_exec`), not on every switch.
    if end != SliceEnd::Switch || totals.header.switches == 1 {
        totals.header.comm = task.comm();
    }
    if end == SliceEnd::Exit {
        totals.header.flags |= ThreadHeader::FLAG_EXITED;
        send(state, totals);
        if let Some(slot) = slot {
            free_slot(state, totals, tid, slot);
        }
    }
}

/// Adds the growth of `task`'s involuntary switches out since its previous charge (all of them
/// for a thread `born_here`, none at the `first` charge of one that ran before), and counts
/// one whose `switch` went to a thread of another cgroup as preempted by another cgroup.
#[inline(always)]
fn count_preemptions(
    totals: &mut ThreadTotals,
    task: impl TaskFields,
    switch: Option<Switch>,
    first: bool,
    born_here: bool,
) {
    let nivcsw = task.involuntary_switches();
    let grown = if !first {
        nivcsw.saturating_sub(totals.nivcsw)
    } else if born_here {
        nivcsw
    } else {
        0
    };
    totals.nivcsw = nivcsw;
    if grown == 0 {
        return;
    }
    totals.behind.rest.preempted += grown;
    // This switch was involuntary: the kernel counts it before the tracepoint.
    if let Some(Switch {
        prev,
        next,
        next_tid,
        ..
    }) = switch
        && next_tid != 0
        && !next.shares_cgroup(prev)
    {
        totals.behind.rest.preempted_by_other += 1;
    }
}

/// A queued thread moves to another CPU (`tp_btf/sched_migrate_task`): the kernel has just
/// booked the wait it spent on the CPU it leaves (`sched_info` at its dequeue), which that
/// CPU's slices did not end. With `SPLIT` (kernels with `bpf_map_lookup_percpu_elem`, 5.19),
/// it is split over that CPU's history ([`split_on_cpu_left`]); else, or where that CPU's
/// history cannot be read, it is charged as waited before a migration (unattributed). The
/// thread is not running (the kernel migrates only tasks off a CPU), so no charge of it races
/// with this one.
#[inline(always)]
pub fn on_migrate<const SPLIT: bool>(task: Task) {
    if !neighbours() {
        return;
    }
    let Some((slot, totals)) = slot_of(task.tid()) else {
        return;
    };
    // SAFETY: the slot of a thread no CPU runs now.
    let totals = unsafe { &mut *totals };
    if totals.runtime_ns == 0 || totals.header.tid != task.tid() {
        return;
    }
    let Some(delay) = task.run_delay() else {
        return;
    };
    let waited = delay.saturating_sub(totals.run_delay_ns);
    if waited == 0 {
        return;
    }
    totals.header.waited_ns += waited;
    totals.run_delay_ns = delay;
    if !(SPLIT && split_on_cpu_left(task, waited, &mut totals.behind)) {
        totals.behind.rest.migrated_ns += waited;
    }
    if let Some(state) = cpu_state() {
        list(state, totals, slot);
    }
}

/// Splits `waited`, the wait `task` just had booked on the CPU it leaves, over that CPU's
/// history: the running slice first (from its latest switch to its run queue's clock, held by
/// its running task), then the slices before. Race-free: the kernel moves a queued task with
/// the run queue it leaves locked, and that CPU's switch program, the only writer of its
/// history, runs under the same lock. False (nothing charged) where the CPU's state cannot be
/// read, it is not counted on (`--cpus`), or it has not switched since the collector started.
#[inline(always)]
fn split_on_cpu_left(task: Task, waited: u64, behind: &mut WaitBehind) -> bool {
    let Some(rq) = RunQueue::of(task) else {
        return false;
    };
    let key = 0u32;
    // SAFETY: the map's address and a key on the stack; the helper bounds-checks the CPU and
    // returns null past the possible ones.
    let state = unsafe {
        bpf_map_lookup_percpu_elem(
            core::ptr::addr_of!(CPU_STATE).cast_mut().cast(),
            core::ptr::addr_of!(key).cast(),
            rq.cpu(),
        )
    }
    .cast::<CpuState>();
    if state.is_null() {
        return false;
    }
    // SAFETY: a map value, read only.
    let state = unsafe { &*state };
    let history = &state.history;
    if state.skipped != 0 || history.switch_ns == 0 {
        return false;
    }
    let holder = match rq.curr() {
        Some(curr) => match curr.tid() {
            0 => (IDLE, 0),
            tid => (curr.cgroup_id(), tid),
        },
        None => (IDLE, 0),
    };
    let running_ns = rq.clock_task().saturating_sub(history.switch_ns);
    history.split_running(waited, holder, running_ns, behind);
    true
}

/// Gives `totals`' slot (`slot`, held by thread `tid`, whose final record is sent) back: its
/// tid cleared first (a reader copying the slot then sees another tid), its header, split and
/// the set's slots zeroed (what a reader could see of it before the next thread's tid), then its
/// index entry.
#[inline(always)]
fn free_slot(state: &mut CpuState, totals: &mut ThreadTotals, tid: u32, slot: u32) {
    // SAFETY: a field of the thread's own slot.
    unsafe { core::ptr::write_volatile(&mut totals.header.tid, 0) };
    totals.header = ThreadTotals::new(0, 0).header;
    totals.behind = WaitBehind::ZERO;
    zero_set_slots(&mut totals.charged);
    if let Some(index) = THREAD_SLOTS.get_ptr_mut(tid) {
        // SAFETY: this thread's own index entry; only the CPU running it writes it.
        unsafe { core::ptr::write_volatile(index, 0) };
    }
    // A second try, as in `take_slot`; a slot that still cannot go back is lost to the map
    // (counted as a full map: the map holds one thread fewer from now on).
    if FREE_SLOTS.push(&slot, 0).is_err() && FREE_SLOTS.push(&slot, 0).is_err() {
        count_in(state, Stat::ThreadMapFull);
    }
}

/// The slot of live thread `tid` in [`THREADS`] and its totals; `None` when it has none.
#[inline(always)]
fn slot_of(tid: u32) -> Option<(u32, *mut ThreadTotals)> {
    // SAFETY: an entry of the tid index, a u32.
    let slot = unsafe { core::ptr::read_volatile(THREAD_SLOTS.get_ptr(tid)?) }.checked_sub(1)?;
    Some((slot, THREADS.get_ptr_mut(slot)?))
}

/// A thread called exec (`task`, the current thread): its name changes now, not at its next
/// tick.
#[inline(always)]
pub fn on_exec(task: Task) {
    let tid = bpf_get_current_pid_tgid() as u32;
    if let Some((_, totals)) = slot_of(tid) {
        // SAFETY: the current thread's own slot; it is running here, so no charge races.
        unsafe { (*totals).header.comm = task.comm() };
    }
}

/// Puts the thread of `totals` (in slot `slot` of `THREADS`) on the [`CHARGED`] list, unless it
/// is already on it in this epoch. A full list is counted and the thread stays unstamped.
#[inline(always)]
fn list(state: &mut CpuState, totals: &mut ThreadTotals, slot: u32) {
    let Some(epoch) = LIST_EPOCH.get_ptr(0) else {
        return;
    };
    // SAFETY: the map's one value, a u64 userspace writes whole.
    let epoch = unsafe { core::ptr::read_volatile(epoch) };
    if totals.listed_epoch == epoch {
        return;
    }
    let listed = ListedThread {
        tid: totals.header.tid,
        epoch: epoch as u32,
        slot,
    };
    if CHARGED.output(&listed, u64::from(BPF_RB_NO_WAKEUP)).is_ok() {
        totals.listed_epoch = epoch;
    } else {
        count_in(state, Stat::ChargedListFull);
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
    let waiting = THREAD_RECORDS.query(u64::from(BPF_RB_AVAIL_DATA));
    let flags = if waiting >= RECORDS_WAKE_AT {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    if THREAD_RECORDS.output(bytes, u64::from(flags)).is_err() {
        count_in(state, Stat::RecordRingFull);
    }
}

/// The totals `task` is charged to, and its slot in `THREADS` (`None`: this CPU's scratch
/// space): its slot there (taken on first sight, with its cgroup), or scratch: for a thread
/// whose first charge is its last (it lived one slice: no slot is taken only to be given back),
/// or when no slot is free or its tid is beyond the index (the loss is counted). A thread at its
/// exit that never switched out before and started running after this CPU's latest tick was
/// never charged, so it has no slot: the lookup is skipped.
#[inline(always)]
fn totals_of(
    state: &mut CpuState,
    task: impl TaskFields,
    tid: u32,
    clocks: &Clocks,
    now: u64,
    end: SliceEnd,
) -> Option<(*mut ThreadTotals, Option<u32>)> {
    // Its one slice started where its runtime began: every tick charge in it has a later clock.
    let never_charged = end == SliceEnd::Exit
        && task.switches_out() == 1
        && state.tick_ns < clocks.run_end.saturating_sub(clocks.runtime);
    if !never_charged && let Some((slot, totals)) = slot_of(tid) {
        return Some((totals, Some(slot)));
    }
    let tgid = task.tgid();
    let scratch = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU scratch slot, not shared with another program run.
    unsafe {
        // Only the set's slots: zeroing all `MAX_COUNTERS` cost a short thread's one switch
        // more than the rest of its accounting (records and snapshots carry only the set's).
        (*scratch).header = ThreadTotals::new(tid, tgid).header;
        (*scratch).behind = WaitBehind::ZERO;
        (*scratch).runtime_ns = 0;
        (*scratch).run_delay_ns = 0;
        (*scratch).listed_epoch = 0;
        (*scratch).nivcsw = 0;
        zero_set_slots(&mut (*scratch).charged);
        (*scratch).header.born_ns = now;
        // The count first: a move completing after it is seen at the next charge.
        (*scratch).cgroup_moves = cgroup_moves::moves();
        (*scratch).header.cgroup_id = bpf_get_current_cgroup_id();
        if follow::is_followed(tgid) {
            (*scratch).header.flags = ThreadHeader::FLAG_FOLLOWED;
        }
    }
    if end == SliceEnd::Exit {
        return Some((scratch, None));
    }
    // SAFETY: as above.
    match take_slot(state, tid, unsafe { &mut *scratch }) {
        Some((slot, totals)) => Some((totals, Some(slot))),
        None => {
            count_in(state, Stat::ThreadMapFull);
            Some((scratch, None))
        }
    }
}

/// Takes a free slot of `THREADS` for thread `tid` and copies `first` (its totals before its
/// first charge, `tid` in them) into it; `None` when its tid is beyond the index or no slot is
/// free. The slot's tid is written last, so a whole read that sees it sees the rest (on x86;
/// see `collect::mapped` in the loader).
#[inline(always)]
fn take_slot(
    state: &mut CpuState,
    tid: u32,
    first: &mut ThreadTotals,
) -> Option<(u32, *mut ThreadTotals)> {
    // The index entry is found before a slot is taken: a slot taken is never given back here.
    let index = THREAD_SLOTS.get_ptr_mut(tid)?;
    // Since Linux 6.15 the stack's lock is a resilient spinlock whose slow path can give up
    // (EBUSY): under thread churn on these 2-CPU VMs about one pop in a thousand did, each a
    // thread charged to scratch (counted as a full map). A second try has taken a slot in
    // every churn run since.
    let slot = match FREE_SLOTS.pop() {
        Ok(slot) => slot?,
        Err(_) => FREE_SLOTS.pop().ok()??,
    };
    let totals = THREADS.get_ptr_mut(slot)?;
    first.header.tid = 0;
    // SAFETY: a free slot, which no program run writes (it was just taken off the stack), and
    // this thread's own index entry.
    unsafe {
        *totals = *first;
        core::ptr::write_volatile(&mut (*totals).header.tid, tid);
        core::ptr::write_volatile(index, slot + 1);
    }
    first.header.tid = tid;
    if u64::from(slot) >= state.slots_high {
        state.slots_high = u64::from(slot) + 1;
    }
    Some((slot, totals))
}

/// Zeroes the slots of the set (see [`SET_SLOTS`]); the rest are never read.
#[inline(always)]
fn zero_set_slots(readings: &mut Readings) {
    // SAFETY: a read-only global the loader sets before loading.
    let slots = unsafe { core::ptr::read_volatile(&SET_SLOTS) } as usize;
    for (i, slot) in readings.slots.iter_mut().enumerate() {
        if i >= slots {
            break;
        }
        *slot = Reading::ZERO;
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
/// that did not run during the slice charges nothing (counted); one whose count no CPU can
/// make in the time it ran charges only its enabled time, as if multiplexed out (counted).
#[inline(always)]
fn read_counters(prev: &mut Prev<'_>, cpu: u32, mut charged: Option<&mut Readings>) {
    let slots = prev.slots;
    if slots >> 1 == 0 {
        return;
    }
    prev.stats[Stat::CounterReads as usize] += 1;
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
        let mut running = now.running_nanos.wrapping_sub(last.running_ns);
        let mut count = if running > 0 {
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
            } else if !possible_count(
                count,
                running,
                // SAFETY: a read-only global the loader sets before loading.
                unsafe { core::ptr::read_volatile(&SLOT_MOST_PER_NS[i]) },
            ) {
                // Charged as if multiplexed out: scaled from the thread's other slices.
                prev.stats[Stat::CounterImpossible as usize] += 1;
                (count, running) = (0, 0);
            }
            let total = &mut charged.slots[i];
            total.count += count;
            total.enabled_ns += enabled;
            total.running_ns += running;
        }
    }
}
