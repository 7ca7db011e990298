//! The c2c filter in the real kernel. No machine here can sample memory, so the filter is
//! attached to `cpu-clock` sampling instead: it must load, run on the samples, find no data_src,
//! count every sample as unparsable, forward nothing, and lose nothing. Needs root.

use std::time::{Duration, Instant};

use topdown_tests::privileged;
use topdown_user::collect::c2c::C2cCollector;

#[test]
fn filter_counts_samples_without_data_src_as_unparsable_and_loses_nothing() {
    if !privileged("filter_counts_samples_without_data_src") {
        return;
    }
    let period = Duration::from_millis(1);
    let mut collector = C2cCollector::start_on_cpu_clock(period, 30, 1 << 20).expect("filter");
    let started = Instant::now();
    let mut x = 0u64;
    while started.elapsed() < Duration::from_millis(400) {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    let elapsed = started.elapsed();
    let counts = collector.counts().expect("counts");
    // The busy CPU samples every millisecond; idle CPUs (NO_HZ) may not sample at all.
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let busy = elapsed.as_millis() as u64;
    eprintln!("{counts:?} ({busy} ms busy on one of {cpus} CPUs)");
    let stats = counts.stats;
    assert!(
        stats.nr_entries >= busy / 2 && stats.nr_entries <= cpus * busy * 2,
        "{} samples over {elapsed:?} at 1 ms on {cpus} CPUs",
        stats.nr_entries
    );
    assert_eq!(
        stats.noparse, stats.nr_entries,
        "no data_src: every sample unparsable"
    );
    assert_eq!(stats.load + stats.store, 0);
    assert_eq!(counts.forwarded, 0);
    assert_eq!(
        (counts.ring_full, counts.read_errors),
        (0, 0),
        "nothing lost"
    );
    assert!(collector.drain().is_empty());
}
