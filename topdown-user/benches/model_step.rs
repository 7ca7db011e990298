//! The model step's cost per window: a window's frame (rows named, TopDown per row) and the
//! report's rows from it (sorted), alone and with Parquet's rows beside them (each output
//! computing its own, as before the frame, and from one frame), over a window of 30,000
//! threads that all ran, with Sapphire Rapids' Level 2 TopDown set (the
//! heaviest per-row work a live run does), and with the software set. Not a test: run with
//! `cargo bench -p topdown-user --bench model_step`; results go to BENCHMARKS.md.
//!
//! The input is shaped like a busy host's window, not repeated rows: each thread's run time and
//! its split of the slots come from a pseudo-random generator (Level 1 adding up to the slots,
//! each Level 2 metric a share of its parent), the general counters of a tenth of the threads
//! multiplexed (running 60 % of their enabled time), every thread in one of 200 cgroups.

mod support;
use support::Lcg;

use std::time::{Duration, Instant};
use topdown_common::{
    cgroup::CgroupId,
    thread::{Pid, Tid},
};

use topdown_user::{
    attrib::{
        Window,
        cgroups::CgroupNames,
        usage::{self, CgroupUsage, CounterValue, ThreadUsage},
    },
    collect::Stats,
    model::{export, frame::Frame, rows::RowOptions},
    pmu::counter_set::{Counter, CounterSet, EventAttr, Unit},
    tma::{Model, view::TopdownView},
};

/// Threads in the window.
const THREADS: u32 = 30_000;
/// Windows timed; the median is reported.
const RUNS: usize = 11;

fn counter(name: &str) -> Counter {
    Counter {
        name: name.into(),
        unit: Unit::Events,
        attr: EventAttr {
            pmu_type: 4,
            ..EventAttr::default()
        },
        cpus: None,
    }
}

/// One thread's counts, by event name: Level 1 splits its slots (fractions drawn and
/// normalised), each Level 2 metric is a share of its parent, cycles are slots over the width,
/// dropped uops a small share of the frontend's.
fn counts(rng: &mut Lcg, slots: u64) -> Vec<(&'static str, u64)> {
    let split: Vec<f64> = (0..4).map(|_| 0.05 + rng.fraction()).collect();
    let sum: f64 = split.iter().sum();
    let part = |i: usize| (slots as f64 * split[i] / sum) as u64;
    let (fe, bad, be, ret) = (part(0), part(1), part(2), part(3));
    let share = |rng: &mut Lcg, of: u64| (of as f64 * rng.fraction()) as u64;
    vec![
        ("TOPDOWN.SLOTS", slots),
        ("topdown-fe-bound", fe),
        ("topdown-bad-spec", bad),
        ("topdown-be-bound", be),
        ("topdown-retiring", ret),
        ("topdown-fetch-lat", share(rng, fe)),
        ("topdown-br-mispredict", share(rng, bad)),
        ("topdown-mem-bound", share(rng, be)),
        ("topdown-heavy-ops", share(rng, ret)),
        ("INT_MISC.UOP_DROPPING", share(rng, fe / 10)),
    ]
}

/// The window: every thread ran, with counts for every counter of `set`.
fn window(set: &CounterSet, rng: &mut Lcg) -> Window {
    let threads: Vec<ThreadUsage> = (1..=THREADS)
        .map(|tid| {
            let ns = 1_000 + rng.next() % 50_000_000;
            let slots = ns * 8 * (1 + rng.next() % 4) / 2;
            let multiplexed = tid % 10 == 0;
            let running = if multiplexed { ns * 6 / 10 } else { ns };
            let by_name = counts(rng, slots);
            let counters = set
                .counters
                .iter()
                .map(|c| {
                    let raw = by_name
                        .iter()
                        .find(|(name, _)| *name == c.name)
                        .map_or(slots / 8, |&(_, n)| n);
                    // The metrics and slots are pinned; the general counters are multiplexed.
                    let pinned = c.name.starts_with("topdown-") || c.name == "TOPDOWN.SLOTS";
                    let running_ns = if pinned { ns } else { running };
                    CounterValue::new(raw * running_ns / ns.max(1), ns, running_ns)
                })
                .collect();
            ThreadUsage {
                tid: Tid(tid),
                pid: Pid(1 + tid / 8),
                comm: format!("worker-{}", tid % 97).into(),
                cgroup_id: CgroupId(1 + u64::from(tid % 200)),
                switches: 1 + rng.next() % 500,
                on_cpu: Duration::from_nanos(ns),
                waited: Duration::from_nanos(rng.next() % 5_000_000),
                behind: Default::default(),
                counters,
                exited: false,
                folded: 0,
            }
        })
        .collect();
    // Each cgroup charged what its threads ran, as the kernel side charges both.
    let mut cgroups: Vec<CgroupUsage> = (1..=200)
        .map(|id| CgroupUsage::new(CgroupId(id), set.counters.len()))
        .collect();
    for thread in &threads {
        let cgroup = &mut cgroups[(thread.cgroup_id.0 - 1) as usize];
        cgroup.switches += thread.switches;
        cgroup.on_cpu += thread.on_cpu;
        cgroup.waited += thread.waited;
        usage::add_counters(&mut cgroup.counters, &thread.counters);
    }
    Window {
        start: Duration::ZERO,
        length: Duration::from_secs(1),
        threads,
        idle: vec![],
        cgroups,
        removed_cgroups: Vec::new(),
        stats: Stats::default(),
        waits_measured: true,
        neighbours_measured: true,
        stalls: std::collections::BTreeMap::new(),
    }
}

/// What a window's outputs ask of the model.
#[derive(Clone, Copy)]
enum Outputs {
    /// The report alone: its rows, sorted.
    Table,
    /// `record --parquet` on a report, each output computing its own rows (as before the
    /// frame): the report's rows, the export's threads and its cgroups, three model steps.
    TableAndParquetApart,
    /// The same outputs from one frame: rows computed once, shared.
    TableAndParquetShared,
}

/// Every case of [`Outputs`], in this order.
const CASES: [Outputs; 3] = [
    Outputs::Table,
    Outputs::TableAndParquetApart,
    Outputs::TableAndParquetShared,
];

/// The time of what `outputs` ask of the model over `window`.
fn time(window: &Window, set: &CounterSet, options: &RowOptions, outputs: Outputs) -> Duration {
    let mut names = CgroupNames::at(None);
    let topdown = options.topdown.as_ref();
    let started = Instant::now();
    let frame = Frame::new(window, &mut names, set, topdown);
    let rows = frame.rows(options);
    assert_eq!(rows.total, THREADS as usize);
    match outputs {
        Outputs::Table => {}
        Outputs::TableAndParquetShared => {
            let export = export::rows(&frame);
            assert_eq!(export.threads.len(), THREADS as usize);
            assert_eq!(export.cgroups.len(), 200);
        }
        Outputs::TableAndParquetApart => {
            drop(frame);
            let mut names = CgroupNames::at(None);
            let threads = Frame::new(window, &mut names, set, topdown);
            assert_eq!(threads.threads().len(), THREADS as usize);
            drop(threads);
            let mut names = CgroupNames::at(None);
            let cgroups = Frame::new(window, &mut names, set, topdown);
            assert_eq!(cgroups.cgroups().len(), 200);
        }
    }
    started.elapsed()
}

/// The median time of each of [`CASES`] over [`RUNS`] rounds, the cases interleaved in each
/// round (one warm-up round first), so none is favoured by when it ran.
fn medians(set: &CounterSet, options: &RowOptions) -> [Duration; 3] {
    let mut rng = Lcg(0x5eed);
    let window = window(set, &mut rng);
    let mut times = [const { Vec::new() }; 3];
    for round in 0..=RUNS {
        for (at, outputs) in CASES.into_iter().enumerate() {
            let took = time(&window, set, options, outputs);
            if round > 0 {
                times[at].push(took);
            }
        }
    }
    times.map(|mut t| {
        t.sort_unstable();
        t[RUNS / 2]
    })
}

fn main() {
    // As the tool does at start: what the bench measures is what the tool runs.
    topdown_user::heap::keep_freed_memory();
    let model = Model::named("sapphirerapids").expect("a known model");
    let mut topdown = CounterSet::software("bench".into());
    topdown
        .counters
        .extend(model.events_for_level(2).iter().map(|e| counter(e)));
    let view = TopdownView::single(model, 2, 8, false);
    let with_topdown = RowOptions {
        topdown: Some(view),
        ..RowOptions::default()
    };
    let software = CounterSet::software("bench".into());
    println!(
        "| window | counters | report (frame rows) | report + Parquet, each its own rows | \
         report + Parquet, one frame | report per thread |"
    );
    println!("|---|---|---|---|---|---|");
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    for (what, set, options) in [
        ("software set", &software, &RowOptions::default()),
        ("Sapphire Rapids Level 2", &topdown, &with_topdown),
    ] {
        let [table, apart, shared] = medians(set, options);
        println!(
            "| {THREADS} threads, {what} | {} | {} | {} | {} | {:.2} us |",
            set.counters.len(),
            ms(table),
            ms(apart),
            ms(shared),
            table.as_secs_f64() * 1e6 / f64::from(THREADS)
        );
    }
}
