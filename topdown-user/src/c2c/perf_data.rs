//! perf.data files (`perf c2c record`, `perf mem record`) read into typed memory samples and
//! mappings at the edge. linux-perf-data reads the header, the attributes and the feature
//! sections; the data section is walked in [`super::records`], straight from a memory map: the
//! crate drops the WEIGHT and DATA_SRC fields c2c needs, and sorts every record of a file
//! without round markers, which is most of perf's own time on a large recording.

use std::{collections::HashMap, fs::File, io::Cursor, ops::ControlFlow, path::Path};

use rustc_hash::FxHashMap;

use anyhow::{Context as _, Result, bail};
use linux_perf_data::{Endianness, PerfFileReader};

use topdown_common::c2c::C2cStats;

use super::{
    maps::{Mapping, ProcessMaps},
    perf_writer::TOTALS_FEATURE,
    records::{self, Formats},
};

/// Our totals section: the 32 counters of [`C2cStats::named`], in order.
fn parse_totals(bytes: &[u8]) -> Option<C2cStats> {
    let mut stats = C2cStats::default();
    let values: Vec<u64> = bytes
        .as_chunks::<8>()
        .0
        .iter()
        .map(|c| u64::from_le_bytes(*c))
        .collect();
    stats.set_named(&values.try_into().ok()?);
    Some(stats)
}

/// One memory sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemSample {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU.
    pub cpu: u32,
    /// Code address.
    pub ip: u64,
    /// Data address (0: none).
    pub addr: u64,
    /// `union perf_mem_data_src`.
    pub data_src: u64,
    /// Load latency (cycles), 0 for stores.
    pub weight: u64,
    /// Physical data address (0: not recorded).
    pub phys_addr: u64,
    /// Sample time (ns; 0: not recorded).
    pub time: u64,
    /// cgroup2 id of the sampled task (0: not recorded; `perf record --all-cgroups`).
    pub cgroup: u64,
    /// Sampled in kernel mode.
    pub kernel: bool,
}

/// Everything c2c needs from a recording.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    /// Memory samples, in time order: a live recording's; [`read`] hands a file's to a
    /// [`SampleSink`] instead ([`read_all`] keeps them).
    pub samples: Vec<MemSample>,
    /// Mappings by process id.
    pub mappings: FxHashMap<u32, ProcessMaps>,
    /// The recorded events' names (`cpu/mem-loads,ldlat=30/P`).
    pub events: Vec<String>,
    /// Physical memory topology (`HEADER_MEM_TOPOLOGY`), if recorded.
    pub memory: Option<MemoryTopology>,
    /// cgroup paths by id, from `PERF_RECORD_CGROUP` (`perf record --all-cgroups`).
    pub cgroups: HashMap<u64, String>,
    /// Thread names by tid, from `PERF_RECORD_COMM` (the latest).
    pub comms: FxHashMap<u32, String>,
    /// Each NUMA node's CPUs (`HEADER_NUMA_TOPOLOGY`), in the file's node order.
    pub numa_cpus: Vec<Vec<u32>>,
    /// Every sample the kernel filter classified, forwarded or not: a live recording's
    /// statistics, saved by `c2c record -o` in a feature section of our own.
    pub totals: Option<C2cStats>,
    /// At most how many samples the file holds (its data section over the smallest sample
    /// record), to size tables once; 0 when unknown.
    pub max_samples: usize,
}

/// Which NUMA node each block of physical memory belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryTopology {
    /// Bytes per block.
    pub block_size: u64,
    /// `(node, bitmap of its blocks)`.
    pub nodes: Vec<(u64, Vec<u64>)>,
}

impl MemoryTopology {
    /// Parses the feature section: version, block size, node count, then per node its id,
    /// size, bit count and bitmap words (tools/perf/util/header.c).
    fn parse(bytes: &[u8]) -> Option<Self> {
        const MAX_NODES: u64 = 1024;
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        let (block_size, count) = (word(1)?, word(2)?);
        let mut nodes = Vec::new();
        let mut at = 3;
        for _ in 0..count {
            let (node, bits) = (word(at)?, word(at + 2)?);
            // Node ids size bit sets per line and entry: bounded by the kernel's most nodes
            // (`MAX_NUMNODES`, 1 << CONFIG_NODES_SHIFT <= 1024); a larger one is no topology.
            if node >= MAX_NODES {
                return None;
            }
            let words = bits.div_ceil(64) as usize;
            let bitmap = (0..words)
                .map(|i| word(at + 3 + i))
                .collect::<Option<Vec<_>>>()?;
            nodes.push((node, bitmap));
            at += 3 + words;
        }
        Some(Self { block_size, nodes })
    }

    /// The node holding physical address `phys`.
    pub fn node_of(&self, phys: u64) -> Option<u64> {
        // Block sizes are powers of two (the kernel's memory block size): a shift, not a
        // division, on the hot path.
        let block = if self.block_size.is_power_of_two() {
            phys >> self.block_size.trailing_zeros()
        } else {
            phys.checked_div(self.block_size)?
        };
        let (word, bit) = ((block / 64) as usize, block % 64);
        self.nodes
            .iter()
            .find(|(_, bitmap)| bitmap.get(word).is_some_and(|w| w >> bit & 1 == 1))
            .map(|(node, _)| *node)
    }
}

impl Recording {
    /// The mapping of process `pid` that holds `addr`.
    pub fn mapping(&self, pid: u32, addr: u64) -> Option<&Mapping> {
        self.mappings.get(&pid)?.find(addr)
    }
}

/// What takes a recording's memory samples, one by one, in time order.
pub trait SampleSink {
    /// Takes `sample`; `recording` holds the mappings, thread names and cgroups known then.
    fn add(&mut self, recording: &Recording, sample: &MemSample);
}

impl SampleSink for Vec<MemSample> {
    fn add(&mut self, _: &Recording, sample: &MemSample) {
        self.push(*sample);
    }
}

/// Reads `path`, handing each memory sample, in time order as perf processes them, to a sink
/// made by `new_sink` from the file's header; returns the recording (without its samples) and
/// the sink. A file in time order is streamed: a sample sees the mappings recorded before it.
/// At the first sample out of order the sink is dropped and the file read again whole, its
/// samples sorted, then handed to a new sink with every mapping known. One line of error,
/// naming the byte offset, for anything corrupt or cut short.
pub fn read<S: SampleSink>(
    path: &Path,
    new_sink: impl Fn(&Recording) -> S,
) -> Result<(Recording, S)> {
    if path.is_dir() {
        bail!(
            "{} is a directory: give a recording with -i FILE (perf.data)",
            path.display()
        );
    }
    let file = File::open(path).with_context(|| {
        format!(
            "cannot open {} (give a recording with -i FILE)",
            path.display()
        )
    })?;
    // SAFETY: the file is only read; a recording changed while we read it can at worst make us
    // report garbage or an error, never read outside the mapping (every access is checked).
    let bytes = unsafe { memmap2::Mmap::map(&file) }
        .with_context(|| format!("mapping {} into memory", path.display()))?;
    records::check_sections(&bytes)
        .with_context(|| format!("{} is not a readable perf.data file", path.display()))?;
    let PerfFileReader { perf_file, .. } = PerfFileReader::parse_file(Cursor::new(&bytes[..]))
        .with_context(|| format!("{} is not a readable perf.data file", path.display()))?;
    if perf_file.endian() != Endianness::LittleEndian {
        bail!("{}: big-endian perf.data is not supported", path.display());
    }
    let attributes = perf_file.event_attributes();
    let formats = Formats::new(
        attributes
            .iter()
            .map(|a| (a.attr.sample_format, a.event_ids.clone())),
    );
    let header = Recording {
        events: attributes
            .iter()
            .filter_map(|attr| attr.name().map(str::to_owned))
            .collect(),
        // Feature 22 is perf's HEADER_MEM_TOPOLOGY; the crate calls it SAMPLE_TOPOLOGY.
        memory: perf_file
            .feature_section_data(linux_perf_data::Feature::SAMPLE_TOPOLOGY)
            .and_then(|section| {
                let topology = MemoryTopology::parse(section);
                if topology.is_none() {
                    log::warn!(
                        "{}: the memory topology section is corrupt: data nodes are not shown",
                        path.display()
                    );
                }
                topology
            }),
        numa_cpus: perf_file
            .feature_section_data(linux_perf_data::Feature::NUMA_TOPOLOGY)
            .and_then(|section| {
                let cpus = records::parse_numa_cpus(section);
                if cpus.is_none() {
                    log::warn!(
                        "{}: the NUMA topology section is corrupt: CPU nodes are not shown",
                        path.display()
                    );
                }
                cpus
            })
            .unwrap_or_default(),
        totals: records::feature(&bytes, TOTALS_FEATURE).and_then(parse_totals),
        max_samples: records::max_samples(&bytes, &formats),
        ..Recording::default()
    };
    let corrupt = || format!("{} is corrupt", path.display());
    let mut recording = header.clone();
    let mut sink = new_sink(&recording);
    let mut last = 0;
    // What was read is dropped from this process's memory as it goes: a recording's pages are
    // then not part of the report's peak memory (they stay in the page cache).
    let release = |up_to: usize| {
        let page = 4096;
        let len = up_to / page * page;
        // SAFETY: a shared, read-only file mapping: MADV_DONTNEED drops only this process's
        // page table entries, and a later read of those bytes maps the file's pages again
        // (same contents). Nothing is lost; it is only advice.
        let _ = unsafe { bytes.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, 0, len) };
    };
    let walked = records::walk(
        &bytes,
        &formats,
        &mut recording,
        |recording, sample| {
            if sample.time < last {
                return ControlFlow::Break(());
            }
            last = sample.time;
            sink.add(recording, sample);
            ControlFlow::Continue(())
        },
        release,
    )
    .with_context(corrupt)?;
    if walked.is_break() {
        drop(sink);
        recording = header;
        let mut samples = Vec::new();
        let _whole = records::walk(
            &bytes,
            &formats,
            &mut recording,
            |recording, sample| {
                samples.add(recording, sample);
                ControlFlow::Continue(())
            },
            release,
        )
        .with_context(corrupt)?;
        samples.sort_by_key(|s| s.time);
        sink = new_sink(&recording);
        for sample in &samples {
            sink.add(&recording, sample);
        }
    }
    Ok((recording, sink))
}

/// Reads `path` with its samples kept in [`Recording::samples`], in time order.
pub fn read_all(path: &Path) -> Result<Recording> {
    let (mut recording, samples) = read(path, |_| Vec::new())?;
    recording.samples = samples;
    Ok(recording)
}
