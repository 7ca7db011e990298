//! Writes a run into a store: each window to the open segment, a new segment once the open one
//! spans `--segment` of windows (or holds `--segment-size`), and after each new segment the
//! oldest ones removed while the store is over `--max-size` or they were last written longer
//! than `--keep` ago. A segment is named by the start of its first window, so segment `i` holds
//! exactly the windows that began from its name's time to the next segment's.

use std::time::{Duration, SystemTime};

use anyhow::{Result, bail};
use jiff::Timestamp;

use super::StoreDir;
use crate::{
    attrib::{Window, cgroups::CgroupNames},
    recording::{format::Header, writer::Recorder},
};

/// How much a store keeps, and how it cuts segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Segments last written longer ago than this are removed.
    pub keep: Duration,
    /// The store's size is kept at or under this, oldest segments removed first.
    pub max_bytes: u64,
    /// A new segment begins once the open one's windows span this...
    pub segment: Duration,
    /// ... or it holds this many bytes.
    pub segment_bytes: u64,
}

/// The open segment.
struct Open {
    name: String,
    recorder: Recorder,
    /// Its first window's start, in nanoseconds since the Unix epoch.
    first_ns: u64,
}

/// The store being written, a [`WindowSink`] of `record --store`.
pub struct StoreWriter {
    store: StoreDir,
    retention: Retention,
    /// Every segment's header: the run's (its start, counter set and interval).
    header: Header,
    open: Option<Open>,
    /// Segments begun by this run.
    begun: u64,
    /// Segments removed to stay within the retention, by this run.
    removed: u64,
    /// Bytes removed.
    removed_bytes: u64,
}

impl StoreWriter {
    /// Starts writing the run whose header is `header` into `store` (opened for writing): its
    /// first window begins the first segment.
    pub fn create(store: StoreDir, header: Header, retention: Retention) -> Self {
        Self {
            store,
            retention,
            header,
            open: None,
            begun: 0,
            removed: 0,
            removed_bytes: 0,
        }
    }

    /// Writes `window` (naming its cgroups from `names`), into a new segment when the open
    /// one is due to end; `now` (the wall clock) judges what `--keep` removes.
    pub fn window_at(
        &mut self,
        window: &Window,
        names: &mut CgroupNames,
        now: SystemTime,
    ) -> Result<()> {
        let start_ns = self
            .header
            .started_unix_ns
            .saturating_add(u64::try_from(window.start.as_nanos()).unwrap_or(u64::MAX));
        if self.due(start_ns)? {
            self.begin_segment(start_ns, now)?;
        }
        let Some(open) = &mut self.open else {
            bail!(
                "the store {} has no open segment",
                self.store.path().display()
            );
        };
        open.recorder.window(window, names)?;
        // On the disk before the next window: a power cut loses at most the window being
        // written (one fdatasync per window: per second at -I 1000).
        open.recorder.sync()
    }

    /// Whether a window that begins at `start_ns` goes to a new segment.
    fn due(&self, start_ns: u64) -> Result<bool> {
        let Some(open) = &self.open else {
            return Ok(true);
        };
        let spanned = Duration::from_nanos(start_ns.saturating_sub(open.first_ns));
        Ok(spanned >= self.retention.segment
            || open.recorder.bytes()? >= self.retention.segment_bytes)
    }

    /// Closes the open segment (its lines are on disk already) and begins one named by
    /// `start_ns`, then removes what the retention leaves out.
    fn begin_segment(&mut self, start_ns: u64, now: SystemTime) -> Result<()> {
        self.open = None;
        let at = Timestamp::from_nanosecond(i128::from(start_ns)).unwrap_or(Timestamp::UNIX_EPOCH);
        let (name, file) = self.store.create_segment(at)?;
        // The new name on the disk too, not only the segment's data.
        self.store.sync()?;
        let path = self.store.path().join(&name);
        let recorder = Recorder::create(&path, file, self.header.clone())?;
        self.open = Some(Open {
            name,
            recorder,
            first_ns: start_ns,
        });
        self.begun += 1;
        self.enforce(now)
    }

    /// Removes the oldest segments (never the open one) while the store holds more than
    /// `max_bytes`, and every segment last written before `keep` ago; each removal is said.
    fn enforce(&mut self, now: SystemTime) -> Result<()> {
        let open = self.open.as_ref().map(|open| open.name.clone());
        let segments = self.store.segments()?;
        let mut total: u64 = segments.iter().map(|s| s.bytes).sum();
        let oldest_kept = now.checked_sub(self.retention.keep);
        for segment in segments {
            if Some(&segment.name) == open.as_ref() {
                continue;
            }
            let too_old = oldest_kept.is_some_and(|oldest| segment.modified < oldest);
            let too_big = total > self.retention.max_bytes;
            if !too_old && !too_big {
                break;
            }
            self.store.remove_segment(&segment.name)?;
            total -= segment.bytes;
            self.removed += 1;
            self.removed_bytes += segment.bytes;
            eprintln!(
                "topdown-bpf: store {}: removed {} ({} bytes, {}); it holds {total} bytes",
                self.store.path().display(),
                segment.name,
                segment.bytes,
                if too_old {
                    "older than --keep"
                } else {
                    "the oldest, over --max-size"
                }
            );
        }
        Ok(())
    }

    /// Segments begun and removed by this run, and the bytes removed.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.begun, self.removed, self.removed_bytes)
    }
}

impl StoreWriter {
    /// What the run stored, for its last line.
    pub fn said(&self) -> String {
        format!(
            "stored the run in {} ({} segments begun; {} removed to stay within --keep and \
             --max-size, {} bytes): `topdown-bpf report --store {0} --from -1h`",
            self.store.path().display(),
            self.begun,
            self.removed,
            self.removed_bytes
        )
    }
}
