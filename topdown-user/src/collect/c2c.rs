//! The c2c filter's loader: BTF offsets and latency threshold in, per-class counts, losses and
//! forwarded samples out.

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
    time::Duration,
};

use anyhow::{Context as _, Result};
use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, PerCpuArray, RingBuf},
    programs::PerfEvent,
};
use perf_event_open_sys::{bindings, ioctls};
use topdown_common::{
    c2c::{C2cRecord, C2cStats, counter},
    names::{global, map, program},
};

use super::{btf::KernelBtf, object};
use crate::{
    perf_file::contents::SAMPLE_TYPE,
    pmu::memory_events::{self, MemoryEvent, Rate},
};

/// Opens one sampling event on `cpu` (every process), disabled, in `leader`'s group if any.
fn open_sampling(event: &MemoryEvent, cpu: u32, leader: Option<RawFd>) -> Result<OwnedFd> {
    let mut attr = bindings::perf_event_attr {
        size: size_of::<bindings::perf_event_attr>() as u32,
        type_: event.pmu_type,
        config: event.config,
        sample_type: u64::from(SAMPLE_TYPE),
        ..Default::default()
    };
    attr.__bindgen_anon_3.config1 = event.config1;
    if event.samples {
        match event.rate {
            Rate::Frequency(hz) => {
                attr.set_freq(1);
                attr.__bindgen_anon_1.sample_freq = hz;
            }
            Rate::Period(period) => attr.__bindgen_anon_1.sample_period = period,
        }
    }
    attr.set_precise_ip(u64::from(event.precise_ip));
    attr.set_disabled(1);
    // SAFETY: attr is a valid perf_event_attr of the size it declares.
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(
            &mut attr,
            -1,
            cpu as i32,
            leader.unwrap_or(-1),
            libc::c_ulong::from(bindings::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error()).context("perf_event_open");
    }
    // SAFETY: a descriptor perf_event_open just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What the filter counted so far, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct C2cCounts {
    /// Every sample, classified as perf c2c classifies it.
    pub stats: C2cStats,
    /// Samples forwarded to userspace.
    pub forwarded: u64,
    /// Loss: samples to forward dropped because the ring buffer was full.
    pub ring_full: u64,
    /// Loss: samples whose fields could not be read.
    pub read_errors: u64,
    /// Stores not forwarded because their line had no HITM yet (`--stores contended`).
    pub stores_skipped: u64,
    /// Contended lines that could not be remembered (`--stores contended`: the line map was
    /// full, so later stores to them may have been skipped).
    pub line_map_full: u64,
}

/// The c2c filter, loaded and attached to every CPU's sampling events.
pub struct C2cCollector {
    bpf: Ebpf,
    samples: RingBuf<MapData>,
    /// Held open for as long as the filter runs on them.
    _events: Vec<OwnedFd>,
}

impl C2cCollector {
    /// Opens `events` on every online CPU, with the fields c2c needs in each sample, and runs
    /// the filter on every sample (`PERF_EVENT_IOC_SET_BPF`); loads under `ldlat` cycles are
    /// counted but not forwarded, and with `stores_contended` so are stores to lines not yet
    /// seen with a contended load.
    pub fn start(
        events: &[MemoryEvent],
        ldlat: u64,
        ring_bytes: u32,
        stores_contended: bool,
    ) -> Result<Self> {
        let mut bpf = load(ldlat, ring_bytes, stores_contended)?;
        let cpus = super::online_cpus()?;
        let program = load_filter(&mut bpf)?;
        let program_fd = program.fd()?.as_fd().as_raw_fd();
        let mut open: Vec<OwnedFd> = Vec::new();
        for &cpu in &cpus {
            let first = open.len();
            for event in events {
                let leader = event.leader.map(|i| open[first + i].as_raw_fd());
                let fd = open_sampling(event, cpu, leader)
                    .with_context(|| format!("opening {} on CPU {cpu}", event.name))?;
                if event.samples {
                    // SAFETY: both descriptors are open; the kernel checks the program type.
                    if unsafe { ioctls::SET_BPF(fd.as_raw_fd(), program_fd as u32) } < 0 {
                        return Err(io::Error::last_os_error()).with_context(|| {
                            format!("attaching the c2c filter to {} on CPU {cpu}", event.name)
                        });
                    }
                }
                open.push(fd);
            }
        }
        for fd in &open {
            // SAFETY: an open perf event descriptor; enabling a member is harmless.
            if unsafe { ioctls::ENABLE(fd.as_raw_fd(), 0) } < 0 {
                return Err(io::Error::last_os_error()).context("enabling the sampling events");
            }
        }
        let samples = RingBuf::try_from(
            bpf.take_map(map::C2C_SAMPLES)
                .context("the BPF object has no C2C_SAMPLES map")?,
        )?;
        Ok(Self {
            bpf,
            samples,
            _events: open,
        })
    }

    /// Loads the filter into the kernel (the verifier checks it) without attaching it: what
    /// `topdown-bpf check` says of c2c on a machine that may have no memory sampling.
    pub fn verify() -> Result<()> {
        load_filter(&mut load(30, 4096, false)?).map(drop)
    }

    /// Attaches the filter to a `cpu-clock` sampling event every `period` on each online CPU:
    /// the software stand-in for memory sampling on machines without it. Samples carry no
    /// data_src, so every one is counted as unparsable and none is forwarded.
    pub fn start_on_cpu_clock(period: Duration, ldlat: u64, ring_bytes: u32) -> Result<Self> {
        let nanos = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1);
        let event = memory_events::software("cpu-clock", Rate::Period(nanos))?;
        Self::start(&[event], ldlat, ring_bytes, false)
    }

    /// Forwarded samples since the previous call.
    pub fn drain(&mut self) -> Vec<C2cRecord> {
        let mut out = Vec::new();
        while let Some(item) = self.samples.next() {
            if item.len() >= size_of::<C2cRecord>() {
                // SAFETY: the kernel wrote a whole C2cRecord (a Pod) into this record.
                out.push(unsafe { item.as_ptr().cast::<C2cRecord>().read_unaligned() });
            }
        }
        out
    }

    /// The counts so far, summed over CPUs.
    pub fn counts(&self) -> Result<C2cCounts> {
        let stats: PerCpuArray<_, C2cStats> =
            PerCpuArray::try_from(self.bpf.map(map::C2C_STATS).context("no C2C_STATS map")?)?;
        let mut counts = C2cCounts::default();
        for per_cpu in stats.get(&0, 0)?.iter() {
            counts.stats.add(per_cpu);
        }
        let counters: PerCpuArray<_, u64> = PerCpuArray::try_from(
            self.bpf
                .map(map::C2C_COUNTERS)
                .context("no C2C_COUNTERS map")?,
        )?;
        let sum = |index| -> Result<u64> { Ok(counters.get(&index, 0)?.iter().sum()) };
        counts.forwarded = sum(counter::FORWARDED)?;
        counts.ring_full = sum(counter::RING_FULL)?;
        counts.read_errors = sum(counter::READ_ERROR)?;
        counts.stores_skipped = sum(counter::STORES_SKIPPED)?;
        counts.line_map_full = sum(counter::LINE_MAP_FULL)?;
        Ok(counts)
    }
}

/// Loads the object's c2c filter into the kernel (the verifier checks it).
fn load_filter(bpf: &mut Ebpf) -> Result<&mut PerfEvent> {
    let program: &mut PerfEvent = bpf
        .program_mut(program::C2C_FILTER)
        .context("the BPF object has no c2c_filter program")?
        .try_into()?;
    program
        .load()
        .map_err(|error| super::explain_bpf_error(error.into()))
        .context("loading the c2c filter")?;
    Ok(program)
}

/// The object with the c2c filter's offsets and threshold set; the per-thread maps kept tiny.
fn load(ldlat: u64, ring_bytes: u32, stores_contended: bool) -> Result<Ebpf> {
    let btf = KernelBtf::from_sys_fs()?;
    let member = |strukt: &str, name: &str| btf.member_offset(strukt, name);
    let offsets: [u32; counter::OFFSETS] = [
        member("bpf_perf_event_data_kern", "regs")?,
        member("bpf_perf_event_data_kern", "data")?,
        // Linux 6.1 added it; before, the fields the sample type asks for are set (but for
        // `phys_addr`, filled after the program runs).
        member("perf_sample_data", "sample_flags").unwrap_or(counter::NO_SAMPLE_FLAGS),
        member("perf_sample_data", "data_src")?,
        member("perf_sample_data", "addr")?,
        member("perf_sample_data", "weight")?,
        member("perf_sample_data", "phys_addr")?,
        member("pt_regs", "ip").or_else(|_| member("pt_regs", "pc"))?,
    ];
    EbpfLoader::new()
        .override_global(global::C2C_OFFSETS, &offsets, true)
        .override_global(global::C2C_LDLAT, &ldlat, true)
        .override_global(
            global::C2C_STORES_CONTENDED,
            &u64::from(stores_contended),
            true,
        )
        .map_max_entries(map::C2C_SAMPLES, ring_bytes)
        .map_max_entries(map::THREADS, 1)
        .load(object::bytes()?)
        .context("loading the BPF programs for c2c")
}
