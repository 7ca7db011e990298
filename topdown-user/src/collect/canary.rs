//! The canary: before the tool shows anything, its kernel side is checked against the kernel's
//! own books on this kernel.
//!
//! A BPF program that loads can still read wrong: on Linux 6.1's x86-64 JIT, a fault-safe load
//! at a negative offset read 0, every thread id was 0 and every slice was charged as idle,
//! and the tool printed an empty table with exit 0. So at start a collector of on-CPU time
//! alone is attached, one thread of ours spins ~20 ms and blocks, and the time charged to it
//! must equal what the scheduler booked for it (`/proc/self/task/TID/schedstat`, the same
//! `se.sum_exec_runtime` the program reads): exactly, as each charge adds that field's growth
//! and the thread is off-CPU when both are read (1 ms and 1 % of slack cover nothing but a
//! kernel that updates the field in a way not yet seen). It costs one extra load of the
//! programs and ~20 ms of one CPU, once, and never runs at a switch.

use std::{
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{Collector, CollectorOptions};
use crate::pmu::counter_set::CounterSet;

/// How long the canary thread spins (its own CPU time).
const SPIN: Duration = Duration::from_millis(20);

/// What the canary saw: the thread's time as the kernel booked it and as the tool charged it.
#[derive(Clone, Copy, Debug)]
pub struct Verdict {
    /// `se.sum_exec_runtime` of the canary thread (schedstat), ns.
    pub booked_ns: u64,
    /// The on-CPU time the kernel side charged to it, ns (`None`: it was never charged).
    pub charged_ns: Option<u64>,
}

impl Verdict {
    /// Whether the charge is within the bound: 1 % of the booked time plus 1 ms.
    pub fn agrees(&self) -> bool {
        self.charged_ns.is_some_and(|charged| {
            charged.abs_diff(self.booked_ns) <= self.booked_ns / 100 + 1_000_000
        })
    }
}

/// Attaches a collector of on-CPU time, runs the canary thread under it, and fails with one
/// line naming the kernel and what disagreed when the charge is not the kernel's books.
pub fn check() -> Result<Verdict> {
    let set = CounterSet::empty("canary", String::new());
    let options = CollectorOptions {
        switch_stop: None,
        ..CollectorOptions::default()
    };
    let mut collector =
        Collector::attach(&set, &options).context("attaching the start-up check")?;
    let verdict = run(&mut collector)?;
    if !verdict.agrees() {
        let charged = verdict
            .charged_ns
            .map_or_else(|| "nothing".to_owned(), |ns| format!("{ns} ns"));
        bail!(
            "this kernel's BPF side does not count right: on Linux {}, a thread that ran {} ns \
             (its schedstat) was charged {charged}; topdown-bpf stops rather than show wrong \
             numbers (please report it, with `topdown-bpf check`)",
            kernel_release(),
            verdict.booked_ns
        );
    }
    Ok(verdict)
}

/// Runs the canary thread: spin, block, compare, release.
fn run(collector: &mut Collector) -> Result<Verdict> {
    let (spun_tx, spun_rx) = mpsc::channel::<u32>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let canary = thread::Builder::new()
        .name("td-canary".into())
        .spawn(move || {
            let start = thread_cputime();
            let mut x = 0u64;
            while thread_cputime().saturating_sub(start) < SPIN {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            // SAFETY: gettid has no preconditions.
            let _ = spun_tx.send(unsafe { libc::gettid() } as u32);
            let _ = release_rx.recv();
        })
        .context("starting the start-up check's thread")?;
    let tid = spun_rx
        .recv_timeout(Duration::from_secs(30))
        .context("the start-up check's thread did not run")?;
    let booked = blocked_runtime(tid)?;
    let charged = collector
        .thread(tid)?
        .filter(|record| record.header.tgid == std::process::id())
        .and_then(|record| Some(record.slots.get(CounterSet::CLOCK_SLOT)?.count));
    let _ = release_tx.send(());
    let _ = canary.join();
    Ok(Verdict {
        booked_ns: booked,
        charged_ns: charged,
    })
}

/// The runtime the scheduler booked for our thread `tid` once it is blocked (off-CPU: its
/// books no longer change): schedstat's first field, read until two reads 1 ms apart agree
/// with the thread sleeping.
fn blocked_runtime(tid: u32) -> Result<u64> {
    let path = format!("/proc/self/task/{tid}/schedstat");
    let stat = format!("/proc/self/task/{tid}/stat");
    let read = || -> Result<u64> {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        text.split_whitespace()
            .next()
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("parsing {path}"))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = read()?;
    loop {
        thread::sleep(Duration::from_millis(1));
        let now = read()?;
        // The state is the field after the name's closing parenthesis.
        let sleeping = std::fs::read_to_string(&stat)
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('S'))
            })
            .unwrap_or(false);
        if (now == last && sleeping) || Instant::now() > deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
pub(crate) fn thread_cputime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "(unknown release)".to_owned())
}
