//! The c2c filter's loader: BTF offsets and latency threshold in, per-class counts, losses and
//! forwarded samples out.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, PerCpuArray, RingBuf},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use topdown_common::c2c::{C2cRecord, C2cStats, counter};

use super::{btf::KernelBtf, object};

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
}

/// The c2c filter, loaded and attached.
pub struct C2cCollector {
    bpf: Ebpf,
    samples: RingBuf<MapData>,
}

impl C2cCollector {
    /// Attaches the filter to a `cpu-clock` sampling event every `period` on each online CPU:
    /// the software stand-in for memory sampling on machines without it. Samples carry no
    /// data_src, so every one is counted as unparsable and none is forwarded.
    pub fn start_on_cpu_clock(period: Duration, ldlat: u64, ring_bytes: u32) -> Result<Self> {
        let mut bpf = load(ldlat, ring_bytes)?;
        let cpus = aya::util::online_cpus()
            .map_err(|(path, error)| anyhow!("reading online CPUs from {path}: {error}"))?;
        let program: &mut PerfEvent = bpf
            .program_mut("c2c_filter")
            .context("the BPF object has no c2c_filter program")?
            .try_into()?;
        program.load().context("loading the c2c filter")?;
        let period = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1);
        for cpu in cpus {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Period(period),
                    false,
                )
                .with_context(|| format!("attaching the c2c filter on CPU {cpu}"))?;
        }
        let samples = RingBuf::try_from(
            bpf.take_map("C2C_SAMPLES")
                .context("the BPF object has no C2C_SAMPLES map")?,
        )?;
        Ok(Self { bpf, samples })
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
            PerCpuArray::try_from(self.bpf.map("C2C_STATS").context("no C2C_STATS map")?)?;
        let mut counts = C2cCounts::default();
        for per_cpu in stats.get(&0, 0)?.iter() {
            counts.stats.add(per_cpu);
        }
        let counters: PerCpuArray<_, u64> = PerCpuArray::try_from(
            self.bpf
                .map("C2C_COUNTERS")
                .context("no C2C_COUNTERS map")?,
        )?;
        let sum = |index| -> Result<u64> { Ok(counters.get(&index, 0)?.iter().sum()) };
        counts.forwarded = sum(counter::FORWARDED)?;
        counts.ring_full = sum(counter::RING_FULL)?;
        counts.read_errors = sum(counter::READ_ERROR)?;
        Ok(counts)
    }
}

/// The object with the c2c filter's offsets and threshold set; the per-thread maps kept tiny.
fn load(ldlat: u64, ring_bytes: u32) -> Result<Ebpf> {
    let btf = KernelBtf::from_sys_fs()?;
    let member = |strukt: &str, name: &str| btf.member_offset(strukt, name);
    let offsets: [u32; counter::OFFSETS] = [
        member("bpf_perf_event_data_kern", "regs")?,
        member("bpf_perf_event_data_kern", "data")?,
        member("perf_sample_data", "sample_flags")?,
        member("perf_sample_data", "data_src")?,
        member("perf_sample_data", "addr")?,
        member("perf_sample_data", "weight")?,
        member("perf_sample_data", "phys_addr")?,
        member("pt_regs", "ip").or_else(|_| member("pt_regs", "pc"))?,
    ];
    EbpfLoader::new()
        .override_global("C2C_OFFSETS", &offsets, true)
        .override_global("C2C_LDLAT", &ldlat, true)
        .map_max_entries("C2C_SAMPLES", ring_bytes)
        .map_max_entries("THREADS", 1)
        .load(object::bytes()?)
        .context("loading the BPF programs for c2c")
}
