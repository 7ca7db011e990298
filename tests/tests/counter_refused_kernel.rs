//! A count no CPU makes is refused, through the kernel: every perf event of the collector is
//! reset under it, so each CPU's next charge of each counter reads a count below the one
//! before (as a hardware counter read across a wrap or an unannounced reprogramming would; seen
//! once in the arm64 guest: 2^31 too many cycles in one thread's slice). Its own test binary:
//! the reset reaches every perf event of the process, and tests in one binary run together.
//! Needs root.

use std::time::Duration;

use topdown_common::stats::Stat;
use topdown_tests::{
    READ_GAP_NS, Workload, assert_switch_counts, privileged,
    software_set::{CONTEXT_SWITCHES, CPU_CLOCK, charges, software},
};
use topdown_user::{
    attrib::{Attributor, target::Target},
    collect::Collector,
    pmu::counter_set::CounterSet,
};

/// The slice read across the reset must charge no count and no running time (as if the counter
/// had been multiplexed out), never the wrapped difference, and be counted as refused.
///
/// The rule tested for every thread: a `cpu-clock` counter's count and its running time come
/// from one `bpf_perf_event_read_value` (both `local_clock()`, read nanoseconds apart), so the
/// count charged never exceeds the running time charged by more than the read gap per charge
/// ([`READ_GAP_NS`]); a charged wrap would put 2^64 in the count. But the reset zeroes the count
/// from another CPU, unordered with the owning CPU's updates and reads, so a slice that spans
/// it may charge a count off by what the clock counted while the reset landed: at most the
/// reset's span, once per CPU the thread's slices spanned it on. Seen both ways: once in about
/// a hundred runs a count fell 12 us short over 6 charges; with 20,000 other threads waking
/// every second, one thread's count came 6.4 us over its running time over 3 charges.
#[test]
fn a_count_that_goes_back_is_refused_and_charged_as_multiplexed_out() {
    if !privileged("a_count_that_goes_back_is_refused_and_charged_as_multiplexed_out") {
        return;
    }
    let set = CounterSet {
        name: "stand-in-reset",
        reason: "software events reset under the collector".into(),
        counters: vec![
            software("cpu-clock#1", CPU_CLOCK, None),
            software("context-switches#2", CONTEXT_SWITCHES, None),
        ],
    };
    let counters = set.counters.len() as u64;
    let cpus = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    let mut collector =
        Collector::start(&set, &topdown_tests::collector_options()).expect("collector");
    let workload = Workload::spawn(
        env!("CARGO_BIN_EXE_workload"),
        &["--run-ms", "1500", "--churn", "0"],
    );
    let mut attrib = Attributor::new(set.counters.len(), Target::All);
    std::thread::sleep(Duration::from_millis(300));
    let before = collector.snapshot().expect("snapshot");
    attrib.window(&before);
    assert_eq!(
        before.stats.get(Stat::CounterImpossible),
        0,
        "nothing reset yet"
    );

    let reset_started = std::time::Instant::now();
    let reset = reset_own_perf_events();
    let reset_span_ns = reset_started.elapsed().as_nanos() as u64;
    assert!(
        reset >= counters * cpus,
        "every counter on every CPU was reset: {reset}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let after = collector.snapshot().expect("snapshot");
    attrib.window(&after);
    let refused = after.stats.get(Stat::CounterImpossible);
    // At most the first charge of each counter on each CPU after the reset; at least one.
    assert!(
        (1..=counters * cpus).contains(&refused),
        "refused {refused} slices for {counters} counters on {cpus} CPUs"
    );
    let totals = attrib.run_totals(&after);
    workload.finish();
    let mut multiplexed_out = 0;
    for thread in &totals.threads {
        let clock = thread.counters[0].reading;
        let tolerance = charges(thread) * READ_GAP_NS + cpus * reset_span_ns;
        assert!(
            clock.count <= clock.running_ns + tolerance,
            "tid {}: cpu-clock counted {} ns, ran {} ns (tolerance {tolerance} ns: the reset took \
             {reset_span_ns} ns)",
            thread.tid.0,
            clock.count,
            clock.running_ns
        );
        // A wrapped difference would be near 2^64.
        assert_switch_counts(
            &format!("tid {}", thread.tid.0),
            thread.counters[1].reading.count,
            thread.switches,
        );
        if clock.running_ns < clock.enabled_ns {
            multiplexed_out += 1;
        }
    }
    // The busy thread's CPU never idles: the first charge there after the reset is a thread's.
    assert!(
        multiplexed_out > 0,
        "a refused slice shows as time not running"
    );
}

/// Resets every perf event this process holds (the collector's); returns how many.
fn reset_own_perf_events() -> u64 {
    let mut reset = 0;
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let entry = entry.expect("fd entry");
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.to_str() != Some("anon_inode:[perf_event]") {
            continue;
        }
        let fd: i32 = entry.file_name().to_str().unwrap().parse().unwrap();
        // SAFETY: an ioctl without argument on a perf event descriptor this process holds.
        let rc = unsafe { perf_event_open_sys::ioctls::RESET(fd, 0) };
        assert_eq!(rc, 0, "PERF_EVENT_IOC_RESET on fd {fd}");
        reset += 1;
    }
    reset
}
