//! Samples grouped by cache line, keyed as perf keys them (`sort__dcacheline_cmp`): kernel and
//! user samples apart; by the data mapping's device and inode; private anonymous memory also by
//! process; then by the line of the address as the mapping sees it (`addr - start + pgoff`).
//! Within a line, samples are grouped again by offset and code address, as perf's default
//! `offset,iaddr` coalescing does for the Pareto table.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use topdown_common::c2c::C2cStats;

use super::{
    display::{Coalesce, Field},
    perf_data::{MemSample, MemoryTopology, Recording},
};

/// A cache line as perf tells lines apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineKey {
    /// Sampled in kernel mode.
    pub kernel: bool,
    /// The data address fell in a known mapping.
    pub mapped: bool,
    /// Device major, minor and inode of the data's mapping (zeros: anonymous or unmapped).
    pub dev_ino: (u32, u32, u64),
    /// The process, for private anonymous memory; 0 otherwise.
    pub pid: u32,
    /// The line's first byte, as the mapping sees it.
    pub line: u64,
}

impl LineKey {
    /// perf's order of lines that rank equal (its `sort__dcacheline_cmp` tree order): kernel
    /// before user, mapped before unmapped, then by device and inode, process, and address.
    pub const fn perf_order(&self) -> (bool, bool, (u32, u32, u64), u32, u64) {
        (
            !self.kernel,
            !self.mapped,
            self.dev_ino,
            self.pid,
            self.line,
        )
    }
}

/// Where samples' data lived in physical memory, as perf counts it: the NUMA nodes, and how
/// often the physical address changed from one sample to the next ("PA cnt"). Samples without
/// a physical address, or one no memory node holds, count for neither.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhysSeen {
    /// Nodes holding the samples' physical addresses.
    pub nodes: BTreeSet<u64>,
    /// Changes of physical address, in sample order.
    pub changes: u64,
    last: u64,
}

impl PhysSeen {
    fn add(&mut self, phys: u64, memory: Option<&MemoryTopology>) {
        if phys == 0 {
            return;
        }
        let Some(node) = memory.and_then(|m| m.node_of(phys)) else {
            return;
        };
        self.nodes.insert(node);
        if self.last != phys {
            self.changes += 1;
            self.last = phys;
        }
    }

    /// The nodes as a kernel bitmap list (`0`, `0-1`, `0,2-3`), `N/A` for none.
    pub fn node_list(&self) -> String {
        if self.nodes.is_empty() {
            return "N/A".into();
        }
        ranges(self.nodes.iter().copied())
    }
}

/// Ascending numbers as a kernel bitmap list: `0,2-3,5`.
pub fn ranges(numbers: impl IntoIterator<Item = u64>) -> String {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for n in numbers {
        match spans.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => spans.push((n, n)),
        }
    }
    spans
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The load classes perf keeps a mean latency for (`compute_stats`), each sample in its most
/// costly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cycles {
    /// Remote HITM.
    RmtHitm,
    /// Local HITM.
    LclHitm,
    /// Remote peer.
    RmtPeer,
    /// Local peer.
    LclPeer,
    /// Any other load.
    Load,
}

impl Cycles {
    /// The class of one sample's classification, if it is a load.
    fn of(one: &C2cStats) -> Option<Self> {
        if one.rmt_hitm > 0 {
            Some(Self::RmtHitm)
        } else if one.lcl_hitm > 0 {
            Some(Self::LclHitm)
        } else if one.rmt_peer > 0 {
            Some(Self::RmtPeer)
        } else if one.lcl_peer > 0 {
            Some(Self::LclPeer)
        } else if one.load > 0 {
            Some(Self::Load)
        } else {
            None
        }
    }
}

/// A set of CPU numbers, as a bitmap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSet(Vec<u64>);

impl CpuSet {
    fn insert(&mut self, cpu: u32) {
        let (word, bit) = ((cpu / 64) as usize, cpu % 64);
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << bit;
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.0
            .get((cpu / 64) as usize)
            .is_some_and(|w| w >> (cpu % 64) & 1 == 1)
    }

    /// How many CPUs are in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
}

/// A running mean of load latencies.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mean {
    sum: f64,
    count: u64,
}

impl Mean {
    fn add(&mut self, value: u64) {
        self.sum += value as f64;
        self.count += 1;
    }

    /// The mean, 0 when empty.
    pub fn get(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }
}

/// What tells entries of a line apart: the offset, and the fields entries are coalesced by
/// (0 for the others). `dso` is an index into [`C2cData::objects`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryKey {
    /// Offset of the data in the line.
    pub offset: u64,
    /// Process, with `-c pid`.
    pub pid: u32,
    /// Thread, with `-c tid`.
    pub tid: u32,
    /// Code address, with `-c iaddr` (the default).
    pub iaddr: u64,
    /// The code's object, with `-c dso`.
    pub dso: u32,
}

/// Samples of one line with the same [`EntryKey`] (a row of perf's Pareto table).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    /// Their classification.
    pub stats: C2cStats,
    /// CPUs that sampled them.
    pub cpus: CpuSet,
    /// Where their data lived.
    pub phys: PhysSeen,
    /// Mean latency per [`Cycles`] class, indexed by it.
    pub cycles: [Mean; 5],
    /// Their classification per NUMA node of the sampling CPU (the recording's node order).
    pub node_stats: Vec<C2cStats>,
    /// The first sample (its process, code address and mode name the code).
    pub first: Option<MemSample>,
}

/// One cache line: its samples' classification and where it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Line {
    /// Its samples, classified.
    pub stats: C2cStats,
    /// The line's virtual address, as its first sample saw it.
    pub address: u64,
    /// Where its data lived.
    pub phys: PhysSeen,
    /// Its samples per cgroup id of the sampled task (id 0: not recorded).
    pub by_cgroup: FxHashMap<u64, C2cStats>,
    /// Its samples by entry.
    pub entries: FxHashMap<EntryKey, Entry>,
}

/// Every sample's classification, in total and per line.
#[derive(Clone, Debug, Default)]
pub struct C2cData {
    /// All samples (perf's "Trace Event Information").
    pub total: C2cStats,
    /// Per cache line.
    pub lines: FxHashMap<LineKey, Line>,
}

impl C2cData {
    /// Classifies every sample of `recording`, with lines of `line_size` bytes (64, or 128 for
    /// `--double-cl`), and entries told apart as `coalesce` says.
    pub fn from_recording(recording: &Recording, line_size: u64, coalesce: Coalesce) -> Self {
        let mut objects: FxHashMap<&str, u32> = FxHashMap::default();
        let memory = recording.memory.as_ref();
        let nodes = recording.numa_cpus.len();
        let mut node_of_cpu: Vec<Option<usize>> = Vec::new();
        for (node, cpus) in recording.numa_cpus.iter().enumerate() {
            for &cpu in cpus {
                let cpu = cpu as usize;
                if node_of_cpu.len() <= cpu {
                    node_of_cpu.resize(cpu + 1, None);
                }
                node_of_cpu[cpu] = Some(node);
            }
        }
        let mut data = Self::default();
        for sample in &recording.samples {
            let data_map = recording.mapping(sample.pid, sample.addr);
            let code_map = recording.mapping(sample.pid, sample.ip);
            let mapped = data_map.is_some() && code_map.is_some();
            let mut one = C2cStats::default();
            one.add_sample(sample.data_src, sample.addr, mapped);
            let anonymous_private =
                !sample.kernel && data_map.is_some_and(|m| !m.shared && m.dev_ino == (0, 0, 0));
            let mapped_addr = data_map.map_or(sample.addr, |m| sample.addr - m.start + m.pgoff);
            let key = LineKey {
                kernel: sample.kernel,
                mapped: data_map.is_some(),
                dev_ino: data_map.map_or((0, 0, 0), |m| m.dev_ino),
                pid: if anonymous_private { sample.pid } else { 0 },
                line: mapped_addr & !(line_size - 1),
            };
            let line = data.lines.entry(key).or_insert_with(|| Line {
                address: sample.addr & !(line_size - 1),
                ..Line::default()
            });
            line.phys.add(sample.phys_addr, memory);
            if sample.cgroup != 0 {
                line.by_cgroup.entry(sample.cgroup).or_default().add(&one);
            }

            let dso = if coalesce.has(Field::Dso) {
                let path = code_map.map_or("", |m| m.path.as_str());
                let next = objects.len() as u32;
                *objects.entry(path).or_insert(next)
            } else {
                0
            };
            let entry_key = EntryKey {
                offset: sample.addr & (line_size - 1),
                pid: if coalesce.has(Field::Pid) {
                    sample.pid
                } else {
                    0
                },
                tid: if coalesce.has(Field::Tid) {
                    sample.tid
                } else {
                    0
                },
                iaddr: if coalesce.has(Field::Iaddr) {
                    sample.ip
                } else {
                    0
                },
                dso,
            };
            let entry = line.entries.entry(entry_key).or_default();
            entry.stats.add(&one);
            if let Some(Some(node)) = node_of_cpu.get(sample.cpu as usize) {
                entry.node_stats.resize(nodes, C2cStats::default());
                entry.node_stats[*node].add(&one);
            }
            entry.cpus.insert(sample.cpu);
            entry.phys.add(sample.phys_addr, memory);
            entry.first.get_or_insert(*sample);
            if let Some(class) = Cycles::of(&one) {
                entry.cycles[class as usize].add(sample.weight);
            }
        }
        // A line's counts are its entries' (every sample is in one), the total its lines'.
        for line in data.lines.values_mut() {
            for entry in line.entries.values() {
                line.stats.add(&entry.stats);
            }
            data.total.add(&line.stats);
        }
        data
    }

    /// The lines perf calls shared (any HITM or peer load), and their summed counts.
    pub fn shared(&self) -> (usize, C2cStats) {
        let mut sum = C2cStats::default();
        let mut count = 0;
        for line in self
            .lines
            .values()
            .filter(|l| l.stats.tot_hitm > 0 || l.stats.tot_peer > 0)
        {
            count += 1;
            sum.add(&line.stats);
        }
        (count, sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_are_kernel_bitmap_lists() {
        let seen = |nodes: &[u64]| PhysSeen {
            nodes: nodes.iter().copied().collect(),
            ..PhysSeen::default()
        };
        assert_eq!(seen(&[]).node_list(), "N/A");
        assert_eq!(seen(&[0]).node_list(), "0");
        assert_eq!(seen(&[0, 1]).node_list(), "0-1");
        assert_eq!(seen(&[0, 2, 3, 5]).node_list(), "0,2-3,5");
    }
}
