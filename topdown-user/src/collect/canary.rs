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
/// line naming the kernel and what disagreed when the charge is not the kernel's books. With
/// `cpus` (the CPUs the run counts on), it counts only there too, and its thread runs on the
/// first of them this process may run on (with none, it counts everywhere: it checks the
/// kernel side, not the choice of CPUs).
pub fn check(cpus: Option<&[u32]>) -> Result<Verdict> {
    let set = CounterSet::empty("canary", String::new());
    let pin = cpus.and_then(|cpus| cpus.iter().copied().find(|&cpu| may_run_on(cpu)));
    let options = CollectorOptions {
        switch_stop: None,
        cpus: pin.and(cpus.map(<[u32]>::to_vec)),
        ..CollectorOptions::default()
    };
    let mut collector =
        Collector::attach(&set, &options).context("attaching the start-up check")?;
    let verdict = run(&mut collector, pin)?;
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

/// Runs the canary thread (on `cpu`, where given): spin, block, compare, release.
fn run(collector: &mut Collector, cpu: Option<u32>) -> Result<Verdict> {
    let (spun_tx, spun_rx) = mpsc::channel::<(u32, u64)>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let canary = thread::Builder::new()
        .name("td-canary".into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                pin_to(cpu);
            }
            let start = thread_cputime();
            let mut x = 0u64;
            while thread_cputime().saturating_sub(start) < SPIN {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            let _ = spun_tx.send((tid, voluntary_switches_of_self()));
            let _ = release_rx.recv();
        })
        .context("starting the start-up check's thread")?;
    let (tid, switches) = spun_rx
        .recv_timeout(Duration::from_secs(30))
        .context("the start-up check's thread did not run")?;
    let booked = blocked_runtime(tid, switches)?;
    // The switch that blocked it is counted before the switch program charges it, which may
    // still be running on another CPU: the charge is read until it is the booked time, for
    // up to a second (it only grows towards it; a charge past it stays past it).
    let deadline = Instant::now() + Duration::from_secs(1);
    let charged = loop {
        let charged = collector
            .thread(tid)?
            .filter(|record| record.header.tgid == std::process::id())
            .and_then(|record| Some(record.slots.get(CounterSet::CLOCK_SLOT)?.count));
        if charged.is_some_and(|ns| ns >= booked) || Instant::now() > deadline {
            break charged;
        }
        thread::sleep(Duration::from_millis(1));
    };
    let _ = release_tx.send(());
    let _ = canary.join();
    Ok(Verdict {
        booked_ns: booked,
        charged_ns: charged,
    })
}

/// Whether this process may run on `cpu` (its affinity, which a cpuset bounds).
fn may_run_on(cpu: u32) -> bool {
    // SAFETY: all-zero is an empty CPU set, which sched_getaffinity fills; CPU_ISSET reads it
    // (and is false beyond the set's size).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0
            && (cpu as usize) < libc::CPU_SETSIZE as usize
            && libc::CPU_ISSET(cpu as usize, &set)
    }
}

/// Runs the calling thread on `cpu` alone (one [`may_run_on`] found).
fn pin_to(cpu: u32) {
    // SAFETY: all-zero is an empty CPU set, which CPU_SET fills; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The calling thread's voluntary context switches so far (`getrusage(RUSAGE_THREAD)`).
fn voluntary_switches_of_self() -> u64 {
    // SAFETY: all-zero is a valid `rusage`, which the call fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a live `rusage`.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    usage.ru_nvcsw as u64
}

/// The runtime the scheduler booked for our thread `tid` once it has blocked: schedstat's
/// first field after its voluntary switches (its `status`) passed `switches`, the count it
/// had before it went to wait. A thread that only looks asleep (state `S` is set before the
/// kernel switches it out, and a running thread's `sum_exec_runtime` is brought up to date
/// only at ticks and switches) is not yet: seen in the emulated guests, where a CPU can
/// stall between the two, as 7 ms charged past the books.
fn blocked_runtime(tid: u32, switches: u64) -> Result<u64> {
    let path = format!("/proc/self/task/{tid}/schedstat");
    let status = format!("/proc/self/task/{tid}/status");
    let read = || -> Result<u64> {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        text.split_whitespace()
            .next()
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("parsing {path}"))
    };
    let switched_out = || {
        std::fs::read_to_string(&status).ok().is_some_and(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
                .is_some_and(|n| n > switches)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if switched_out() {
            return read();
        }
        if Instant::now() > deadline {
            bail!("the start-up check's thread did not block within 10 s");
        }
        thread::sleep(Duration::from_millis(1));
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
