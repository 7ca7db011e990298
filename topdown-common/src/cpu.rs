//! Everything the kernel programs keep per CPU, in one map value: the switch path looks it up
//! once.

use crate::{neighbours::History, reading::Readings, stats::NR_STATS};

/// One CPU's state: read and written only by programs running on that CPU (and by the loader
/// before the programs attach), so it needs no atomics.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuState {
    /// Scheduler clock (ns: the runqueue's `clock_task`, which `se.exec_start` holds) up to
    /// which this CPU's run time is charged; 0 until its first charge, which only starts the
    /// measurement.
    pub last_ns: u64,
    /// Which counter slots this CPU reads (bit `i`: slot `i`); slot 0, the clock, is never
    /// read. Hybrid parts read their own core type's events, so a thread's P-core and E-core
    /// counts land in different slots and are never mixed.
    pub slots: u32,
    /// The thread now on this CPU as the last switch saw it (`next`'s tid), with
    /// [`CpuState::WATCHED`] set when it is watched (used when the collector is narrowed to
    /// some processes). Trusted only when its tid is the current thread's: the tracepoint
    /// reports some threads switched to and never switched out (on these VMs, the tokio workers
    /// of PID 1, a few times a second): the next switch on that CPU names another `prev`; that
    /// is counted ([`crate::stats::Stat::SwitchesUnreported`]) and the current thread is
    /// looked up.
    pub current: u32,
    /// Non-zero on a CPU the collector does not count on (`--cpus`, or one the kernel keeps
    /// apart: isolcpus, nohz_full): its switch program returns at once.
    pub skipped: u32,
    /// Padding (explicit: the value is plain old data).
    pub pad: u32,
    /// When only cgroups are reported: the cgroup (its `struct cgroup` address; 0 for the idle
    /// task, [`CpuState::NO_GROUP`] before the first switch) whose threads ran on this CPU
    /// since its counters were last read. A switch to a thread of the same cgroup leaves the
    /// counters unread: the deltas go to the next thread charged with a read, which is in the
    /// same cgroup, so every cgroup's sums stay exact.
    pub group: u64,
    /// The kernel's count of cgroup moves (see the kernel's `cgroup_moves`) when `group` was
    /// set: a move since forces a read.
    pub group_moves: u64,
    /// Scheduler clock of this CPU's latest tick charge (0 before the first): a thread that
    /// started running after it and never switched out was not ticked, so it has no map slot
    /// to look up at its exit.
    pub tick_ns: u64,
    /// One past the highest slot of the thread map this CPU took (0: none): the slots in use
    /// are below the highest of all CPUs', so a whole read scans only those.
    pub slots_high: u64,
    /// Loss and activity counters, indexed by [`crate::stats::Stat`].
    pub stats: [u64; NR_STATS as usize],
    /// Counter readings at the previous charge.
    pub prev: Readings,
    /// What this CPU's idle task (tid 0) was charged: idle is kept per CPU, never as a thread.
    pub idle: Readings,
    /// Its latest slices, for splitting a wait over whoever held the CPU during it (unused when
    /// the loader turned neighbours off).
    pub history: History,
}

impl CpuState {
    /// Set in [`CpuState::current`] when that thread is watched (tids stay below 2^22).
    pub const WATCHED: u32 = 1 << 31;

    /// [`CpuState::group`] before the CPU's first switch: no cgroup's counts are pending.
    pub const NO_GROUP: u64 = u64::MAX;

    /// A CPU that reads the slots in `slots`, not measuring yet.
    pub const fn new(slots: u32) -> Self {
        Self {
            last_ns: 0,
            slots,
            current: 0,
            skipped: 0,
            pad: 0,
            group: Self::NO_GROUP,
            group_moves: 0,
            tick_ns: 0,
            slots_high: 0,
            stats: [0; NR_STATS as usize],
            prev: Readings::ZERO,
            idle: Readings::ZERO,
            history: History::EMPTY,
        }
    }
}

#[cfg(feature = "user")]
// SAFETY: repr(C); u64s, four u32s, u64 arrays: no padding.
unsafe impl aya::Pod for CpuState {}
