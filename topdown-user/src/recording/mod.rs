//! Recordings: a live run kept in a file (`topdown-bpf record`), to be looked at later with
//! `topdown-bpf report` (every view of the live run, the same numbers: `commands::report`) and
//! `topdown-bpf plot` (timelines). The format is zstd-compressed JSON lines, versioned ([`format`]).

pub mod format;
pub mod plot;
pub mod reader;
pub mod writer;

use std::time::{SystemTime, UNIX_EPOCH};

use self::format::{FORMAT, Header, MachineLine, SetLine, TopdownLine, VERSION};
use crate::{
    pmu::{counter_set::CounterSet, machine::host_names},
    tma::view::TopdownView,
};

/// The header of a recording of `set` (and `topdown` over it) started now, windows every
/// `interval_ms`, on a machine with `cpu` and `cpus` online.
pub fn header(
    set: &CounterSet,
    topdown: Option<&TopdownView>,
    interval_ms: u64,
    cpu: String,
    cpus: usize,
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
        command_line: std::env::args().collect(),
        machine: MachineLine {
            hostname,
            kernel,
            cpu,
            cpus,
        },
        counter_set: SetLine::of(set),
        topdown: topdown.map(TopdownLine::of),
    }
}

#[cfg(test)]
mod tests {
    use std::{io::Write as _, time::Duration};

    use super::{format::WindowLine, reader::Recording, writer::Recorder, *};
    use crate::{
        attrib::{
            Window,
            cgroups::CgroupNames,
            usage::{CgroupUsage, CounterValue, ThreadUsage},
        },
        collect::Stats,
        tma::Model,
    };
    use topdown_common::stats::Stat;

    fn value(raw: u64) -> CounterValue {
        CounterValue {
            raw,
            enabled_ns: raw + 1,
            running_ns: raw / 2,
        }
    }

    fn thread(tid: u32, comm: &str, cgroup_id: u64, ns: u64) -> ThreadUsage {
        ThreadUsage {
            tid,
            pid: 100,
            comm: comm.into(),
            cgroup_id,
            switches: tid.into(),
            counters: vec![value(ns), value(ns * 3)],
            exited: tid == 2,
            folded: 0,
        }
    }

    fn window(i: u64) -> Window {
        let mut stats = Stats::default();
        stats.set(Stat::Switches, 10 * i);
        stats.set(Stat::RecordRingFull, i);
        Window {
            start: Duration::from_millis(100 * i),
            length: Duration::from_millis(100),
            threads: vec![thread(1, "alpha", 7, 1000 * i), thread(2, "beta", 8, 5)],
            idle: vec![value(9), value(11)],
            cgroups: vec![CgroupUsage {
                id: 7,
                switches: 3,
                counters: vec![value(1000 * i), value(3000 * i)],
            }],
            stats,
        }
    }

    fn set() -> CounterSet {
        let mut set = CounterSet::software("test".into());
        let mut second = set.counters[0].clone();
        second.name = "msr/tsc/".into();
        second.unit = crate::pmu::counter_set::Unit::Events;
        second.attr.pmu_type = 11;
        set.counters.push(second);
        set
    }

    fn names() -> CgroupNames {
        let mut names = CgroupNames::at(None);
        names.learn(7, "/a/b".into());
        names.learn(8, "/c".into());
        names.learn(5, "/a".into());
        names
    }

    /// Writes `windows` and, when `totals`, the totals; the file's bytes.
    fn recorded(
        windows: &[Window],
        totals: Option<&Window>,
    ) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.rec");
        let view = crate::tma::view::TopdownView::single(
            Model::named("sapphirerapids").unwrap(),
            2,
            8,
            false,
        );
        let head = header(&set(), Some(&view), 100, "GenuineIntel-6-8F".into(), 2);
        let mut recorder = Recorder::create(&path, head).unwrap();
        let mut names = names();
        for w in windows {
            recorder.window(w, &mut names).unwrap();
        }
        if let Some(totals) = totals {
            assert_eq!(
                recorder.finish(totals, &mut names).unwrap(),
                windows.len() as u64
            );
        }
        (dir, path)
    }

    fn same(a: &Window, b: &Window) {
        assert_eq!(a.start, b.start);
        assert_eq!(a.length, b.length);
        assert_eq!(a.threads, b.threads);
        assert_eq!(a.idle, b.idle);
        assert_eq!(a.cgroups, b.cgroups);
        assert_eq!(a.stats, b.stats);
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
        assert_eq!(read.header.interval_ms, 100);
        assert_eq!(read.header.machine.cpu, "GenuineIntel-6-8F");
        assert_eq!(read.names.name(7), "/a/b");
        assert_eq!(read.names.name(8), "/c");
        assert_eq!(
            read.names.id_of("/a"),
            Some(5),
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
        assert_eq!(
            sum.threads[0].counters[0].raw, 10_000,
            "1000 * (1 + 2 + 3 + 4)"
        );
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

        let mut newer = header(&set(), None, 100, String::new(), 1);
        newer.version = VERSION + 1;
        let mut encoder = zstd::Encoder::new(std::fs::File::create(&path).unwrap(), 1).unwrap();
        serde_json::to_writer(&mut encoder, &format::Line::Header(newer)).unwrap();
        encoder.write_all(b"\n").unwrap();
        encoder.finish().unwrap();
        let error = Recording::read(&path).err().unwrap().to_string();
        assert!(error.contains("version 2 recording"), "{error}");
    }

    #[test]
    fn rows_must_carry_one_value_per_counter() {
        let mut line = WindowLine::of(&window(1));
        line.threads[0].counters.pop();
        let error = line.window(2).unwrap_err().to_string();
        assert!(
            error.contains("thread 1 has 1 counter values and the set has 2"),
            "{error}"
        );
    }

    /// A recording of the TopDown set with known Level 1: alpha 10 % frontend, 5 % bad
    /// speculation, 60 % backend, 25 % retiring in every window; beta half as busy.
    fn topdown_recording() -> Recording {
        let counters = [
            "cpu-clock",
            "TOPDOWN.SLOTS",
            "topdown-retiring",
            "topdown-bad-spec",
            "topdown-fe-bound",
            "topdown-be-bound",
            "INT_MISC.UOP_DROPPING",
        ];
        let mut set = CounterSet::on_cpu_clock("topdown", "test".into());
        for name in &counters[1..] {
            let mut counter = set.counters[0].clone();
            counter.name = (*name).into();
            set.counters.push(counter);
        }
        let view = crate::tma::view::TopdownView::single(
            Model::named("sapphirerapids").unwrap(),
            1,
            8,
            false,
        );
        let counts = |ns: u64| {
            [ns, 4000, 1000, 200, 400, 2400, 0]
                .iter()
                .map(|&raw| CounterValue {
                    raw: if raw == ns { ns } else { raw * ns / 1000 },
                    enabled_ns: ns,
                    running_ns: ns,
                })
                .collect::<Vec<_>>()
        };
        let windows = (0..5u64)
            .map(|i| {
                let mut w = window(i);
                w.threads = vec![
                    ThreadUsage {
                        counters: counts(50_000_000),
                        ..thread(1, "alpha", 7, 0)
                    },
                    ThreadUsage {
                        counters: counts(25_000_000),
                        exited: false,
                        ..thread(2, "beta", 8, 0)
                    },
                ];
                w.cgroups.clear();
                w
            })
            .collect();
        Recording {
            header: header(&set, Some(&view), 100, String::new(), 2),
            set,
            topdown: Some(view),
            windows,
            totals: None,
            names: names(),
            cut_short: None,
        }
    }

    #[test]
    fn plot_timelines_rank_rows_and_stack_level_1() {
        let mut recording = topdown_recording();
        let data = plot::timelines(&mut recording, None, "cpu", 1).unwrap();
        assert_eq!(data.times.len(), 5);
        assert_eq!(data.lines.len(), 1, "--top 1");
        assert_eq!(data.lines[0].label, "alpha (1)");
        for value in &data.lines[0].values {
            assert!(
                (value.unwrap() - 50.0).abs() < 1e-9,
                "50 ms of 100: {value:?}"
            );
        }
        let level1: Vec<(&str, f64)> = data
            .level1
            .iter()
            .map(|s| (s.label.as_str(), s.values[0].unwrap()))
            .collect();
        let expected = [
            ("tma_frontend_bound", 10.0),
            ("tma_bad_speculation", 5.0),
            ("tma_backend_bound", 60.0),
            ("tma_retiring", 25.0),
        ];
        assert_eq!(level1.len(), 4, "{level1:?}");
        for (name, percent) in expected {
            let got = level1.iter().find(|(n, _)| *n == name).unwrap().1;
            assert!((got - percent).abs() < 1e-9, "{name}: {got}");
        }
        let node = plot::timelines(&mut recording, None, "tma_backend_bound", 2).unwrap();
        assert_eq!(node.lines.len(), 2);
        assert!((node.lines[1].values[3].unwrap() - 60.0).abs() < 1e-9);
        let error = plot::timelines(&mut recording, None, "tma_nope", 2).unwrap_err();
        assert!(
            error.to_string().contains("unknown metric `tma_nope`"),
            "{error}"
        );

        let svg = plot::svg(&data).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        for name in ["alpha (1)", "tma_backend_bound", "tma_retiring", "%CPU"] {
            assert!(
                texts.iter().any(|t| t.contains(name)),
                "{name} in {texts:?}"
            );
        }
        assert!(
            !texts.iter().any(|t| t.contains("beta")),
            "only the top row: {texts:?}"
        );
    }

    #[test]
    fn software_recordings_plot_cpu_only() {
        let windows: Vec<Window> = (1..=3).map(window).collect();
        let (_dir, path) = recorded(&windows, None);
        let mut read = Recording::read(&path).unwrap();
        read.topdown = None;
        let error = plot::timelines(&mut read, None, "tma_retiring", 3).unwrap_err();
        assert!(error.to_string().contains("measured no TopDown"), "{error}");
        let data = plot::timelines(&mut read, None, "cpu", 3).unwrap();
        assert!(data.level1.is_empty());
        assert_eq!(data.lines.len(), 2);
    }
}
