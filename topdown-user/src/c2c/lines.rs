//! Samples grouped by cache line, keyed as perf keys them (`sort__dcacheline_cmp`): kernel and
//! user samples apart; by the data mapping's device and inode; private anonymous memory also by
//! process; then by the line of the address as the mapping sees it (`addr - start + pgoff`).

use std::collections::{BTreeMap, BTreeSet};

use topdown_common::c2c::C2cStats;

use super::perf_data::Recording;

/// A cache line as perf tells lines apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineKey {
    /// Sampled in kernel mode.
    pub kernel: bool,
    /// Device major, minor and inode of the data's mapping (zeros: anonymous or unmapped).
    pub dev_ino: (u32, u32, u64),
    /// The process, for private anonymous memory; 0 otherwise.
    pub pid: u32,
    /// The line's first byte, as the mapping sees it.
    pub line: u64,
}

/// One cache line: its samples' classification and where it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Line {
    /// Its samples, classified.
    pub stats: C2cStats,
    /// The line's virtual address, as its first sample saw it.
    pub address: u64,
    /// The first sample's physical address (0: not recorded).
    pub first_phys: u64,
    /// The distinct physical addresses its samples touched.
    pub phys: BTreeSet<u64>,
    /// Its samples per cgroup id of the sampled task (id 0: not recorded).
    pub by_cgroup: BTreeMap<u64, C2cStats>,
}

/// Every sample's classification, in total and per line.
#[derive(Clone, Debug, Default)]
pub struct C2cData {
    /// All samples (perf's "Trace Event Information").
    pub total: C2cStats,
    /// Per cache line.
    pub lines: BTreeMap<LineKey, Line>,
}

impl C2cData {
    /// Classifies every sample of `recording`, with lines of `line_size` bytes (64, or 128 for
    /// `--double-cl`).
    pub fn from_recording(recording: &Recording, line_size: u64) -> Self {
        let mut data = Self::default();
        for sample in &recording.samples {
            let data_map = recording.mapping(sample.pid, sample.addr);
            let mapped = data_map.is_some() && recording.mapping(sample.pid, sample.ip).is_some();
            let mut one = C2cStats::default();
            one.add_sample(sample.data_src, sample.addr, mapped);
            data.total.add(&one);
            let anonymous_private =
                !sample.kernel && data_map.is_some_and(|m| !m.shared && m.dev_ino == (0, 0, 0));
            let mapped_addr = data_map.map_or(sample.addr, |m| sample.addr - m.start + m.pgoff);
            let key = LineKey {
                kernel: sample.kernel,
                dev_ino: data_map.map_or((0, 0, 0), |m| m.dev_ino),
                pid: if anonymous_private { sample.pid } else { 0 },
                line: mapped_addr & !(line_size - 1),
            };
            let line = data.lines.entry(key).or_insert_with(|| Line {
                address: sample.addr & !(line_size - 1),
                first_phys: sample.phys_addr,
                ..Line::default()
            });
            line.stats.add(&one);
            line.by_cgroup.entry(sample.cgroup).or_default().add(&one);
            if sample.phys_addr != 0 {
                line.phys.insert(sample.phys_addr);
            }
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
