//! User space's cost per interval of `--per-thread -I 1000 --json` after the kernel's books are
//! read: the attributor's window from a snapshot, the frame (rows named), and the JSON document
//! written; then the run's totals and their document, once, as at the end of a run. Not a test:
//! run with `cargo xtask bench interval-cost`; results go to BENCHMARKS.md (issues 33 and 55).
//!
//! Three shapes of input (`SHAPE=quiet`, the default, `SHAPE=busy` or `SHAPE=busy-off`), with
//! the software set (what these machines and the scale bench run), run times, switches and
//! run-queue delays drawn from a pseudo-random generator, threads read as the kernel listed
//! them (`live_complete` unset), in the order they ran (shuffled each interval):
//! - quiet: the scale bench's pool of mostly idle threads (`scale.sh`, the 5 s shape): 30,000
//!   live threads, a different fifth of them running in each interval (6,000 rows);
//! - busy: issue 55's host, where every thread runs in every interval: 20,000 threads of one
//!   cgroup (as `sleepers 20000 1000` makes them), each wait split by the kernel over two of
//!   the others (culprit thread slots drawn at random, so a cgroup's sum has thousands);
//! - busy-off: the same host with `--no-neighbours` (no wait split, none measured).
//!
//! Not measured here: the `bpf()` lookups of the listed threads and the write to standard
//! output (the document goes to a sink).

mod support;
use support::Lcg;

use std::time::{Duration, Instant};

use topdown_common::{
    reading::Reading,
    stats::Stat,
    thread::{COMM_LEN, ThreadTotals},
};
use topdown_user::{
    attrib::{Attributor, cgroups::CgroupNames, target::Target},
    collect::{Snapshot, Stats, ThreadRecord},
    model::{frame::Frame, rows::RowOptions, sink::WindowSink},
    pmu::counter_set::CounterSet,
    report::{Format, Renderer},
};

/// Intervals timed (after one warm-up interval per share, which lists every thread once).
const INTERVALS: usize = 25;

/// The input's shape (see the top of this file).
#[derive(Clone, Copy)]
struct Shape {
    /// Live threads.
    threads: u32,
    /// One thread in this many runs in an interval (a different share each interval).
    share: u32,
    /// Whether each wait is split over culprit threads (the kernel's neighbours split).
    culprits: bool,
    /// Whether the kernel split waits at all (`--no-neighbours` leaves it off).
    neighbours: bool,
}

impl Shape {
    /// `SHAPE` from the environment.
    fn from_env() -> Self {
        match std::env::var("SHAPE").as_deref() {
            Ok("busy") => Self {
                threads: 20_000,
                share: 1,
                culprits: true,
                neighbours: true,
            },
            Ok("busy-off") => Self {
                threads: 20_000,
                share: 1,
                culprits: false,
                neighbours: false,
            },
            Ok("quiet") | Err(_) => Self {
                threads: 30_000,
                share: 5,
                culprits: false,
                neighbours: true,
            },
            Ok(other) => panic!("SHAPE={other}: quiet, busy or busy-off"),
        }
    }
}

/// Every thread's cumulative totals, as the kernel's map holds them.
struct Books {
    threads: Vec<ThreadTotals>,
    nr: usize,
    shape: Shape,
}

impl Books {
    fn new(nr: usize, shape: Shape) -> Self {
        let threads = (0..shape.threads)
            .map(|i| {
                let mut totals = ThreadTotals::new(1_000 + i, 1_000 + i / 64);
                totals.header.cgroup_id = 1;
                totals.header.born_ns = 1 + u64::from(i);
                let name = format!("worker-{}", i % 97);
                totals.header.comm[..name.len().min(COMM_LEN - 1)]
                    .copy_from_slice(&name.as_bytes()[..name.len().min(COMM_LEN - 1)]);
                totals
            })
            .collect();
        Self { threads, nr, shape }
    }

    /// Charges the threads of `share` (a different one each interval) a run each, and returns
    /// the snapshot that lists them.
    fn interval(&mut self, share: u32, rng: &mut Lcg, at: Instant) -> Snapshot {
        let shape = self.shape;
        let mut live = Vec::with_capacity((shape.threads / shape.share) as usize);
        let mut live_splits = Vec::new();
        // In the order they ran, as the kernel lists them: no order of tids (a Fisher-Yates
        // shuffle each interval). Listed in tid order, the rows came out sorted and their sort
        // cost nothing, which no host gives.
        let mut ran: Vec<usize> = (0..self.threads.len())
            .filter(|&i| i as u32 % shape.share == share)
            .collect();
        for i in (1..ran.len()).rev() {
            ran.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        for i in ran {
            let totals = &mut self.threads[i];
            let ran = 2_000 + rng.next() % 100_000;
            for slot in &mut totals.charged.slots[..self.nr] {
                *slot = slot.plus(Reading {
                    count: ran,
                    enabled_ns: ran,
                    running_ns: ran,
                });
            }
            totals.header.switches += 1 + rng.next() % 3;
            let waited = rng.next() % 20_000;
            totals.header.waited_ns += waited;
            if shape.culprits {
                let behind = &mut totals.behind;
                behind.begin_split();
                let mut culprit = || 1_000 + (rng.next() % u64::from(shape.threads)) as u32;
                let (first, second) = (culprit(), culprit());
                behind.charge(1, first, waited / 2);
                behind.charge(1, second, waited - waited / 2);
            }
            live.push(ThreadRecord::from_totals(totals, self.nr));
            // As the collector reads them: a split per record only where the kernel splits.
            if shape.neighbours {
                live_splits.push(totals.behind);
            }
        }
        let mut stats = Stats::default();
        stats.set(Stat::Switches, 12_000);
        Snapshot {
            at,
            live,
            live_splits,
            live_complete: false,
            records: Vec::new(),
            record_splits: Vec::new(),
            idle: vec![Duration::from_millis(900); 2],
            removed_cgroups: Vec::new(),
            stats,
            waits_measured: true,
            neighbours_measured: shape.neighbours,
        }
    }
}

/// How long each stage took over one interval.
#[derive(Default, Clone, Copy)]
struct Stages {
    attribute: Duration,
    /// The frame's rows (named, sorted: computed when the sink asks) and the document.
    json: Duration,
}

fn main() {
    // As the tool does at start: what the bench measures is what the tool runs.
    topdown_user::heap::keep_freed_memory();
    let shape = Shape::from_env();
    let set = CounterSet::software("bench".into());
    let nr = set.counters.len();
    let mut books = Books::new(set.kernel_slots(), shape);
    let mut rng = Lcg(0x5eed);
    let mut attributor = Attributor::new(nr, Target::All);
    let mut names = CgroupNames::host();
    let mut renderer = Box::new(Renderer::new(
        Box::new(std::io::sink()),
        Format::Json,
        RowOptions::default(),
        set.clone(),
    ));
    let mut at = Instant::now();
    attributor.start(at);
    let mut times: Vec<Stages> = Vec::new();
    let mut rows = 0;
    let mut last = None;
    for interval in 0..shape.share as usize + INTERVALS {
        at += Duration::from_secs(1);
        let snapshot = books.interval(interval as u32 % shape.share, &mut rng, at);
        let started = Instant::now();
        let window = attributor.window(&snapshot);
        let attributed = Instant::now();
        let frame = Frame::new(&window, &mut names, &set, None);
        WindowSink::window(renderer.as_mut(), &frame).expect("writing to a sink");
        let written = Instant::now();
        if interval >= shape.share as usize {
            rows += window.threads.len();
            times.push(Stages {
                attribute: attributed - started,
                json: written - attributed,
            });
        }
        last = Some(snapshot);
    }
    // The end of the run: its totals, and their document.
    let started = Instant::now();
    let totals = attributor.run_totals(&last.expect("an interval"));
    let frame = Frame::new(&totals, &mut names, &set, None);
    WindowSink::finish(renderer, &frame).expect("writing to a sink");
    let finished = started.elapsed();
    let median = |pick: fn(&Stages) -> Duration| {
        let mut all: Vec<Duration> = times.iter().map(pick).collect();
        all.sort_unstable();
        all[all.len() / 2]
    };
    let stages = [
        ("attribute", median(|s| s.attribute)),
        ("rows and JSON", median(|s| s.json)),
        ("all", median(|s| s.attribute + s.json)),
    ];
    let threads = f64::from(shape.threads);
    println!(
        "{} live threads, 1 in {} ran ({} rows an interval), software set{}, median of \
         {INTERVALS} intervals:",
        shape.threads,
        shape.share,
        rows / INTERVALS,
        if shape.culprits {
            ", each wait split over two culprit threads"
        } else {
            ""
        }
    );
    println!("| stage | per interval | per live thread | per row |");
    println!("|---|---:|---:|---:|");
    for (stage, took) in stages {
        println!(
            "| {stage} | {:.2} ms | {:.3} us | {:.2} us |",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e6 / threads,
            took.as_secs_f64() * 1e6 * INTERVALS as f64 / rows as f64
        );
    }
    println!(
        "| the run's totals and their document (once) | {:.2} ms | {:.3} us | - |",
        finished.as_secs_f64() * 1e3,
        finished.as_secs_f64() * 1e6 / threads
    );
}
