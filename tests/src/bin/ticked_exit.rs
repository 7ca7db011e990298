//! A thread whose whole life is one slice long enough to be ticked: its first switch out is
//! its exit. The process runs `SCHED_FIFO` on one CPU (`--cpu`, default 0), so the thread it
//! starts (which inherits both) is not preempted by ordinary tasks, and runs only once the main
//! thread blocks joining it. The thread spins for `--spin-ms`; once it is joined, the main thread
//! prints one JSON line with its tid, the CPU time it measured itself (`CLOCK_THREAD_CPUTIME_ID`)
//! just before it returned, and its runtime as the kernel booked it at its death
//! (`runtime_at_exit_ns`: the process's CPU time, which takes a dead thread's `sum_exec_runtime`
//! in `__exit_signal` near the end of its exit, minus the main thread's own): that one includes
//! the thread's exit path, which in the emulated guest can take tens of milliseconds.
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
    // SAFETY: the call only reads the structure given.
    unsafe {
        let param = libc::sched_param { sched_priority: 10 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
            eprintln!(
                "ticked_exit: SCHED_FIFO needs root: {}",
                std::io::Error::last_os_error()
            );
            std::process::exit(2);
        }
    }
    let (tid, cputime_ns) = thread::Builder::new()
        .name("ticked".into())
        .spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < spin {
                std::hint::spin_loop();
            }
            // SAFETY: gettid has no preconditions.
            (unsafe { libc::gettid() }, thread_cputime_ns())
        })
        .expect("starting the thread")
        .join()
        .expect("joining the thread");
    // The main thread's own clock first: the process's, read after it, holds a little more of
    // the main thread, so the difference errs by the microseconds between the two reads.
    let main_ns = thread_cputime_ns();
    let runtime_at_exit_ns = process_cputime_ns().saturating_sub(main_ns);
    println!(
        r#"{{"event":"exit","tid":{tid},"cputime_ns":{cputime_ns},"runtime_at_exit_ns":{runtime_at_exit_ns}}}"#
    );
}
