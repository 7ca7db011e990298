//! Samples grouped by cache line, keyed as perf keys them (`sort__dcacheline_cmp`): kernel and
//! user samples apart; by the data mapping's device and inode; private anonymous memory also by
//! process; then by the line of the address as the mapping sees it (`addr - start + pgoff`).
//! Within a line, samples are grouped again by offset and code address, as perf's default
//! `offset,iaddr` coalescing does for the Pareto table.

use smallvec::SmallVec;
use topdown_common::c2c::C2cStats;

use crate::perf_file::contents::MemSample;

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
    pub nodes: BitSet,
    /// Changes of physical address, in sample order.
    pub changes: u64,
    last: u64,
}

impl PhysSeen {
    /// Adds a sample's physical address and the node holding it (none: not counted).
    pub(super) fn add(&mut self, phys: u64, node: Option<u32>) {
        let Some(node) = node else {
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
        crate::cpus::cpu_list(self.nodes.iter().map(u64::from))
    }
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
    pub(super) const fn of(one: &C2cStats) -> Option<Self> {
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

/// A set of small numbers (CPUs, NUMA nodes), as a bitmap whose first word is inline (no
/// allocation below 64).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BitSet {
    low: u64,
    /// Words past the first, allocated only for numbers of 64 and more: a thin pointer, so a
    /// set is 16 bytes (there are about three per sample in a large report).
    #[allow(
        clippy::box_collection,
        reason = "8 bytes instead of the 24 of a Vec, per set"
    )]
    high: Option<Box<Vec<u64>>>,
}

impl BitSet {
    pub(super) fn insert(&mut self, n: u32) {
        let (word, bit) = ((n / 64) as usize, n % 64);
        if word == 0 {
            self.low |= 1 << bit;
            return;
        }
        let high = self.high.get_or_insert_with(Box::default);
        if high.len() < word {
            high.resize(word, 0);
        }
        high[word - 1] |= 1 << bit;
    }

    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.low).chain(self.high.iter().flat_map(|h| h.iter().copied()))
    }

    /// Whether `n` is in the set.
    pub fn contains(&self, n: u32) -> bool {
        self.words()
            .nth((n / 64) as usize)
            .is_some_and(|w| w >> (n % 64) & 1 == 1)
    }

    /// The members, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words().enumerate().flat_map(|(i, word)| {
            (0..64)
                .filter(move |bit| word >> bit & 1 == 1)
                .map(move |bit| i as u32 * 64 + bit)
        })
    }

    /// How many numbers are in the set.
    pub fn len(&self) -> usize {
        self.words().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words().all(|w| w == 0)
    }
}

/// What tells entries of a line apart: the offset, and the fields entries are coalesced by
/// (0 for the others). `dso` numbers the code object (as `-c dso` met them, the resolver's `objects`).
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

/// How many samples fell in one classification (an index into [`C2cData::classes`]), sampled
/// by the CPUs of one NUMA node (its index in the recording's node list; [`NO_NODE`]: none),
/// and their summed load latency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCount {
    /// The classification.
    pub class: u32,
    /// The node of the sampling CPU.
    pub node: u32,
    /// How many samples.
    pub samples: u64,
    /// Their latencies (`weight`), summed.
    pub weight: u64,
}

/// The node of a CPU the recording's NUMA topology does not list.
pub const NO_NODE: u32 = u32::MAX;

/// No entry: the end of a line's list.
const NONE: u32 = u32::MAX;

/// What names an entry's code: its first sample's process, thread, code address and mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FirstSample {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Code address.
    pub ip: u64,
    /// Sampled in kernel mode.
    pub kernel: bool,
}

impl From<&MemSample> for FirstSample {
    fn from(sample: &MemSample) -> Self {
        Self {
            pid: sample.pid,
            tid: sample.tid,
            ip: sample.ip,
            kernel: sample.kernel,
        }
    }
}

/// Samples of one line with the same [`EntryKey`] (a row of perf's Pareto table). Kept small:
/// a recording of a busy host has about as many entries as samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Their count per classification and node (see [`C2cData::entry_stats`]); one, inline,
    /// for most entries.
    pub counts: SmallVec<[ClassCount; 1]>,
    /// CPUs that sampled them.
    pub cpus: BitSet,
    /// Where their data lived.
    pub phys: PhysSeen,
    /// The first sample (its process, code address and mode name the code).
    pub first: FirstSample,
    /// Its line: an index into [`C2cData::lines`].
    pub line: u32,
    /// The next entry of its line, in the order of their first samples ([`NONE`]: the last).
    next: u32,
}

impl Entry {
    /// A new entry of line `line`, its first sample `first`.
    pub(super) fn new(line: u32, first: FirstSample) -> Self {
        Self {
            counts: SmallVec::new(),
            cpus: BitSet::default(),
            phys: PhysSeen::default(),
            first,
            line,
            next: NONE,
        }
    }
}

/// A line's contended loads: what lines are ranked by (`-d`) and called shared by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contended {
    /// HITMs, all, local and remote.
    pub tot_hitm: u64,
    /// See `tot_hitm`.
    pub lcl_hitm: u64,
    /// See `tot_hitm`.
    pub rmt_hitm: u64,
    /// Loads served by a peer cache.
    pub tot_peer: u64,
}

impl Contended {
    pub(super) fn add_times(&mut self, one: &C2cStats, times: u64) {
        self.tot_hitm += one.tot_hitm * times;
        self.lcl_hitm += one.lcl_hitm * times;
        self.rmt_hitm += one.rmt_hitm * times;
        self.tot_peer += one.tot_peer * times;
    }

    /// Whether perf calls the line shared (any HITM or peer load).
    pub const fn is_shared(&self) -> bool {
        self.tot_hitm > 0 || self.tot_peer > 0
    }
}

/// One cache line: where it is and its entries; its statistics come from them
/// ([`C2cData::line_stats`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CacheLine {
    /// Its contended loads (the counts it is ranked by).
    pub contended: Contended,
    /// The line's virtual address, as its first sample saw it.
    pub address: u64,
    /// Where its data lived.
    pub phys: PhysSeen,
    /// Its samples per cgroup id of the sampled task (id 0: not recorded).
    pub by_cgroup: Box<[(u64, C2cStats)]>,
    /// Its first and last entries ([`NONE`]: none yet).
    first_entry: u32,
    last_entry: u32,
}

impl CacheLine {
    /// A line at `address` without entries yet.
    pub(super) fn new(address: u64) -> Self {
        Self {
            contended: Contended::default(),
            address,
            phys: PhysSeen::default(),
            by_cgroup: Box::default(),
            first_entry: NONE,
            last_entry: NONE,
        }
    }
}

/// One thread's stores and contended loads at one word of one line (kept when a report labels
/// sharing, see [`super::sharing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The line: an index into [`C2cData::lines`].
    pub line: u32,
    /// The word in the line (offset / [`super::sharing::WORD`]).
    pub word: u8,
    /// The thread.
    pub tid: u32,
    /// Its stores there.
    pub stores: u32,
    /// Its contended loads there (HITMs and loads from a peer cache).
    pub contended: u32,
}

/// Sampled load latency over the whole recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Latency of every sampled load, summed (cycles).
    pub all_cycles: u64,
    /// Latency of the loads that were not contended (no HITM, no peer), summed.
    pub uncontended_cycles: u64,
    /// How many loads were not contended.
    pub uncontended_loads: u64,
}

/// Every sample's classification, in total, per line and per entry.
#[derive(Clone, Debug, Default)]
pub struct C2cData {
    /// All samples (perf's "Trace Event Information").
    pub total: C2cStats,
    /// Per cache line, in the order of their first samples.
    pub lines: Vec<(LineKey, CacheLine)>,
    /// Every line's entries.
    pub entries: Vec<(EntryKey, Entry)>,
    /// How one sample of each classification is counted, by [`ClassCount::class`].
    pub classes: Vec<C2cStats>,
    /// The latency class of each classification (`None`: not a load).
    pub class_cycles: Vec<Option<Cycles>>,
    /// How many lines are shared, and their summed counts.
    pub(super) shared: (usize, C2cStats),
    /// Sampled load latency in total.
    pub latency: Latency,
    /// Each thread's stores and contended loads per word, by line (empty unless asked).
    pub accesses: Vec<Access>,
}

impl C2cData {
    /// The lines perf calls shared (any HITM or peer load), and their summed counts.
    pub const fn shared(&self) -> (usize, C2cStats) {
        self.shared
    }

    /// Appends entry `index` (already in [`Self::entries`]) to its line's list.
    pub(super) fn link(&mut self, index: u32) {
        let line_index = self.entries[index as usize].1.line as usize;
        let line = &mut self.lines[line_index].1;
        match line.last_entry {
            NONE => line.first_entry = index,
            last => self.entries[last as usize].1.next = index,
        }
        line.last_entry = index;
    }

    /// The entries of `line`, with their keys, in the order of their first samples.
    pub fn entries_of<'a>(
        &'a self,
        line: &'a CacheLine,
    ) -> impl Iterator<Item = (&'a EntryKey, &'a Entry)> + 'a {
        let mut next = line.first_entry;
        std::iter::from_fn(move || {
            let (key, entry) = self.entries.get(next as usize)?;
            next = entry.next;
            Some((key, entry))
        })
    }

    /// The classification of `entry`'s samples sampled on `node`'s CPUs (`None`: all).
    pub fn entry_stats(&self, entry: &Entry, node: Option<u32>) -> C2cStats {
        let mut stats = C2cStats::default();
        for count in &entry.counts {
            if node.is_none_or(|n| n == count.node) {
                stats.add_times(&self.classes[count.class as usize], count.samples);
            }
        }
        stats
    }

    /// The index of `line` in [`Self::lines`] (a line has an entry from its first sample).
    pub fn line_index(&self, line: &CacheLine) -> Option<u32> {
        self.entries
            .get(line.first_entry as usize)
            .map(|(_, entry)| entry.line)
    }

    /// The stores and contended loads recorded for `line`, by word and thread.
    pub fn accesses_of(&self, line: &CacheLine) -> &[Access] {
        let Some(index) = self.line_index(line) else {
            return &[];
        };
        let start = self.accesses.partition_point(|a| a.line < index);
        let end = self.accesses.partition_point(|a| a.line <= index);
        &self.accesses[start..end]
    }

    /// The classification of all of `line`'s samples.
    pub fn line_stats(&self, line: &CacheLine) -> C2cStats {
        let mut stats = C2cStats::default();
        for (_, entry) in self.entries_of(line) {
            for count in &entry.counts {
                stats.add_times(&self.classes[count.class as usize], count.samples);
            }
        }
        stats
    }

    /// The mean latency of `entry`'s loads of latency class `class` (0 without any).
    pub fn mean_cycles(&self, entry: &Entry, class: Cycles) -> f64 {
        let (mut weight, mut samples) = (0u64, 0u64);
        for count in &entry.counts {
            if self
                .class_cycles
                .get(count.class as usize)
                .copied()
                .flatten()
                == Some(class)
            {
                weight += count.weight;
                samples += count.samples;
            }
        }
        if samples == 0 {
            0.0
        } else {
            weight as f64 / samples as f64
        }
    }

    /// Sets every line's contended counts from its entries (every line's).
    pub(super) fn sum_contended_of_entries(&mut self) {
        for (_, entry) in &self.entries {
            let line = &mut self.lines[entry.line as usize].1;
            for count in &entry.counts {
                line.contended
                    .add_times(&self.classes[count.class as usize], count.samples);
            }
        }
    }

    /// How many lines are shared, and their summed counts, from the entries (every line's).
    pub(super) fn shared_of_entries(&self) -> (usize, C2cStats) {
        let mut shared = vec![0u64; self.classes.len()];
        for (_, entry) in &self.entries {
            if self.lines[entry.line as usize].1.contended.is_shared() {
                for count in &entry.counts {
                    shared[count.class as usize] += count.samples;
                }
            }
        }
        let lines = self.lines.iter().filter(|(_, l)| l.contended.is_shared());
        (lines.count(), self.stats_of(&shared))
    }

    /// The classification of `samples[class]` samples of each class.
    pub(super) fn stats_of(&self, samples: &[u64]) -> C2cStats {
        let mut stats = C2cStats::default();
        for (class, &n) in samples.iter().enumerate() {
            stats.add_times(&self.classes[class], n);
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_are_kernel_bitmap_lists() {
        let seen = |nodes: &[u32]| {
            let mut seen = PhysSeen::default();
            for &node in nodes {
                seen.add(0x1000 * u64::from(node + 1), Some(node));
            }
            seen
        };
        assert_eq!(seen(&[]).node_list(), "N/A");
        assert_eq!(seen(&[0]).node_list(), "0");
        assert_eq!(seen(&[0, 1]).node_list(), "0-1");
        assert_eq!(seen(&[0, 2, 3, 5]).node_list(), "0,2-3,5");
    }

    #[test]
    fn physical_addresses_count_changes_and_only_on_a_node() {
        let mut seen = PhysSeen::default();
        for (phys, node) in [(0x1000, Some(0)), (0x1000, Some(0)), (0x2000, Some(1))] {
            seen.add(phys, node);
        }
        seen.add(0x3000, None);
        assert_eq!((seen.changes, seen.node_list().as_str()), (2, "0-1"));
    }

    #[test]
    fn bit_sets_hold_numbers_past_one_word() {
        let mut set = BitSet::default();
        for n in [130, 0, 64, 63, 64] {
            set.insert(n);
        }
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 63, 64, 130]);
        assert_eq!(set.len(), 4);
        assert!(set.contains(130) && !set.contains(129) && !set.contains(4000));
    }
}
