//! The model step's cost per window: `model::step` (rows named, TopDown per row, sorted) over a
//! window of 30,000 threads that all ran, with Sapphire Rapids' Level 2 TopDown set (the
//! heaviest per-row work a live run does), and with the software set. Not a test: run with
//! `cargo bench -p topdown-user --bench model_step`; results go to BENCHMARKS.md.
//!
//! The input is shaped like a busy host's window, not repeated rows: each thread's run time and
//! its split of the slots come from a pseudo-random generator (Level 1 adding up to the slots,
//! each Level 2 metric a share of its parent), the general counters of a tenth of the threads
//! multiplexed (running 60 % of their enabled time), every thread in one of 200 cgroups.

use std::time::{Duration, Instant};

use topdown_user::{
    attrib::{
        Window,
        cgroups::CgroupNames,
        usage::{CounterValue, ThreadUsage},
    },
    collect::Stats,
    model::{self, rows::RowOptions},
    pmu::counter_set::{Counter, CounterSet, EventAttr, Unit},
    tma::{Model, view::TopdownView},
};

/// Threads in the window.
const THREADS: u32 = 30_000;
/// Windows timed; the median is reported.
const RUNS: usize = 11;

/// A small deterministic generator (64-bit LCG), so runs are comparable.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    /// A fraction in [0, 1).
    fn fraction(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 1e6
    }
}

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
    let threads = (1..=THREADS)
        .map(|tid| {
            let ns = 1_000 + rng.next() % 50_000_000;
            let slots = ns * 8 * (1 + rng.next() % 4) / 2;
            let multiplexed = tid % 10 == 0;
            let running = if multiplexed { ns * 6 / 10 } else { ns };
            let by_name = counts(rng, slots);
            let counters = set
                .counters
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let raw = if i == 0 {
                        ns
                    } else {
                        by_name
                            .iter()
                            .find(|(name, _)| *name == c.name)
                            .map_or(slots / 8, |&(_, n)| n)
                    };
                    // The metrics and slots are pinned; the general counters are multiplexed.
                    let pinned =
                        i == 0 || c.name.starts_with("topdown-") || c.name == "TOPDOWN.SLOTS";
                    let running_ns = if pinned { ns } else { running };
                    CounterValue::new(raw * running_ns / ns.max(1), ns, running_ns)
                })
                .collect();
            ThreadUsage {
                tid,
                pid: 1 + tid / 8,
                comm: format!("worker-{}", tid % 97),
                cgroup_id: 1 + u64::from(tid % 200),
                switches: 1 + rng.next() % 500,
                counters,
                exited: false,
                folded: 0,
            }
        })
        .collect();
    Window {
        start: Duration::ZERO,
        length: Duration::from_secs(1),
        threads,
        idle: vec![],
        cgroups: vec![],
        stats: Stats::default(),
    }
}

/// The median time of `model::step` over [`RUNS`] windows.
fn median_step(set: &CounterSet, options: &RowOptions) -> Duration {
    let mut rng = Lcg(0x5eed);
    let window = window(set, &mut rng);
    let mut names = CgroupNames::at(None);
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            let rows = model::step(&window, &mut names, set, options);
            let took = started.elapsed();
            assert_eq!(rows.total, THREADS as usize);
            took
        })
        .collect();
    times.sort_unstable();
    times[RUNS / 2]
}

fn main() {
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
    println!("| window | counters | model::step, median of {RUNS} | per thread |");
    println!("|---|---|---|---|");
    for (what, set, options) in [
        ("software set", &software, &RowOptions::default()),
        ("Sapphire Rapids Level 2", &topdown, &with_topdown),
    ] {
        let took = median_step(set, options);
        println!(
            "| {THREADS} threads, {what} | {} | {:.1} ms | {:.2} us |",
            set.counters.len(),
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e6 / f64::from(THREADS)
        );
    }
}
