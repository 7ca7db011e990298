//! A workload with known, different duty cycles, for the integration tests.
//!
//! Threads: `busy` (always running), `half` (about 50 % busy), `sleepy` (mostly sleeping), and
//! `churn-N` threads that start and exit during the run, each printing the CPU time it measured
//! itself (`CLOCK_THREAD_CPUTIME_ID`) just before it exits. Every event is one JSON line on
//! stdout. After `--run-ms`, the long-lived threads park (blocked, so their totals are final),
//! `parked` is printed, and the process exits when stdin closes (or at once with `--no-wait`).
//! With `--pin-cpu N` the long-lived threads all run on CPU N, so each waits in its run queue
//! while the others run; with `--all-busy` all three are always runnable (named as usual).

use std::{
    env,
    io::Read as _,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use topdown_tests::{flag_value, pin_to_cpu, thread_cputime_ns};

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

fn spin(duration: Duration) {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < duration {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn main() {
    let run = Duration::from_millis(flag_value("--run-ms", 3000));
    let churn = flag_value("--churn", 12);
    let no_wait = env::args().any(|a| a == "--no-wait");
    let pin = Some(flag_value("--pin-cpu", usize::MAX)).filter(|&cpu| cpu != usize::MAX);
    let all_busy = env::args().any(|a| a == "--all-busy");
    let stop = Arc::new(AtomicBool::new(false));
    let (parked_tx, parked_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(std::sync::Mutex::new(release_rx));

    // (name, busy slice, sleep slice) per long-lived thread.
    let shapes: [(&str, u64, u64); 3] = [("busy", 1, 0), ("half", 10, 10), ("sleepy", 1, 40)];
    let mut handles = Vec::new();
    for (name, busy_ms, sleep_ms) in shapes {
        let sleep_ms = if all_busy { 0 } else { sleep_ms };
        let stop = Arc::clone(&stop);
        let parked_tx = parked_tx.clone();
        let release_rx = Arc::clone(&release_rx);
        let handle = thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Some(cpu) = pin {
                    pin_to_cpu(cpu).expect("pinning to --pin-cpu");
                }
                println!(r#"{{"event":"thread","name":"{name}","tid":{}}}"#, gettid());
                while !stop.load(Ordering::Relaxed) {
                    spin(Duration::from_millis(busy_ms));
                    if sleep_ms > 0 {
                        thread::sleep(Duration::from_millis(sleep_ms));
                    }
                }
                parked_tx.send(()).expect("main waits");
                // Parked: blocked until released, so its totals no longer change.
                let _ = release_rx.lock().expect("lock").recv();
            })
            .expect("spawning a thread");
        handles.push(handle);
    }

    let started = Instant::now();
    let gap = run / u32::try_from(churn + 1).unwrap_or(1);
    let mut churned = Vec::new();
    for i in 0..churn {
        thread::sleep(gap.saturating_sub(Duration::from_millis(1)));
        let spin_ms = 5 + (i * 7) % 40;
        churned.push(
            thread::Builder::new()
                .name(format!("churn-{i}"))
                .spawn(move || {
                    spin(Duration::from_millis(spin_ms));
                    let cputime = thread_cputime_ns();
                    println!(
                        r#"{{"event":"exit","tid":{},"cputime_ns":{cputime}}}"#,
                        gettid()
                    );
                })
                .expect("spawning a churn thread"),
        );
    }
    for handle in churned {
        handle.join().expect("churn thread");
    }
    thread::sleep(run.saturating_sub(started.elapsed()));
    stop.store(true, Ordering::Relaxed);
    for _ in 0..shapes.len() {
        parked_rx.recv().expect("a thread parks");
    }
    // Give the last one time to block after reporting.
    thread::sleep(Duration::from_millis(20));
    println!(r#"{{"event":"parked","pid":{}}}"#, std::process::id());
    if !no_wait {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }
    drop(release_tx);
    for handle in handles {
        handle.join().expect("long-lived thread");
    }
}
