//! The store against plain recordings of the same windows, with synthetic clocks.

use std::time::{Duration, SystemTime};

use jiff::Timestamp;

use super::{
    StoreDir, range,
    when::When,
    writer::{Retention, StoreWriter},
};
use crate::{
    attrib::Window,
    recording::{
        fixtures::{names, recorded, set, window},
        format::WindowLine,
        header,
        reader::Recording,
    },
};

/// 2026-12-06 03:00:00 UTC, in nanoseconds since the Unix epoch: the run's start.
const BASE_NS: u64 = 1_796_526_000_000_000_000;

/// Window `i`: the fixture's, one second long, beginning `i` seconds after the run's start.
fn second(i: u64) -> Window {
    let mut w = window(i + 1);
    w.start = Duration::from_secs(i);
    w.length = Duration::from_secs(1);
    w
}

fn at(offset: Duration) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(BASE_NS) + offset
}

fn when(offset_ms: u64) -> When {
    When {
        at: Timestamp::from_nanosecond(i128::from(BASE_NS + offset_ms * 1_000_000)).unwrap(),
        read_as: format!("+{offset_ms} ms"),
    }
}

/// Writes `windows` into a store at `dir` (each written as it ends, the wall clock at `now`
/// plus its end), with `retention`; returns what the writer counted.
fn stored(
    dir: &std::path::Path,
    windows: &[Window],
    retention: Retention,
    now: Duration,
) -> (u64, u64, u64) {
    let store = StoreDir::open_for_writing(dir, None).unwrap();
    let mut head = header(&set(), None, 1000, "GenuineIntel-6-8F".into(), 2, None);
    head.started_unix_ns = BASE_NS;
    let mut writer = StoreWriter::create(store, head, retention);
    let mut names = names();
    for w in windows {
        writer
            .window_at(w, &mut names, at(now + w.start + w.length))
            .unwrap();
    }
    writer.counts()
}

/// Every window's line, to compare two reads whole.
fn lines(windows: &[Window]) -> Vec<String> {
    windows
        .iter()
        .map(|w| serde_json::to_string(&WindowLine::of(w)).unwrap())
        .collect()
}

const ROOMY: Retention = Retention {
    keep: Duration::from_secs(86_400),
    max_bytes: 1 << 30,
    segment: Duration::from_secs(3),
    segment_bytes: 1 << 30,
};

#[test]
fn a_range_across_segments_reads_what_one_recording_of_the_same_windows_holds() {
    let windows: Vec<Window> = (0..10).map(second).collect();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (begun, removed, _) = stored(&store, &windows, ROOMY, Duration::ZERO);
    // Segments of three seconds of windows: 0-2, 3-5, 6-8, 9.
    assert_eq!((begun, removed), (4, 0));
    let names: Vec<String> = StoreDir::open(&store)
        .unwrap()
        .segments()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        [
            "20261206T030000Z.rec",
            "20261206T030003Z.rec",
            "20261206T030006Z.rec",
            "20261206T030009Z.rec"
        ]
    );
    let (_plain_dir, plain) = recorded(&windows, None);
    let plain = Recording::read(&plain).unwrap();
    // From 2.5 s to 7.5 s: windows 3 to 7, from the second and third segments.
    let mut read = range::read(&store, Some(&when(2_500)), Some(&when(7_500)), 1 << 30).unwrap();
    let expected: Vec<Window> = plain
        .windows
        .iter()
        .filter(|w| (2_500..7_500).contains(&w.start.as_millis()))
        .cloned()
        .collect();
    assert_eq!(expected.len(), 5);
    assert_eq!(lines(&read.recording.windows), lines(&expected));
    assert_eq!(read.recording.header.started_unix_ns, BASE_NS);
    assert_eq!(
        &*read
            .recording
            .names
            .name(topdown_common::cgroup::CgroupId(7)),
        "/a/b"
    );
    assert!(read.said[0].contains("5 windows"), "{:?}", read.said);
    // The whole store, and the totals of a range are its windows' sum.
    let all = range::read(&store, None, None, 1 << 30).unwrap();
    assert_eq!(lines(&all.recording.windows), lines(&plain.windows));
    let sum = Window::merge(&expected).unwrap();
    assert_eq!(
        read.recording.totals().unwrap().threads[0].on_cpu_ns(),
        sum.threads[0].on_cpu_ns()
    );
    // Nothing there: said, never an empty report.
    let error = range::read(&store, Some(&when(20_000)), None, 1 << 30)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("no window"), "{error}");
}

#[test]
fn the_oldest_segments_go_first_and_the_budget_holds() {
    let windows: Vec<Window> = (0..30).map(second).collect();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    // A segment per two windows; room for a few.
    let one_segment = {
        let probe = dir.path().join("probe");
        stored(&probe, &windows[..2], ROOMY, Duration::ZERO);
        StoreDir::open(&probe).unwrap().segments().unwrap()[0].bytes
    };
    let retention = Retention {
        max_bytes: one_segment * 4,
        segment: Duration::from_secs(2),
        ..ROOMY
    };
    let (begun, removed, removed_bytes) = stored(&store, &windows, retention, Duration::ZERO);
    assert_eq!(begun, 15);
    let kept = StoreDir::open(&store).unwrap().segments().unwrap();
    let held: u64 = kept.iter().map(|s| s.bytes).sum();
    assert_eq!(removed, 15 - kept.len() as u64);
    assert!(removed > 0 && removed_bytes > 0);
    // Checked as each segment begins: the open one may add one more.
    assert!(
        held <= retention.max_bytes + one_segment * 2,
        "{held} bytes kept"
    );
    // What is kept is the newest, and every kept window reads back.
    assert_eq!(kept.last().unwrap().name, "20261206T030028Z.rec");
    let read = range::read(&store, None, None, 1 << 30).unwrap();
    let first_kept = 30 - read.recording.windows.len();
    assert_eq!(
        lines(&read.recording.windows),
        lines(&windows[first_kept..])
            .into_iter()
            .collect::<Vec<_>>()
    );
    // Older than --keep: gone at the next segment, whatever the size.
    let retention = Retention {
        keep: Duration::from_secs(60),
        ..ROOMY
    };
    let late = dir.path().join("late");
    stored(&late, &windows[..3], retention, Duration::ZERO);
    // `--keep` judges a segment by when it was last written (its file's time): the test's
    // clock, not the machine's (a real time after the test's "day later" kept them all).
    let written = at(windows[2].start + windows[2].length);
    for entry in std::fs::read_dir(&late).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rec") {
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(written).unwrap();
        }
    }
    // Written a day later: the first run's segments are older than --keep by then.
    let (_, removed, _) = stored(
        &late,
        &windows[3..6],
        retention,
        Duration::from_secs(86_400),
    );
    assert!(removed >= 1);
}

#[test]
fn a_segment_cut_inside_a_line_is_read_to_its_last_whole_window_and_said() {
    let windows: Vec<Window> = (0..6).map(second).collect();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    stored(&store, &windows, ROOMY, Duration::ZERO);
    let last = StoreDir::open(&store).unwrap().segments().unwrap()[1]
        .name
        .clone();
    let path = store.join(&last);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 7]).unwrap();
    let read = range::read(&store, None, None, 1 << 30).unwrap();
    assert_eq!(read.recording.windows.len(), 5, "the cut window is skipped");
    assert!(
        read.said
            .iter()
            .any(|l| l.contains(&last) && l.contains("skipped")),
        "{:?}",
        read.said
    );
    // A power cut after the filesystem grew the file but before the data reached the disk:
    // zeros where the last frame should be. Every whole window is read; the tail is said.
    let mut zeroed = bytes.clone();
    zeroed.extend(std::iter::repeat_n(0u8, 4096));
    std::fs::write(&path, &zeroed).unwrap();
    let read = range::read(&store, None, None, 1 << 30).unwrap();
    assert_eq!(read.recording.windows.len(), 6);
    assert!(
        read.said.iter().any(|l| l.contains("4096 zero bytes")),
        "{:?}",
        read.said
    );
    // Anything else there is damage: said as such, never read as numbers.
    let mut damaged = bytes;
    damaged.extend([0u8, 1, 2, 3]);
    std::fs::write(&path, &damaged).unwrap();
    let error = range::read(&store, None, None, 1 << 30).err().unwrap();
    assert!(format!("{error:#}").contains("corrupt"), "{error:#}");
}

#[test]
fn a_store_someone_else_can_write_or_a_second_writer_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let held = StoreDir::open_for_writing(&store, None).unwrap();
    let mode = std::fs::metadata(&store).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let error = StoreDir::open_for_writing(&store, None)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("another run"), "{error}");
    drop(held);
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o777)).unwrap();
    let error = StoreDir::open_for_writing(&store, None)
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("written by others"), "{error}");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&store, &link).unwrap();
    let error = StoreDir::open(&link).err().unwrap().to_string();
    assert!(error.contains("symbolic link"), "{error}");
}
