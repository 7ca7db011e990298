//! perf.data files (`perf c2c record`, `perf mem record`) read into typed memory samples and
//! mappings at the edge. linux-perf-data reads the file and its MMAP records; the sample body is
//! parsed here, because the crate drops the WEIGHT and DATA_SRC fields c2c needs.

use std::{collections::HashMap, fs::File, io::BufReader, path::Path};

use anyhow::{Context as _, Result, bail};
use linux_perf_data::{
    Endianness, PerfFileReader, PerfFileRecord,
    linux_perf_event_reader::{EventRecord, RawData, RecordType, SampleFormat},
};

/// One memory sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// cgroup2 id of the sampled task (0: not recorded; `perf record --all-cgroups`).
    pub cgroup: u64,
    /// Sampled in kernel mode.
    pub kernel: bool,
}

/// One mapping of a process, from an MMAP or MMAP2 record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Device major and minor, inode (0 for anonymous memory).
    pub dev_ino: (u32, u32, u64),
    /// `MAP_SHARED`.
    pub shared: bool,
    /// The mapped file (`//anon` for anonymous memory).
    pub path: String,
}

impl Mapping {
    /// Whether `addr` falls in this mapping.
    pub const fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// Everything c2c needs from a recording.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    /// Memory samples, in file order.
    pub samples: Vec<MemSample>,
    /// Mappings by process id.
    pub mappings: HashMap<u32, Vec<Mapping>>,
    /// The recorded events' names (`cpu/mem-loads,ldlat=30/P`).
    pub events: Vec<String>,
    /// Physical memory topology (`HEADER_MEM_TOPOLOGY`), if recorded.
    pub memory: Option<MemoryTopology>,
    /// cgroup paths by id, from `PERF_RECORD_CGROUP` (`perf record --all-cgroups`).
    pub cgroups: HashMap<u64, String>,
    /// Each NUMA node's CPUs (`HEADER_NUMA_TOPOLOGY`), in the file's node order.
    pub numa_cpus: Vec<Vec<u32>>,
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
        let block = phys.checked_div(self.block_size)?;
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
        self.mappings
            .get(&pid)?
            .iter()
            .rev()
            .find(|m| m.contains(addr))
    }
}

const MAP_SHARED: u32 = 0x01;

/// Reads `path`.
pub fn read(path: &Path) -> Result<Recording> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(BufReader::new(file))
        .with_context(|| format!("{} is not a readable perf.data file", path.display()))?;
    let mut recording = Recording {
        events: perf_file
            .event_attributes()
            .iter()
            .filter_map(|attr| attr.name().map(str::to_owned))
            .collect(),
        // Feature 22 is perf's HEADER_MEM_TOPOLOGY; the crate calls it SAMPLE_TOPOLOGY.
        memory: perf_file
            .feature_section_data(linux_perf_data::Feature::SAMPLE_TOPOLOGY)
            .and_then(MemoryTopology::parse),
        numa_cpus: perf_file
            .feature_section_data(linux_perf_data::Feature::NUMA_TOPOLOGY)
            .and_then(parse_numa_cpus)
            .unwrap_or_default(),
        ..Recording::default()
    };
    let mut index = 0usize;
    loop {
        let record = record_iter
            .next_record(&mut perf_file)
            .with_context(|| format!("{}: corrupt record after record {index}", path.display()))?;
        let Some(record) = record else { break };
        index += 1;
        let PerfFileRecord::EventRecord { record, .. } = record else {
            continue;
        };
        if record.parse_info.endian != Endianness::LittleEndian {
            bail!("{}: big-endian perf.data is not supported", path.display());
        }
        if record.record_type == RecordType::SAMPLE {
            let sample = parse_sample(record.data, record.parse_info.sample_format, record.misc)
                .with_context(|| format!("{}: record {index}: corrupt sample", path.display()))?;
            recording.samples.push(sample);
            continue;
        }
        if record.record_type == RecordType::CGROUP {
            let (id, cgroup_path) = parse_cgroup(&record.data.as_slice()).with_context(|| {
                format!("{}: record {index}: corrupt cgroup record", path.display())
            })?;
            recording.cgroups.insert(id, cgroup_path);
            continue;
        }
        let parsed = record
            .parse()
            .with_context(|| format!("{}: record {index}: corrupt record", path.display()))?;
        let (pid, mapping) = match parsed {
            EventRecord::Mmap(m) => (
                m.pid,
                Mapping {
                    start: m.address,
                    end: m.address + m.length,
                    pgoff: m.page_offset,
                    dev_ino: (0, 0, 0),
                    shared: false,
                    path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
                },
            ),
            EventRecord::Mmap2(m) => {
                let dev_ino = match m.file_id {
                    linux_perf_data::linux_perf_event_reader::Mmap2FileId::InodeAndVersion(i) => {
                        (i.major, i.minor, i.inode)
                    }
                    linux_perf_data::linux_perf_event_reader::Mmap2FileId::BuildId(_) => (0, 0, 0),
                };
                (
                    m.pid,
                    Mapping {
                        start: m.address,
                        end: m.address + m.length,
                        pgoff: m.page_offset,
                        dev_ino,
                        shared: m.flags & MAP_SHARED != 0,
                        path: String::from_utf8_lossy(&m.path.as_slice()).into_owned(),
                    },
                )
            }
            _ => continue,
        };
        recording
            .mappings
            .entry(u32::try_from(pid).unwrap_or_default())
            .or_default()
            .push(mapping);
    }
    Ok(recording)
}

/// `HEADER_NUMA_TOPOLOGY`: a node count, then per node its id, total and free memory, and its
/// CPU list as a perf string (u32 length, then the NUL-padded text).
fn parse_numa_cpus(bytes: &[u8]) -> Option<Vec<Vec<u32>>> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let mut nodes = Vec::new();
    let mut at = 4;
    for _ in 0..u32_at(0)? {
        let len = u32_at(at + 20)? as usize;
        let text = bytes.get(at + 24..at + 24 + len)?;
        let end = text.iter().position(|&b| b == 0).unwrap_or(len);
        nodes.push(parse_cpu_list(std::str::from_utf8(&text[..end]).ok()?)?);
        at += 24 + len;
    }
    Some(nodes)
}

/// `0-3,8` to its CPUs.
fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.trim().parse::<u32>().ok()?..=b.trim().parse().ok()?),
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// `PERF_RECORD_CGROUP`: the id, then the NUL-terminated path.
fn parse_cgroup(bytes: &[u8]) -> Option<(u64, String)> {
    let id = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let rest = bytes.get(8..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some((id, String::from_utf8_lossy(&rest[..end]).into_owned()))
}

/// `PERF_RECORD_MISC_CPUMODE_MASK` / `PERF_RECORD_MISC_KERNEL`.
const CPUMODE_MASK: u16 = 0x7;
const MISC_KERNEL: u16 = 1;

/// The sample body, field by field in `perf_event.h` order, for the fields memory samples carry.
fn parse_sample(data: RawData<'_>, format: SampleFormat, misc: u16) -> Result<MemSample> {
    let unsupported = SampleFormat::READ
        | SampleFormat::RAW
        | SampleFormat::BRANCH_STACK
        | SampleFormat::REGS_USER
        | SampleFormat::STACK_USER
        | SampleFormat::REGS_INTR;
    if format.intersects(unsupported) {
        bail!("sample fields {:?} are not supported", format & unsupported);
    }
    let bytes = data.as_slice();
    let mut at = 0usize;
    let mut u64_next = || -> Result<u64> {
        let word = bytes
            .get(at..at + 8)
            .with_context(|| format!("sample ends at byte {at}"))?;
        at += 8;
        Ok(u64::from_le_bytes(word.try_into()?))
    };
    let mut sample = MemSample {
        pid: 0,
        tid: 0,
        cpu: 0,
        ip: 0,
        addr: 0,
        data_src: 0,
        weight: 0,
        phys_addr: 0,
        cgroup: 0,
        kernel: misc & CPUMODE_MASK == MISC_KERNEL,
    };
    if format.contains(SampleFormat::IDENTIFIER) {
        u64_next()?;
    }
    if format.contains(SampleFormat::IP) {
        sample.ip = u64_next()?;
    }
    if format.contains(SampleFormat::TID) {
        let word = u64_next()?;
        (sample.pid, sample.tid) = (word as u32, (word >> 32) as u32);
    }
    if format.contains(SampleFormat::TIME) {
        u64_next()?;
    }
    if format.contains(SampleFormat::ADDR) {
        sample.addr = u64_next()?;
    }
    if format.contains(SampleFormat::ID) {
        u64_next()?;
    }
    if format.contains(SampleFormat::STREAM_ID) {
        u64_next()?;
    }
    if format.contains(SampleFormat::CPU) {
        sample.cpu = u64_next()? as u32;
    }
    if format.contains(SampleFormat::PERIOD) {
        u64_next()?;
    }
    if format.contains(SampleFormat::CALLCHAIN) {
        let nr = u64_next()?;
        for _ in 0..nr {
            u64_next()?;
        }
    }
    if format.intersects(SampleFormat::WEIGHT | SampleFormat::WEIGHT_STRUCT) {
        let word = u64_next()?;
        // WEIGHT_STRUCT: the latency is the low 32 bits (var1_dw).
        sample.weight = if format.contains(SampleFormat::WEIGHT_STRUCT) {
            word & 0xffff_ffff
        } else {
            word
        };
    }
    if format.contains(SampleFormat::DATA_SRC) {
        sample.data_src = u64_next()?;
    }
    if format.contains(SampleFormat::TRANSACTION) {
        u64_next()?;
    }
    if format.contains(SampleFormat::PHYS_ADDR) {
        sample.phys_addr = u64_next()?;
    }
    if format.contains(SampleFormat::CGROUP) {
        sample.cgroup = u64_next()?;
    }
    Ok(sample)
}
