//! Writes a live run as a recording: the header, then each window (with the paths of cgroups it
//! names for the first time), then the run's totals. Every line is its own zstd frame with
//! zstd's checksum of its content (so a flipped bit is an error that names the line, never
//! different numbers), flushed as it is written (so a run that is killed leaves a file readable
//! up to its last window).

use std::{
    collections::HashSet,
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};
use topdown_common::cgroup::CgroupId;

use anyhow::{Context as _, Result};

use super::format::{Header, RecordLine, WindowLine};
use crate::attrib::{Window, cgroups::CgroupNames, groups::self_and_ancestors};

/// zstd level: fast enough for a live run (a window a second), a tenth of the JSON's size.
const LEVEL: i32 = 3;

/// An open recording.
pub struct Recorder {
    path: PathBuf,
    out: BufWriter<File>,
    /// Compresses one line into one frame, with its checksum.
    frames: zstd::bulk::Compressor<'static>,
    /// cgroup ids whose path is written.
    named: HashSet<CgroupId>,
    /// Windows written.
    windows: u64,
}

impl Recorder {
    /// Writes `header` to `file`, the recording `path` (opened by
    /// [`crate::report::new_file::StreamFile`]).
    pub fn create(path: &Path, file: File, header: Header) -> Result<Self> {
        let mut frames =
            zstd::bulk::Compressor::new(LEVEL).context("starting the recording's compression")?;
        frames
            .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
            .context("starting the recording's compression")?;
        let mut recorder = Self {
            path: path.to_owned(),
            out: BufWriter::new(file),
            frames,
            named: HashSet::new(),
            windows: 0,
        };
        recorder.line(&RecordLine::Header(header))?;
        recorder.flush()?;
        Ok(recorder)
    }

    /// Appends one interval's usage, naming the cgroups it charges that no earlier line named
    /// (and their ancestors, so a roll-up can be made from the file).
    pub fn window(&mut self, window: &Window, names: &mut CgroupNames) -> Result<()> {
        self.names(window, names)?;
        self.line(&RecordLine::Window(WindowLine::of(window)))?;
        self.windows += 1;
        self.flush()
    }

    /// Appends the run's totals and closes the file; returns how many windows it holds.
    pub fn finish(mut self, totals: &Window, names: &mut CgroupNames) -> Result<u64> {
        self.names(totals, names)?;
        self.line(&RecordLine::Totals(WindowLine::of(totals)))?;
        self.flush()?;
        Ok(self.windows)
    }

    fn names(&mut self, window: &Window, names: &mut CgroupNames) -> Result<()> {
        let ids = window
            .threads
            .iter()
            .map(|t| t.cgroup_id)
            .chain(window.cgroups.iter().map(|c| c.id));
        let mut new = Vec::new();
        for id in ids {
            if !self.named.insert(id) {
                continue;
            }
            let path = names.name(id);
            for ancestor in self_and_ancestors(&path).skip(1) {
                if let Some(parent) = names.id_of(ancestor)
                    && self.named.insert(parent)
                {
                    new.push((parent.0, ancestor.to_owned()));
                }
            }
            new.push((id.0, path.to_string()));
        }
        if new.is_empty() {
            return Ok(());
        }
        self.line(&RecordLine::Cgroups { names: new })
    }

    /// Waits until what was written is on the disk (`fdatasync`): an always-on store's window
    /// survives a power cut once this returns.
    pub fn sync(&self) -> Result<()> {
        self.out
            .get_ref()
            .sync_data()
            .with_context(|| format!("writing the recording {}", self.path.display()))
    }

    /// Bytes written so far (every window is flushed as written).
    pub fn bytes(&self) -> Result<u64> {
        let meta = self
            .out
            .get_ref()
            .metadata()
            .with_context(|| format!("writing the recording {}", self.path.display()))?;
        Ok(meta.len())
    }

    /// Where it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn line(&mut self, line: &RecordLine) -> Result<()> {
        let mut text = serde_json::to_vec(line).context("a recording line")?;
        text.push(b'\n');
        let frame = self
            .frames
            .compress(&text)
            .context("compressing a recording line")?;
        self.out
            .write_all(&frame)
            .with_context(|| format!("writing the recording {}", self.path.display()))
    }

    fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .with_context(|| format!("writing the recording {}", self.path.display()))
    }
}
