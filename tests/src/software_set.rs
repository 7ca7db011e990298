//! Software events standing in for a PMU's counters in the host's kernel tests: counter sets
//! built from them, and how many charges a thread's counts went through.

use topdown_user::{
    attrib::usage::ThreadUsage,
    pmu::counter_set::{Counter, EventAttr, Unit},
};

/// `PERF_TYPE_SOFTWARE`.
const SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_CPU_CLOCK`: counts nanoseconds.
pub const CPU_CLOCK: u64 = 0;
/// `PERF_COUNT_SW_PAGE_FAULTS`.
pub const PAGE_FAULTS: u64 = 2;
/// `PERF_COUNT_SW_CONTEXT_SWITCHES`.
pub const CONTEXT_SWITCHES: u64 = 3;
/// `PERF_COUNT_SW_CPU_MIGRATIONS`.
pub const CPU_MIGRATIONS: u64 = 4;

/// A software counter named `name`, in the group of counter `leader` when given.
pub fn software(name: &str, config: u64, leader: Option<usize>) -> Counter {
    Counter {
        name: name.to_owned(),
        unit: if config == CPU_CLOCK {
            Unit::Nanoseconds
        } else {
            Unit::Events
        },
        attr: EventAttr {
            pmu_type: SOFTWARE,
            config,
            leader,
            ..EventAttr::default()
        },
        cpus: None,
    }
}

/// Most charges a thread had: its switches, and a tick per 10 ms it ran (twice over, as ticks
/// and slices do not line up), and one at each end.
pub fn charges(thread: &ThreadUsage) -> u64 {
    thread.switches + 2 * thread.on_cpu_ns() / 10_000_000 + 2
}
