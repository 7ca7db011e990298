//! A thread whose whole life is one slice long enough to be ticked: its first switch out is
//! its exit. The process runs `SCHED_FIFO` on one CPU (`--cpu`, default 0), so the thread it
//! starts (which inherits both) is not preempted by ordinary tasks; the main thread then drops
//! to a lower `SCHED_FIFO` priority, so the thread runs at once and its exit, which wakes the
//! main thread, is not preempted by it (Linux 7.3 preempted an exiting thread in `do_exit` for
//! the joiner it woke at the same priority, both pinned to one CPU: a switch out before its
//! last). The thread spins for `--spin-ms`; once it is joined, the main thread
//! prints one JSON line with its tid, the CPU time it measured itself (`CLOCK_THREAD_CPUTIME_ID`)
//! just before it returned, and its runtime as the kernel booked it at its death
//! (`runtime_at_exit_ns`: the process's CPU time, which takes a dead thread's `sum_exec_runtime`
//! in `__exit_signal` near the end of its exit, minus the main thread's own): that one includes
//! the thread's exit path, which in the emulated guest can take tens of milliseconds; and the
//! thread's own voluntary and involuntary switches before its exit (`voluntary`, `involuntary`).
//! Needs root (`SCHED_FIFO`).

use std::{thread, time::Duration};

use topdown_tests::{flag_value, pin_to_cpu, process_cputime_ns, thread_cputime_ns};

fn main() {
    let cpu = flag_value("--cpu", 0usize);
    let spin = Duration::from_millis(flag_value("--spin-ms", 60));
    if let Err(error) = pin_to_cpu(cpu) {
        eprintln!("ticked_exit: cannot run on CPU {cpu}: {error}");
        std::process::exit(2);
    }
    set_fifo(10);
    let spinner = thread::Builder::new()
        .name("ticked".into())
        .spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < spin {
                std::hint::spin_loop();
            }
            // Its own switches so far: a switch out before its exit shows here.
            // SAFETY: getrusage writes one rusage into the value given.
            let usage = unsafe {
                let mut usage: libc::rusage = std::mem::zeroed();
                libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
                usage
            };
            // SAFETY: gettid has no preconditions.
            (
                unsafe { libc::gettid() },
                thread_cputime_ns(),
                (usage.ru_nvcsw, usage.ru_nivcsw),
            )
        })
        .expect("starting the thread");
    // Below the thread: it runs now, and waking this thread at its exit preempts nothing.
    set_fifo(5);
    let (tid, cputime_ns, (voluntary, involuntary)) = spinner.join().expect("joining the thread");
    // The main thread's own clock first: the process's, read after it, holds a little more of
    // the main thread, so the difference errs by the microseconds between the two reads.
    let main_ns = thread_cputime_ns();
    let runtime_at_exit_ns = process_cputime_ns().saturating_sub(main_ns);
    println!(
        r#"{{"event":"exit","tid":{tid},"cputime_ns":{cputime_ns},"runtime_at_exit_ns":{runtime_at_exit_ns},"voluntary":{voluntary},"involuntary":{involuntary}}}"#
    );
}

/// Runs the calling thread `SCHED_FIFO` at `priority`; exits 2 where that is refused.
fn set_fifo(priority: i32) {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: the call only reads the structure given; 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        eprintln!(
            "ticked_exit: SCHED_FIFO needs root: {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(2);
    }
}
