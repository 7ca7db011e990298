//! The data section of a perf.data file, walked record by record from a memory map: samples
//! (the fields memory samples carry), MMAP/MMAP2 (mappings), CGROUP (names). Every read is
//! bounds-checked, and what does not fit is an error naming its byte offset in the file.

use std::{collections::HashMap, ops::ControlFlow};

use anyhow::{Result, bail};
use linux_perf_data::linux_perf_event_reader::SampleFormat;

use super::{
    contents::{MemSample, PerfData},
    maps::Mapping,
};
use crate::cpus::{MAX_CPUS, parse_cpu_list};

/// perf.data record types and `misc` bits (`perf_event.h`), for reading and writing.
#[allow(missing_docs, reason = "perf_event.h's names")]
pub mod kind {
    pub const MMAP: u32 = 1;
    pub const COMM: u32 = 3;
    pub const SAMPLE: u32 = 9;
    pub const MMAP2: u32 = 10;
    pub const CGROUP: u32 = 19;
    pub const FINISHED_ROUND: u32 = 68;
    pub const COMPRESSED: u32 = 81;
    /// `PERF_RECORD_MISC_CPUMODE_MASK`.
    pub const CPUMODE_MASK: u16 = 0x7;
    pub const MISC_KERNEL: u16 = 1;
    pub const MISC_USER: u16 = 2;
    /// On COMM: the exec of the process (its main thread).
    pub const MISC_COMM_EXEC: u16 = 1 << 13;
    /// On MMAP2: a data (not executable) mapping.
    pub const MISC_MMAP_DATA: u16 = 1 << 13;
}
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an MMAP2 record with a build id instead of device/inode.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
const MAP_SHARED: u32 = 0x01;

/// Where the fields c2c reads sit in the samples of one event: byte offsets in the sample body,
/// in `perf_event.h` order; fields after a callchain move by its length.
#[derive(Clone, Copy, Debug)]
struct Layout {
    ip: Option<usize>,
    tid: Option<usize>,
    time: Option<usize>,
    addr: Option<usize>,
    cpu: Option<usize>,
    /// Where the callchain's entry count is.
    callchain: Option<usize>,
    weight: Option<usize>,
    /// WEIGHT_STRUCT: the latency is the low 32 bits of the weight word.
    weight_struct: bool,
    data_src: Option<usize>,
    phys_addr: Option<usize>,
    cgroup: Option<usize>,
    /// The body's size without a callchain.
    size: usize,
    /// Fields we cannot step over (empty: none).
    unsupported: SampleFormat,
}

impl Layout {
    fn new(format: SampleFormat) -> Self {
        let mut size = 0;
        let mut field = |flag: SampleFormat| {
            format.intersects(flag).then(|| {
                size += 8;
                size - 8
            })
        };
        field(SampleFormat::IDENTIFIER);
        let (ip, tid, time, addr) = (
            field(SampleFormat::IP),
            field(SampleFormat::TID),
            field(SampleFormat::TIME),
            field(SampleFormat::ADDR),
        );
        field(SampleFormat::ID);
        field(SampleFormat::STREAM_ID);
        let cpu = field(SampleFormat::CPU);
        field(SampleFormat::PERIOD);
        let callchain = field(SampleFormat::CALLCHAIN);
        let weight = field(SampleFormat::WEIGHT | SampleFormat::WEIGHT_STRUCT);
        let data_src = field(SampleFormat::DATA_SRC);
        field(SampleFormat::TRANSACTION);
        let phys_addr = field(SampleFormat::PHYS_ADDR);
        let cgroup = field(SampleFormat::CGROUP);
        Self {
            ip,
            tid,
            time,
            addr,
            cpu,
            callchain,
            weight,
            weight_struct: format.contains(SampleFormat::WEIGHT_STRUCT),
            data_src,
            phys_addr,
            cgroup,
            size,
            unsupported: format
                & (SampleFormat::READ
                    | SampleFormat::RAW
                    | SampleFormat::BRANCH_STACK
                    | SampleFormat::REGS_USER
                    | SampleFormat::STACK_USER
                    | SampleFormat::REGS_INTR),
        }
    }

    /// Reads the sample in `body`, a SAMPLE record's body with `misc` bits, into `sample`.
    fn parse(&self, body: &[u8], misc: u16, sample: &mut MemSample) -> Result<()> {
        if !self.unsupported.is_empty() {
            bail!("sample fields {:?} are not supported", self.unsupported);
        }
        let shift = match self.callchain {
            Some(at) => {
                let nr = word(body, at).unwrap_or(0);
                if nr > body.len() as u64 / 8 {
                    bail!("callchain of {nr} entries in a {}-byte sample", body.len());
                }
                8 * nr as usize
            }
            None => 0,
        };
        if body.len() < self.size + shift {
            bail!(
                "the sample has {} bytes, its fields need {}",
                body.len(),
                self.size + shift
            );
        }
        // Every field lies in the first `size + shift` bytes, checked above: read them with
        // no further checks (this runs once per sample).
        let get = |at: Option<usize>| match at {
            // SAFETY: `at + 8 <= self.size + shift <= body.len()` for every field offset
            // (Layout::new counts 8 bytes per field it places; `after` adds the shift).
            Some(at) => {
                u64::from_le(unsafe { body.as_ptr().add(at).cast::<u64>().read_unaligned() })
            }
            None => 0,
        };
        let after = |at: Option<usize>| get(at.map(|at| at + shift));
        // The CPU (`u32 cpu, res`: the low half) sizes each entry's CPU set: one no kernel
        // can have is a corrupt file, not a bit set of half a gigabyte.
        let cpu = get(self.cpu) as u32;
        if cpu >= MAX_CPUS {
            bail!("the sample names CPU {cpu}; a kernel has at most {MAX_CPUS} CPUs");
        }
        let tid = get(self.tid);
        // A load's latency in cycles: hardware reports at most 32 bits of it (WEIGHT_STRUCT's
        // `var1_dw`; the plain word holds the same). Larger is a corrupt file, and keeps the
        // 64-bit latency sums from overflowing below 2^32 samples.
        let weight = after(self.weight);
        let weight = if self.weight_struct {
            weight & 0xffff_ffff
        } else {
            weight
        };
        if weight > u64::from(u32::MAX) {
            bail!("the sample's weight {weight} is no load latency (at most 2^32 - 1 cycles)");
        }
        *sample = MemSample {
            pid: tid as u32,
            tid: (tid >> 32) as u32,
            cpu,
            ip: get(self.ip),
            addr: get(self.addr),
            data_src: after(self.data_src),
            weight,
            phys_addr: after(self.phys_addr),
            time: get(self.time),
            cgroup: after(self.cgroup),
            kernel: misc & kind::CPUMODE_MASK == kind::MISC_KERNEL,
        };
        Ok(())
    }
}

/// The sample layout of each event, and how to tell which event a sample is from.
pub struct Formats {
    /// The layout every event shares, if they all share one.
    common: Option<Layout>,
    by_id: HashMap<u64, Layout>,
    first: Layout,
    /// Where a sample's event id is (IDENTIFIER first, or ID after IP, TID, TIME and ADDR).
    id_at: usize,
}

impl Formats {
    /// From each event's sample format and its ids.
    pub fn new(events: impl Iterator<Item = (SampleFormat, Vec<u64>)>) -> Self {
        let mut by_id = HashMap::new();
        let mut formats = Vec::new();
        for (format, ids) in events {
            formats.push(format);
            by_id.extend(ids.into_iter().map(|id| (id, Layout::new(format))));
        }
        let first = formats.first().copied().unwrap_or(SampleFormat::empty());
        let common = formats
            .iter()
            .all(|f| *f == first)
            .then(|| Layout::new(first));
        let id_at = if first.contains(SampleFormat::IDENTIFIER) {
            0
        } else {
            let before = [
                SampleFormat::IP,
                SampleFormat::TID,
                SampleFormat::TIME,
                SampleFormat::ADDR,
            ];
            8 * before.iter().filter(|f| first.contains(**f)).count()
        };
        Self {
            common,
            by_id,
            first: Layout::new(first),
            id_at,
        }
    }

    /// The size of the smallest sample record (header included) of any event.
    fn smallest_sample(&self) -> usize {
        8 + self
            .by_id
            .values()
            .chain(self.common.as_ref())
            .chain([&self.first])
            .map(|layout| layout.size)
            .min()
            .unwrap_or(0)
    }

    /// The layout of the sample whose body is `body`: the shared one, or its event's.
    fn of(&self, body: &[u8]) -> &Layout {
        if let Some(layout) = &self.common {
            return layout;
        }
        word(body, self.id_at)
            .and_then(|id| self.by_id.get(&id))
            .unwrap_or(&self.first)
    }
}

fn word(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

fn half(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The NUL-terminated string at `at`.
fn c_string(bytes: &[u8], at: usize) -> Option<String> {
    let rest = bytes.get(at..)?;
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Checks that the sections the file header names (attributes, data, the feature table and
/// each feature section) lie inside the file, so a cut or damaged file is reported with the
/// byte offset where it goes wrong rather than as a failed read.
pub fn check_sections(bytes: &[u8]) -> Result<()> {
    let len = bytes.len() as u64;
    if bytes.get(..8) != Some(b"PERFILE2".as_slice()) {
        bail!("no PERFILE2 magic at byte 0: not a perf.data file");
    }
    let header_size = word(bytes, 8).unwrap_or(0);
    if header_size < 104 || len < 104 {
        bail!("the file header is cut short: the file has {len} bytes");
    }
    let section = |at: usize, what: &str| -> Result<u64> {
        let (offset, size) = (
            word(bytes, at).unwrap_or(0),
            word(bytes, at + 8).unwrap_or(0),
        );
        let end = offset.saturating_add(size);
        if end > len {
            bail!("the {what} run to byte {end} but the file ends at byte {len} (truncated?)");
        }
        Ok(end)
    };
    section(24, "event attributes")?;
    section(56, "event types")?;
    let data_end = section(40, "samples (data section)")?;
    check_attributes(bytes)?;
    let features = bytes[72..104]
        .iter()
        .map(|b| b.count_ones() as u64)
        .sum::<u64>();
    let table_end = data_end + 16 * features;
    if table_end > len {
        bail!(
            "the feature table runs to byte {table_end} but the file ends at byte {len} (truncated?)"
        );
    }
    for i in 0..features {
        section((data_end + 16 * i) as usize, "feature sections")?;
    }
    if let Some(events) = feature(bytes, EVENT_DESC_FEATURE) {
        let at = events.as_ptr() as usize - bytes.as_ptr() as usize;
        check_event_desc(events).map_err(|what| {
            anyhow::anyhow!("the event descriptions at byte {at} are corrupt: {what}")
        })?;
    }
    Ok(())
}

/// perf's `HEADER_EVENT_DESC` feature bit.
const EVENT_DESC_FEATURE: u32 = 12;
/// Smallest `perf_event_attr` (`PERF_ATTR_SIZE_VER0`).
const ATTR_SIZE_MIN: u64 = 64;
/// Largest `perf_event_attr` we accept: a page, far beyond any kernel's.
const ATTR_SIZE_MAX: u64 = 4096;

/// Each entry of the attributes section (`perf_event_attr` then the section of its ids): sizes
/// in range, the ids inside the file, whole ids.
fn check_attributes(bytes: &[u8]) -> Result<()> {
    let len = bytes.len() as u64;
    let entry = word(bytes, 16).unwrap_or(0);
    let (offset, size) = (word(bytes, 24).unwrap_or(0), word(bytes, 32).unwrap_or(0));
    if !(ATTR_SIZE_MIN + 16..=ATTR_SIZE_MAX + 16).contains(&entry) || size % entry != 0 {
        bail!(
            "the event attributes at byte {offset} are corrupt: entries of {entry} bytes in a \
             section of {size}"
        );
    }
    for start in (offset..offset + size).step_by(entry as usize) {
        let at = start as usize;
        let attr_size = u64::from(half(bytes, at + 4).unwrap_or(0));
        if attr_size > entry - 16 {
            bail!(
                "the event attribute at byte {start} says it has {attr_size} bytes, more than its entry"
            );
        }
        let ids = at + (entry - 16) as usize;
        let (ids_offset, ids_size) = (
            word(bytes, ids).unwrap_or(0),
            word(bytes, ids + 8).unwrap_or(0),
        );
        if ids_offset.saturating_add(ids_size) > len || ids_size % 8 != 0 {
            bail!(
                "the event ids of the attribute at byte {start} ({ids_size} bytes at byte \
                 {ids_offset}) are not in the file's {len} bytes"
            );
        }
    }
    Ok(())
}

/// The `HEADER_EVENT_DESC` section: `nr` events of `attr_size` bytes each, then per event a
/// count of ids, a length-prefixed name and the ids; every count must fit what is left.
fn check_event_desc(section: &[u8]) -> std::result::Result<(), String> {
    let (Some(nr), Some(attr_size)) = (half(section, 0), half(section, 4)) else {
        return Err("shorter than its header".into());
    };
    let attr_size = u64::from(attr_size);
    if !(ATTR_SIZE_MIN..=ATTR_SIZE_MAX).contains(&attr_size) {
        return Err(format!("attributes of {attr_size} bytes"));
    }
    let len = section.len() as u64;
    // Each event takes at least its attribute, its id count and its name's length.
    if u64::from(nr) * (attr_size + 8) > len {
        return Err(format!("{nr} events do not fit in {len} bytes"));
    }
    let mut at = 8u64;
    for event in 0..nr {
        let take = |at: &mut u64, size: u64| -> std::result::Result<u64, String> {
            let start = *at;
            *at = start.saturating_add(size);
            if *at > len {
                return Err(format!("event {event} runs past the section's {len} bytes"));
            }
            Ok(start)
        };
        take(&mut at, attr_size)?;
        let ids = u64::from(half(section, take(&mut at, 4)? as usize).unwrap_or(0));
        let name = u64::from(half(section, take(&mut at, 4)? as usize).unwrap_or(0));
        take(&mut at, name)?;
        take(&mut at, ids.saturating_mul(8))?;
    }
    Ok(())
}

/// The payload of feature section `bit`, if the file has it (sections follow the data section's
/// end, one table entry per set bit, in bit order). Call after [`check_sections`].
pub fn feature(bytes: &[u8], bit: u32) -> Option<&[u8]> {
    let bits: Vec<u64> = (0..4)
        .map(|i| word(bytes, 72 + 8 * i))
        .collect::<Option<_>>()?;
    let is_set = |b: u32| bits[(b / 64) as usize] >> (b % 64) & 1 == 1;
    if !is_set(bit) {
        return None;
    }
    let index = (0..bit).filter(|&b| is_set(b)).count();
    let table = word(bytes, 40)? + word(bytes, 48)?;
    let entry = table as usize + 16 * index;
    let (offset, size) = (
        word(bytes, entry)? as usize,
        word(bytes, entry + 8)? as usize,
    );
    bytes.get(offset..offset.checked_add(size)?)
}

/// At most how many samples the data section of the file in `bytes` can hold.
pub fn max_samples(bytes: &[u8], formats: &Formats) -> usize {
    word(bytes, 48).map_or(0, |size| size as usize / formats.smallest_sample())
}

/// How far apart [`walk`] tells how far it has read.
pub const PROGRESS_BYTES: usize = 16 << 20;

/// Walks the data section of the file in `bytes` in file order: mappings, thread names and
/// cgroups go into `recording`, and each sample to `on_sample` with the recording as it stands
/// when the sample comes (the mappings recorded before it). Stops where `on_sample` breaks.
/// Every [`PROGRESS_BYTES`], `read_up_to` is told the offset of the first byte it still needs.
pub fn walk(
    bytes: &[u8],
    formats: &Formats,
    recording: &mut PerfData,
    mut on_sample: impl FnMut(&PerfData, &MemSample) -> ControlFlow<()>,
    mut read_up_to: impl FnMut(usize),
) -> Result<ControlFlow<()>> {
    let (Some(offset), Some(size)) = (word(bytes, 40), word(bytes, 48)) else {
        bail!("the file header is cut short ({} bytes)", bytes.len());
    };
    let end = offset.saturating_add(size);
    if end > bytes.len() as u64 {
        bail!(
            "the data section ends at byte {end} but the file has {} bytes (truncated?)",
            bytes.len()
        );
    }
    let (mut at, end) = (offset as usize, end as usize);
    let mut sample = MemSample::default();
    let mut told = at;
    while at < end {
        if at - told >= PROGRESS_BYTES {
            read_up_to(at);
            told = at;
        }
        let Some(head) = bytes.get(at..at + 8) else {
            bail!("record header cut short at byte {at}");
        };
        let kind = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let misc = u16::from_le_bytes([head[4], head[5]]);
        let size = usize::from(u16::from_le_bytes([head[6], head[7]]));
        if size < 8 || at + size > end {
            bail!("record at byte {at} has an impossible size ({size} bytes)");
        }
        let body = &bytes[at + 8..at + size];
        let parsed = match kind {
            kind::SAMPLE => match formats.of(body).parse(body, misc, &mut sample) {
                Ok(()) => {
                    if on_sample(recording, &sample).is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                    Ok(())
                }
                Err(error) => Err(error),
            },
            kind::MMAP | kind::MMAP2 => {
                parse_mapping(body, kind == kind::MMAP2, misc).map(|(pid, mapping)| {
                    recording.mappings.entry(pid).or_default().push(mapping);
                })
            }
            kind::COMM => half(body, 4)
                .zip(c_string(body, 8))
                .map(|(tid, comm)| {
                    recording.comms.insert(tid, comm);
                })
                .ok_or_else(|| anyhow::anyhow!("cut short")),
            kind::CGROUP => word(body, 0)
                .zip(c_string(body, 8))
                .map(|(id, path)| {
                    recording.cgroups.insert(id, path);
                })
                .ok_or_else(|| anyhow::anyhow!("cut short")),
            kind::COMPRESSED => bail!(
                "compressed records (perf record -z) are not supported: record without -z, or \
                 `perf inject -i FILE -o PLAIN` first"
            ),
            _ => Ok(()),
        };
        if let Err(error) = parsed {
            bail!("record at byte {at} (type {kind}): {error}");
        }
        at += size;
    }
    Ok(ControlFlow::Continue(()))
}

/// MMAP: pid, tid, start, length, page offset, file name. MMAP2 adds device and inode (or a
/// build id), protection and flags before the name.
fn parse_mapping(body: &[u8], mmap2: bool, misc: u16) -> Result<(u32, Mapping)> {
    let field = |at| word(body, at).ok_or_else(|| anyhow::anyhow!("cut short at field {at}"));
    let pid = half(body, 0).ok_or_else(|| anyhow::anyhow!("cut short"))?;
    let (start, len, pgoff) = (field(8)?, field(16)?, field(24)?);
    let prot = if mmap2 {
        half(body, 56).unwrap_or(0)
    } else {
        0
    };
    let (dev_ino, flags, name_at) = if mmap2 {
        let dev_ino = if misc & MISC_MMAP_BUILD_ID == 0 {
            let maj = half(body, 32).unwrap_or(0);
            let min = half(body, 36).unwrap_or(0);
            (maj, min, field(40)?)
        } else {
            (0, 0, 0)
        };
        (dev_ino, half(body, 60).unwrap_or(0), 64)
    } else {
        ((0, 0, 0), 0, 32)
    };
    let path = c_string(body, name_at).ok_or_else(|| anyhow::anyhow!("no file name"))?;
    let mapping = Mapping {
        start,
        end: start.saturating_add(len),
        pgoff,
        dev_ino,
        shared: flags & MAP_SHARED != 0,
        prot,
        path,
    };
    Ok((pid, mapping))
}

/// `HEADER_NUMA_TOPOLOGY`: a node count, then per node its id, total and free memory, and its
/// CPU list as a perf string (u32 length, then the NUL-padded text).
pub fn parse_numa_cpus(bytes: &[u8]) -> Option<Vec<Vec<u32>>> {
    let mut nodes = Vec::new();
    let mut at = 4;
    for _ in 0..half(bytes, 0)? {
        let len = half(bytes, at + 20)? as usize;
        let text = c_string(bytes.get(..at + 24 + len)?, at + 24)?;
        nodes.push(parse_cpu_list(&text).ok()?);
        at += 24 + len;
    }
    Some(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_descriptions_are_checked_before_anything_is_sized_by_them() {
        let mut section = Vec::new();
        section.extend(1u32.to_le_bytes());
        section.extend(128u32.to_le_bytes());
        section.extend([0u8; 128]);
        section.extend(2u32.to_le_bytes()); // ids
        section.extend(4u32.to_le_bytes()); // name length
        section.extend(*b"cyc\0");
        section.extend([0u8; 16]);
        assert_eq!(check_event_desc(&section), Ok(()));
        let mut lying = section.clone();
        lying[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(check_event_desc(&lying).unwrap_err().contains("do not fit"));
        let mut long_name = section.clone();
        long_name[140..144].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            check_event_desc(&long_name)
                .unwrap_err()
                .contains("runs past")
        );
        let mut many_ids = section;
        many_ids[136..140].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            check_event_desc(&many_ids)
                .unwrap_err()
                .contains("runs past")
        );
    }

    #[test]
    fn cut_samples_say_how_short_they_are() {
        let layout = Layout::new(SampleFormat::IP | SampleFormat::TID);
        let error = layout
            .parse(&[0; 12], 0, &mut MemSample::default())
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("has 12 bytes, its fields need 16"),
            "{error}"
        );
    }

    #[test]
    fn a_sample_on_a_cpu_no_kernel_has_is_corrupt() {
        let layout = Layout::new(SampleFormat::IP | SampleFormat::CPU);
        let body = |cpu: u32| -> Vec<u8> {
            let mut body = 0x401000u64.to_le_bytes().to_vec();
            body.extend(cpu.to_le_bytes());
            body.extend(0u32.to_le_bytes());
            body
        };
        let mut sample = MemSample::default();
        layout.parse(&body(MAX_CPUS - 1), 0, &mut sample).unwrap();
        assert_eq!(sample.cpu, MAX_CPUS - 1);
        for cpu in [MAX_CPUS, u32::MAX] {
            let error = layout.parse(&body(cpu), 0, &mut sample).unwrap_err();
            assert!(
                error.to_string().contains(&format!("names CPU {cpu}")),
                "{error}"
            );
        }
    }

    #[test]
    fn a_weight_no_latency_can_have_is_corrupt() {
        let layout = Layout::new(SampleFormat::IP | SampleFormat::WEIGHT);
        let body = |weight: u64| -> Vec<u8> {
            let mut body = 0x401000u64.to_le_bytes().to_vec();
            body.extend(weight.to_le_bytes());
            body
        };
        let mut sample = MemSample::default();
        layout
            .parse(&body(u64::from(u32::MAX)), 0, &mut sample)
            .unwrap();
        assert_eq!(sample.weight, u64::from(u32::MAX));
        for weight in [1 << 32, u64::MAX] {
            let error = layout.parse(&body(weight), 0, &mut sample).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains(&format!("weight {weight} is no load")),
                "{error}"
            );
        }
        // WEIGHT_STRUCT's latency is its low half: the rest is other fields, not corruption.
        let structured = Layout::new(SampleFormat::IP | SampleFormat::WEIGHT_STRUCT);
        structured.parse(&body(u64::MAX), 0, &mut sample).unwrap();
        assert_eq!(sample.weight, u64::from(u32::MAX));
    }

    #[test]
    fn fields_after_a_callchain_move_by_its_length() {
        let layout =
            Layout::new(SampleFormat::IP | SampleFormat::CALLCHAIN | SampleFormat::DATA_SRC);
        let words: [u64; 5] = [0x401000, 2, 0xa, 0xb, 0x42];
        let body: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut sample = MemSample::default();
        layout.parse(&body, 0, &mut sample).unwrap();
        assert_eq!((sample.ip, sample.data_src), (0x401000, 0x42));
        let error = layout.parse(&body[..32], 0, &mut sample).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("has 32 bytes, its fields need 40"),
            "{error}"
        );
    }
}
