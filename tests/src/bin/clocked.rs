//! A workload that keeps its own books: `--threads N` threads (24 by default), each spinning a
//! different amount in short bursts between sleeps (so it is switched out often), then printing
//! `{"tid": T, "cputime_ns": C}` from its own `CLOCK_THREAD_CPUTIME_ID` as its last act and
//! exiting. Nothing in it knows about the tool: the kernel matrix compares what the tool
//! charged each thread with what the thread measured itself.

use std::{
    thread,
    time::{Duration, Instant},
};

use topdown_tests::{flag_value, thread_cputime_ns};

fn main() {
    let threads: u64 = flag_value("--threads", 24);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            thread::Builder::new()
                .name(format!("clocked-{i}"))
                .spawn(move || {
                    // 40 to 120 ms of CPU, in 10 ms bursts with 2 ms sleeps between.
                    let bursts = 4 + i % 9;
                    for _ in 0..bursts {
                        let start = thread_cputime_ns();
                        let mut x = 0u64;
                        while thread_cputime_ns() - start < 10_000_000 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1),
                            );
                        }
                        thread::sleep(Duration::from_millis(2));
                    }
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
                    println!(r#"{{"tid":{tid},"cputime_ns":{}}}"#, thread_cputime_ns());
                })
                .expect("spawning a thread")
        })
        .collect();
    let started = Instant::now();
    for handle in handles {
        handle.join().expect("a clocked thread");
    }
    eprintln!("clocked: {threads} threads in {:?}", started.elapsed());
}
