//! What a perf.data file holds for c2c, typed: memory samples, the file's mappings, thread
//! names, cgroups and topology, and the sample type every c2c sample carries.

use std::collections::HashMap;

use perf_event_open_sys::bindings;
use rustc_hash::FxHashMap;
use topdown_common::c2c::C2cStats;

use super::maps::{Mapping, ProcessMaps};

/// What every sample carries, as `perf c2c record` asks (`-d --phys-data --sample-cpu -W`).
pub const SAMPLE_TYPE: u32 = bindings::PERF_SAMPLE_IP
    | bindings::PERF_SAMPLE_TID
    | bindings::PERF_SAMPLE_TIME
    | bindings::PERF_SAMPLE_ADDR
    | bindings::PERF_SAMPLE_ID
    | bindings::PERF_SAMPLE_CPU
    | bindings::PERF_SAMPLE_PERIOD
    | bindings::PERF_SAMPLE_WEIGHT
    | bindings::PERF_SAMPLE_DATA_SRC
    | bindings::PERF_SAMPLE_PHYS_ADDR;

/// The feature bit of our totals section (a live recording's totals, the 32 counters of
/// [`C2cStats::named`] in order): the last of perf's 256, far past any perf uses.
pub const TOTALS_FEATURE: u32 = 255;

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
pub struct PerfData {
    /// Memory samples, in time order: a live recording's; [`super::reader::read`] hands a
    /// file's to a [`SampleSink`] instead ([`super::reader::read_all`] keeps them).
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
    pub(super) fn parse(bytes: &[u8]) -> Option<Self> {
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

impl PerfData {
    /// The mapping of process `pid` that holds `addr`.
    pub fn mapping(&self, pid: u32, addr: u64) -> Option<&Mapping> {
        self.mappings.get(&pid)?.find(addr)
    }
}

/// What takes a recording's memory samples, one by one, in time order.
pub trait SampleSink {
    /// Takes `sample`; `recording` holds the mappings, thread names and cgroups known then.
    fn add(&mut self, recording: &PerfData, sample: &MemSample);
}

impl SampleSink for Vec<MemSample> {
    fn add(&mut self, _: &PerfData, sample: &MemSample) {
        self.push(*sample);
    }
}
