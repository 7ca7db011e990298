//! The data section of a perf.data file, walked record by record from a memory map: samples
//! (the fields memory samples carry), MMAP/MMAP2 (mappings), CGROUP (names). Every read is
//! bounds-checked, and what does not fit is an error naming its byte offset in the file.

use std::collections::HashMap;

use anyhow::{Result, bail};
use linux_perf_data::linux_perf_event_reader::SampleFormat;

use super::perf_data::{Mapping, MemSample, Recording};
use crate::pmu::machine::parse_cpu_list;

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

/// The sample format of each event, and how to tell which event a sample is from.
pub struct Formats {
    /// The format every event shares, if they all share one.
    common: Option<SampleFormat>,
    by_id: HashMap<u64, SampleFormat>,
    first: SampleFormat,
}

impl Formats {
    /// From each event's sample format and its ids.
    pub fn new(events: impl Iterator<Item = (SampleFormat, Vec<u64>)>) -> Self {
        let mut by_id = HashMap::new();
        let mut formats = Vec::new();
        for (format, ids) in events {
            formats.push(format);
            by_id.extend(ids.into_iter().map(|id| (id, format)));
        }
        let first = formats.first().copied().unwrap_or(SampleFormat::empty());
        let common = formats.iter().all(|f| *f == first).then_some(first);
        Self {
            common,
            by_id,
            first,
        }
    }

    /// The format of the sample whose body is `body`: the shared one, or its event's (found by
    /// IDENTIFIER, the first word, or by ID after IP, TID, TIME and ADDR).
    fn of(&self, body: &[u8]) -> SampleFormat {
        if let Some(format) = self.common {
            return format;
        }
        let at = if self.first.contains(SampleFormat::IDENTIFIER) {
            0
        } else {
            let before = [
                SampleFormat::IP,
                SampleFormat::TID,
                SampleFormat::TIME,
                SampleFormat::ADDR,
            ];
            8 * before.iter().filter(|f| self.first.contains(**f)).count()
        };
        word(body, at)
            .and_then(|id| self.by_id.get(&id).copied())
            .unwrap_or(self.first)
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
    let data_end = section(40, "samples (data section)")?;
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

/// Walks the data section of the file in `bytes` into `recording`. Samples end in time order,
/// as perf processes them (files without round markers may hold them out of order).
pub fn walk(bytes: &[u8], formats: &Formats, recording: &mut Recording) -> Result<()> {
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
    while at < end {
        let (Some(kind), Some(head)) = (half(bytes, at), bytes.get(at + 4..at + 8)) else {
            bail!("record header cut short at byte {at}");
        };
        let misc = u16::from_le_bytes([head[0], head[1]]);
        let size = usize::from(u16::from_le_bytes([head[2], head[3]]));
        if size < 8 || at + size > end {
            bail!("record at byte {at} has an impossible size ({size} bytes)");
        }
        let body = &bytes[at + 8..at + size];
        let parsed = match kind {
            kind::SAMPLE => {
                parse_sample(body, formats.of(body), misc).map(|s| recording.samples.push(s))
            }
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
    if !recording.samples.is_sorted_by_key(|s| s.time) {
        recording.samples.sort_by_key(|s| s.time);
    }
    Ok(())
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

/// The sample body, field by field in `perf_event.h` order, for the fields memory samples carry.
fn parse_sample(body: &[u8], format: SampleFormat, misc: u16) -> Result<MemSample> {
    let unsupported = SampleFormat::READ
        | SampleFormat::RAW
        | SampleFormat::BRANCH_STACK
        | SampleFormat::REGS_USER
        | SampleFormat::STACK_USER
        | SampleFormat::REGS_INTR;
    if format.intersects(unsupported) {
        bail!("sample fields {:?} are not supported", format & unsupported);
    }
    let mut at = 0usize;
    let mut next = || -> Result<u64> {
        let value = word(body, at).ok_or_else(|| anyhow::anyhow!("sample ends at byte {at}"))?;
        at += 8;
        Ok(value)
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
        time: 0,
        cgroup: 0,
        kernel: misc & kind::CPUMODE_MASK == kind::MISC_KERNEL,
    };
    if format.contains(SampleFormat::IDENTIFIER) {
        next()?;
    }
    if format.contains(SampleFormat::IP) {
        sample.ip = next()?;
    }
    if format.contains(SampleFormat::TID) {
        let word = next()?;
        (sample.pid, sample.tid) = (word as u32, (word >> 32) as u32);
    }
    if format.contains(SampleFormat::TIME) {
        sample.time = next()?;
    }
    if format.contains(SampleFormat::ADDR) {
        sample.addr = next()?;
    }
    if format.contains(SampleFormat::ID) {
        next()?;
    }
    if format.contains(SampleFormat::STREAM_ID) {
        next()?;
    }
    if format.contains(SampleFormat::CPU) {
        sample.cpu = next()? as u32;
    }
    if format.contains(SampleFormat::PERIOD) {
        next()?;
    }
    if format.contains(SampleFormat::CALLCHAIN) {
        let nr = next()?;
        if nr > body.len() as u64 / 8 {
            bail!("callchain of {nr} entries in a {}-byte sample", body.len());
        }
        for _ in 0..nr {
            next()?;
        }
    }
    if format.intersects(SampleFormat::WEIGHT | SampleFormat::WEIGHT_STRUCT) {
        let word = next()?;
        // WEIGHT_STRUCT: the latency is the low 32 bits (var1_dw).
        sample.weight = if format.contains(SampleFormat::WEIGHT_STRUCT) {
            word & 0xffff_ffff
        } else {
            word
        };
    }
    if format.contains(SampleFormat::DATA_SRC) {
        sample.data_src = next()?;
    }
    if format.contains(SampleFormat::TRANSACTION) {
        next()?;
    }
    if format.contains(SampleFormat::PHYS_ADDR) {
        sample.phys_addr = next()?;
    }
    if format.contains(SampleFormat::CGROUP) {
        sample.cgroup = next()?;
    }
    Ok(sample)
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
    fn cut_samples_name_where_they_end() {
        let error = parse_sample(&[0; 4], SampleFormat::IP, 0).unwrap_err();
        assert!(error.to_string().contains("byte 0"), "{error}");
    }
}
