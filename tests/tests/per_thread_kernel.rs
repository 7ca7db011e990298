//! The kernel mechanism, for real: the BPF program charges per-CPU `cpu-clock` deltas to threads
//! at every switch, and the totals agree with the kernel's own books. Needs root.

use std::{collections::HashMap, time::Duration};

use topdown_tests::{
    Workload, assert_books, assert_waits_booked, books_floor_ns, privileged, schedstat_ns,
    schedstat_run_delay_ns, wait_for_event,
};
use topdown_user::{
    attrib::{Attributor, target::Target, usage::ThreadUsage},
    collect::{Collector, CollectorOptions},
    pmu::{counter_set::CounterSet, sysfs::SysRoot},
};

/// The live threads read by batch (`BPF_MAP_LOOKUP_BATCH`, what kernels from 5.6 do).
#[test]
fn charged_time_matches_schedstat_and_exited_threads_match_their_own_clock() {
    if !privileged("charged_time_matches_schedstat") {
        return;
    }
    charged_as_the_books_say(false);
}

/// The same with the map walked entry by entry, as on a kernel without batch reads.
#[test]
fn charged_time_matches_schedstat_with_the_map_walked() {
    if !privileged("charged_time_matches_schedstat_with_the_map_walked") {
        return;
    }
    charged_as_the_books_say(true);
}

/// One workload at a time: its duty cycles are compared, and two at once on two CPUs would
/// crowd its busy thread.
static ONE_WORKLOAD: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn charged_as_the_books_say(walk_maps: bool) {
    let _alone = ONE_WORKLOAD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let set = CounterSet::for_machine(&SysRoot::host()).expect("counter set");
    let options = CollectorOptions {
        walk_maps,
        ..CollectorOptions::default()
    };
    let mut collector = Collector::start(&set, &options).expect("collector");

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
    let by_tid: HashMap<u32, &ThreadUsage> = totals.threads.iter().map(|t| (t.tid.0, t)).collect();

    for (name, tid) in &long_lived {
        let usage = by_tid
            .get(tid)
            .unwrap_or_else(|| panic!("thread {name} ({tid}) was not reported"));
        assert!(!usage.exited, "{name} is parked, not dead");
        assert_eq!(usage.pid.0, pid);
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

/// Run-queue delay, charged at each switch like on-CPU time: the workload's three long-lived
/// threads all on CPU 0 (`busy` always runnable, `half` half the time, `sleepy` a little) wait
/// for each other, and each one's charged wait is its `schedstat` (second field) within
/// [`assert_waits_booked`]'s bound.
#[test]
fn run_queue_delay_matches_schedstat() {
    if !privileged("run_queue_delay_matches_schedstat") {
        return;
    }
    let _alone = ONE_WORKLOAD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let set = CounterSet::for_machine(&SysRoot::host()).expect("counter set");
    let mut collector = Collector::start(&set, &CollectorOptions::default()).expect("collector");
    let workload = Workload::spawn(
        env!("CARGO_BIN_EXE_workload"),
        &["--run-ms", "2000", "--churn", "0", "--pin-cpu", "0"],
    );
    let long_lived = workload.parked_threads();
    let pid = workload.pid();
    let booked: HashMap<u32, u64> = long_lived
        .values()
        .map(|&tid| (tid, schedstat_run_delay_ns(pid, tid)))
        .collect();
    let mut attrib = Attributor::new(set.counters.len(), Target::Pids(vec![pid]));
    let snapshot = collector.snapshot().expect("snapshot");
    assert!(
        snapshot.waits_measured,
        "this kernel has sched_info (schedstat's second field): waits must be read"
    );
    attrib.window(&snapshot);
    let totals = attrib.run_totals(&snapshot);
    assert!(totals.waits_measured);
    assert!(!totals.stats.lost_anything(), "{:?}", totals.stats);
    let by_tid: HashMap<u32, &ThreadUsage> = totals.threads.iter().map(|t| (t.tid.0, t)).collect();
    for (name, tid) in &long_lived {
        let usage = by_tid
            .get(tid)
            .unwrap_or_else(|| panic!("thread {name} ({tid}) was not reported"));
        // Charged (sleepy runs a few percent: in the emulated guest, less than the floor that
        // on-CPU comparisons need; its wait is compared exactly all the same).
        assert!(usage.on_cpu_ns() > 0 && usage.switches > 0, "{name} ran");
        assert_waits_booked(
            &format!("{name} vs schedstat"),
            usage.waited.as_nanos() as u64,
            booked[tid],
        );
    }
    // Three threads on one CPU: the one always runnable waits a share of the run, far more
    // than the floor the comparison allows, so the comparison says something.
    let busy = by_tid[&long_lived["busy"]].waited.as_nanos() as u64;
    assert!(
        busy > 10 * books_floor_ns(),
        "busy waited {busy} ns on a CPU shared with two others"
    );
    workload.finish();
}

/// A thread whose first switch out is its exit, after ticks charged it while it ran (so it has
/// a map slot): the switch program must find its slot (it skips the lookup only for a thread
/// that started after the CPU's latest tick), charge it whole and free the slot. The thread
/// runs `SCHED_FIFO` on one CPU (`ticked_exit`), so no ordinary task preempts it; the kernel's
/// stopper class still can (the soft-lockup watchdog queues work on every CPU every 4 s with
/// the default `watchdog_thresh`, ~2 % of an 80 ms run), and then its first switch out is not
/// its exit. So each run is checked whole (one exited row, charged its own clock), and the
/// case this test is about must have happened in at least one of up to five runs.
#[test]
fn a_thread_ticked_through_its_only_slice_is_charged_whole_at_exit() {
    if !privileged("a_thread_ticked_through_its_only_slice_is_charged_whole_at_exit") {
        return;
    }
    let set = CounterSet::for_machine(&SysRoot::host()).expect("counter set");
    let mut collector = Collector::start(&set, &CollectorOptions::default()).expect("collector");
    let mut attrib = Attributor::new(set.counters.len(), Target::All);
    let mut switches_seen = Vec::new();
    for _ in 0..5 {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_ticked_exit"))
            .args(["--cpu", "0", "--spin-ms", "80"])
            .output()
            .expect("running ticked_exit");
        assert!(
            output.status.success(),
            "ticked_exit: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let line: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("ticked_exit's JSON line");
        let tid = line["tid"].as_u64().unwrap() as u32;
        let cputime = line["cputime_ns"].as_u64().unwrap();
        // Its runtime as the kernel booked it at its death, its exit path included (its own
        // clock, read before that path, is short of it by up to tens of ms in the guest). Its
        // exit came before the process's: the main thread, woken by it on the same CPU at the
        // same SCHED_FIFO priority, ran only after its last switch.
        let runtime = line["runtime_at_exit_ns"].as_u64().unwrap();

        let snapshot = collector.snapshot().expect("snapshot");
        attrib.window(&snapshot);
        assert!(!snapshot.stats.lost_anything(), "{:?}", snapshot.stats);
        let rows: Vec<ThreadUsage> = attrib
            .run_totals(&snapshot)
            .threads
            .into_iter()
            .filter(|t| t.tid.0 == tid)
            .collect();
        assert_eq!(rows.len(), 1, "one row for the thread: {rows:?}");
        let thread = &rows[0];
        assert!(thread.exited, "its slot was found and freed: {thread:?}");
        // Ticks every 10 ms charged it while it ran; its exit adds the rest.
        assert!(cputime > 50_000_000, "it spun: {cputime} ns");
        assert!(
            runtime >= cputime,
            "booked at death {runtime} >= own clock {cputime}"
        );
        assert_books("the ticked thread", thread.on_cpu_ns(), runtime);
        switches_seen.push(thread.switches);
        if thread.switches == 1 {
            return;
        }
    }
    panic!(
        "in no run was the thread's exit its only switch out (switches per run: \
         {switches_seen:?}): SCHED_FIFO on CPU 0 should keep it running"
    );
}
