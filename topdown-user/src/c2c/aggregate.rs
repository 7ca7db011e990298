//! Memory samples classified and grouped into [`C2cData`], one at a time in time order: the
//! hot loop of `c2c report`. Each distinct classification input (data_src, whether the sample
//! has an address, whether it is mapped) is classified once; an entry counts its samples per
//! class and NUMA node; the counts become perf's statistics per line once, at the end, and per
//! entry only for the entries a report shows ([`C2cData::entry_stats`]).

use std::hash::{Hash, Hasher};

use rustc_hash::FxHashMap;

use topdown_common::c2c::C2cStats;

use super::{
    display::{Coalesce, Field},
    lines::{C2cData, ClassCount, Cycles, Entry, EntryKey, Line, LineKey, NO_NODE},
    perf_data::{MemSample, MemoryTopology, Recording, SampleSink},
};

/// At most how many entries and lines [`C2cBuilder::new`] reserves room for.
const MAX_RESERVED: usize = 1 << 20;

/// Slots of [`Classes::recent`].
const RECENT: usize = 64;

/// Each distinct classification input, classified once.
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
#[derive(Clone, Copy, PartialEq, Eq)]
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

/// Builds [`C2cData`] one sample at a time, in time order (perf's order: physical-address
/// changes and each entry's first sample depend on it).
pub struct C2cBuilder {
    line_size: u64,
    /// Which sample fields tell entries apart (`-c`).
    fields: KeyFields,
    memory: Option<MemoryTopology>,
    /// Index in the recording's node list of each CPU's node ([`NO_NODE`]: none).
    node_of_cpu: Vec<u32>,
    /// Code objects by path, numbered as met (`-c dso`).
    objects: FxHashMap<String, u32>,
    classes: Classes,
    line_ids: FxHashMap<LineKey, u32>,
    /// Each entry's index in `data.entries`, and its line's in `data.lines`.
    entry_ids: FxHashMap<EntryId, (u32, u32)>,
    /// Each entry's line, by the entry's index.
    entry_lines: Vec<u32>,
    data: C2cData,
}

impl C2cBuilder {
    /// For lines of `line_size` bytes (64, or 128 for `--double-cl`) and entries told apart as
    /// `coalesce` says, with the NUMA and memory topology of `recording`.
    pub fn new(recording: &Recording, line_size: u64, coalesce: Coalesce) -> Self {
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
        // Address space for as many entries and lines as the file has samples (up to a
        // bound): vectors that never move or copy; only the pages used are ever touched.
        let mut data = C2cData::default();
        let most = recording.max_samples.min(MAX_RESERVED);
        let _ = data.entries.try_reserve_exact(most);
        let _ = data.lines.try_reserve_exact(most);
        Self {
            line_size,
            fields: KeyFields::new(coalesce),
            memory: recording.memory.clone(),
            node_of_cpu,
            objects: FxHashMap::default(),
            classes: Classes::default(),
            line_ids: FxHashMap::default(),
            entry_ids: FxHashMap::default(),
            entry_lines: Vec::new(),
            data,
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

    /// The indexes of a new entry and of its line (new too, if it is the line's first).
    fn new_entry(&mut self, line: LineKey, key: EntryKey, sample: &MemSample) -> (u32, u32) {
        let lines = &mut self.data.lines;
        let line_size = self.line_size;
        let line_index = *self.line_ids.entry(line).or_insert_with(|| {
            let address = sample.addr & !(line_size - 1);
            lines.push((
                line,
                Line {
                    address,
                    ..Line::default()
                },
            ));
            lines.len() as u32 - 1
        });
        let entries = &mut self.data.entries;
        let index = entries.len() as u32;
        entries.push((
            key,
            Entry {
                first: *sample,
                ..Entry::default()
            },
        ));
        lines[line_index as usize].1.entries.push(index);
        self.entry_lines.push(line_index);
        self.entry_ids
            .insert(EntryId::new(&line, &key), (index, line_index));
        (index, line_index)
    }

    /// The classification of every sample added.
    pub fn finish(self) -> C2cData {
        let mut data = self.data;
        data.classes = self
            .classes
            .classified
            .iter()
            .map(|(one, _)| *one)
            .collect();
        // A line's counts are its entries' (every sample is in one), the total its lines'.
        for ((_, entry), &line) in data.entries.iter().zip(&self.entry_lines) {
            let line = &mut data.lines[line as usize].1;
            for count in &entry.counts {
                line.stats
                    .add_times(&data.classes[count.class as usize], count.samples);
            }
        }
        for (_, line) in &data.lines {
            data.total.add(&line.stats);
        }
        data
    }
}

impl SampleSink for C2cBuilder {
    /// Classifies `sample`, its addresses looked up in `recording`'s mappings.
    fn add(&mut self, recording: &Recording, sample: &MemSample) {
        let line_size = self.line_size;
        let maps = recording.mappings.get(&sample.pid);
        let data_map = maps.and_then(|maps| maps.find(sample.addr));
        let code_map = maps.and_then(|maps| maps.find(sample.ip));
        let mapped = data_map.is_some() && code_map.is_some();
        let class = self.classes.id(sample.data_src, sample.addr, mapped);
        let anonymous_private =
            !sample.kernel && data_map.is_some_and(|m| !m.shared && m.dev_ino == (0, 0, 0));
        let mapped_addr = data_map.map_or(sample.addr, |m| sample.addr - m.start + m.pgoff);
        let line_key = LineKey {
            kernel: sample.kernel,
            mapped: data_map.is_some(),
            dev_ino: data_map.map_or((0, 0, 0), |m| m.dev_ino),
            pid: if anonymous_private { sample.pid } else { 0 },
            line: mapped_addr & !(line_size - 1),
        };
        let fields = self.fields;
        let entry_key = EntryKey {
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
        let (index, line_index) = match self.entry_ids.get(&EntryId::new(&line_key, &entry_key)) {
            Some(&indexes) => indexes,
            None => self.new_entry(line_key, entry_key, sample),
        };

        let phys_node = match (&self.memory, sample.phys_addr) {
            (Some(memory), phys) if phys != 0 => memory.node_of(phys).map(|n| n as u32),
            _ => None,
        };
        let (one, cycles) = &self.classes.classified[class as usize];
        let entry = &mut self.data.entries[index as usize].1;
        let line = &mut self.data.lines[line_index as usize].1;
        line.phys.add(sample.phys_addr, phys_node);
        if sample.cgroup != 0 {
            line.by_cgroup.entry(sample.cgroup).or_default().add(one);
        }
        let node = self
            .node_of_cpu
            .get(sample.cpu as usize)
            .copied()
            .unwrap_or(NO_NODE);
        match entry
            .counts
            .iter_mut()
            .find(|c| c.class == class && c.node == node)
        {
            Some(count) => count.samples += 1,
            None => entry.counts.push(ClassCount {
                class,
                node,
                samples: 1,
            }),
        }
        entry.cpus.insert(sample.cpu);
        entry.phys.add(sample.phys_addr, phys_node);
        if let Some(cycles) = cycles {
            entry.cycles[*cycles as usize].add(sample.weight);
        }
    }
}

impl C2cData {
    /// Classifies every sample of `recording` (see [`C2cBuilder::new`]).
    pub fn from_recording(recording: &Recording, line_size: u64, coalesce: Coalesce) -> Self {
        let mut builder = C2cBuilder::new(recording, line_size, coalesce);
        for sample in &recording.samples {
            builder.add(recording, sample);
        }
        builder.finish()
    }
}

#[cfg(test)]
mod tests {
    use topdown_common::data_src::DataSrc;

    use super::*;

    fn data_src(op: u64, lvl: u64, snoop: u64) -> u64 {
        let mut src = DataSrc::decode(0);
        (src.op, src.lvl, src.snoop) = (op, lvl, snoop);
        src.encode()
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
