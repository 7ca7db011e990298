//! Thread churn, for the collector's tests and benchmark: `--creators N` threads each start a
//! thread, let it spin for `--work-us` microseconds, and join it, as fast as they can (or at
//! `--rate` exits per second in all), for `--seconds`. At the end one JSON line on stdout gives
//! the threads that exited and the process's own CPU time (`getrusage(RUSAGE_SELF)`, every
//! thread included, the exited ones too).

use std::{
    thread,
    time::{Duration, Instant},
};

use topdown_tests::flag_value;

fn spin(duration: Duration) {
    let start = Instant::now();
    while start.elapsed() < duration {
        std::hint::spin_loop();
    }
}

fn main() {
    let seconds = flag_value("--seconds", 10.0);
    let creators = flag_value("--creators", 2u32).max(1);
    let rate = flag_value("--rate", 0.0);
    let work = Duration::from_micros(flag_value("--work-us", 0));
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    // Each creator's gap between starts, for the asked rate in all.
    let gap = (rate > 0.0).then(|| Duration::from_secs_f64(f64::from(creators) / rate));
    let started = Instant::now();
    let creators: Vec<_> = (0..creators)
        .map(|i| {
            thread::Builder::new()
                .name(format!("creator-{i}"))
                .spawn(move || {
                    let mut exits = 0u64;
                    let mut next = Instant::now();
                    while Instant::now() < end {
                        thread::Builder::new()
                            .name("churned".into())
                            .spawn(move || spin(work))
                            .expect("starting a thread")
                            .join()
                            .expect("joining a thread");
                        exits += 1;
                        if let Some(gap) = gap {
                            next += gap;
                            thread::sleep(next.saturating_duration_since(Instant::now()));
                        }
                    }
                    exits
                })
                .expect("starting a creator")
        })
        .collect();
    let churned: u64 = creators
        .into_iter()
        .map(|c| c.join().expect("creator"))
        .sum();
    let elapsed = started.elapsed().as_secs_f64();
    // SAFETY: a zeroed rusage is a valid value to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid rusage to fill.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut usage) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    println!(
        r#"{{"event":"done","exits":{},"seconds":{elapsed:.3},"exits_per_s":{:.0},"rusage_cpu_ns":{}}}"#,
        churned,
        churned as f64 / elapsed,
        ns(usage.ru_utime) + ns(usage.ru_stime)
    );
}
