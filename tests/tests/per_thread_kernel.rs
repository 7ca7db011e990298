//! The kernel mechanism, for real: the BPF program charges per-CPU `cpu-clock` deltas to threads
//! at every switch, and the totals agree with the kernel's own books. Needs root.

use std::{collections::HashMap, time::Duration};

use topdown_tests::{Workload, assert_books, privileged, schedstat_ns, wait_for_event};
use topdown_user::{
    attrib::{Attributor, target::Target, usage::ThreadUsage},
    collect::{Collector, CollectorOptions},
    pmu::{counter_set::CounterSet, sysfs::SysRoot},
};

#[test]
fn charged_time_matches_schedstat_and_exited_threads_match_their_own_clock() {
    if !privileged("charged_time_matches_schedstat") {
        return;
    }
    let set = CounterSet::for_machine(&SysRoot::host()).expect("counter set");
    let mut collector = Collector::start(&set, &CollectorOptions::default()).expect("collector");

    let workload = Workload::spawn(
        env!("CARGO_BIN_EXE_workload"),
        &["--run-ms", "3000", "--churn", "12"],
    );
    let mut long_lived: HashMap<String, u32> = HashMap::new();
    let mut exited_cputime: HashMap<u32, u64> = HashMap::new();
    wait_for_event(
        &workload.events,
        "parked",
        Duration::from_secs(30),
        |event| match event["event"].as_str() {
            Some("thread") => {
                long_lived.insert(
                    event["name"].as_str().unwrap().to_owned(),
                    event["tid"].as_u64().unwrap() as u32,
                );
            }
            Some("exit") => {
                exited_cputime.insert(
                    event["tid"].as_u64().unwrap() as u32,
                    event["cputime_ns"].as_u64().unwrap(),
                );
            }
            _ => {}
        },
        || {},
    );
    let pid = workload.pid();
    let expected: HashMap<u32, u64> = long_lived
        .values()
        .map(|&tid| (tid, schedstat_ns(pid, tid)))
        .collect();

    let mut attrib = Attributor::new(set.counters.len(), Target::Pids(vec![pid]));
    let snapshot = collector.snapshot().expect("snapshot");
    attrib.window(&snapshot);
    let totals = attrib.run_totals(&snapshot);
    let by_tid: HashMap<u32, &ThreadUsage> = totals.threads.iter().map(|t| (t.tid, t)).collect();

    for (name, tid) in &long_lived {
        let usage = by_tid
            .get(tid)
            .unwrap_or_else(|| panic!("thread {name} ({tid}) was not reported"));
        assert!(!usage.exited, "{name} is parked, not dead");
        assert_eq!(usage.pid, pid);
        assert_eq!(&usage.comm, name, "comm of {tid}");
        assert_books(
            &format!("{name} vs schedstat"),
            usage.on_cpu_ns(),
            expected[tid],
        );
        assert!(usage.switches > 0, "{name} was switched out");
    }
    let on_cpu = |name: &str| by_tid[&long_lived[name]].on_cpu_ns();
    assert!(
        on_cpu("busy") > on_cpu("half") * 13 / 10 && on_cpu("half") > on_cpu("sleepy") * 3,
        "duty cycles not ordered: busy {} half {} sleepy {}",
        on_cpu("busy"),
        on_cpu("half"),
        on_cpu("sleepy")
    );

    assert_eq!(
        exited_cputime.len(),
        12,
        "every churn thread reported its exit"
    );
    for (tid, cputime) in &exited_cputime {
        let usage = by_tid
            .get(tid)
            .unwrap_or_else(|| panic!("exited thread {tid} was not reported"));
        assert!(usage.exited, "thread {tid} is marked exited");
        assert_books(
            &format!("exited {tid} vs its own clock"),
            usage.on_cpu_ns(),
            *cputime,
        );
    }

    assert!(
        !snapshot.stats.lost_anything(),
        "the kernel side lost data: {:?}",
        snapshot.stats
    );
    workload.finish();
}
