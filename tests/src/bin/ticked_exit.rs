//! A thread whose whole life is one slice long enough to be ticked: its first switch out is
//! its exit. The process runs `SCHED_FIFO` on one CPU (`--cpu`, default 0), so the thread it
//! starts (which inherits both) is not preempted by ordinary tasks, and runs only once the main
//! thread blocks joining it. The thread spins for `--spin-ms` and prints one JSON line with its
//! tid and the CPU time it measured itself (`CLOCK_THREAD_CPUTIME_ID`) just before it exits.
//! Needs root (`SCHED_FIFO`).

use std::{thread, time::Duration};

use topdown_tests::{flag_value, thread_cputime_ns};

fn main() {
    let cpu = flag_value("--cpu", 0usize);
    let spin = Duration::from_millis(flag_value("--spin-ms", 60));
    // SAFETY: a zeroed cpu_set_t is empty; the calls only read the structures given.
    unsafe {
        let mut mask: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut mask);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &mask) != 0 {
            eprintln!(
                "ticked_exit: cannot run on CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
            std::process::exit(2);
        }
        let param = libc::sched_param { sched_priority: 10 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
            eprintln!(
                "ticked_exit: SCHED_FIFO needs root: {}",
                std::io::Error::last_os_error()
            );
            std::process::exit(2);
        }
    }
    thread::Builder::new()
        .name("ticked".into())
        .spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < spin {
                std::hint::spin_loop();
            }
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            println!(
                r#"{{"event":"exit","tid":{tid},"cputime_ns":{}}}"#,
                thread_cputime_ns()
            );
        })
        .expect("starting the thread")
        .join()
        .expect("joining the thread");
}
