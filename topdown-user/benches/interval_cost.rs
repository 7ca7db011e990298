//! User space's cost per interval of `--per-thread -I 1000 --json` after the kernel's books are
//! read: the attributor's window from a snapshot, the frame (rows named), and the JSON document
//! written. Not a test: run with `cargo xtask bench interval-cost`; results go to BENCHMARKS.md
//! (issue 33 item 1).
//!
//! The input is shaped like the scale bench's pool of mostly idle threads (`scale.sh`, the 5 s
//! shape): 30,000 live threads, of which a different fifth ran in each interval, so each
//! snapshot lists 6,000 threads (read as the kernel listed them, `live_complete` unset), each
//! with a run time, switches and a run-queue delay drawn from a pseudo-random generator, with
//! the software set (what these machines and the scale bench run). Not measured here: the
//! `bpf()` lookups of the listed threads and the write to standard output (the document goes
//! to a sink).

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

/// Live threads.
const THREADS: u32 = 30_000;
/// One thread in this many runs in an interval (a different share each interval).
const SHARE: u32 = 5;
/// Intervals timed (after one warm-up interval per share, which lists every thread once).
const INTERVALS: usize = 25;

/// Every thread's cumulative totals, as the kernel's map holds them.
struct Books {
    threads: Vec<ThreadTotals>,
    nr: usize,
}

impl Books {
    fn new(nr: usize) -> Self {
        let threads = (0..THREADS)
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
        Self { threads, nr }
    }

    /// Charges the threads of `share` (a different fifth each interval) a run each, and returns
    /// the snapshot that lists them.
    fn interval(&mut self, share: u32, rng: &mut Lcg, at: Instant) -> Snapshot {
        let mut live = Vec::with_capacity((THREADS / SHARE) as usize);
        for (i, totals) in self.threads.iter_mut().enumerate() {
            if i as u32 % SHARE != share {
                continue;
            }
            let ran = 2_000 + rng.next() % 100_000;
            for slot in &mut totals.charged.slots[..self.nr] {
                *slot = slot.plus(Reading {
                    count: ran,
                    enabled_ns: ran,
                    running_ns: ran,
                });
            }
            totals.header.switches += 1 + rng.next() % 3;
            totals.header.waited_ns += rng.next() % 20_000;
            live.push(ThreadRecord::from_totals(totals, self.nr));
        }
        let mut stats = Stats::default();
        stats.set(Stat::Switches, 12_000);
        Snapshot {
            at,
            live,
            live_complete: false,
            records: Vec::new(),
            idle: vec![Duration::from_millis(900); 2],
            removed_cgroups: Vec::new(),
            stats,
            waits_measured: true,
            neighbours_measured: true,
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
    let set = CounterSet::software("bench".into());
    let nr = set.counters.len();
    let mut books = Books::new(set.kernel_slots());
    let mut rng = Lcg(0x5eed);
    let mut attributor = Attributor::new(nr, Target::All);
    let mut names = CgroupNames::host();
    let mut renderer = Renderer::new(
        Box::new(std::io::sink()),
        Format::Json,
        RowOptions::default(),
        set.clone(),
    );
    let mut at = Instant::now();
    attributor.start(at);
    let mut times: Vec<Stages> = Vec::new();
    let mut rows = 0;
    for interval in 0..SHARE as usize + INTERVALS {
        at += Duration::from_secs(1);
        let snapshot = books.interval(interval as u32 % SHARE, &mut rng, at);
        let started = Instant::now();
        let window = attributor.window(&snapshot);
        let attributed = Instant::now();
        let frame = Frame::new(&window, &mut names, &set, None);
        WindowSink::window(&mut renderer, &frame).expect("writing to a sink");
        let written = Instant::now();
        if interval >= SHARE as usize {
            rows += window.threads.len();
            times.push(Stages {
                attribute: attributed - started,
                json: written - attributed,
            });
        }
    }
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
    println!(
        "{THREADS} live threads, 1 in {SHARE} ran ({} rows an interval), software set, \
         median of {INTERVALS} intervals:",
        rows / INTERVALS
    );
    println!("| stage | per interval | per live thread | per row |");
    println!("|---|---:|---:|---:|");
    for (stage, took) in stages {
        println!(
            "| {stage} | {:.2} ms | {:.3} us | {:.2} us |",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e6 / f64::from(THREADS),
            took.as_secs_f64() * 1e6 * INTERVALS as f64 / rows as f64
        );
    }
}
