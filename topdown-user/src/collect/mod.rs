//! Loads and attaches the kernel programs, opens the per-CPU counters, and reads what the kernel
//! charged into typed [`Snapshot`]s. Nothing else in the crate touches aya.

pub mod btf;
pub mod c2c;
pub mod calibration;
pub mod canary;
pub mod capacity;
pub mod cpus;
mod listing;
mod mapped;
mod object;
mod offsets;
pub mod perf_open;
mod record_stream;
mod snapshot;

use std::{os::fd::AsFd as _, time::Duration};

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuValues, PerfEventArray, RingBuf, Stack},
    programs::{
        BtfTracePoint, PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
    util::KernelVersion,
};
pub use snapshot::{Books, Snapshot, Stats, ThreadRecord};
use topdown_common::{
    MAX_COUNTERS,
    cgroup::{CgroupId, CgroupRemoved},
    cpu::CpuState,
    names::{global, map, program},
    stats::Stat,
};

use self::{perf_open::OpenCounters, record_stream::RecordStream};
use crate::pmu::counter_set::CounterSet;
use crate::prefetch;
use crate::privileges::Phase;

/// How the collector runs.
#[derive(Clone, Debug)]
pub struct CollectorOptions {
    /// Capacity of the kernel's live-thread map.
    pub max_threads: u32,
    /// How often the running thread's slice so far is charged on each CPU.
    pub tick: Duration,
    /// Charge only the threads of followed processes ([`Collector::follow`]): a switch between
    /// two other threads then costs one lookup. Idle time is not measured then.
    pub narrow: bool,
    /// Only cgroups are reported: a switch between two threads of one cgroup reads no counter
    /// (the deltas go to the next thread of that cgroup charged with a read, so cgroup sums
    /// stay exact while the threads' own counter values do not).
    pub cgroup_only: bool,
    /// Read each thread's run-queue delay at its charges (where the kernel has `sched_info`).
    /// Off by default only when [`NO_WAITS`] is in the environment: how the bench measures the
    /// switch program with and without the extra load.
    pub read_waits: bool,
    /// Read every live thread at every snapshot, not only those the kernel listed as charged
    /// since the previous one: how the bench compares the two and the tests check both. Set by
    /// default when [`READ_WHOLE`] is in the environment.
    pub read_whole: bool,
    /// Where the switch program stops early (`None`: it runs whole): only the benchmark of its
    /// parts sets it, through [`SWITCH_STOP`]; nothing after that point is charged.
    pub switch_stop: Option<u32>,
    /// Wait out the charges running when a snapshot starts a new epoch of the kernel's list
    /// (see [`listing`]), so a listed thread is read once, not again at the next snapshot. Off
    /// by default only when [`CARRY_ALL`] is in the environment: how the tests check the way
    /// hosts whose kernel refuses the wait (`nohz_full`) read.
    pub wait_out_charges: bool,
    /// Bounds that replace what some counters can count per nanosecond
    /// ([`CounterSet::slot_bounds`]: counter index and bound); empty by default. The tests
    /// give one counter a bound of 0 to see every count of it refused in the kernel.
    pub counter_bounds: Vec<(usize, u64)>,
    /// How many tids the kernel's list of charged threads holds (`None`: twice
    /// `max_threads`, which a read never overflows without churn; a list that fills makes the
    /// next snapshot read the whole map). The tests make it small to check that fallback.
    pub list_capacity: Option<u32>,
    /// The CPUs counted on (`None`: every online CPU; see [`cpus`]): counters and the tick are
    /// opened only there, and the switch program returns at once on every other CPU.
    pub cpus: Option<Vec<u32>>,
    /// Split each thread's waits over whoever held the CPU during them, and count its
    /// preemptions ([`topdown_common::neighbours`]). On by default; off with
    /// `--no-neighbours`, or when [`NO_NEIGHBOURS`] is in the environment (how the bench
    /// measures what it costs).
    pub neighbours: bool,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        Self {
            max_threads: 16384,
            tick: Duration::from_millis(10),
            narrow: false,
            cgroup_only: false,
            read_waits: std::env::var_os(NO_WAITS).is_none(),
            read_whole: std::env::var_os(READ_WHOLE).is_some(),
            wait_out_charges: std::env::var_os(CARRY_ALL).is_none(),
            counter_bounds: Vec::new(),
            list_capacity: None,
            neighbours: std::env::var_os(NO_NEIGHBOURS).is_none(),
            cpus: None,
            switch_stop: std::env::var(SWITCH_STOP)
                .ok()
                .and_then(|stage| stage.parse().ok()),
        }
    }
}

/// In the environment: the kernel does not split waits over neighbours
/// ([`CollectorOptions::neighbours`] off).
pub const NO_NEIGHBOURS: &str = "TOPDOWN_BPF_NO_NEIGHBOURS";

/// In the environment, a stage (0 to 4) where the switch program stops
/// ([`CollectorOptions::switch_stop`]): the benchmark of where its nanoseconds go.
pub const SWITCH_STOP: &str = "TOPDOWN_BPF_SWITCH_STOP";

/// Set (to anything) in the environment, every snapshot reads the whole thread map
/// ([`CollectorOptions::read_whole`]).
pub const READ_WHOLE: &str = "TOPDOWN_BPF_READ_WHOLE";

/// Set (to anything) in the environment, running charges are not waited out at a snapshot
/// ([`CollectorOptions::wait_out_charges`]): every listed tid is read again at the next one.
pub const CARRY_ALL: &str = "TOPDOWN_BPF_CARRY_ALL";

/// Bytes the kernel's ring takes per listed thread: an 8-byte record header and a
/// [`topdown_common::thread::ListedThread`], rounded up to 8 bytes.
const LISTED_TID_BYTES: u32 =
    8 + size_of::<topdown_common::thread::ListedThread>().next_multiple_of(8) as u32;

/// Bytes of the kernel's list of charged threads holding `tids` tids: a power of two and a
/// whole number of pages, as ring buffers must be.
fn charged_list_bytes(tids: u32) -> u32 {
    // SAFETY: sysconf has no preconditions.
    let page = u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(4096);
    tids.saturating_mul(LISTED_TID_BYTES)
        .checked_next_power_of_two()
        .unwrap_or(1 << 31)
        .max(page)
}

/// Set (to anything) in the environment, run-queue delay is not read
/// ([`CollectorOptions::read_waits`]): every wait is then not measured.
pub const NO_WAITS: &str = "TOPDOWN_BPF_NO_WAITS";

/// The live collector: programs attached, counters counting.
pub struct Collector {
    bpf: Ebpf,
    records: RecordStream,
    removed_cgroups: RingBuf<MapData>,
    /// Kernel slots of the counter set: the clock's and the counters'.
    nr: usize,
    /// Charging only followed processes (idle is not measured then).
    narrow: bool,
    /// The kernel side reads run-queue delay (the kernel has `sched_info`).
    waits_measured: bool,
    /// Whether the kernel side splits waits over neighbours.
    neighbours: bool,
    /// How a wait booked as a thread is moved off a CPU is charged: see
    /// [`load_migrate_program`].
    migrated_waits: MigratedWaits,
    /// Whether anything was followed: followed processes are then forgotten once freed, and
    /// the kernel programs look processes up in `FOLLOWED`.
    following: bool,
    /// Held open for as long as the kernel programs read them.
    _counters: OpenCounters,
    /// What the start-up check saw before this collector attached.
    startup_check: Option<canary::Verdict>,
    /// Which of the set's hardware events this PMU counts (see [`calibration`]).
    calibration: calibration::Calibration,
    /// The live threads' totals, mapped ([`mapped::MappedThreads`]).
    threads: mapped::MappedThreads,
    /// Which threads to read at each snapshot ([`listing::Listing`]).
    listing: listing::Listing,
}

impl Collector {
    /// Finds which of `set`'s hardware events this PMU counts ([`calibration::calibrate`]),
    /// checks the kernel side on this kernel ([`canary::check`]), then opens `set` on every
    /// online CPU, loads and attaches the kernel programs, and starts counting. Everything
    /// charged from now on is in the next [`Collector::snapshot`].
    pub fn start(set: &CounterSet, options: &CollectorOptions) -> Result<Self> {
        let calibration = calibration::calibrate(set)?;
        let verdict = canary::check(options.cpus.as_deref())?;
        if let Some(stage) = options.switch_stop {
            eprintln!(
                "topdown-bpf: {SWITCH_STOP}={stage}: the switch program stops early (a \
                 benchmark), so what it skips is not charged"
            );
        }
        let mut collector = Self::attach(set, options)?;
        collector.startup_check = Some(verdict);
        collector.calibration = calibration;
        Ok(collector)
    }

    /// How a wait booked as a thread is moved off a CPU is charged: split over that CPU's
    /// history (Linux 5.19 and later), or as unattributed.
    pub fn migrated_waits(&self) -> MigratedWaits {
        self.migrated_waits
    }

    /// What the start-up check saw (`None` for the check's own collector).
    pub fn startup_check(&self) -> Option<canary::Verdict> {
        self.startup_check
    }

    /// Which of the set's hardware events this PMU counts, as the calibration at start found.
    pub fn calibration(&self) -> &calibration::Calibration {
        &self.calibration
    }

    /// [`Collector::start`] without the start-up check.
    fn attach(set: &CounterSet, options: &CollectorOptions) -> Result<Self> {
        check_floor()?;
        let cpus = match &options.cpus {
            Some(cpus) => cpus.clone(),
            None => online_cpus()?,
        };
        let possible = aya::util::nr_cpus()
            .map_err(|(path, error)| anyhow!("reading possible CPUs from {path}: {error}"))?;
        let counters = OpenCounters::open(set, &cpus)?;
        let kernel_btf = btf::KernelBtf::from_sys_fs()
            .context("reading the kernel's BTF (needs CONFIG_DEBUG_INFO_BTF=y)")?;
        let offsets = offsets::KernelOffsets::find(&kernel_btf, options.read_waits)?;

        let mut bpf = load_object(set, options, &offsets, possible.get())?;
        store_counters(&mut bpf, &counters)?;

        // Load (and verify) everything first, then count, then attach: a pinned group
        // (TopDown's `slots`) that is not yet enabled makes every read fail with EBUSY, and what
        // counts between enabling and attaching (microseconds) is charged to the first thread
        // switched out on each CPU.
        let btf = Btf::from_sys_fs().context(
            "reading kernel BTF from /sys/kernel/btf/vmlinux (needs CONFIG_DEBUG_INFO_BTF=y)",
        )?;
        for name in PROGRAMS.into_iter().chain([FORGET_PROGRAM]) {
            let program: &mut BtfTracePoint = program(&mut bpf, name)?.try_into()?;
            program
                .load(name, &btf)
                .map_err(|error| explain_bpf_error(error.into()))
                .with_context(|| format!("loading the {name} program"))?;
        }
        let (migrate, migrated_waits) = load_migrate_program(&mut bpf, &btf, offsets.run_queue())?;
        let tick: &mut PerfEvent = program(&mut bpf, program::TICK)?.try_into()?;
        tick.load()
            .map_err(|error| explain_bpf_error(error.into()))
            .context("loading the tick program")?;

        counters.enable()?;
        // Each CPU starts measuring at its first switch or tick (the scheduler's clock, which
        // the kernel programs charge, cannot be read from here).
        let states: Vec<CpuState> = (0..possible.get())
            .map(|cpu| CpuState {
                skipped: u32::from(!cpus.contains(&cpu)),
                ..CpuState::new(set.slot_mask(cpu))
            })
            .collect();
        let mut cpu_state: PerCpuArray<_, CpuState> =
            PerCpuArray::try_from(map(&mut bpf, map::CPU_STATE)?)?;
        cpu_state
            .set(0, PerCpuValues::try_from(states)?, 0)
            .context("setting each CPU's counter slots")?;
        let listing =
            listing::Listing::start(&mut bpf, options.read_whole, options.wait_out_charges)?;
        let threads = map_threads(
            &mut bpf,
            options.max_threads,
            options.neighbours && offsets.waits(),
        )?;

        attach_programs(&mut bpf, options, &cpus, migrate)?;

        let nr = set.kernel_slots();
        let records = RecordStream::start(
            RingBuf::try_from(
                bpf.take_map(map::THREAD_RECORDS)
                    .context("the BPF object has no THREAD_RECORDS map")?,
            )?,
            nr,
        )?;
        let removed_cgroups = RingBuf::try_from(
            bpf.take_map(map::CGROUPS_REMOVED)
                .context("the BPF object has no CGROUPS_REMOVED map")?,
        )?;
        Ok(Self {
            bpf,
            records,
            removed_cgroups,
            nr,
            narrow: options.narrow,
            waits_measured: offsets.waits(),
            neighbours: options.neighbours && offsets.waits(),
            migrated_waits,
            following: false,
            _counters: counters,
            startup_check: None,
            calibration: calibration::Calibration::default(),
            threads,
            listing,
        })
    }

    /// The first time something is followed: attaches the program that forgets followed
    /// processes once freed, and tells the kernel programs to look processes up in `FOLLOWED`
    /// (they skip it until then).
    fn start_following(&mut self) -> Result<()> {
        if !self.following {
            let program: &mut BtfTracePoint = program(&mut self.bpf, FORGET_PROGRAM)?.try_into()?;
            program
                .attach()
                .with_context(|| format!("attaching to tp_btf/{FORGET_PROGRAM}"))?;
            let mut following: Array<_, u32> =
                Array::try_from(map(&mut self.bpf, map::FOLLOWING)?)?;
            following
                .set(0, &1, 0)
                .context("turning following on in the kernel")?;
            self.following = true;
        }
        Ok(())
    }

    /// Follows process `pid`: every process it forks from now on is followed too, and their
    /// threads carry `ThreadHeader::FLAG_FOLLOWED`. On a narrowed collector, only followed
    /// processes are charged.
    pub fn follow(&mut self, pid: u32) -> Result<()> {
        self.start_following()?;
        let mut followed: HashMap<_, u32, u8> =
            HashMap::try_from(map(&mut self.bpf, map::FOLLOWED)?)?;
        followed
            .insert(&pid, &1, 0)
            .with_context(|| format!("following process {pid}"))
    }

    /// Runs `spawn` (which starts a process from this thread) with this thread's forks followed:
    /// the process is followed from its first instruction, and none of our own threads is.
    pub fn spawn_followed<T>(&mut self, spawn: impl FnOnce() -> T) -> Result<T> {
        self.start_following()?;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let mut spawner: Array<_, u32> = Array::try_from(map(&mut self.bpf, map::SPAWNER)?)?;
        spawner
            .set(0, &tid, 0)
            .context("following the command we start")?;
        let spawned = spawn();
        spawner
            .set(0, &0, 0)
            .context("following the command we start")?;
        Ok(spawned)
    }

    /// Has the collector's own thread (draining thread records) give up its capabilities:
    /// nothing it does after setup needs one.
    pub fn drop_privileges(&self, phase: Phase) -> Result<()> {
        self.records.drop_privileges(phase)
    }

    /// Everything charged so far: the live threads charged since the previous snapshot (or
    /// every live thread, see [`Snapshot::live_complete`]), the records the kernel sent since
    /// the previous snapshot, idle per CPU, and the loss counters. The map is read before the
    /// records are taken, so a thread missing from the map has its final record here (unless it
    /// was lost, which is counted), and a record may be newer than the thread's map value.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let listed = self.listing.advance(&mut self.bpf)?;
        let states = self.cpu_states()?;
        let whole = self.listing.must_read_whole(&sum_stats(&states));
        let listed_high = listed
            .iter()
            .map(|thread| thread.slot.saturating_add(1))
            .max();
        let high = slots_high(&states).max(listed_high.unwrap_or(0));
        self.threads
            .cover(high)
            .context("mapping more of the kernel's thread map")?;
        // Memory holds a record of the set's slots per thread, not the kernel's whole value
        // (every slot a set may have).
        let mut live = Vec::with_capacity(if whole { high as usize } else { listed.len() });
        let mut live_splits = Vec::with_capacity(if self.neighbours { live.capacity() } else { 0 });
        if whole {
            self.threads
                .each(high, self.nr, &mut live_splits, |record| live.push(record));
        } else {
            // A thread gone since it was listed exited: its final record is in `records`.
            // The slots of the threads that ran are spread over the map: each is asked for
            // a few threads ahead of its copy (`crate::prefetch`).
            for (i, thread) in listed.iter().enumerate() {
                if let Some(ahead) = listed.get(i + prefetch::AHEAD) {
                    self.threads.prefetch(ahead.slot, self.nr);
                }
                if let Some(record) =
                    self.threads
                        .get(thread.slot, thread.tid, self.nr, &mut live_splits)
                {
                    live.push(record);
                }
            }
        }
        let (records, mut record_splits) = self.records.take();
        if !self.neighbours {
            record_splits.clear();
        }
        let states = self.cpu_states()?;
        let idle = if self.narrow {
            Vec::new()
        } else {
            states
                .iter()
                .map(|state| Duration::from_nanos(state.idle.slots[CounterSet::CLOCK_SLOT].count))
                .collect::<Vec<Duration>>()
        };
        Ok(Snapshot {
            at: std::time::Instant::now(),
            live,
            live_splits,
            live_complete: whole,
            records,
            record_splits,
            idle,
            removed_cgroups: self.removed_cgroups(),
            stats: sum_stats(&states),
            waits_measured: self.waits_measured,
            neighbours_measured: self.neighbours,
        })
    }

    /// Every CPU's state as the kernel holds it now.
    fn cpu_states(&self) -> Result<PerCpuValues<CpuState>> {
        let states: PerCpuArray<_, CpuState> =
            PerCpuArray::try_from(self.bpf.map(map::CPU_STATE).context("no CPU_STATE map")?)?;
        states.get(&0, 0).context("reading each CPU's state")
    }

    /// Waits until every thread of the processes `ended` (which have exited: reaped, or their
    /// pidfd readable) has switched out for the last time, so its final record is in the next
    /// snapshot; at most `limit`. A process is reported exited once its last thread has passed
    /// `exit_notify()`, just before that thread's final switch (`do_task_dead()`): the parent
    /// may run in between, and on one CPU it does. Returns how many threads had still not
    /// switched out at the limit (they stay live in the report, their counts complete but for
    /// that last slice).
    pub async fn await_final_switches(&mut self, ended: &[u32], limit: Duration) -> Result<usize> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let high = slots_high(&self.cpu_states()?);
            self.threads
                .cover(high)
                .context("mapping more of the kernel's thread map")?;
            let left = self
                .threads
                .tids(high)
                .filter(|(_, tgid)| ended.contains(tgid))
                .count();
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return Ok(left);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The header and the set's slots of live thread `tid` as the kernel holds them now
    /// (`None`: it has no slot).
    pub fn thread(&mut self, tid: u32) -> Result<Option<ThreadRecord>> {
        let index: Array<_, u32> = Array::try_from(
            self.bpf
                .map(map::THREAD_SLOTS)
                .context("no THREAD_SLOTS map")?,
        )?;
        let slot = match index.get(&tid, 0) {
            Ok(slot) => slot,
            Err(aya::maps::MapError::OutOfBounds { .. }) => 0,
            Err(error) => return Err(error).context("reading the THREAD_SLOTS map"),
        };
        let Some(slot) = slot.checked_sub(1) else {
            return Ok(None);
        };
        self.threads
            .cover(slot.saturating_add(1))
            .context("mapping more of the kernel's thread map")?;
        // Its split (where splits are read) is not wanted here: dropped with the vector.
        Ok(self.threads.get(slot, tid, self.nr, &mut Vec::new()))
    }

    /// Ids and paths of the cgroups removed since the previous call.
    fn removed_cgroups(&mut self) -> Vec<(CgroupId, String)> {
        let mut removed = Vec::new();
        while let Some(item) = self.removed_cgroups.next() {
            if item.len() >= size_of::<CgroupRemoved>() {
                // SAFETY: the kernel wrote a whole CgroupRemoved (a Pod) into this record.
                let record = unsafe { item.as_ptr().cast::<CgroupRemoved>().read_unaligned() };
                let end = record
                    .path
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(record.path.len());
                let path = String::from_utf8_lossy(&record.path[..end]).into_owned();
                removed.push((CgroupId(record.id), path));
            }
        }
        removed
    }
}

/// One past the highest slot of the thread map any CPU took: every live thread's slot is below.
fn slots_high(states: &[CpuState]) -> u32 {
    let high = states.iter().map(|state| state.slots_high).max();
    u32::try_from(high.unwrap_or(0)).unwrap_or(u32::MAX)
}

/// Fills the kernel's stack of free slots of the thread map (`max_threads` of them, slot 0 on
/// top) and maps the map's slots read-only, reading threads' splits where `split` (the kernel
/// splits waits). Before the programs attach.
fn map_threads(bpf: &mut Ebpf, max_threads: u32, split: bool) -> Result<mapped::MappedThreads> {
    let mut free: Stack<_, u32> = Stack::try_from(map(bpf, map::FREE_SLOTS)?)?;
    for slot in (0..max_threads).rev() {
        free.push(&slot, 0)
            .context("filling the kernel's list of free thread slots")?;
    }
    let threads = bpf.map(map::THREADS).context("no THREADS map")?;
    let aya::maps::Map::Array(data) = threads else {
        bail!("the BPF object's THREADS map is not an array");
    };
    mapped::MappedThreads::map(data.fd().as_fd(), max_threads, split).context(
        "mapping the kernel's thread map (needs Linux 5.5 or newer: memory-mapped BPF arrays)",
    )
}

/// Each stat summed over CPUs.
fn sum_stats(states: &[CpuState]) -> Stats {
    let mut stats = Stats::default();
    for stat in Stat::ALL {
        stats.set(
            stat,
            states.iter().map(|state| state.stats[stat as usize]).sum(),
        );
    }
    stats
}

/// The tracepoint programs, in the order they are loaded and attached: moves are counted
/// before the switch program relies on the count.
const PROGRAMS: [&str; 5] = [
    program::CGROUP_ATTACH_TASK,
    program::SCHED_SWITCH,
    program::SCHED_PROCESS_FORK,
    program::SCHED_PROCESS_EXEC,
    program::CGROUP_RMDIR,
];

/// The program that forgets followed processes once they are freed: loaded with the others,
/// attached only when something is followed (it runs at every task's free).
const FORGET_PROGRAM: &str = program::SCHED_PROCESS_FREE;

/// The tracepoint of the programs that charge a migrated thread's wait on the CPU it left
/// (attached only when waits are split over neighbours).
const MIGRATE_TRACEPOINT: &str = "sched_migrate_task";

/// The kernel from which a program can read another CPU's per-CPU state
/// (`bpf_map_lookup_percpu_elem`).
const PERCPU_LOOKUP_KERNEL: KernelVersion = KernelVersion::new(5, 19, 0);

/// How a wait the kernel books as it moves a queued thread off a CPU is charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigratedWaits {
    /// Split over the history of the CPU the thread left.
    Split,
    /// Charged as unattributed (`migrated_ns`), and why.
    Unattributed(&'static str),
}

impl MigratedWaits {
    /// One line for `check`.
    pub fn line(self) -> String {
        match self {
            Self::Split => "waits of threads moved to another CPU: split over the CPU they \
                            left"
                .to_owned(),
            Self::Unattributed(why) => {
                format!("waits of threads moved to another CPU: unattributed ({why})")
            }
        }
    }
}

/// Loads the program that charges a migrated thread's wait on the CPU it left, and says how it
/// charges: the one that splits it over that CPU's history where the kernel can read another
/// CPU's state (5.19) and its BTF has the run queue's fields (`run_queue`), else (or where the
/// kernel refuses it) the one that charges it as unattributed.
fn load_migrate_program(
    bpf: &mut Ebpf,
    btf: &Btf,
    run_queue: bool,
) -> Result<(&'static str, MigratedWaits)> {
    let why = if !run_queue {
        "the kernel's BTF has no cfs_rq.rq: CONFIG_FAIR_GROUP_SCHED is off"
    } else if !KernelVersion::current().is_ok_and(|v| v >= PERCPU_LOOKUP_KERNEL) {
        "a program reads another CPU's state from Linux 5.19"
    } else {
        let program: &mut BtfTracePoint =
            program(bpf, program::SCHED_MIGRATE_TASK_SPLIT)?.try_into()?;
        match program.load(MIGRATE_TRACEPOINT, btf) {
            Ok(()) => return Ok((program::SCHED_MIGRATE_TASK_SPLIT, MigratedWaits::Split)),
            Err(_) => "this kernel refused the program that splits them",
        }
    };
    let name = program::SCHED_MIGRATE_TASK;
    let program: &mut BtfTracePoint = program(bpf, name)?.try_into()?;
    program
        .load(MIGRATE_TRACEPOINT, btf)
        .map_err(|error| explain_bpf_error(error.into()))
        .with_context(|| format!("loading the {name} program"))?;
    Ok((name, MigratedWaits::Unattributed(why)))
}

/// Loads the BPF object for `set` and `options`, the kernel's `offsets` and the possible CPUs'
/// count in its globals, its maps sized; no program loaded yet.
fn load_object(
    set: &CounterSet,
    options: &CollectorOptions,
    offsets: &offsets::KernelOffsets,
    possible: u32,
) -> Result<Ebpf> {
    let set_slots = set.kernel_slots() as u32;
    let slot_most_per_ns = set.slot_bounds(&options.counter_bounds);
    let switch_stop = options.switch_stop.unwrap_or(u32::MAX);
    let narrow = u32::from(options.narrow);
    let cgroup_only = u32::from(options.cgroup_only);
    let neighbours = u32::from(options.neighbours);
    let mut loader = EbpfLoader::new();
    offsets.apply(&mut loader);
    loader
        .override_global(global::NEIGHBOURS, &neighbours, true)
        .override_global(global::SET_SLOTS, &set_slots, true)
        .override_global(global::SLOT_MOST_PER_NS, &slot_most_per_ns, true)
        .override_global(global::SWITCH_STOP, &switch_stop, true)
        .override_global(global::NARROW, &narrow, true)
        .override_global(global::CGROUP_ONLY, &cgroup_only, true)
        .map_max_entries(map::THREADS, options.max_threads)
        .map_max_entries(map::FREE_SLOTS, options.max_threads)
        .map_max_entries(map::THREAD_SLOTS, capacity::tid_index_size())
        .map_max_entries(
            map::CHARGED,
            charged_list_bytes(
                options
                    .list_capacity
                    .unwrap_or(options.max_threads.saturating_mul(2)),
            ),
        )
        .map_max_entries(map::COUNTERS, possible * MAX_COUNTERS as u32)
        .load(object::bytes()?)
        .map_err(|error| explain_bpf_error(error.into()))
        .context("loading the BPF programs")
}

/// Stores each CPU's counters where the switch programs read them.
fn store_counters(bpf: &mut Ebpf, counters: &OpenCounters) -> Result<()> {
    let mut slots = PerfEventArray::try_from(map(bpf, map::COUNTERS)?)?;
    for (cpu, index, fd) in counters.iter() {
        slots
            .set(
                cpu * MAX_COUNTERS as u32 + CounterSet::kernel_slot(index) as u32,
                &fd,
            )
            .with_context(|| format!("storing counter {index} of CPU {cpu}"))?;
    }
    Ok(())
}

/// Attaches the loaded programs: the switch and task programs, the migration program `migrate`
/// where waits are split over neighbours, and the tick on each of `cpus`.
fn attach_programs(
    bpf: &mut Ebpf,
    options: &CollectorOptions,
    cpus: &[u32],
    migrate: &'static str,
) -> Result<()> {
    let migrations = options.neighbours.then_some(migrate);
    for name in PROGRAMS.into_iter().chain(migrations) {
        let program: &mut BtfTracePoint = program(bpf, name)?.try_into()?;
        program
            .attach()
            .with_context(|| format!("attaching to tp_btf/{name}"))?;
    }
    let tick: &mut PerfEvent = program(bpf, program::TICK)?.try_into()?;
    let period = u64::try_from(options.tick.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    for &cpu in cpus {
        tick.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Period(period),
            false,
        )
        .with_context(|| format!("attaching the tick program on CPU {cpu}"))?;
    }
    Ok(())
}

/// The CPUs online now, as the kernel lists them.
pub fn online_cpus() -> Result<Vec<u32>> {
    aya::util::online_cpus()
        .map_err(|(path, error)| anyhow!("reading online CPUs from {path}: {error}"))
}

fn map<'a>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::maps::Map> {
    bpf.map_mut(name)
        .with_context(|| format!("the BPF object has no map {name}"))
}

fn program<'a>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::programs::Program> {
    bpf.program_mut(name)
        .with_context(|| format!("the BPF object has no program {name}"))
}

/// The oldest kernel the programs are written for, and what it brings that they need.
pub const FLOOR: &str = "5.10";

/// Refuses, in one line naming the release and what it lacks, a kernel below the floor: by
/// what it has, never by its version string (distributions backport). BTF in
/// `/sys/kernel/btf/vmlinux` (`tp_btf` programs and the field offsets) and BPF ring buffers
/// (5.8) are probed; the rest of what 5.10 has is what the verifier then checks.
pub fn check_floor() -> Result<()> {
    crate::preflight::host_pids()?;
    let release = canary::kernel_release();
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!(
            "Linux {release} has no kernel BTF (/sys/kernel/btf/vmlinux: CONFIG_DEBUG_INFO_BTF, \
             which tp_btf programs need): topdown-bpf needs Linux {FLOOR} or newer built with BTF"
        );
    }
    match aya::sys::is_map_supported(aya::maps::MapType::RingBuf) {
        Ok(true) => Ok(()),
        Ok(false) => bail!(
            "Linux {release} lacks BPF ring buffers (5.8): topdown-bpf needs Linux {FLOOR} or newer"
        ),
        // Probing needs the same privileges as loading: the load says what is wrong.
        Err(_) => Ok(()),
    }
}

/// Turns a BPF failure into one line that says what to do: the verifier's first meaningful line
/// with the program's name and the kernel's release when the kernel refused a program (root,
/// with the verifier's log in hand, has no privilege problem), and privilege advice only to
/// those without root.
pub(crate) fn explain_bpf_error(error: anyhow::Error) -> anyhow::Error {
    let log =
        error.chain().find_map(
            |cause| match cause.downcast_ref::<aya::programs::ProgramError>() {
                Some(aya::programs::ProgramError::LoadError { verifier_log, .. }) => {
                    Some(verifier_log.to_string())
                }
                _ => None,
            },
        );
    if let Some(log) = log
        && let Some(line) = verifier_reason(&log)
    {
        // One line, not aya's error with the whole log in it; `-v` shows the log.
        log::info!("the verifier's log:\n{log}");
        return anyhow!(
            "the kernel's verifier refused it on Linux {}: {line} (`-v` shows its whole log)",
            canary::kernel_release()
        );
    }
    let errno = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    match errno {
        Some(libc::ENOSYS) => error.context(
            "this kernel has no bpf() system call (CONFIG_BPF_SYSCALL is off): BPF is disabled",
        ),
        Some(libc::EPERM | libc::EACCES) if !root => error.context(
            "the kernel refused BPF: run as root (CAP_BPF and CAP_PERFMON), and check \
             kernel.unprivileged_bpf_disabled and lockdown",
        ),
        Some(libc::EPERM | libc::EACCES) => error.context(format!(
            "Linux {} refused BPF to root: check lockdown (/sys/kernel/security/lockdown) \
             and the capabilities this process holds",
            canary::kernel_release()
        )),
        _ => error,
    }
}

/// The verifier's first meaningful line in `log`: not an instruction, register state, source
/// line or statistic, the line that says why.
pub fn verifier_reason(log: &str) -> Option<String> {
    let noise = |line: &str| {
        let starts_with_number = line
            .split_once(':')
            .is_some_and(|(head, _)| !head.is_empty() && head.chars().all(|c| c.is_ascii_digit()));
        starts_with_number
            || line.starts_with("; ")
            || line.starts_with("R0")
            || (line.starts_with('R') && line.chars().nth(1).is_some_and(|c| c.is_ascii_digit()))
            || line.starts_with("from ")
            || line.starts_with("processed ")
            || line.starts_with("verification time")
            || line.starts_with("stack depth")
            || line.starts_with("last_idx")
            || line.starts_with("regs=")
            || line.starts_with("parent ")
            || line.starts_with("func#")
            || line.starts_with("reg type unsupported")
            || line.starts_with("Validating ")
            || line.starts_with("mark_precise")
            || line.contains(" has btf_id ")
    };
    log.lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !noise(line))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::verifier_reason;

    #[test]
    fn the_verifier_s_reason_is_found_among_its_instruction_dump() {
        // Linux 5.10's log for a program that read `tp_btf/sched_switch`'s 4th argument (the
        // issue that found it quoted its first line).
        let log = "func 'sched_switch' arg1 has btf_id 136 type STRUCT 'task_struct'\n\
                   0: (79) r7 = *(u64 *)(r1 +16)\n\
                   ; let next = Task::from_arg(ctx.arg(2));\n\
                   R1 type=ctx expected=fp\n\
                   func 'sched_switch' doesn't have 4-th argument\n\
                   invalid bpf_context access off=24 size=8\n\
                   processed 43 insns (limit 1000000) max_states_per_insn 0 total_states 2\n";
        assert_eq!(
            verifier_reason(log).as_deref(),
            Some("func 'sched_switch' doesn't have 4-th argument")
        );
        let log = "0: (b7) r0 = 0\n1: (95) exit\nR0 !read_ok\nprocessed 2 insns\n";
        assert_eq!(
            verifier_reason(log),
            None,
            "nothing but dump and statistics"
        );
        assert_eq!(
            verifier_reason("12: (61) r2 = *(u32 *)(r1 +0)\ninvalid mem access 'scalar'\n"),
            Some("invalid mem access 'scalar'".to_owned())
        );
    }
}
