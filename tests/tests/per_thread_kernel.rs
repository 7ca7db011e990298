//! The kernel mechanism, for real: the BPF program charges per-CPU `cpu-clock` deltas to threads
//! at every switch, and the totals agree with the kernel's own books. Needs root.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use topdown_common::stats::Stat;
use topdown_tests::{
    Workload, assert_books, assert_charged_through_exit, assert_waits_booked, books_floor_ns,
    privileged, schedstat_ns, schedstat_run_delay_ns, wait_for_event,
};
use topdown_user::{
    attrib::{Attributor, target::Target, usage::ThreadUsage},
    collect::{Collector, CollectorOptions, Stats},
    pmu::{counter_set::CounterSet, sysfs::SysRoot},
};

/// The live threads the kernel listed as charged, read one by one (every collector's way).
#[test]
fn charged_time_matches_schedstat_and_exited_threads_match_their_own_clock() {
    if !privileged("charged_time_matches_schedstat") {
        return;
    }
    charged_as_the_books_say(false);
}

/// The same with every live thread read at every snapshot (a scan of the mapped slots), as
/// after a full list or a lost record.
#[test]
fn charged_time_matches_schedstat_with_whole_reads() {
    if !privileged("charged_time_matches_schedstat_with_whole_reads") {
        return;
    }
    charged_as_the_books_say(true);
}

/// One workload at a time: its duty cycles are compared, and two at once on two CPUs would
/// crowd its busy thread.
static ONE_WORKLOAD: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn charged_as_the_books_say(read_whole: bool) {
    let _alone = ONE_WORKLOAD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let set = CounterSet::for_machine(&SysRoot::host()).expect("counter set");
    let options = CollectorOptions {
        read_whole,
        ..topdown_tests::collector_options()
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
        // It read its clock as its last act: the rest of its life is the exit's rule.
        assert_charged_through_exit(
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
    let mut collector =
        Collector::start(&set, &topdown_tests::collector_options()).expect("collector");
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
/// runs `SCHED_FIFO` on one CPU above the thread that joins it (`ticked_exit`), so no ordinary
/// task preempts it, nor does the joiner its exit wakes (Linux 7.3 preempted the exit in
/// `do_exit` for a joiner of the same priority, every time); the kernel's
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
    let mut collector =
        Collector::start(&set, &topdown_tests::collector_options()).expect("collector");
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
        switches_seen.push((
            thread.switches,
            line["voluntary"].as_u64(),
            line["involuntary"].as_u64(),
        ));
        if thread.switches == 1 {
            return;
        }
    }
    panic!(
        "in no run was the thread's exit its only switch out (switches per run, and the \
         thread's own voluntary and involuntary switches before its exit: {switches_seen:?}): \
         SCHED_FIFO on CPU 0 should keep it running"
    );
}

/// Snapshots read only the threads the kernel listed as charged since the previous one: over
/// many snapshots of threads that run in some intervals and not in others, every worker's
/// totals in the run's totals are exactly its value in the kernel's map once all are parked
/// (the same numbers, so no bound: a charge the listing missed shows as a difference), the
/// windows add up to them exactly, and they agree with schedstat within [`assert_books`]. Two
/// snapshots after the workers parked, none of them is read any more: a read costs per
/// thread that ran.
#[test]
fn interval_reads_of_the_threads_charged_miss_no_charge() {
    if !privileged("interval_reads_of_the_threads_charged_miss_no_charge") {
        return;
    }
    let (stats, (listed_reads, snapshots)) =
        listed_reads_match_the_map(48, None, Duration::from_millis(2), 30, true);
    assert!(
        listed_reads * 2 >= snapshots,
        "of {snapshots} snapshots, {listed_reads} read only the threads listed: most threads of \
         this process are idle, so a whole read is not cheaper"
    );
    assert_eq!(
        stats.get(Stat::ChargedListFull),
        0,
        "a list of twice --max-threads never fills with 48 threads"
    );
}

/// The same where the kernel refuses to wait out running charges (`nohz_full` hosts): every
/// tid listed is read again at the next snapshot, and no charge is missed either.
#[test]
fn reads_that_carry_every_listed_thread_miss_no_charge() {
    if !privileged("reads_that_carry_every_listed_thread_miss_no_charge") {
        return;
    }
    let (stats, (listed_reads, snapshots)) =
        listed_reads_match_the_map(48, None, Duration::from_millis(2), 30, false);
    assert!(
        listed_reads * 2 >= snapshots && stats.get(Stat::ChargedListFull) == 0,
        "of {snapshots} snapshots, {listed_reads} read only the threads listed: {stats:?}"
    );
}

/// The same with a list too small for the threads charged in an interval (a page of tids, 256,
/// against 320 threads that each run in every interval): the kernel counts the tids it could not
/// list, the next snapshot reads the whole map, and no charge is missed either.
#[test]
fn a_full_charged_list_falls_back_to_reading_the_whole_map() {
    if !privileged("a_full_charged_list_falls_back_to_reading_the_whole_map") {
        return;
    }
    let (stats, _) = listed_reads_match_the_map(320, Some(1), Duration::from_micros(20), 10, true);
    assert!(
        stats.get(Stat::ChargedListFull) > 0,
        "320 threads charged per interval overflow a list of 256: {stats:?}"
    );
}

/// Threads of [`listed_reads_match_the_map`] that block at once and stay blocked.
const IDLE_THREADS: usize = 400;

/// Runs `threads` workers (and [`IDLE_THREADS`] idle ones) in this process for 1.5 s, each
/// spinning `spin` then sleeping `sleep_ms` times 1 to 4 (so some run in an interval and others
/// not), with a collector whose list holds `list_capacity` tids, snapshotting every 40 ms; then
/// parks them and checks what [`interval_reads_of_the_threads_charged_miss_no_charge`] says;
/// `wait_out_charges` as [`CollectorOptions::wait_out_charges`]. Returns the last stats, and how
/// many snapshots read only the threads listed of how many.
fn listed_reads_match_the_map(
    threads: usize,
    list_capacity: Option<u32>,
    spin: Duration,
    sleep_ms: u64,
    wait_out_charges: bool,
) -> (Stats, (usize, usize)) {
    let _alone = ONE_WORKLOAD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let set = CounterSet::for_machine(&SysRoot::host()).expect("counter set");
    let options = CollectorOptions {
        list_capacity,
        wait_out_charges,
        ..topdown_tests::collector_options()
    };
    let mut collector = Collector::start(&set, &options).expect("collector");
    let pid = std::process::id();
    let mut attrib = Attributor::new(set.counters.len(), Target::Pids(vec![pid]));

    let stop = Arc::new(AtomicBool::new(false));
    let (tid_tx, tid_rx) = mpsc::channel::<u32>();
    let (parked_tx, parked_rx) = mpsc::channel::<()>();
    let mut releases = Vec::new();
    let mut handles = Vec::new();
    // Idle threads, as most of a large host's are: charged once (they block at once), then
    // never listed again, so a read of the listed threads is cheaper than a whole one.
    for _ in 0..IDLE_THREADS {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        releases.push(release_tx);
        handles.push(std::thread::spawn(move || {
            let _ = release_rx.recv();
        }));
    }
    for i in 0..threads {
        let (stop, tid_tx, parked_tx) = (Arc::clone(&stop), tid_tx.clone(), parked_tx.clone());
        let (release_tx, release_rx) = mpsc::channel::<()>();
        releases.push(release_tx);
        let nap = Duration::from_millis(sleep_ms * (i as u64 % 4 + 1));
        handles.push(std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                while start.elapsed() < spin {
                    std::hint::spin_loop();
                }
                std::thread::sleep(nap);
            }
            parked_tx.send(()).unwrap();
            // Blocked until released: its totals are final.
            let _ = release_rx.recv();
        }));
    }
    let tids: Vec<u32> = (0..threads).map(|_| tid_rx.recv().unwrap()).collect();

    let mut windowed: HashMap<u32, u64> = HashMap::new();
    let (mut listed_reads, mut snapshots) = (0, 0);
    let mut snapshot_and_sum = |collector: &mut Collector| {
        let snapshot = collector.snapshot().expect("snapshot");
        listed_reads += usize::from(!snapshot.live_complete);
        snapshots += 1;
        for usage in attrib.window(&snapshot).threads {
            *windowed.entry(usage.tid.0).or_default() += usage.on_cpu_ns();
        }
        snapshot
    };
    // At least 1.5 s and a dozen snapshots: where the host preempts an emulated guest's CPUs, a
    // snapshot of a debug build can take hundreds of milliseconds (3 in 1.5 s were seen beside
    // another guest), and the first reads are whole ones.
    let started = Instant::now();
    let mut taken = 0;
    while started.elapsed() < Duration::from_millis(1500) || taken < 12 {
        std::thread::sleep(Duration::from_millis(40));
        snapshot_and_sum(&mut collector);
        taken += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for _ in 0..threads {
        parked_rx.recv().unwrap();
    }
    // Each parked thread then blocks: its last switch out is its last charge, listed in that
    // epoch and read at the next two snapshots, never after. How soon after its last message
    // it blocks is not bounded where the host preempts the guest's CPUs (the guest's clock runs
    // on meanwhile, so a sleep of the test thread proves nothing): snapshots are taken until one
    // reads only listed threads and none of the workers, which a list that kept parked threads
    // on it would never give.
    let mut last = None;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(40));
        let snapshot = snapshot_and_sum(&mut collector);
        let done = !snapshot.live_complete
            && snapshot
                .live
                .iter()
                .all(|record| !tids.contains(&record.tid().0));
        last = Some(snapshot);
        if done {
            break;
        }
    }
    let last = last.unwrap();
    let (listed_reads, snapshots) = (listed_reads, snapshots);
    eprintln!(
        "{listed_reads} of {snapshots} snapshots read only the threads listed; the last: {:?}",
        last.stats
    );
    let totals = attrib.run_totals(&last);
    let by_tid: HashMap<u32, &ThreadUsage> = totals.threads.iter().map(|t| (t.tid.0, t)).collect();
    for &tid in &tids {
        let usage = by_tid
            .get(&tid)
            .unwrap_or_else(|| panic!("worker {tid} was not reported"));
        let kernel = collector
            .thread(tid)
            .expect("reading the map")
            .unwrap_or_else(|| panic!("worker {tid} is parked: it is in the map"));
        assert_eq!(
            (usage.on_cpu_ns(), usage.switches),
            (kernel.slots[0].count, kernel.header.switches),
            "worker {tid}: the run's totals are the kernel's, to the nanosecond"
        );
        assert_eq!(
            windowed.get(&tid).copied(),
            Some(usage.on_cpu_ns()),
            "worker {tid}: the windows add up to the run's totals"
        );
        assert_books(
            &format!("worker {tid} vs schedstat"),
            usage.on_cpu_ns(),
            schedstat_ns(pid, tid),
        );
    }
    let reread: Vec<u32> = last
        .live
        .iter()
        .map(|record| record.tid().0)
        .filter(|tid| tids.contains(tid))
        .collect();
    assert!(
        !last.live_complete && reread.is_empty(),
        "parked workers still read 8 s after they parked (whole read: {}): {reread:?}",
        last.live_complete
    );
    assert!(!last.stats.lost_anything(), "{:?}", last.stats);
    drop(releases);
    for handle in handles {
        handle.join().unwrap();
    }
    (last.stats, (listed_reads, snapshots))
}
