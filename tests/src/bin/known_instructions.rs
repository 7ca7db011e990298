//! Threads that each retire a known number of user instructions, for the exact-count tests on
//! a PMU whose instruction counter is exact (QEMU's emulated Arm PMUv3 under `-icount`).
//!
//! `known_instructions N...` starts one thread per `N`, all at once, so that they interleave
//! on the CPUs and are switched in and out in the middle of their loops. Each thread runs the
//! same code: a loop of `1 + 2N` user instructions (a compare-and-branch, then `N` times a
//! subtract and a branch), stores its tid, and returns. Threads differ only in `N`, so a
//! thread with `N = 0` measures what every thread costs besides its loop (thread start and
//! exit in the C library), and each other thread's user instructions minus that thread's are
//! exactly `2N`. The threads are raw `pthread_create` threads that neither allocate nor
//! print, so nothing else differs between them. After they are joined, one JSON line per
//! thread (`{"tid": T, "n": N}`) goes to standard output.

use std::{
    ffi::c_void,
    sync::atomic::{AtomicU32, Ordering},
};

use topdown_tests::known_loop;

/// What one thread is given and leaves behind.
struct Job {
    n: u64,
    tid: AtomicU32,
}

extern "C" fn run(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` points to a Job that outlives the thread (joined before it is dropped).
    let job = unsafe { &*arg.cast::<Job>() };
    known_loop(job.n);
    // SAFETY: gettid has no preconditions.
    job.tid
        .store(unsafe { libc::gettid() } as u32, Ordering::Relaxed);
    std::ptr::null_mut()
}

fn main() {
    let counts: Vec<u64> = std::env::args()
        .skip(1)
        .map(|n| {
            n.parse().unwrap_or_else(|_| {
                eprintln!("known_instructions: `{n}` is not a count: give N...");
                std::process::exit(2)
            })
        })
        .collect();
    let jobs: Vec<Job> = counts
        .iter()
        .map(|&n| Job {
            n,
            tid: AtomicU32::new(0),
        })
        .collect();
    let mut threads = Vec::new();
    for job in &jobs {
        let mut thread: libc::pthread_t = 0;
        // SAFETY: a fresh pthread_t, default attributes, a function of the right type and a
        // Job that lives until the join below.
        let rc = unsafe {
            libc::pthread_create(
                &mut thread,
                std::ptr::null(),
                run,
                std::ptr::from_ref(job).cast_mut().cast(),
            )
        };
        assert_eq!(rc, 0, "pthread_create");
        threads.push(thread);
    }
    for thread in threads {
        // SAFETY: a thread created above, joined once.
        let rc = unsafe { libc::pthread_join(thread, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "pthread_join");
    }
    for job in &jobs {
        println!(
            "{{\"tid\": {}, \"n\": {}}}",
            job.tid.load(Ordering::Relaxed),
            job.n
        );
    }
}
