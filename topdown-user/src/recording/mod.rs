//! Recordings: a live run kept in a file (`topdown-bpf record`), to be looked at later with
//! `topdown-bpf report` (every view of the live run, the same numbers: `commands::report`) and
//! `topdown-bpf plot` (timelines). The format is zstd-compressed JSON lines, versioned ([`mod@format`]).

#[cfg(test)]
pub(crate) mod fixtures;
pub mod format;
pub mod reader;
pub mod store;
pub mod writer;

use std::time::{SystemTime, UNIX_EPOCH};

use self::format::{FORMAT, Header, MachineLine, RowBounds, SetLine, TopdownLine, VERSION};
use crate::{
    pmu::{counter_set::CounterSet, machine::host_names},
    tma::view::TopdownView,
};

/// The header of a recording of `set` (and `topdown` over it) started now, windows every
/// `interval_ms`, on a machine with `cpu` and `cpus` online, its thread rows bounded by
/// `row_bounds` (`None`: every exit its own row).
pub fn header(
    set: &CounterSet,
    topdown: Option<&TopdownView>,
    interval_ms: u64,
    cpu: String,
    cpus: usize,
    row_bounds: Option<RowBounds>,
) -> Header {
    let (hostname, kernel) = host_names();
    Header {
        format: FORMAT.to_owned(),
        version: VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        interval_ms,
        // Lossy: an argument that is not UTF-8 (a path) is kept readable, never a panic.
        command_line: std::env::args_os()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect(),
        machine: MachineLine {
            hostname,
            kernel,
            cpu,
            cpus,
        },
        counter_set: SetLine::of(set),
        topdown: topdown.map(TopdownLine::of),
        row_bounds,
    }
}

#[cfg(test)]
mod tests {
    use topdown_common::cgroup::CgroupId;
    use topdown_common::thread::Tid;

    use std::{io::Write as _, time::Duration};

    use super::{fixtures::*, format::WindowLine, reader::Recording, *};
    use crate::attrib::{Window, usage::ThreadUsage};

    fn same(a: &Window, b: &Window) {
        assert_eq!(a.start, b.start);
        assert_eq!(a.length, b.length);
        assert_eq!(a.threads, b.threads);
        assert_eq!(a.idle, b.idle);
        assert_eq!(a.cgroups, b.cgroups);
        assert_eq!(a.stats, b.stats);
        assert_eq!(a.waits_measured, b.waits_measured);
        assert_eq!(a.stalls, b.stalls);
    }

    #[test]
    fn a_recording_reads_back_every_window_the_totals_and_the_names() {
        let windows: Vec<Window> = (1..=3).map(window).collect();
        let totals = Window::merge(&windows).unwrap();
        let (_dir, path) = recorded(&windows, Some(&totals));
        let mut read = Recording::read(&path).unwrap();
        assert_eq!(read.cut_short, None);
        assert_eq!(read.windows.len(), 3);
        for (a, b) in windows.iter().zip(&read.windows) {
            same(a, b);
        }
        same(read.totals.as_ref().unwrap(), &totals);
        assert_eq!(read.set, set());
        let view = read.topdown.as_ref().unwrap();
        assert_eq!(
            (view.parts[0].model.name, view.level),
            ("sapphirerapids", 2)
        );
        assert!(view.has_pmem, "the recording machine's #has_pmem");
        assert_eq!(read.header.interval_ms, 100);
        assert_eq!(read.header.machine.cpu, "GenuineIntel-6-8F");
        assert_eq!(&*read.names.name(CgroupId(7)), "/a/b");
        assert_eq!(&*read.names.name(CgroupId(8)), "/c");
        assert_eq!(
            read.names.id_of("/a"),
            Some(CgroupId(5)),
            "ancestors are named for roll-ups"
        );
    }

    #[test]
    fn a_recording_cut_short_keeps_its_whole_windows_and_says_so() {
        let windows: Vec<Window> = (1..=4).map(window).collect();
        let (_dir, path) = recorded(&windows, None);
        let read = Recording::read(&path).unwrap();
        assert_eq!(read.windows.len(), 4, "every flushed window");
        assert!(read.cut_short.is_some());
        let sum = read.totals().unwrap();
        assert_eq!(sum.threads[0].on_cpu_ns(), 10_000, "1000 * (1 + 2 + 3 + 4)");
        assert_eq!(sum.length, Duration::from_millis(400));

        // Bytes cut in the middle of the compressed data.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 20]).unwrap();
        let read = Recording::read(&path).unwrap();
        assert!(read.windows.len() < 4 && read.cut_short.is_some());
    }

    #[test]
    fn files_that_are_not_recordings_get_one_line_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, "{\"type\":\"header\"}\n").unwrap();
        let error = Recording::read(&path).err().unwrap().to_string();
        assert!(error.contains("not a topdown-bpf recording"), "{error}");
        let error = Recording::read(&dir.path().join("none"))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("cannot open"), "{error}");

        let mut newer = header(&set(), None, 100, String::new(), 1, None);
        newer.version = VERSION + 1;
        let mut encoder = zstd::Encoder::new(std::fs::File::create(&path).unwrap(), 1).unwrap();
        serde_json::to_writer(&mut encoder, &format::RecordLine::Header(newer)).unwrap();
        encoder.write_all(b"\n").unwrap();
        encoder.finish().unwrap();
        let error = Recording::read(&path).err().unwrap().to_string();
        assert!(
            error.contains(&format!("version {} recording", VERSION + 1)),
            "{error}"
        );
    }

    /// An event the PMU did not count in a window reads back as not counted in every row of
    /// it; the next window, where it counted, reads back counted. A window naming a counter
    /// the set lacks is refused.
    #[test]
    fn events_the_pmu_did_not_count_read_back_as_not_counted() {
        let mut silent = window(1);
        for values in silent
            .threads
            .iter_mut()
            .map(|t| &mut t.counters)
            .chain(silent.cgroups.iter_mut().map(|c| &mut c.counters))
        {
            values[0].reading.count = 0;
            values[0].silent = true;
        }
        let windows = [silent, window(2)];
        let (_dir, path) = recorded(&windows, None);
        let read = Recording::read(&path).unwrap();
        for (a, b) in windows.iter().zip(&read.windows) {
            same(a, b);
        }
        assert_eq!(read.windows[0].silent(), [0]);
        assert!(read.windows[1].silent().is_empty());
        let sum = read.totals().unwrap();
        assert!(!sum.threads[0].counters[0].silent, "counted in one window");

        // The file's slots are the kernel's: the clock's 0, the set's one counter 1.
        let line = WindowLine::of(&windows[0]);
        assert_eq!(line.silent, [1]);
        for slot in [0, 2] {
            let mut line = WindowLine::of(&windows[0]);
            line.silent.push(slot);
            let error = line.window(1).unwrap_err().to_string();
            assert!(
                error.contains(&format!("slot {slot} as not counting")),
                "{error}"
            );
        }
    }

    /// Every single-bit flip of a recording is an error (one line), or reads back the recorded
    /// numbers (a bit the decoder never uses, or a file that then looks cut short, whose
    /// windows are the recorded ones): never other numbers.
    #[test]
    fn a_flipped_bit_is_an_error_never_other_numbers() {
        let windows: Vec<Window> = (1..=3).map(window).collect();
        let totals = Window::merge(&windows).unwrap();
        let (dir, path) = recorded(&windows, Some(&totals));
        let bytes = std::fs::read(&path).unwrap();
        let flipped = dir.path().join("flipped.rec");
        let (mut errors, mut cut) = (0, 0);
        for at in 0..bytes.len() {
            for bit in [0, 3, 7] {
                let mut damaged = bytes.clone();
                damaged[at] ^= 1 << bit;
                std::fs::write(&flipped, &damaged).unwrap();
                match Recording::read(&flipped) {
                    Err(error) => {
                        let text = format!("{error:#}");
                        assert_eq!(text.lines().count(), 1, "{text}");
                        errors += 1;
                    }
                    Ok(read) => {
                        assert!(read.windows.len() <= 3);
                        for (a, b) in windows.iter().zip(&read.windows) {
                            same(a, b);
                        }
                        assert_eq!(read.set, set(), "byte {at} bit {bit}");
                        match (&read.cut_short, &read.totals) {
                            (None, Some(read_totals)) => {
                                assert_eq!(read.windows.len(), 3, "byte {at} bit {bit}");
                                same(read_totals, &totals);
                            }
                            (Some(_), _) => cut += 1,
                            (None, None) => panic!("byte {at} bit {bit}: no totals, not cut"),
                        }
                    }
                }
            }
        }
        eprintln!(
            "{} flips: {errors} errors, {cut} read as cut short",
            3 * bytes.len()
        );
        assert!(errors > 0);
        let corrupt = {
            let mut damaged = bytes.clone();
            let middle = damaged.len() / 2;
            damaged[middle] ^= 0x10;
            std::fs::write(&flipped, &damaged).unwrap();
            Recording::read(&flipped).err().map(|e| format!("{e:#}"))
        };
        if let Some(text) = corrupt {
            assert!(text.contains("window") || text.contains("not a"), "{text}");
        }
    }

    /// A window of 100,000 rows compresses to a few kilobytes; read within a 1 MiB budget it is
    /// refused in one line before it is parsed, and read with room it is whole.
    #[test]
    fn rows_past_the_memory_budget_are_refused_before_they_are_read() {
        let mut big = window(1);
        let row = big.threads[0].clone();
        big.threads = (0..100_000u32)
            .map(|tid| ThreadUsage {
                tid: Tid(tid),
                ..row.clone()
            })
            .collect();
        let (_dir, path) = recorded(&[big], None);
        assert!(std::fs::metadata(&path).unwrap().len() < 200_000);
        let error = format!(
            "{:#}",
            Recording::read_within(&path, 1 << 20).err().unwrap()
        );
        assert!(error.contains("1 MiB memory budget"), "{error}");
        assert!(
            error.contains("--max-memory") && error.lines().count() == 1,
            "{error}"
        );
        let read = Recording::read_within(&path, 1 << 30).unwrap();
        assert_eq!(read.windows[0].threads.len(), 100_000);
    }

    /// A window holds at most the live-thread map's capacity plus the exited rows the header
    /// names: one row more is refused in one line naming the window, before it is parsed.
    #[test]
    fn thread_rows_past_what_the_run_could_write_are_refused() {
        let bounds = RowBounds {
            max_threads: 10,
            exited_rows: 2,
        };
        let with_rows = |n: u64| {
            let mut w = window(1);
            let row = w.threads[0].clone();
            w.threads = (0..n)
                .map(|tid| ThreadUsage {
                    tid: Tid(tid as u32 + 1),
                    ..row.clone()
                })
                .collect();
            w
        };
        let most = bounds.thread_rows();
        assert_eq!(most, 15);
        let (_dir, path) = recorded_within(&[window(1), with_rows(most)], None, Some(bounds));
        assert_eq!(Recording::read(&path).unwrap().windows[1].threads.len(), 15);

        let (_dir, path) = recorded_within(&[window(1), with_rows(most + 1)], None, Some(bounds));
        let error = format!("{:#}", Recording::read(&path).err().unwrap());
        assert!(
            error.contains("the line after window 1 holds 16 thread rows, more than the 15")
                && error.contains("--max-threads 10")
                && error.lines().count() == 1,
            "{error}"
        );
        // Without bounds in the header (`--every-exit`, older files), the memory budget holds.
        let (_dir, path) = recorded_within(&[with_rows(most + 1)], None, None);
        assert!(Recording::read(&path).is_ok());
    }

    /// Version 1 (one zstd frame for the whole file, no checksum) is still read.
    #[test]
    fn version_1_recordings_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.rec");
        let mut head = header(&set(), None, 100, String::new(), 1, None);
        head.version = 1;
        let mut encoder = zstd::Encoder::new(std::fs::File::create(&path).unwrap(), 3).unwrap();
        for line in [
            format::RecordLine::Header(head),
            format::RecordLine::Window(WindowLine::of(&window(1))),
        ] {
            serde_json::to_writer(&mut encoder, &line).unwrap();
            encoder.write_all(b"\n").unwrap();
        }
        encoder.finish().unwrap();
        let read = Recording::read(&path).unwrap();
        assert_eq!(read.windows.len(), 1);
        same(&read.windows[0], &window(1));
        assert!(read.cut_short.is_some(), "no totals line");
    }

    #[test]
    fn rows_must_carry_one_value_per_counter() {
        let mut line = WindowLine::of(&window(1));
        line.threads[0].counters.pop();
        let error = line.window(1).unwrap_err().to_string();
        assert!(
            error.contains("thread 1 has 1 values and the set has 2 slots"),
            "{error}"
        );
    }
}
