//! The per-thread plumbing of N counters, end to end through the kernel, with software events
//! standing in for TopDown counters (N = 4 and N = 8 counters after the kernel's clock slot, the
//! sizes the TopDown sets need, one set with a group). Each counter is an event whose per-thread
//! value is known independently: copies of `cpu-clock` must equal the thread's on-CPU time (the
//! clock slot), and `context-switches` must match the switches the kernel program counted. A
//! slot read from the wrong place shows up as a wrong kind of number.
//! Needs root.

use std::collections::HashMap;

use topdown_common::stats::Stat;
use topdown_tests::{
    READ_GAP_NS, Workload, assert_clock_counter, assert_read_together, assert_switch_counts,
    privileged,
    software_set::{CONTEXT_SWITCHES, CPU_CLOCK, CPU_MIGRATIONS, PAGE_FAULTS, charges, software},
    stolen_ns,
};
use topdown_user::{
    attrib::{Attributor, target::Target, usage::ThreadUsage},
    collect::{Collector, CollectorOptions, Stats},
    pmu::counter_set::{Counter, CounterSet},
    tma::Model,
    tma::view::TopdownView,
};

/// What a run of the workload under a set gave.
struct Run {
    /// Each long-lived thread's usage, by name.
    threads: HashMap<String, ThreadUsage>,
    /// Time the hypervisor stole during the run (see [`stolen_ns`]).
    stolen: u64,
    /// Switches the kernel did not report during the run (all CPUs).
    unreported: u64,
    /// The kernel's loss and activity counters at the end of the run.
    stats: Stats,
}

impl Run {
    /// Asserts a clock counter of `thread` against its on-CPU time (see
    /// [`assert_clock_counter`]).
    fn assert_clock(&self, what: &str, clock: u64, thread: &ThreadUsage, books: u64) {
        assert_clock_counter(
            what,
            clock,
            books,
            self.stolen,
            charges(thread),
            self.unreported,
        );
    }
}

/// Runs the workload under `set`.
fn run(set: &CounterSet) -> Run {
    run_on(set, None)
}

/// As [`run`], with the workload pinned to `cpu` when given.
fn run_on(set: &CounterSet, cpu: Option<u32>) -> Run {
    run_with(set, cpu, &topdown_tests::collector_options())
}

/// As [`run_on`], with the collector started with `options`.
fn run_with(set: &CounterSet, cpu: Option<u32>, options: &CollectorOptions) -> Run {
    let stolen_before = stolen_ns();
    let mut collector = Collector::start(set, options).expect("collector");
    let args = ["--run-ms", "1500", "--churn", "3"];
    let workload = match cpu {
        None => Workload::spawn(env!("CARGO_BIN_EXE_workload"), &args),
        Some(cpu) => {
            let cpu = cpu.to_string();
            let mut pinned = vec!["-c", cpu.as_str(), env!("CARGO_BIN_EXE_workload")];
            pinned.extend(args);
            Workload::spawn("taskset", &pinned)
        }
    };
    let names: HashMap<u32, String> = workload
        .parked_threads()
        .into_iter()
        .map(|(name, tid)| (tid, name))
        .collect();
    let mut attrib = Attributor::new(set.counters.len(), Target::Pids(vec![workload.pid()]));
    let snapshot = collector.snapshot().expect("snapshot");
    attrib.window(&snapshot);
    // Nothing lost; counts refused only where a bound was set to refuse them.
    assert!(
        snapshot
            .stats
            .losses()
            .all(|(stat, n)| n == 0 || stat == Stat::CounterImpossible)
            && (snapshot.stats.get(Stat::CounterImpossible) == 0
                || !options.counter_bounds.is_empty()),
        "{:?}",
        snapshot.stats
    );
    let usage = attrib
        .run_totals(&snapshot)
        .threads
        .into_iter()
        .filter_map(|t| Some((names.get(&t.tid.0)?.clone(), t)))
        .collect();
    workload.finish();
    Run {
        threads: usage,
        stolen: stolen_ns() - stolen_before,
        unreported: snapshot.stats.get(Stat::SwitchesUnreported),
        stats: snapshot.stats,
    }
}

/// A counter held to no count at all (a bound of 0 per nanosecond,
/// [`CollectorOptions::counter_bounds`]) has every slice's count refused in the kernel, and
/// only that counter: it shows as not counting (a refused slice charges no count and no running
/// time, never a number made of the refused count), while the counters in the slots beside it
/// keep their exact counts. A bound read from the wrong slot refuses the wrong counter.
///
/// The rule for the held `cpu-clock`: its count and running time come from one
/// `bpf_perf_event_read_value` (both `local_clock()`, read nanoseconds apart), so a slice whose
/// count is 0 (the only count a bound of 0 lets through) ran at most the read gap
/// ([`READ_GAP_NS`] per charge).
#[test]
fn a_counter_held_to_no_count_has_every_slice_refused_and_only_it() {
    if !privileged("a_counter_held_to_no_count_has_every_slice_refused_and_only_it") {
        return;
    }
    let set = CounterSet {
        name: "stand-in-bounds",
        reason: "software events, one held to no count".into(),
        counters: vec![
            software("context-switches#1", CONTEXT_SWITCHES, None),
            software("cpu-clock#2", CPU_CLOCK, None),
            software("context-switches#3", CONTEXT_SWITCHES, None),
        ],
    };
    let options = CollectorOptions {
        counter_bounds: vec![(1, 0)],
        ..topdown_tests::collector_options()
    };
    let run = run_with(&set, None, &options);
    let (refused, reads) = (
        run.stats.get(Stat::CounterImpossible),
        run.stats.get(Stat::CounterReads),
    );
    // One refusal at most per read of the set: only the held counter is refused.
    assert!(
        (1..=reads).contains(&refused),
        "{refused} slices refused in {reads} reads of the set"
    );
    assert_eq!(run.threads.len(), 3, "{:?}", run.threads);
    for (name, thread) in &run.threads {
        assert!(thread.on_cpu_ns() > 1_000_000, "{name} ran");
        let held = thread.counters[1].reading;
        let gap = charges(thread) * READ_GAP_NS;
        assert!(
            held.count == 0 && held.running_ns <= gap && held.enabled_ns > 0,
            "{name}: the held cpu-clock was charged {held:?} (running at most {gap} ns)"
        );
        for i in [0, 2] {
            assert_switch_counts(
                &format!("{name} slot {i}"),
                thread.counters[i].reading.count,
                thread.switches,
            );
        }
    }
}

fn check(set: &CounterSet) {
    let run = run(set);
    let usage = &run.threads;
    assert_eq!(
        usage.len(),
        3,
        "busy, half and sleepy are reported: {usage:?}"
    );
    // The first clock counter the kernel reads (its clock slot is no counter).
    let first_clock = (0..set.counters.len())
        .find(|&i| set.counters[i].attr.config == CPU_CLOCK)
        .expect("a clock counter");
    for (name, thread) in usage {
        assert_eq!(thread.counters.len(), set.counters.len());
        let on_cpu = thread.on_cpu_ns();
        assert!(on_cpu > 1_000_000, "{name} ran");
        for (i, counter) in set.counters.iter().enumerate() {
            let value = thread.counters[i];
            assert!(value.reading.enabled_ns > 0, "{name} slot {i} was enabled");
            match counter.attr.config {
                // The first copy against the on-CPU time taken at the same charges; the others
                // against the first, read with it.
                CPU_CLOCK => {
                    let what = format!("{name} slot {i} ({})", counter.name);
                    let first = thread.counters[first_clock].reading.count;
                    if i == first_clock {
                        run.assert_clock(&what, value.reading.count, thread, on_cpu);
                    } else {
                        assert_read_together(
                            &what,
                            value.reading.count,
                            first,
                            charges(thread),
                            run.stolen,
                        );
                    }
                }
                // Counted after the switch tracepoint: a thread is charged its switches in.
                CONTEXT_SWITCHES => assert_switch_counts(
                    &format!("{name} slot {i}"),
                    value.reading.count,
                    thread.switches,
                ),
                // Small counts, far below any clock: not a clock read from the wrong slot.
                _ => assert!(
                    value.reading.count < on_cpu / 1000 + 1000,
                    "{name} slot {i} ({}) = {}",
                    counter.name,
                    value.reading.count
                ),
            }
        }
    }
}

#[test]
fn five_counters_land_in_their_slots() {
    if !privileged("five_counters_land_in_their_slots") {
        return;
    }
    check(&CounterSet {
        name: "stand-in-5",
        reason: "software events standing in for a TopDown L1 set".into(),
        counters: vec![
            software("context-switches", CONTEXT_SWITCHES, None),
            software("cpu-clock#2", CPU_CLOCK, None),
            software("page-faults", PAGE_FAULTS, None),
            software("cpu-clock#4", CPU_CLOCK, None),
        ],
    });
}

#[test]
fn nine_counters_with_a_group_land_in_their_slots() {
    if !privileged("nine_counters_with_a_group_land_in_their_slots") {
        return;
    }
    check(&CounterSet {
        name: "stand-in-9",
        reason: "software events standing in for a TopDown L2 set".into(),
        counters: vec![
            // A group like slots + metrics: leader at kernel slot 1 (counter 0), members after.
            software("cpu-clock#1", CPU_CLOCK, None),
            software("context-switches#2", CONTEXT_SWITCHES, Some(0)),
            software("cpu-clock#3", CPU_CLOCK, Some(0)),
            software("page-faults#4", PAGE_FAULTS, Some(0)),
            software("cpu-migrations#5", CPU_MIGRATIONS, None),
            software("cpu-clock#6", CPU_CLOCK, None),
            software("context-switches#7", CONTEXT_SWITCHES, None),
            software("cpu-clock#8", CPU_CLOCK, None),
        ],
    });
}

/// The TopDown path end to end: a set named like Sapphire Rapids' Level 1 (slots leader pinned,
/// four metrics in its group, `INT_MISC.UOP_DROPPING`) but backed by software counters: slots
/// and the four metrics all count `cpu-clock`, so every thread's four Level 1 nodes must come out
/// at a quarter each, through the kernel, attribution, and the model reading counters by name.
#[test]
fn topdown_names_flow_from_kernel_counters_into_the_model() {
    if !privileged("topdown_names_flow_from_kernel_counters_into_the_model") {
        return;
    }
    let mut slots = software("TOPDOWN.SLOTS", CPU_CLOCK, None);
    slots.attr.pinned = true;
    let set = CounterSet {
        name: "stand-in-spr-l1",
        reason: "software events named as Sapphire Rapids Level 1".into(),
        counters: vec![
            slots,
            software("topdown-retiring", CPU_CLOCK, Some(0)),
            software("topdown-bad-spec", CPU_CLOCK, Some(0)),
            software("topdown-fe-bound", CPU_CLOCK, Some(0)),
            software("topdown-be-bound", CPU_CLOCK, Some(0)),
            software("INT_MISC.UOP_DROPPING", PAGE_FAULTS, None),
        ],
    };
    let view = TopdownView::single(Model::named("sapphirerapids").unwrap(), 1, 8, false);
    for (name, thread) in run(&set).threads {
        let td = view.of(&set, &thread.counters)[0]
            .clone()
            .expect("every thread ran");
        assert_eq!(td.nodes.len(), 4, "{name}: {td:?}");
        for node in &td.nodes {
            assert!(
                (node.value - 0.25).abs() < 0.005,
                "{name} {}: {}",
                node.node.name,
                node.value
            );
        }
    }
}

/// Hybrid parts read different events on P-cores and E-cores: each CPU reads only its slots, so
/// a thread's counts on one core type never mix with the other's. Stand-in: the on-CPU clock on
/// every CPU, and `cpu-clock` opened only on CPU 0 and only on CPU 1.
#[test]
fn cpu_specific_slots_keep_core_types_apart() {
    if !privileged("cpu_specific_slots_keep_core_types_apart") {
        return;
    }
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("SKIPPED cpu_specific_slots_keep_core_types_apart: needs 2 CPUs");
        return;
    }
    let on = |name: &str, config, cpu: u32| Counter {
        cpus: Some(vec![cpu]),
        ..software(name, config, None)
    };
    let set = CounterSet {
        name: "stand-in-hybrid",
        reason: "per-CPU slots".into(),
        counters: vec![
            on("cpu-clock@cpu0", CPU_CLOCK, 0),
            on("cpu-clock@cpu1", CPU_CLOCK, 1),
            on("context-switches@cpu1", CONTEXT_SWITCHES, 1),
        ],
    };
    // Kernel slots: the clock's (bit 0) everywhere, each counter's at its index + 1.
    assert_eq!((set.slot_mask(0), set.slot_mask(1)), (0b0011, 0b1101));

    let both = run(&set);
    for (name, thread) in &both.threads {
        let [cpu0, cpu1, _] = thread.counters[..] else {
            panic!("3 counters")
        };
        both.assert_clock(
            &format!("{name}: cpu-clock on CPU 0 + on CPU 1"),
            cpu0.reading.count + cpu1.reading.count,
            thread,
            thread.on_cpu_ns(),
        );
    }
    let pinned = run_on(&set, Some(1));
    for (name, thread) in &pinned.threads {
        let [cpu0, cpu1, switches] = thread.counters[..] else {
            panic!("3 counters")
        };
        assert_eq!(
            (cpu0.reading.count, cpu0.reading.enabled_ns),
            (0, 0),
            "{name} never ran on CPU 0"
        );
        pinned.assert_clock(
            &format!("{name}: cpu-clock on CPU 1"),
            cpu1.reading.count,
            thread,
            thread.on_cpu_ns(),
        );
        assert_switch_counts(name, switches.reading.count, thread.switches);
    }
}
