//! The noisy-neighbour scene, one role per process (the test starts each in its own cgroup):
//!
//! - `neighbours victim --run-ms N`: one thread that sleeps 1 to 2 ms (a fixed pseudo-random
//!   sequence) and then works 200 us of wall time, for N ms; then it prints
//!   `{"parked": TID}` and blocks until stdin closes, so its books are final while it lives.
//! - `neighbours spinner --run-ms N`: one thread always runnable for N ms (a victim that is
//!   queued whenever it is not running, so it can be moved while it waits); then it parks as
//!   the victim does.
//! - `neighbours hog --threads T --run-ms N`: T threads (`hog-0`, ...) always runnable for N
//!   ms; the process then exits.
//! - `neighbours duty --percent P --run-ms N`: one thread (`duty`) that works P % of every 10
//!   ms (its own CPU time, so a busy machine does not shorten its work) and sleeps the rest,
//!   for N ms; the process then exits.

use std::{
    io::{Read as _, Write as _},
    thread,
    time::{Duration, Instant},
};

use topdown_tests::{flag_value, thread_cputime_ns};

fn spin_until(end: Instant) {
    let mut x = 0u64;
    while Instant::now() < end {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn victim(run: Duration) {
    let start = Instant::now();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    while start.elapsed() < run {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        thread::sleep(Duration::from_micros(1_000 + seed % 1_000));
        spin_until(Instant::now() + Duration::from_micros(200));
    }
    park();
}

fn duty(percent: u64, run: Duration) {
    let end = Instant::now() + run;
    let period = Duration::from_millis(10);
    let work = period * u32::try_from(percent.min(100)).unwrap_or(100) / 100;
    thread::Builder::new()
        .name("duty".into())
        .spawn(move || {
            let mut next = Instant::now();
            let work_ns = u64::try_from(work.as_nanos()).unwrap_or(u64::MAX);
            while Instant::now() < end {
                let start = thread_cputime_ns();
                let mut x = 0u64;
                while thread_cputime_ns().saturating_sub(start) < work_ns {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                next += period;
                if let Some(rest) = next.checked_duration_since(Instant::now()) {
                    thread::sleep(rest);
                }
            }
        })
        .expect("starting the duty thread")
        .join()
        .expect("the duty thread");
}

fn spinner(run: Duration) {
    spin_until(Instant::now() + run);
    park();
}

/// Prints `{"parked": TID}` and blocks until stdin closes.
fn park() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    println!("{{\"parked\": {tid}}}");
    std::io::stdout().flush().expect("writing stdout");
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}

fn hog(threads: usize, run: Duration) {
    let end = Instant::now() + run;
    let hogs: Vec<_> = (0..threads)
        .map(|i| {
            thread::Builder::new()
                .name(format!("hog-{i}"))
                .spawn(move || spin_until(end))
                .expect("starting a hog")
        })
        .collect();
    for hog in hogs {
        hog.join().expect("a hog");
    }
}

fn main() {
    let run = Duration::from_millis(flag_value("--run-ms", 1500));
    match std::env::args().nth(1).as_deref() {
        Some("victim") => victim(run),
        Some("hog") => hog(flag_value("--threads", 1), run),
        Some("spinner") => spinner(run),
        Some("duty") => duty(flag_value("--percent", 20), run),
        _ => {
            eprintln!(
                "usage: neighbours victim|spinner|hog|duty [--threads T] [--percent P] [--run-ms N]"
            );
            std::process::exit(2);
        }
    }
}
