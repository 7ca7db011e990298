//! Reads a time range of a store as one recording: the windows that began in the range, from
//! every segment it overlaps (the one being written up to its last whole window), their times
//! counted from the first one's run, the cgroup names of every segment read; its totals are the
//! windows' sum. Segments of runs with another counter set or interval than the first cannot be
//! shown as one table: the range is refused with the time where they change.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use jiff::{Timestamp, tz::TimeZone};

use super::{StoreDir, when::When};
use crate::{
    attrib::cgroups::CgroupNames,
    recording::reader::{NO_TOTALS, Recording, row_bytes},
};

/// A store's time range, read.
pub struct StoreRange {
    /// Its windows as one recording (no totals line: [`Recording::totals`] sums them).
    pub recording: Recording,
    /// What was read and what was skipped, a line each, for standard error.
    pub said: Vec<String>,
}

/// Reads the windows of the store at `dir` that began at or after `from` and before `to` (the
/// whole store without them), their rows within `budget` bytes of memory.
pub fn read(
    dir: &std::path::Path,
    from: Option<&When>,
    to: Option<&When>,
    budget: u64,
) -> Result<StoreRange> {
    let store = StoreDir::open(dir)?;
    let shown = dir.display();
    let segments = store.segments()?;
    if segments.is_empty() {
        bail!(
            "the store {shown} holds no segment yet: is `topdown-bpf record --store {shown}` running?"
        );
    }
    let start = from.map_or(Timestamp::MIN, |w| w.at);
    let end = to.map_or(Timestamp::MAX, |w| w.at);
    if start >= end {
        bail!("--from is not before --to: nothing to show");
    }
    let mut said = Vec::new();
    let mut combined: Option<Recording> = None;
    let mut names = CgroupNames::at(None);
    let mut first_set = None;
    let mut held = 0u64;
    let mut read = 0usize;
    for (i, segment) in segments.iter().enumerate() {
        // A segment runs until the next one begins (the last, until now).
        let next = segments.get(i + 1).map_or(Timestamp::MAX, |s| s.began);
        if segment.began >= end || next <= start {
            continue;
        }
        let path = dir.join(&segment.name);
        let file = store.open_segment(&segment.name)?;
        let mut part = Recording::read_file(file, &path.display().to_string(), budget)?;
        read += 1;
        said.extend(cut_short(&part, &path));
        same_run(&mut first_set, &part, &path, segment.began)?;
        names.learn_all(&part.names);
        let run_start = part.header.started_unix_ns;
        let windows = std::mem::take(&mut part.windows);
        part.cut_short = None;
        part.totals = None;
        // The first segment read holds the others' windows.
        let recording = combined.get_or_insert(part);
        let base = recording.header.started_unix_ns;
        for mut window in windows {
            let began = run_start.saturating_add(nanos(window.start));
            let at = Timestamp::from_nanosecond(i128::from(began)).unwrap_or(Timestamp::MAX);
            if at < start || at >= end {
                continue;
            }
            held += (window.threads.len() + window.cgroups.len()) as u64
                * row_bytes(recording.set.counters.len());
            if held > budget {
                let (from, to) = said_range(from, to);
                bail!(
                    "the store {shown} from {from} to {to} takes its rows past the {} MiB \
                     memory budget: give a shorter range, or --max-memory MIB",
                    budget >> 20
                );
            }
            // Counted from the first run read (a later run's windows start later).
            window.start = Duration::from_nanos(began.saturating_sub(base));
            recording.windows.push(window);
        }
    }
    let Some(mut recording) = combined else {
        let (from, to) = said_range(from, to);
        bail!(
            "the store {shown} holds nothing from {from} to {to} (it holds {} to now)",
            local(segments[0].began)
        );
    };
    recording.names = names;
    let (Some(first), Some(last)) = (recording.windows.first(), recording.windows.last()) else {
        let (from, to) = said_range(from, to);
        bail!("the store {shown} has no window that began from {from} to {to}");
    };
    let base = i128::from(recording.header.started_unix_ns);
    let at = |offset: Duration| {
        Timestamp::from_nanosecond(base + offset.as_nanos() as i128).unwrap_or(Timestamp::MAX)
    };
    said.insert(
        0,
        format!(
            "store {shown}: {} windows from {} to {} (read from {read} segments)",
            recording.windows.len(),
            local(at(first.start)),
            local(at(last.start + last.length)),
        ),
    );
    Ok(StoreRange { recording, said })
}

/// What to say of segment `part` (at `path`) when it ends before its totals for another
/// reason than being the one still written.
fn cut_short(part: &Recording, path: &std::path::Path) -> Option<String> {
    let why = part.cut_short.as_deref().filter(|why| *why != NO_TOTALS)?;
    Some(format!(
        "{}: {why}: its whole windows are read, the rest skipped (the segment being written, \
         or a run that was killed)",
        path.display()
    ))
}

/// `--from` and `--to` as messages say them.
fn said_range(from: Option<&When>, to: Option<&When>) -> (String, String) {
    (
        from.map_or("its start".to_owned(), |w| w.read_as.clone()),
        to.map_or("its end".to_owned(), |w| w.read_as.clone()),
    )
}

/// Checks that `part` (the segment at `path`, begun at `began`) was recorded with the counter
/// set and interval of the segments read before it (`first`, set by the first one).
fn same_run(
    first: &mut Option<serde_json::Value>,
    part: &Recording,
    path: &std::path::Path,
    began: Timestamp,
) -> Result<()> {
    let set = serde_json::to_value((&part.header.counter_set, part.header.interval_ms))
        .context("comparing counter sets")?;
    match first {
        None => *first = Some(set),
        Some(first) if *first != set => bail!(
            "{} was recorded with another counter set or interval than the segments before it \
             (the recording run changed at {}): give --from and --to on one side of it",
            path.display(),
            local(began)
        ),
        Some(_) => {}
    }
    Ok(())
}

/// `at` in the host's time zone and in UTC.
fn local(at: Timestamp) -> String {
    let zone = TimeZone::system();
    format!(
        "{} ({} UTC)",
        at.to_zoned(zone).strftime("%Y-%m-%d %H:%M:%S %:z"),
        at.strftime("%H:%M:%S")
    )
}

fn nanos(offset: Duration) -> u64 {
    u64::try_from(offset.as_nanos()).unwrap_or(u64::MAX)
}
