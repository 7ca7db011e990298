//! perf.data files (`perf c2c record`, `perf mem record`) read into typed memory samples and
//! mappings at the edge. linux-perf-data reads the header, the attributes and the feature
//! sections; the data section is walked in [`super::records`], straight from a memory map: the
//! crate drops the WEIGHT and DATA_SRC fields c2c needs, and sorts every record of a file
//! without round markers, which is most of perf's own time on a large recording.

use std::{
    fs::File,
    io::Cursor,
    ops::ControlFlow,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use linux_perf_data::{Endianness, PerfFileReader};

use topdown_common::c2c::C2cStats;

use super::{
    contents::{MemoryTopology, PerfData, SampleSink, TOTALS_FEATURE},
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

/// A perf.data file mapped and its header read (what is corrupt in it said once), its samples
/// read by [`Self::read`], as many times as needed.
pub struct Opened {
    path: PathBuf,
    bytes: memmap2::Mmap,
    formats: Formats,
    header: PerfData,
}

/// Reads `path` once: [`open`], then [`Opened::read`].
pub fn read<S: SampleSink>(
    path: &Path,
    new_sink: impl Fn(&PerfData) -> S,
) -> Result<(PerfData, S)> {
    open(path)?.read(new_sink)
}

/// Maps `path` and reads its header. One line of error for anything that is not a readable
/// perf.data file.
pub fn open(path: &Path) -> Result<Opened> {
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
    let header = PerfData {
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
        ..PerfData::default()
    };
    Ok(Opened {
        path: path.to_owned(),
        bytes,
        formats,
        header,
    })
}

impl Opened {
    /// Hands each memory sample, in time order as perf processes them, to a sink made by
    /// `new_sink` from the file's header; returns the recording (without its samples) and the
    /// sink. A file in time order is streamed: a sample sees the mappings recorded before it.
    /// At the first sample out of order the sink is dropped and the file read again whole,
    /// its samples sorted, then handed to a new sink with every mapping known. One line of
    /// error, naming the byte offset, for anything corrupt or cut short.
    pub fn read<S: SampleSink>(&self, new_sink: impl Fn(&PerfData) -> S) -> Result<(PerfData, S)> {
        self.read_telling(new_sink, &|_, _| {})
    }

    /// [`Self::read`], telling `told` every [`records::PROGRESS_BYTES`] how many bytes of the
    /// file's `size` it has read: `told(read, size)`. A file read again in time order counts
    /// from 0 again.
    pub fn read_telling<S: SampleSink>(
        &self,
        new_sink: impl Fn(&PerfData) -> S,
        told: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(PerfData, S)> {
        let header = self.header.clone();
        let read = Read {
            path: &self.path,
            bytes: &self.bytes,
            formats: &self.formats,
            told,
        };
        read_samples(&read, header, new_sink)
    }
}

/// What [`read_samples`] reads: the file at `path` mapped at `bytes`, its sample formats, and
/// whom it tells how far it is.
struct Read<'a> {
    path: &'a Path,
    bytes: &'a memmap2::Mmap,
    formats: &'a Formats,
    told: &'a (dyn Fn(u64, u64) + Sync),
}

/// [`Opened::read_telling`] of the file `read` names.
fn read_samples<S: SampleSink>(
    read: &Read<'_>,
    header: PerfData,
    new_sink: impl Fn(&PerfData) -> S,
) -> Result<(PerfData, S)> {
    let Read {
        path,
        bytes,
        formats,
        told,
    } = *read;
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
        told(up_to as u64, bytes.len() as u64);
    };
    let walked = records::walk(
        bytes,
        formats,
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
            bytes,
            formats,
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

/// Reads `path` with its samples kept in [`PerfData::samples`], in time order.
pub fn read_all(path: &Path) -> Result<PerfData> {
    let (mut recording, samples) = read(path, |_| Vec::new())?;
    recording.samples = samples;
    Ok(recording)
}
