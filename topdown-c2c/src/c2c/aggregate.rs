//! Memory samples classified and grouped into [`C2cData`], one at a time in time order: the
//! hot loop of `c2c report`. Two stages: a `Resolver` keys each sample as perf does (it needs
//! the recording's mappings, which change as the file is read); an `Accumulator` classifies
//! and counts it. Each distinct classification input (data_src, whether the sample has an
//! address, whether it is mapped) is classified once; an entry counts its samples per class and
//! NUMA node; the counts become perf's statistics per line once, at the end, and per entry only
//! for the entries a report shows ([`C2cData::entry_stats`]). A file is read twice, entries
//! kept the second time only for the lines the first found worth showing, and each time on two
//! threads when there are two CPUs, one stage each ([`read_file`]).

use std::{
    hash::{Hash, Hasher},
    path::Path,
    rc::Rc,
    sync::mpsc,
};

use anyhow::Result;

use hashbrown::HashTable;
use rustc_hash::FxHashMap;

use topdown_common::c2c::C2cStats;

use super::{
    lines::{
        Access, C2cData, CacheLine, ClassCount, Contended, Cycles, Entry, EntryKey, FirstSample,
        Latency, LineKey, NO_NODE,
    },
    options::{Coalesce, Field, ReportOptions},
    rank::Shown,
    sharing,
};
use crate::perf_file::{
    contents::{MemSample, MemoryTopology, PerfData, SampleSink},
    reader,
};

/// At most how many entries and lines an accumulator's tables are sized for at the start.
const MAX_RESERVED: usize = 1 << 20;

/// Samples per line the line table is first sized for: it grows from there (its 72-byte slots
/// sized for every sample would be most of a small report's memory; a recording has several
/// samples per line as a rule).
const SAMPLES_PER_LINE: usize = 8;

/// Slots of [`Classes::recent`].
const RECENT: usize = 64;

/// Each distinct classification input, classified once.
#[derive(Clone)]
struct Classes {
    ids: FxHashMap<(u64, bool, bool), u32>,
    /// By id: how one such sample is counted, and its latency class.
    classified: Vec<(C2cStats, Option<Cycles>)>,
    /// The last input seen per slot (by data_src) and its id: a recording repeats a few
    /// data_src values, and this spares most samples the hash map.
    recent: [((u64, bool, bool), u32); RECENT],
}

impl Default for Classes {
    fn default() -> Self {
        Self {
            ids: FxHashMap::default(),
            classified: Vec::new(),
            // Never matches: an id the map has not handed out.
            recent: [((0, false, false), u32::MAX); RECENT],
        }
    }
}

impl Classes {
    /// The slot of `data_src` in `recent`.
    const fn slot(data_src: u64) -> usize {
        (data_src ^ data_src >> 21 ^ data_src >> 42) as usize % RECENT
    }

    /// The id of a sample's classification (perf's `c2c_decode_stats` looks only at whether
    /// the data address is 0).
    fn id(&mut self, data_src: u64, addr: u64, mapped: bool) -> u32 {
        let input = (data_src, addr != 0, mapped);
        let slot = Self::slot(data_src);
        let (last, id) = self.recent[slot];
        if last == input && id != u32::MAX {
            return id;
        }
        let classified = &mut self.classified;
        let id = *self.ids.entry(input).or_insert_with(|| {
            let mut one = C2cStats::default();
            one.add_sample(data_src, addr, mapped);
            classified.push((one, Cycles::of(&one)));
            classified.len() as u32 - 1
        });
        self.recent[slot] = (input, id);
        id
    }
}

/// An entry and its line packed into words: the key the builder finds an entry by, compared
/// word by word and hashed as one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EntryId {
    line: u64,
    inode: u64,
    device: u64,
    /// The line's process, mode and mapped flag.
    owner: u64,
    /// The offset in the line and the object.
    offset: u64,
    /// Process and thread.
    task: u64,
    iaddr: u64,
}

impl EntryId {
    fn new(line: &LineKey, entry: &EntryKey) -> Self {
        let (major, minor, inode) = line.dev_ino;
        Self {
            line: line.line,
            inode,
            device: u64::from(major) << 32 | u64::from(minor),
            owner: u64::from(line.pid)
                | u64::from(line.kernel) << 32
                | u64::from(line.mapped) << 33,
            // The offset is below the line size.
            offset: entry.offset | u64::from(entry.dso) << 32,
            task: u64::from(entry.pid) | u64::from(entry.tid) << 32,
            iaddr: entry.iaddr,
        }
    }

    /// The line and entry keys packed in this id.
    fn keys(&self) -> (LineKey, EntryKey) {
        let line = LineKey {
            kernel: self.owner >> 32 & 1 == 1,
            mapped: self.owner >> 33 & 1 == 1,
            dev_ino: ((self.device >> 32) as u32, self.device as u32, self.inode),
            pid: self.owner as u32,
            line: self.line,
        };
        let entry = EntryKey {
            offset: self.offset & 0xffff_ffff,
            pid: self.task as u32,
            tid: (self.task >> 32) as u32,
            iaddr: self.iaddr,
            dso: (self.offset >> 32) as u32,
        };
        (line, entry)
    }
}

impl Hash for EntryId {
    /// One word mixed from those that tell entries apart most (equal ids hash equal): the
    /// hottest lookup of the report.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(
            self.line
                ^ self.inode.rotate_left(17)
                ^ self.owner.rotate_left(40)
                ^ self.offset.rotate_left(52)
                ^ self.task.rotate_left(7)
                ^ self.iaddr.rotate_left(23),
        );
    }
}

/// Which sample fields tell entries apart (`-c`): masks of all ones for those that do.
#[derive(Clone, Copy)]
struct KeyFields {
    pid: u32,
    tid: u32,
    iaddr: u64,
    dso: bool,
}

impl KeyFields {
    fn new(coalesce: Coalesce) -> Self {
        let mask = |field| if coalesce.has(field) { u64::MAX } else { 0 };
        Self {
            pid: mask(Field::Pid) as u32,
            tid: mask(Field::Tid) as u32,
            iaddr: mask(Field::Iaddr),
            dso: coalesce.has(Field::Dso),
        }
    }
}

/// A sample resolved against its process's mappings: its line and entry as perf keys them.
#[derive(Clone, Copy)]
struct Resolved {
    id: EntryId,
    /// Both its data and code addresses are in mappings.
    mapped: bool,
    sample: MemSample,
}

/// The first stage: what needs the recording's mappings (which change as it is read).
struct Resolver {
    line_size: u64,
    /// Which sample fields tell entries apart (`-c`).
    fields: KeyFields,
    /// Code objects by path, numbered as met (`-c dso`).
    objects: FxHashMap<String, u32>,
}

impl Resolver {
    fn new(line_size: u64, coalesce: Coalesce) -> Self {
        Self {
            line_size,
            fields: KeyFields::new(coalesce),
            objects: FxHashMap::default(),
        }
    }

    /// The number of the object at `path` (`-c dso`).
    fn object(&mut self, path: &str) -> u32 {
        if let Some(&index) = self.objects.get(path) {
            return index;
        }
        let index = self.objects.len() as u32;
        self.objects.insert(path.to_owned(), index);
        index
    }

    /// `sample`, its addresses looked up in `recording`'s mappings, keyed as perf keys it.
    fn resolve(&mut self, recording: &PerfData, sample: &MemSample) -> Resolved {
        let line_size = self.line_size;
        let maps = recording.mappings.get(&sample.pid);
        let data_map = maps.and_then(|maps| maps.find(sample.addr));
        let code_map = maps.and_then(|maps| maps.find(sample.ip));
        let anonymous_private =
            !sample.kernel && data_map.is_some_and(|m| !m.shared && m.dev_ino == (0, 0, 0));
        let mapped_addr = data_map.map_or(sample.addr, |m| sample.addr - m.start + m.pgoff);
        let fields = self.fields;
        let line = LineKey {
            kernel: sample.kernel,
            mapped: data_map.is_some(),
            dev_ino: data_map.map_or((0, 0, 0), |m| m.dev_ino),
            pid: if anonymous_private { sample.pid } else { 0 },
            line: mapped_addr & !(line_size - 1),
        };
        let entry = EntryKey {
            offset: sample.addr & (line_size - 1),
            pid: sample.pid & fields.pid,
            tid: sample.tid & fields.tid,
            iaddr: sample.ip & fields.iaddr,
            dso: if fields.dso {
                self.object(code_map.map_or("", |m| m.path.as_str()))
            } else {
                0
            },
        };
        Resolved {
            id: EntryId::new(&line, &entry),
            mapped: data_map.is_some() && code_map.is_some(),
            sample: *sample,
        }
    }
}

/// The second stage: resolved samples classified and counted into lines and entries.
///
/// Lines and entries are found through hash tables of their indexes only (4 bytes a slot):
/// their keys are compared where they are stored, in [`C2cData::lines`] and
/// [`C2cData::entries`]. A recording of a busy host has about as many entries as samples, so
/// every byte per entry counts (BENCHMARKS.md: "c2c report on a million distinct samples").
#[derive(Clone)]
struct Accumulator {
    line_size: u64,
    memory: Option<MemoryTopology>,
    /// Index in the recording's node list of each CPU's node ([`NO_NODE`]: none).
    node_of_cpu: Vec<u32>,
    classes: Classes,
    /// Each line's key, index in `data.lines` and (when lines are kept by [`Keep::Lines`])
    /// contended counts, by the hash of its key.
    line_ids: HashTable<LineSlot>,
    /// Index of each entry in `data.entries`, by the hash of its [`EntryId`].
    entry_ids: HashTable<u32>,
    /// Samples per (line, cgroup id, class), for samples that carry a cgroup.
    cgroups: FxHashMap<(u32, u64, u32), u64>,
    /// Stores and contended loads per (line, thread, word), when sharing is labelled.
    accesses: Option<AccessCounts>,
    /// Which lines get entries.
    keep: Keep,
    /// Samples per class: all, and those of the lines `keep` says are shared.
    samples: Vec<u64>,
    shared_samples: Vec<u64>,
    latency: Latency,
    data: C2cData,
}

/// Which lines an [`Accumulator`] keeps entries (and nodes, cgroups and accesses) for. Every
/// line gets its contended counts, and every sample counts in the totals and latencies.
#[derive(Clone)]
enum Keep {
    /// Every line: one pass (`--show-all`, and the live view).
    All,
    /// The lines a first pass found `shown`, by index (lines are numbered in the order of
    /// their first samples: the same in every pass over a file), and those it found `shared`
    /// (their samples make [`C2cData::shared`]). Both empty for the first pass itself, which
    /// keeps no entries and counts no shared samples: it finds the lines' contended counts.
    Lines { shown: Vec<bool>, shared: Vec<bool> },
}

impl Keep {
    /// What a first pass keeps: no entries, only the lines' contended counts.
    const fn first_pass() -> Self {
        Self::Lines {
            shown: Vec::new(),
            shared: Vec::new(),
        }
    }

    /// Whether line `index` is shown, and (with [`Self::Lines`]) shared.
    fn line(&self, index: u32) -> (bool, bool) {
        match self {
            Self::All => (true, false),
            Self::Lines { shown, shared } => (
                shown.get(index as usize) == Some(&true),
                shared.get(index as usize) == Some(&true),
            ),
        }
    }

    /// What a second pass keeps, from a first pass's `lines`: the lines `options` shows.
    fn second_pass(lines: &[(LineKey, CacheLine)], options: ReportOptions) -> Self {
        let shown = Shown::new(lines.iter().map(|(_, l)| &l.contended), options);
        Self::Lines {
            shown: lines
                .iter()
                .map(|(_, l)| shown.line(&l.contended))
                .collect(),
            shared: lines.iter().map(|(_, l)| l.contended.is_shared()).collect(),
        }
    }
}

/// A line in [`Accumulator::line_ids`]. With [`Keep::Lines`] every sample looks its line up
/// (most lines of a busy recording are not shown): its key and counts are in the slot the
/// lookup reads, not in a second place in memory (a cache miss fewer per sample, about a
/// third of the lookup at ten million samples).
#[derive(Clone)]
struct LineSlot {
    key: LineKey,
    /// The line's index in [`C2cData::lines`].
    index: u32,
    /// Its contended counts so far (copied to the line at the end).
    contended: Contended,
}

/// (stores, contended loads) per (line, thread, word).
type AccessCounts = FxHashMap<(u32, u32, u8), (u32, u32)>;

/// The hash of a line's key.
fn line_hash(key: &LineKey) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    key.hash(&mut hasher);
    hasher.finish()
}

/// The hash of an entry's id.
fn entry_hash(id: &EntryId) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    id.hash(&mut hasher);
    hasher.finish()
}

impl Accumulator {
    /// For `line_size`-byte lines of the samples of `recording`, with its NUMA and memory
    /// topology.
    fn new(recording: &PerfData, line_size: u64, sharing: bool, keep: Keep) -> Self {
        let mut node_of_cpu = Vec::new();
        for (node, cpus) in recording.numa_cpus.iter().enumerate() {
            for &cpu in cpus {
                let cpu = cpu as usize;
                if node_of_cpu.len() <= cpu {
                    node_of_cpu.resize(cpu + 1, NO_NODE);
                }
                node_of_cpu[cpu] = node as u32;
            }
        }
        // Lines and entries grow with what the file holds (152 bytes an entry, 128 a line;
        // growing a vector remaps it, no copy). The entry table is sized once for as many
        // entries as the file can hold samples (up to a bound), as rehashing a million
        // entries costs a third of the report: resident are its 1-byte control words (about
        // 2 bytes per possible sample) and the 4-byte slots filled.
        let data = C2cData::default();
        let most = recording.max_samples.min(MAX_RESERVED);
        Self {
            line_size,
            memory: recording.memory.clone(),
            node_of_cpu,
            classes: Classes::default(),
            line_ids: HashTable::with_capacity(most / SAMPLES_PER_LINE),
            // A second pass's entries are those of the lines shown: few, as a rule.
            entry_ids: HashTable::with_capacity(if let Keep::All = keep { most } else { 0 }),
            cgroups: FxHashMap::default(),
            accesses: sharing.then(FxHashMap::default),
            keep,
            samples: Vec::new(),
            shared_samples: Vec::new(),
            latency: Latency::default(),
            data,
        }
    }

    /// The slot of the line of `r` (key `key`), a new line if it is the line's first sample.
    fn line_of(&mut self, r: &Resolved, key: &LineKey) -> &mut LineSlot {
        let lines = &mut self.data.lines;
        let line_size = self.line_size;
        match self
            .line_ids
            .entry(line_hash(key), |s| s.key == *key, |s| line_hash(&s.key))
        {
            hashbrown::hash_table::Entry::Occupied(found) => found.into_mut(),
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                let index = lines.len() as u32;
                lines.push((*key, CacheLine::new(r.sample.addr & !(line_size - 1))));
                let slot = LineSlot {
                    key: *key,
                    index,
                    contended: Contended::default(),
                };
                vacant.insert(slot).into_mut()
            }
        }
    }

    /// The index of the entry of `r` (whose hash is `hash`), a new one of line `line` if it is
    /// the entry's first sample.
    fn entry_of(&mut self, r: &Resolved, hash: u64, line: u32) -> u32 {
        let (_, entry_key) = r.id.keys();
        let entries = &self.data.entries;
        let found = self.entry_ids.find(hash, |&i| {
            let (key, entry) = &entries[i as usize];
            entry.line == line && *key == entry_key
        });
        if let Some(&index) = found {
            return index;
        }
        let entries = &mut self.data.entries;
        let index = entries.len() as u32;
        entries.push((entry_key, Entry::new(line, FirstSample::from(&r.sample))));
        let data = &self.data;
        self.entry_ids
            .insert_unique(hash, index, |&i| entry_hash(&entry_id(data, i)));
        self.data.link(index);
        index
    }

    /// The index of the entry of `r` with every line kept: the entry is looked up first (most
    /// samples of a busy recording are not their line's first), its line only for a new one.
    fn entry_of_any_line(&mut self, r: &Resolved, hash: u64) -> u32 {
        let (lines, entries) = (&self.data.lines, &self.data.entries);
        let (line_key, entry_key) = r.id.keys();
        let found = self.entry_ids.find(hash, |&i| {
            let (key, entry) = &entries[i as usize];
            *key == entry_key && lines[entry.line as usize].0 == line_key
        });
        match found {
            Some(&index) => index,
            None => {
                let line = self.line_of(r, &line_key).index;
                self.entry_of(r, hash, line)
            }
        }
    }

    /// Counts `class` (of `weight`) in the totals and latencies.
    fn count(&mut self, class: u32, weight: u64) {
        let class = class as usize;
        if self.samples.len() <= class {
            self.samples.resize(class + 1, 0);
            self.shared_samples.resize(class + 1, 0);
        }
        self.samples[class] += 1;
        // Latencies count for loads only (perf's `compute_stats`).
        match self.classes.classified[class].1 {
            None => {}
            Some(Cycles::Load) => {
                self.latency.all_cycles += weight;
                self.latency.uncontended_cycles += weight;
                self.latency.uncontended_loads += 1;
            }
            Some(_) => self.latency.all_cycles += weight,
        }
    }

    /// Classifies `r` and counts it in its line, and in its entry where its line is kept.
    fn add(&mut self, r: &Resolved) {
        let sample = &r.sample;
        let class = self.classes.id(sample.data_src, sample.addr, r.mapped);
        let (one, cycles) = self.classes.classified[class as usize];
        let weight = if cycles.is_some() { sample.weight } else { 0 };
        self.count(class, weight);
        let hash = entry_hash(&r.id);
        let (line_index, index) = if let Keep::All = self.keep {
            let index = self.entry_of_any_line(r, hash);
            (self.data.entries[index as usize].1.line, index)
        } else {
            let slot = self.line_of(r, &r.id.keys().0);
            slot.contended.add_times(&one, 1);
            let line = slot.index;
            let (shown, shared) = self.keep.line(line);
            if shared {
                self.shared_samples[class as usize] += 1;
            }
            if !shown {
                return;
            }
            (line, self.entry_of(r, hash, line))
        };
        let node = self
            .node_of_cpu
            .get(sample.cpu as usize)
            .copied()
            .unwrap_or(NO_NODE);
        let phys_node = match (&self.memory, sample.phys_addr) {
            (Some(memory), phys) if phys != 0 => memory.node_of(phys).map(|n| n as u32),
            _ => None,
        };
        let entry = &mut self.data.entries[index as usize].1;
        match entry
            .counts
            .iter_mut()
            .find(|c| c.class == class && c.node == node)
        {
            Some(count) => {
                count.samples += 1;
                count.weight += weight;
            }
            None => entry.counts.push(ClassCount {
                class,
                node,
                samples: 1,
                weight,
            }),
        }
        entry.cpus.insert(sample.cpu);
        entry.phys.add(sample.phys_addr, phys_node);
        self.data.lines[line_index as usize]
            .1
            .phys
            .add(sample.phys_addr, phys_node);
        if sample.cgroup != 0 {
            *self
                .cgroups
                .entry((line_index, sample.cgroup, class))
                .or_default() += 1;
        }
        if let Some(accesses) = &mut self.accesses {
            let contended = one.tot_hitm > 0 || one.tot_peer > 0;
            if one.store > 0 || contended {
                let word = ((sample.addr & (self.line_size - 1)) / sharing::WORD) as u8;
                let counts = accesses.entry((line_index, sample.tid, word)).or_default();
                counts.0 = counts.0.saturating_add(u32::from(one.store > 0));
                counts.1 = counts.1.saturating_add(u32::from(contended));
            }
        }
    }

    /// The classification of every sample added.
    fn finish(self) -> C2cData {
        let mut data = self.data;
        (data.classes, data.class_cycles) = self.classes.classified.iter().copied().unzip();
        data.total = data.stats_of(&self.samples);
        data.latency = self.latency;
        data.shared = match self.keep {
            Keep::All => {
                data.sum_contended_of_entries();
                data.shared_of_entries()
            }
            Keep::Lines { .. } => {
                for slot in self.line_ids.iter() {
                    data.lines[slot.index as usize].1.contended = slot.contended;
                }
                let lines = data.lines.iter().filter(|(_, l)| l.contended.is_shared());
                (lines.count(), data.stats_of(&self.shared_samples))
            }
        };
        let mut by_line: FxHashMap<u32, FxHashMap<u64, C2cStats>> = FxHashMap::default();
        for ((line, cgroup, class), samples) in self.cgroups {
            by_line
                .entry(line)
                .or_default()
                .entry(cgroup)
                .or_default()
                .add_times(&data.classes[class as usize], samples);
        }
        if let Some(accesses) = self.accesses {
            data.accesses = accesses
                .into_iter()
                .map(|((line, tid, word), (stores, contended))| Access {
                    line,
                    word,
                    tid,
                    stores,
                    contended,
                })
                .collect();
            data.accesses.sort_by_key(|a| (a.line, a.word, a.tid));
        }
        for (line, groups) in by_line {
            let mut groups: Vec<(u64, C2cStats)> = groups.into_iter().collect();
            groups.sort_by_key(|(id, _)| *id);
            data.lines[line as usize].1.by_cgroup = groups.into_boxed_slice();
        }
        data
    }
}

/// The id of entry `index` of `data`, as [`Resolver::resolve`] made it.
fn entry_id(data: &C2cData, index: u32) -> EntryId {
    let (key, entry) = &data.entries[index as usize];
    EntryId::new(&data.lines[entry.line as usize].0, key)
}

/// Builds [`C2cData`] one sample at a time, in time order (perf's order: physical-address
/// changes and each entry's first sample depend on it).
pub struct C2cBuilder {
    resolver: Resolver,
    accumulator: Accumulator,
}

impl C2cBuilder {
    /// For lines of `options.line_size()` bytes (64, or 128 for `--double-cl`) and entries
    /// told apart as `options.coalesce` says (with each thread's stores and contended loads per
    /// word when `options.sharing`), with the NUMA and memory topology of `recording`.
    pub fn new(recording: &PerfData, options: ReportOptions) -> Self {
        Self {
            resolver: Resolver::new(options.line_size(), options.coalesce),
            accumulator: Accumulator::new(
                recording,
                options.line_size(),
                options.sharing,
                Keep::All,
            ),
        }
    }

    /// The classification of every sample added.
    pub fn finish(self) -> C2cData {
        self.accumulator.finish()
    }

    /// The classification of every sample added so far (the live view), the builder kept.
    pub fn snapshot(&self) -> C2cData {
        self.accumulator.clone().finish()
    }
}

impl SampleSink for C2cBuilder {
    /// Classifies `sample`, its addresses looked up in `recording`'s mappings.
    fn add(&mut self, recording: &PerfData, sample: &MemSample) {
        let resolved = self.resolver.resolve(recording, sample);
        self.accumulator.add(&resolved);
    }
}

/// Resolved samples handed from the reading thread to the counting one, in batches.
const BATCH: usize = 512;

/// What the reading thread tells the counting thread.
enum Message {
    /// Start (again) from nothing, for the samples of this recording (its header).
    Start(Box<PerfData>),
    /// The next resolved samples, in order.
    Batch(Vec<Resolved>),
}

/// The reading thread's sink: resolves samples and sends them on in batches.
struct Batcher {
    resolver: Resolver,
    batch: Vec<Resolved>,
    to_counter: mpsc::SyncSender<Message>,
    /// Batches the counting thread is done with, to fill again (they stay in cache).
    spent: Rc<mpsc::Receiver<Vec<Resolved>>>,
}

impl Batcher {
    fn flush(&mut self) {
        let empty = self
            .spent
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.batch, empty);
        // The counting thread only stops early if it panicked; join reports that.
        let _ = self.to_counter.send(Message::Batch(full));
    }
}

impl SampleSink for Batcher {
    fn add(&mut self, recording: &PerfData, sample: &MemSample) {
        self.batch.push(self.resolver.resolve(recording, sample));
        if self.batch.len() == BATCH {
            self.flush();
        }
    }
}

/// Reads the perf.data at `path` and classifies its samples (see [`C2cBuilder::new`]), on two
/// threads when the machine lets us: one reads and resolves, the other counts.
///
/// Entries are kept only for the lines the report shows (all with `--show-all`): a first
/// pass over the file counts each line's contended loads, which decide the lines shown; a
/// second one counts again and keeps entries for those lines. A busy host's recording has
/// about one entry per sample and few lines worth showing, so memory follows the report, not
/// the file (BENCHMARKS.md: "c2c report at ten million samples").
///
/// `progress` is told, every 16 MB read, which pass of how many it is in and how far.
pub fn read_file(
    path: &Path,
    options: ReportOptions,
    progress: &(dyn Fn(ReadProgress) + Sync),
) -> Result<(PerfData, C2cData)> {
    let file = reader::open(path)?;
    // What pass `pass` of `passes` tells `progress` as it reads.
    let telling = |pass, passes| {
        move |read, size| {
            progress(ReadProgress {
                pass,
                passes,
                read,
                size,
            });
        }
    };
    if options.show_all {
        return read_pass(&file, options, &Keep::All, &telling(1, 1));
    }
    let (_, lines) = read_pass(&file, options, &Keep::first_pass(), &telling(1, 2))?;
    let keep = Keep::second_pass(&lines.lines, options);
    drop(lines);
    read_pass(&file, options, &keep, &telling(2, 2))
}

/// How far [`read_file`] is: pass `pass` of `passes` over the file, `read` bytes of its
/// `size` into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadProgress {
    /// The pass, from 1.
    pub pass: u32,
    /// How many passes the report takes (1 with `--show-all`, else 2).
    pub passes: u32,
    /// Bytes of the file read in this pass.
    pub read: u64,
    /// The file's size in bytes.
    pub size: u64,
}

impl ReadProgress {
    /// How far the whole read is, in percent of every pass's bytes.
    pub fn percent(&self) -> u64 {
        let size = self.size.max(1);
        let done = u64::from(self.pass.saturating_sub(1)) * size + self.read.min(size);
        done * 100 / (u64::from(self.passes.max(1)) * size)
    }
}

/// One pass over `file`, keeping entries for the lines `keep` says, telling `told` how far.
fn read_pass(
    file: &reader::Opened,
    options: ReportOptions,
    keep: &Keep,
    told: &(dyn Fn(u64, u64) + Sync),
) -> Result<(PerfData, C2cData)> {
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        let (line_size, sharing) = (options.line_size(), options.sharing);
        let (recording, builder) = file.read_telling(
            |recording| C2cBuilder {
                resolver: Resolver::new(line_size, options.coalesce),
                accumulator: Accumulator::new(recording, line_size, sharing, keep.clone()),
            },
            told,
        )?;
        return Ok((recording, builder.finish()));
    }
    read_file_on_two_threads(file, options, keep, told)
}

/// [`read_file`] on two threads: this one counts what the other reads and resolves, in
/// batches (sent in order, handed back to be filled again).
fn read_file_on_two_threads(
    file: &reader::Opened,
    options: ReportOptions,
    keep: &Keep,
    told: &(dyn Fn(u64, u64) + Sync),
) -> Result<(PerfData, C2cData)> {
    let (line_size, coalesce, sharing) = (options.line_size(), options.coalesce, options.sharing);
    let (to_counter, from_reader) = mpsc::sync_channel(8);
    let (to_reader, spent) = mpsc::channel();
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || -> Result<PerfData> {
            let spent = Rc::new(spent);
            let (recording, mut sender) = file.read_telling(
                |recording| {
                    // A new sink means a new start (a file out of time order is read again).
                    let _ = to_counter.send(Message::Start(Box::new(recording.clone())));
                    Batcher {
                        resolver: Resolver::new(line_size, coalesce),
                        batch: Vec::with_capacity(BATCH),
                        to_counter: to_counter.clone(),
                        spent: Rc::clone(&spent),
                    }
                },
                told,
            )?;
            sender.flush();
            Ok(recording)
        });
        let mut accumulator = None;
        for message in from_reader {
            match message {
                Message::Start(recording) => {
                    accumulator = Some(Accumulator::new(
                        &recording,
                        line_size,
                        sharing,
                        keep.clone(),
                    ));
                }
                Message::Batch(mut batch) => {
                    if let Some(accumulator) = &mut accumulator {
                        for resolved in &batch {
                            accumulator.add(resolved);
                        }
                    }
                    batch.clear();
                    let _ = to_reader.send(batch);
                }
            }
        }
        let recording = reader
            .join()
            .map_err(|_| anyhow::anyhow!("the reading thread failed"))??;
        let accumulator = accumulator
            .unwrap_or_else(|| Accumulator::new(&recording, line_size, sharing, keep.clone()));
        Ok((recording, accumulator.finish()))
    })
}

#[cfg(test)]
mod tests {
    use topdown_common::data_src::DataSrc;

    use super::*;

    #[test]
    fn progress_counts_every_pass_in_one_percentage() {
        let at = |pass, passes, read| {
            ReadProgress {
                pass,
                passes,
                read,
                size: 1000,
            }
            .percent()
        };
        assert_eq!(at(1, 2, 0), 0);
        assert_eq!(at(1, 2, 500), 25);
        assert_eq!(at(2, 2, 0), 50);
        assert_eq!(at(2, 2, 1000), 100);
        assert_eq!(at(1, 1, 990), 99);
        // A read past the size (a file grown while mapped) stops at its pass's end.
        assert_eq!(at(1, 2, 5000), 50);
        let empty = ReadProgress {
            pass: 1,
            passes: 1,
            read: 0,
            size: 0,
        };
        assert_eq!(empty.percent(), 0);
    }

    fn data_src(op: u64, lvl: u64, snoop: u64) -> u64 {
        let mut src = DataSrc::decode(0);
        (src.op, src.lvl, src.snoop) = (op, lvl, snoop);
        src.encode()
    }

    /// Two processes with code, private anonymous and shared file memory, four CPUs on two
    /// nodes, memory on both; samples of every kind, in time order or not.
    fn recording(in_order: bool) -> PerfData {
        use topdown_common::data_src::{lvl, op, snoop};

        use crate::perf_file::maps::Mapping;
        let map = |start: u64, len: u64, path: &str, dev_ino, shared| Mapping {
            start,
            end: start + len,
            pgoff: 0,
            dev_ino,
            shared,
            prot: if path.starts_with("/bin") { 5 } else { 3 },
            path: path.into(),
        };
        let mut recording = PerfData {
            events: vec!["cpu/mem-loads,ldlat=30/P".into()],
            numa_cpus: vec![vec![0, 1], vec![2, 3]],
            memory: Some(MemoryTopology {
                block_size: 0x1000_0000,
                nodes: vec![(0, vec![0b01]), (1, vec![0b10])],
            }),
            ..PerfData::default()
        };
        for pid in [100, 200] {
            let maps = [
                map(0x40_0000, 0x1_0000, "/bin/w", (8, 1, 11), false),
                map(0x7f00_0000_0000, 0x10_0000, "//anon", (0, 0, 0), false),
                map(0x7f10_0000_0000, 0x10_0000, "/dev/shm/s", (0, 25, 7), true),
            ];
            recording.mappings.insert(pid, maps.into_iter().collect());
        }
        let kinds = [
            data_src(op::LOAD, lvl::HIT | lvl::L3, snoop::HITM),
            data_src(op::LOAD, lvl::HIT | lvl::L1, snoop::NONE),
            data_src(op::LOAD, lvl::HIT | lvl::LOC_RAM, snoop::HIT),
            data_src(op::STORE, lvl::HIT | lvl::L1, 0),
            0,
        ];
        let mut next = crate::perf_file::test_random(0x2545_f491_4f6c_dd1d_u64);
        for i in 0..3000 {
            let pid = if next(2) == 0 { 100 } else { 200 };
            let addr = match next(8) {
                0 => 0,
                1 => 0x1234_0000,
                2..=4 => 0x7f00_0000_0000 + next(64) * 64 + next(8) * 8,
                _ => 0x7f10_0000_0000 + next(64) * 64 + next(8) * 8,
            };
            recording.samples.push(MemSample {
                pid,
                tid: pid + next(2) as u32,
                cpu: next(4) as u32,
                ip: 0x40_1000 + next(16) * 0x10,
                addr,
                data_src: kinds[next(kinds.len() as u64) as usize],
                weight: next(400),
                phys_addr: [0, 0x0800_0000, 0x1800_0000][next(3) as usize],
                time: if in_order { i } else { (i * 7919) % 3001 },
                cgroup: [0, 1, 2][next(3) as usize],
                kernel: false,
            });
        }
        recording.cgroups = [(1, "/a".to_owned()), (2, "/b".to_owned())].into();
        recording
    }

    /// [`recording`] written in time order and out of it, into `dir`.
    fn recording_files(dir: &Path) -> [std::path::PathBuf; 2] {
        [true, false].map(|in_order| {
            let path = dir.join(format!("{in_order}.data"));
            std::fs::write(
                &path,
                crate::perf_file::writer::encode(&recording(in_order), None),
            )
            .unwrap();
            path
        })
    }

    /// Every sample of `recording`, classified on this thread.
    fn one_thread(recording: &PerfData, options: ReportOptions) -> C2cData {
        let mut builder = C2cBuilder::new(recording, options);
        for sample in &recording.samples {
            builder.add(recording, sample);
        }
        builder.finish()
    }

    #[test]
    fn two_threads_count_what_one_does_in_time_order_or_not() {
        let dir = tempfile::tempdir().unwrap();
        for path in recording_files(dir.path()) {
            for (coalesce, sharing) in [("iaddr", false), ("pid,tid,dso", true)] {
                let options = ReportOptions {
                    coalesce: Coalesce::parse(coalesce).unwrap(),
                    sharing,
                    ..ReportOptions::default()
                };
                let (_, two) = read_file_on_two_threads(
                    &reader::open(&path).unwrap(),
                    options,
                    &Keep::All,
                    &|_, _| {},
                )
                .unwrap();
                let read = reader::read_all(&path).unwrap();
                let one = one_thread(&read, options);
                assert_eq!(two.total, one.total);
                assert_eq!(two.lines, one.lines);
                assert_eq!(two.entries, one.entries);
                assert_eq!(two.classes, one.classes);
                assert_eq!(two.accesses, one.accesses);
                assert_eq!(two.latency, one.latency);
                assert_eq!(one.accesses.is_empty(), !sharing, "tracked only when asked");
                // Not trivially equal: everything counted, shared lines, cgroups, nodes.
                assert_eq!(one.total.nr_entries, 3000);
                assert!(one.shared().0 > 10 && one.total.lcl_hitm > 0);
                assert!(one.lines.iter().any(|(_, l)| l.by_cgroup.len() == 2));
                assert!(one.entries.iter().any(|(_, e)| e.phys.nodes.len() == 2));
            }
        }
    }

    #[test]
    fn two_passes_keep_the_entries_of_the_lines_shown_and_count_what_one_pass_does() {
        use crate::c2c::{options::C2cDisplay, rank};
        let dir = tempfile::tempdir().unwrap();
        for path in recording_files(dir.path()) {
            for (display, sharing) in [(C2cDisplay::Tot, false), (C2cDisplay::Lcl, true)] {
                let options = ReportOptions {
                    display,
                    sharing,
                    ..ReportOptions::default()
                };
                let (_, two) = read_file(&path, options, &|_| {}).unwrap();
                let (_, one) = read_pass(
                    &reader::open(&path).unwrap(),
                    options,
                    &Keep::All,
                    &|_, _| {},
                )
                .unwrap();
                assert_eq!(two.total, one.total);
                assert_eq!(two.latency, one.latency);
                assert_eq!(two.shared(), one.shared());
                assert_eq!(two.classes, one.classes);
                assert_eq!(two.lines.len(), one.lines.len());
                let shown = rank::Shown::new(one.lines.iter().map(|(_, l)| &l.contended), options);
                let mut counted = [0; 2];
                for ((key_two, two_line), (key_one, one_line)) in two.lines.iter().zip(&one.lines) {
                    assert_eq!(key_two, key_one);
                    assert_eq!(two_line.contended, one_line.contended);
                    assert_eq!(two_line.address, one_line.address);
                    let entries = |data: &C2cData, line| -> Vec<_> {
                        data.entries_of(line)
                            .map(|(key, e)| {
                                (
                                    *key,
                                    e.counts.clone(),
                                    e.cpus.clone(),
                                    e.phys.clone(),
                                    e.first,
                                    e.line,
                                )
                            })
                            .collect()
                    };
                    let is_shown = shown.line(&one_line.contended);
                    counted[usize::from(is_shown)] += 1;
                    if is_shown {
                        assert_eq!(entries(&two, two_line), entries(&one, one_line));
                        assert_eq!(two.line_stats(two_line), one.line_stats(one_line));
                        assert_eq!(two_line.phys, one_line.phys);
                        assert_eq!(two_line.by_cgroup, one_line.by_cgroup);
                        assert_eq!(two.accesses_of(two_line), one.accesses_of(one_line));
                    } else {
                        assert_eq!(two.entries_of(two_line).count(), 0);
                        assert!(two_line.by_cgroup.is_empty());
                    }
                }
                assert!(
                    counted[0] > 0 && counted[1] > 0,
                    "shown and not: {counted:?}"
                );
                assert!(two.entries.len() < one.entries.len());
                let address = |data: &C2cData| -> Vec<u64> {
                    rank::rank(data, options)
                        .lines
                        .iter()
                        .map(|l| l.address)
                        .collect()
                };
                assert_eq!(address(&two), address(&one));
                assert_eq!(
                    rank::rank(&two, options).total,
                    rank::rank(&one, options).total
                );
            }
        }
    }

    #[test]
    fn entry_ids_unpack_to_the_keys_they_were_packed_from() {
        let line = LineKey {
            kernel: true,
            mapped: true,
            dev_ino: (259, 7, 1 << 40),
            pid: 4242,
            line: 0x7f00_0000_1240,
        };
        let entry = EntryKey {
            offset: 0x38,
            pid: 4242,
            tid: 4243,
            iaddr: 0xffff_ffff_8100_0000,
            dso: 3,
        };
        assert_eq!(EntryId::new(&line, &entry).keys(), (line, entry));
        let other = LineKey {
            kernel: false,
            ..line
        };
        assert_ne!(EntryId::new(&other, &entry), EntryId::new(&line, &entry));
    }

    #[test]
    fn each_input_is_classified_once_and_slot_collisions_stay_apart() {
        use topdown_common::data_src::{lvl, op, snoop};
        let mut classes = Classes::default();
        let hitm = data_src(op::LOAD, lvl::HIT | lvl::L3, snoop::HITM);
        let id = classes.id(hitm, 0x1000, true);
        assert_eq!(classes.id(hitm, 0x2000, true), id, "only address 0 matters");
        assert_ne!(classes.id(hitm, 0, true), id, "no address: another class");
        assert_ne!(
            classes.id(hitm, 0x1000, false),
            id,
            "unmapped: another class"
        );
        // Inputs sharing a slot of the recent cache keep their own ids.
        let other = (1..)
            .map(|k| hitm ^ (k << 52))
            .find(|&d| Classes::slot(d) == Classes::slot(hitm))
            .unwrap();
        let other_id = classes.id(other, 0x1000, true);
        assert_ne!(other_id, id);
        assert_eq!(classes.id(hitm, 0x1000, true), id);
        assert_eq!(classes.id(other, 0x1000, true), other_id);
        let (one, cycles) = classes.classified[id as usize];
        assert_eq!((one.lcl_hitm, one.tot_hitm, one.load), (1, 1, 1));
        assert_eq!(cycles, Some(Cycles::LclHitm));
        assert_eq!(classes.classified.len(), 4);
    }
}
