//! Recordings for tests: windows, a counter set, cgroup names, files written by the recorder, and
//! a TopDown recording with known Level 1.

use std::time::Duration;
use topdown_common::cgroup::CgroupId;
use topdown_common::thread::{Pid, Tid};

use topdown_common::stats::Stat;

use super::{format::RowBounds, header, reader::Recording, writer::Recorder};
use crate::{
    attrib::{
        Window,
        cgroups::CgroupNames,
        stalls::CpuStalls,
        usage::{CgroupUsage, CounterValue, ThreadUsage},
    },
    collect::Stats,
    pmu::counter_set::{Counter, CounterSet, EventAttr, Unit},
    tma::Model,
};

/// A counter value of `raw` (enabled a ns longer, running half).
pub fn value(raw: u64) -> CounterValue {
    CounterValue::new(raw, raw + 1, raw / 2)
}

/// Thread `tid` of process 100 in cgroup `cgroup_id`, `ns` on CPU (thread 2 exited).
pub fn thread(tid: u32, comm: &str, cgroup_id: u64, ns: u64) -> ThreadUsage {
    ThreadUsage {
        tid: Tid(tid),
        pid: Pid(100),
        comm: comm.into(),
        cgroup_id: CgroupId(cgroup_id),
        switches: tid.into(),
        on_cpu: Duration::from_nanos(ns),
        waited: Duration::from_nanos(ns / 4 + u64::from(tid)),
        behind: Default::default(),
        counters: vec![value(ns * 3)],
        exited: tid == 2,
        folded: 0,
    }
}

/// Window `i`: alpha busy `i` us, beta 5 ns, cgroup 7.
pub fn window(i: u64) -> Window {
    let mut stats = Stats::default();
    stats.set(Stat::Switches, 10 * i);
    stats.set(Stat::RecordRingFull, i);
    Window {
        start: Duration::from_millis(100 * i),
        length: Duration::from_millis(100),
        threads: vec![thread(1, "alpha", 7, 1000 * i), thread(2, "beta", 8, 5)],
        idle: vec![Duration::from_nanos(9), Duration::from_nanos(11)],
        cgroups: vec![CgroupUsage {
            id: CgroupId(7),
            switches: 3,
            on_cpu: Duration::from_nanos(1000 * i),
            waited: Duration::from_nanos(250 * i),
            behind: Default::default(),
            counters: vec![value(3000 * i)],
        }],
        removed_cgroups: Vec::new(),
        stats,
        waits_measured: true,
        neighbours_measured: true,
        // cgroup 7 (`/a/b`) throttled, its parent under pressure; no `full` line (Linux 5.10).
        stalls: [
            (
                "/a/b".to_owned(),
                CpuStalls {
                    nr_throttled: Some(i),
                    throttled: Some(Duration::from_millis(10 * i)),
                    pressure_some: Some(Duration::from_millis(12 * i)),
                    pressure_full: None,
                },
            ),
            (
                "/a".to_owned(),
                CpuStalls {
                    pressure_some: Some(Duration::from_millis(12 * i)),
                    ..CpuStalls::default()
                },
            ),
        ]
        .into(),
    }
}

/// The software set with msr/tsc.
pub fn set() -> CounterSet {
    let mut set = CounterSet::software("test".into());
    set.counters.push(Counter {
        name: "msr/tsc/".into(),
        unit: Unit::Events,
        attr: EventAttr {
            pmu_type: 11,
            ..EventAttr::default()
        },
        cpus: None,
    });
    set
}

/// Cgroups 7 `/a/b`, 8 `/c`, 5 `/a`.
pub fn names() -> CgroupNames {
    let mut names = CgroupNames::at(None);
    names.learn(CgroupId(7), "/a/b".into());
    names.learn(CgroupId(8), "/c".into());
    names.learn(CgroupId(5), "/a".into());
    names
}

/// Writes `windows` and, when `totals`, the totals; the file's bytes.
pub fn recorded(
    windows: &[Window],
    totals: Option<&Window>,
) -> (tempfile::TempDir, std::path::PathBuf) {
    recorded_within(windows, totals, None)
}

/// As [`recorded`], the header saying what bounds its thread rows.
pub fn recorded_within(
    windows: &[Window],
    totals: Option<&Window>,
    bounds: Option<RowBounds>,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.rec");
    let mut view =
        crate::tma::view::TopdownView::single(Model::named("sapphirerapids").unwrap(), 2, 8, false);
    // As measured on a machine with persistent memory, whatever the viewing machine has.
    view.has_pmem = true;
    let head = header(
        &set(),
        Some(&view),
        100,
        "GenuineIntel-6-8F".into(),
        2,
        bounds,
    );
    let mut recorder =
        Recorder::create(&path, std::fs::File::create(&path).unwrap(), head).unwrap();
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

/// A recording of the TopDown set with known Level 1: alpha 10 % frontend, 5 % bad
/// speculation, 60 % backend, 25 % retiring in every window; beta half as busy.
pub fn topdown_recording() -> Recording {
    let counters = [
        "TOPDOWN.SLOTS",
        "topdown-retiring",
        "topdown-bad-spec",
        "topdown-fe-bound",
        "topdown-be-bound",
        "INT_MISC.UOP_DROPPING",
    ];
    let mut set = CounterSet::empty("topdown", "test".into());
    for name in counters {
        set.counters.push(Counter {
            name: name.into(),
            unit: Unit::Events,
            attr: EventAttr::default(),
            cpus: None,
        });
    }
    let view =
        crate::tma::view::TopdownView::single(Model::named("sapphirerapids").unwrap(), 1, 8, false);
    let counts = |ns: u64| {
        [4000, 1000, 200, 400, 2400, 0]
            .iter()
            .map(|&raw| CounterValue::new(raw * ns / 1000, ns, ns))
            .collect::<Vec<_>>()
    };
    let windows = (0..5u64)
        .map(|i| {
            let mut w = window(i);
            w.threads = vec![
                ThreadUsage {
                    counters: counts(50_000_000),
                    ..thread(1, "alpha", 7, 50_000_000)
                },
                ThreadUsage {
                    counters: counts(25_000_000),
                    exited: false,
                    ..thread(2, "beta", 8, 25_000_000)
                },
            ];
            w.cgroups.clear();
            w
        })
        .collect();
    Recording {
        header: header(&set, Some(&view), 100, String::new(), 2, None),
        set,
        topdown: Some(view),
        windows,
        totals: None,
        names: names(),
        cut_short: None,
    }
}
