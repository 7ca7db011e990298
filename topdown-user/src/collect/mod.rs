//! Loads and attaches the kernel programs, opens the per-CPU counters, and reads what the kernel
//! charged into typed [`Snapshot`]s. Nothing else in the crate touches aya.

pub mod btf;
pub mod c2c;
mod object;
pub mod perf_open;
mod snapshot;

use std::{collections::HashMap as StdHashMap, hash::Hash, time::Duration};

use anyhow::{Context as _, Result, anyhow};
use aya::{
    Btf, Ebpf, EbpfLoader, Pod,
    maps::{HashMap, MapData, PerCpuArray, PerCpuValues, PerfEventArray, RingBuf},
    programs::{
        BtfTracePoint, PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use aya_log::EbpfLogger;
pub use snapshot::{Snapshot, Stats};
use topdown_common::{
    MAX_COUNTERS,
    cgroup::{CgroupRemoved, CgroupTotals},
    stats::Stat,
    thread::ThreadTotals,
};

use self::perf_open::OpenCounters;
use crate::pmu::counter_set::CounterSet;

/// How the collector runs.
#[derive(Clone, Debug)]
pub struct CollectorOptions {
    /// Capacity of the kernel's live-thread map.
    pub max_threads: u32,
    /// Capacity of the kernel's cgroup map.
    pub max_cgroups: u32,
    /// How often the running thread's slice so far is charged on each CPU.
    pub tick: Duration,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        Self {
            max_threads: 16384,
            max_cgroups: 4096,
            tick: Duration::from_millis(10),
        }
    }
}

/// The live collector: programs attached, counters counting.
pub struct Collector {
    bpf: Ebpf,
    exits: RingBuf<MapData>,
    removed_cgroups: RingBuf<MapData>,
    /// Removed cgroups drained from their ring buffer since the last snapshot.
    pending_removed: Vec<(u64, String)>,
    /// Exit records drained from the ring buffer since the last snapshot.
    pending_exits: Vec<ThreadTotals>,
    /// Held open for as long as the kernel programs read them.
    _counters: OpenCounters,
}

impl Collector {
    /// Opens `set` on every online CPU, loads and attaches the kernel programs, and starts
    /// counting. Everything charged from now on is in the next [`Collector::snapshot`].
    pub fn start(set: &CounterSet, options: &CollectorOptions) -> Result<Self> {
        let cpus = aya::util::online_cpus()
            .map_err(|(path, error)| anyhow!("reading online CPUs from {path}: {error}"))?;
        let possible = aya::util::nr_cpus()
            .map_err(|(path, error)| anyhow!("reading possible CPUs from {path}: {error}"))?;
        let counters = OpenCounters::open(set, &cpus)?;
        let kernel_btf = btf::KernelBtf::from_sys_fs()
            .context("reading the kernel's BTF (needs CONFIG_DEBUG_INFO_BTF=y)")?;
        let offset = |ty: &str, member: &str| {
            kernel_btf.member_offset(ty, member).with_context(|| {
                format!("finding {ty}.{member} in the kernel's BTF (needs CONFIG_DEBUG_INFO_BTF=y)")
            })
        };
        let task_tgid_offset = offset("task_struct", "tgid")?;
        let cgroup_kn_offset = offset("cgroup", "kn")?;
        let kernfs_node_id_offset = offset("kernfs_node", "id")?;
        let cgroup_root_offset = offset("cgroup", "root")?;
        let hierarchy_id_offset = offset("cgroup_root", "hierarchy_id")?;

        let mut bpf = EbpfLoader::new()
            .override_global("TASK_TGID_OFFSET", &task_tgid_offset, true)
            .override_global("CGROUP_KN_OFFSET", &cgroup_kn_offset, true)
            .override_global("KERNFS_NODE_ID_OFFSET", &kernfs_node_id_offset, true)
            .override_global("CGROUP_ROOT_OFFSET", &cgroup_root_offset, true)
            .override_global("HIERARCHY_ID_OFFSET", &hierarchy_id_offset, true)
            .map_max_entries("THREADS", options.max_threads)
            .map_max_entries("CGROUPS", options.max_cgroups)
            .map_max_entries("COUNTERS", possible.get() * MAX_COUNTERS as u32)
            .load(object::bytes()?)
            .map_err(|error| explain_bpf_error(error.into()))
            .context("loading the BPF programs")?;

        let masks: Vec<u32> = (0..possible.get()).map(|cpu| set.slot_mask(cpu)).collect();
        let mut cpu_slots: PerCpuArray<_, u32> =
            PerCpuArray::try_from(map(&mut bpf, "CPU_SLOTS")?)?;
        cpu_slots
            .set(0, PerCpuValues::try_from(masks)?, 0)
            .context("setting each CPU's counter slots")?;

        let mut slots = PerfEventArray::try_from(map(&mut bpf, "COUNTERS")?)?;
        for (cpu, index, fd) in counters.iter() {
            slots
                .set(cpu * MAX_COUNTERS as u32 + index as u32, &fd)
                .with_context(|| format!("storing counter {index} of CPU {cpu}"))?;
        }

        // Load (and verify) everything first, then count, then attach: a pinned group
        // (TopDown's `slots`) that is not yet enabled makes every read fail with EBUSY, and what
        // counts between enabling and attaching (microseconds) is charged to the first thread
        // switched out on each CPU.
        let btf = Btf::from_sys_fs().context(
            "reading kernel BTF from /sys/kernel/btf/vmlinux (needs CONFIG_DEBUG_INFO_BTF=y)",
        )?;
        for name in ["sched_switch", "sched_process_fork", "cgroup_rmdir"] {
            let program: &mut BtfTracePoint = program(&mut bpf, name)?.try_into()?;
            program
                .load(name, &btf)
                .map_err(|error| explain_bpf_error(error.into()))
                .with_context(|| format!("loading the {name} program"))?;
        }
        let tick: &mut PerfEvent = program(&mut bpf, "tick")?.try_into()?;
        tick.load().context("loading the tick program")?;

        counters.enable()?;

        for name in ["sched_switch", "sched_process_fork", "cgroup_rmdir"] {
            let program: &mut BtfTracePoint = program(&mut bpf, name)?.try_into()?;
            program
                .attach()
                .with_context(|| format!("attaching to tp_btf/{name}"))?;
        }
        let tick: &mut PerfEvent = program(&mut bpf, "tick")?.try_into()?;
        let period = u64::try_from(options.tick.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        for &cpu in &cpus {
            tick.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Period(period),
                false,
            )
            .with_context(|| format!("attaching the tick program on CPU {cpu}"))?;
        }

        let exits = RingBuf::try_from(
            bpf.take_map("EXITS")
                .context("the BPF object has no EXITS map")?,
        )?;
        let removed_cgroups = RingBuf::try_from(
            bpf.take_map("CGROUPS_REMOVED")
                .context("the BPF object has no CGROUPS_REMOVED map")?,
        )?;
        Ok(Self {
            bpf,
            exits,
            removed_cgroups,
            pending_removed: Vec::new(),
            pending_exits: Vec::new(),
            _counters: counters,
        })
    }

    /// Follows process `pid`: every process it forks from now on is followed too, and their
    /// threads carry [`ThreadTotals::FLAG_FOLLOWED`].
    pub fn follow(&mut self, pid: u32) -> Result<()> {
        let mut followed: HashMap<_, u32, u8> = HashMap::try_from(map(&mut self.bpf, "FOLLOWED")?)?;
        followed
            .insert(&pid, &1, 0)
            .with_context(|| format!("following process {pid}"))
    }

    /// Stops following process `pid` (processes it forked stay followed).
    pub fn unfollow(&mut self, pid: u32) -> Result<()> {
        let mut followed: HashMap<_, u32, u8> = HashMap::try_from(map(&mut self.bpf, "FOLLOWED")?)?;
        match followed.remove(&pid) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(error) => Err(error).with_context(|| format!("unfollowing process {pid}")),
        }
    }

    /// Frees the kernel's totals of cgroups that are gone and no longer reported: the map
    /// holds live cgroups only, however long the collector runs.
    pub fn forget_cgroups(&mut self, ids: &[u64]) -> Result<()> {
        let mut cgroups: HashMap<_, u64, CgroupTotals> =
            HashMap::try_from(map(&mut self.bpf, "CGROUPS")?)?;
        for id in ids {
            match cgroups.remove(id) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                Err(error) => return Err(error).with_context(|| format!("forgetting cgroup {id}")),
            }
        }
        Ok(())
    }

    /// The logger that forwards the kernel programs' `aya-log` messages, if they have any.
    pub fn take_logger(&mut self) -> Option<EbpfLogger<&'static dyn log::Log>> {
        EbpfLogger::init(&mut self.bpf)
            .inspect_err(|error| log::debug!("no BPF logger: {error}"))
            .ok()
    }

    /// Everything charged so far: live threads, threads that died since the previous snapshot,
    /// idle per CPU, and the loss counters.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        let live = self.live_threads()?;
        self.drain_exits();
        let exited = std::mem::take(&mut self.pending_exits);
        let idle: PerCpuArray<_, ThreadTotals> =
            PerCpuArray::try_from(self.bpf.map("IDLE").context("no IDLE map")?)?;
        let idle = idle.get(&0, 0)?.iter().copied().collect();
        let cgroups = self.cgroups()?;
        Ok(Snapshot {
            at: std::time::Instant::now(),
            live,
            exited,
            idle,
            cgroups,
            removed_cgroups: std::mem::take(&mut self.pending_removed),
            stats: self.stats()?,
        })
    }

    /// Moves dead threads' and removed cgroups' records out of their ring buffers so they never
    /// fill between snapshots; they are handed out by the next [`Collector::snapshot`].
    pub fn drain_exits(&mut self) {
        while let Some(item) = self.exits.next() {
            if item.len() >= size_of::<ThreadTotals>() {
                // SAFETY: the kernel wrote a whole ThreadTotals (a Pod) into this record.
                let record = unsafe { item.as_ptr().cast::<ThreadTotals>().read_unaligned() };
                self.pending_exits.push(record);
            }
        }
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
                self.pending_removed.push((record.id, path));
            }
        }
    }

    fn cgroups(&self) -> Result<Vec<CgroupTotals>> {
        self.values_of::<u64, CgroupTotals>("CGROUPS")
    }

    fn live_threads(&self) -> Result<Vec<ThreadTotals>> {
        self.values_of::<u32, ThreadTotals>("THREADS")
    }

    /// Every value of the hash map `name`, one per key: deleting the key being visited (a
    /// thread exiting, a cgroup forgotten) restarts the kernel's walk, so keys can come twice.
    fn values_of<K: Pod + Eq + Hash, V: Pod>(&self, name: &str) -> Result<Vec<V>> {
        let map: HashMap<_, K, V> = HashMap::try_from(
            self.bpf
                .map(name)
                .with_context(|| format!("no {name} map"))?,
        )?;
        let mut by_key = StdHashMap::new();
        for entry in map.iter() {
            match entry {
                Ok((key, value)) => {
                    by_key.insert(key, value);
                }
                Err(aya::maps::MapError::KeyNotFound) => {}
                Err(error) => return Err(error).with_context(|| format!("reading the {name} map")),
            }
        }
        Ok(by_key.into_values().collect())
    }

    fn stats(&self) -> Result<Stats> {
        let stats: PerCpuArray<_, u64> =
            PerCpuArray::try_from(self.bpf.map("STATS").context("no STATS map")?)?;
        let mut out = Stats::default();
        for stat in Stat::ALL {
            let per_cpu = stats.get(&(stat as u32), 0)?;
            out.set(stat, per_cpu.iter().sum());
        }
        Ok(out)
    }
}

fn map<'a>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::maps::Map> {
    bpf.map_mut(name)
        .with_context(|| format!("the BPF object has no map {name}"))
}

fn program<'a>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut aya::programs::Program> {
    bpf.program_mut(name)
        .with_context(|| format!("the BPF object has no program {name}"))
}

/// Turns the errno behind a BPF failure into advice.
fn explain_bpf_error(error: anyhow::Error) -> anyhow::Error {
    let errno = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error);
    match errno {
        Some(libc::ENOSYS) => error.context(
            "this kernel has no bpf() system call (CONFIG_BPF_SYSCALL is off): BPF is disabled",
        ),
        Some(libc::EPERM | libc::EACCES) => error.context(
            "the kernel refused BPF: run as root (CAP_BPF and CAP_PERFMON), and check \
             kernel.unprivileged_bpf_disabled and lockdown",
        ),
        _ => error,
    }
}
