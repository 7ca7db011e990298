//! Counter sets: which events the kernel program reads at every switch, how to open them and
//! what to call them. A set is data; the kernel and collection code are the same for all.

use anyhow::{Result, bail};
use topdown_common::{
    MAX_COUNTERS,
    stats::{MAX_COUNT_PER_NS, MAX_CYCLES_PER_NS},
};

use super::{machine::Machine, sysfs::SysRoot};

/// `PERF_TYPE_SOFTWARE`.
const PERF_TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_CPU_CLOCK`.
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

/// What a counter's value is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Nanoseconds (the on-CPU clock).
    Nanoseconds,
    /// Clock cycles.
    Cycles,
    /// A plain event count.
    Events,
}

impl Unit {
    /// Short unit name for headers and JSON.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Nanoseconds => "ns",
            Self::Cycles => "cycles",
            Self::Events => "events",
        }
    }
}

/// How to open one counter with `perf_event_open` (one per CPU, pid = -1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventAttr {
    /// `perf_event_attr.type`.
    pub pmu_type: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1`.
    pub config1: u64,
    /// Index (in the set) of this counter's group leader; `None` for a leader or a lone counter.
    pub leader: Option<usize>,
    /// Keep the group on the PMU at all times (`perf_event_attr.pinned`).
    pub pinned: bool,
    /// Do not count in user mode (`exclude_user`).
    pub exclude_user: bool,
    /// Do not count in kernel mode (`exclude_kernel`).
    pub exclude_kernel: bool,
}

/// One counter of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// Column and JSON name, e.g. `cpu-clock`, `msr/tsc`.
    pub name: String,
    /// What the value is measured in.
    pub unit: Unit,
    /// How to open it.
    pub attr: EventAttr,
    /// The CPUs it is opened on (a hybrid part's core type); `None`: every CPU.
    pub cpus: Option<Vec<u32>>,
}

#[cfg(test)]
impl Counter {
    /// A counter of event `name` (`perf_event_attr` type and config), counting events on every
    /// CPU: the unit tests' counters.
    pub(crate) fn event(name: &str, pmu_type: u32, config: u64) -> Self {
        Self {
            name: name.to_owned(),
            unit: Unit::Events,
            attr: EventAttr {
                pmu_type,
                config,
                ..EventAttr::default()
            },
            cpus: None,
        }
    }
}

impl Counter {
    /// `PERF_TYPE_HARDWARE`'s cycle events: `PERF_COUNT_HW_CPU_CYCLES`,
    /// `PERF_COUNT_HW_BUS_CYCLES`, `PERF_COUNT_HW_REF_CPU_CYCLES`.
    const HW_CYCLE_EVENTS: [u64; 3] = [0, 6, 9];

    /// The event its name spells, without a PMU prefix or modifiers: `INST_RETIRED.ANY` of
    /// `cpu_core/INST_RETIRED.ANY/u` or of `INST_RETIRED.ANY:u`.
    pub fn event_name(&self) -> &str {
        match self.name.split_once('/') {
            // `pmu/event/modifiers`: what is between the first and the last slash.
            Some((_, rest)) => rest.rsplit_once('/').map_or(rest, |(event, _)| event),
            None => self
                .name
                .split_once(':')
                .map_or(&self.name, |(event, _)| event),
        }
    }

    /// Whether this event counts cycles, at most one a cycle of a clock: perf's generic cycle
    /// events, or an event its name says counts cycles (`cycles`, `CPU_CYCLES`, `*_CYCLES`
    /// events that count cycles with a condition, Intel's `CPU_CLK_UNHALTED.*` and
    /// `CYCLE_ACTIVITY.*`, AMD's `*_cyc`). Modifiers and PMU prefixes (`cpu_core/cycles/u`) do
    /// not change it.
    pub fn counts_cycles(&self) -> bool {
        /// `PERF_TYPE_HARDWARE`.
        const PERF_TYPE_HARDWARE: u32 = 0;
        if self.attr.pmu_type == PERF_TYPE_HARDWARE {
            return Self::HW_CYCLE_EVENTS.contains(&(self.attr.config & 0xffff_ffff));
        }
        let event = self.event_name().to_ascii_lowercase();
        event.contains("cycles")
            || event.starts_with("cycle_activity")
            || event.starts_with("cpu_clk_unhalted")
            || event.ends_with("_cyc")
    }

    /// The most this counter can count per nanosecond it ran, to which the kernel program
    /// holds every slice's count (`topdown_common::stats::possible_count`):
    /// [`MAX_CYCLES_PER_NS`] for an event of cycles ([`Self::counts_cycles`]),
    /// [`MAX_COUNT_PER_NS`] for any other.
    pub fn most_per_ns(&self) -> u64 {
        if self.counts_cycles() {
            MAX_CYCLES_PER_NS
        } else {
            MAX_COUNT_PER_NS
        }
    }
}

/// The counters the kernel program reads at every switch, beside the on-CPU clock.
///
/// The clock is not a counter of the set: the kernel program takes every thread's on-CPU time
/// from the scheduler's clock into its slot 0 ([`CounterSet::CLOCK_SLOT`]), and counter `i` of
/// the set is its slot `i + 1` ([`CounterSet::kernel_slot`]). Everything after collection sees
/// on-CPU time as its own field and the set's counters by their index here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterSet {
    /// Name shown to the user, e.g. `software`.
    pub name: &'static str,
    /// Why this set is the one running, for the first output line.
    pub reason: String,
    /// The counters, at most [`CounterSet::MAX`]; none for the software set.
    pub counters: Vec<Counter>,
}

impl CounterSet {
    /// The kernel program's slot for the on-CPU clock.
    pub const CLOCK_SLOT: usize = 0;

    /// The most counters a set holds: the kernel's slots less the clock's.
    pub const MAX: usize = MAX_COUNTERS - 1;

    /// The kernel program's slot for counter `index` of the set.
    pub const fn kernel_slot(index: usize) -> usize {
        index + 1
    }

    /// How many slots the kernel program reads for this set: the clock's and the counters'.
    pub fn kernel_slots(&self) -> usize {
        self.counters.len() + 1
    }

    /// What each kernel slot's counter can count at most per nanosecond it ran
    /// ([`Counter::most_per_ns`]); `override_by_counter` replaces some (by counter index, in
    /// set order: the tests refuse every count of one counter this way). Slots the set does not
    /// use (and the clock's, which is no counter) hold [`MAX_COUNT_PER_NS`].
    pub fn slot_bounds(&self, override_by_counter: &[(usize, u64)]) -> [u64; MAX_COUNTERS] {
        let mut bounds = [MAX_COUNT_PER_NS; MAX_COUNTERS];
        for (index, counter) in self.counters.iter().enumerate() {
            if let Some(bound) = bounds.get_mut(Self::kernel_slot(index)) {
                *bound = counter.most_per_ns();
            }
        }
        for &(index, most) in override_by_counter {
            if let Some(bound) = bounds.get_mut(Self::kernel_slot(index)) {
                *bound = most;
            }
        }
        bounds
    }

    /// A set without counters: on-CPU time and switches only.
    pub fn empty(name: &'static str, reason: String) -> Self {
        Self {
            name,
            reason,
            counters: Vec::new(),
        }
    }

    /// The software set: on-CPU time and switches, which every set has, and nothing the switch
    /// program must read. (`msr/tsc`, where it exists, counts at a constant rate while a thread
    /// runs: on-CPU time times the TSC frequency, no new information for a counter read at every
    /// switch; `-e msr/tsc/` adds it.)
    pub fn software(reason: String) -> Self {
        Self::empty("software", reason)
    }

    /// This set with the per-CPU `cpu-clock` software event first, for counters read from
    /// userspace per CPU (`--per-core`), where it is a counter like the others: a CPU's clock
    /// counts wall time while enabled.
    pub fn with_cpu_clock(&self) -> Self {
        let clock = Counter {
            name: "cpu-clock".into(),
            unit: Unit::Nanoseconds,
            attr: EventAttr {
                pmu_type: PERF_TYPE_SOFTWARE,
                config: PERF_COUNT_SW_CPU_CLOCK,
                ..EventAttr::default()
            },
            cpus: None,
        };
        let shifted = self.counters.iter().map(|c| {
            let mut c = c.clone();
            c.attr.leader = c.attr.leader.map(|l| l + 1);
            c
        });
        Self {
            name: self.name,
            reason: self.reason.clone(),
            counters: std::iter::once(clock).chain(shifted).collect(),
        }
    }

    /// The set to run on this machine, and why.
    pub fn for_machine(sys: &SysRoot) -> Result<Self> {
        let machine = Machine::read(sys)?;
        let hardware = machine.core_pmus.first().map(|pmu| pmu.name.as_str());
        let reason = match hardware {
            None => "no hardware PMU: software counters only".to_owned(),
            Some(pmu) => format!(
                "hardware PMU `{pmu}` present: software counters by default, TopDown with \
                 --td-level"
            ),
        };
        Self::checked(Self::software(reason))
    }

    fn checked(self) -> Result<Self> {
        if self.counters.len() > Self::MAX {
            bail!(
                "counter set `{}` has {} counters; at most {} fit",
                self.name,
                self.counters.len(),
                Self::MAX
            );
        }
        Ok(self)
    }

    /// Which kernel slots CPU `cpu` reads: bit 0 for the clock, bit [`Self::kernel_slot`] of
    /// each counter opened there.
    pub fn slot_mask(&self, cpu: u32) -> u32 {
        self.counters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.cpus.as_ref().is_none_or(|cpus| cpus.contains(&cpu)))
            .fold(1 << Self::CLOCK_SLOT, |mask, (i, _)| {
                mask | 1 << Self::kernel_slot(i)
            })
    }

    /// Counter names, in slot order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.counters.iter().map(|c| c.name.as_str())
    }

    /// The names of the counters in `slots` (slots the set does not have are left out).
    pub fn names_of(&self, slots: &[usize]) -> Vec<&str> {
        slots
            .iter()
            .filter_map(|&slot| self.counters.get(slot).map(|c| c.name.as_str()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn named(name: &str, pmu_type: u32, config: u64) -> Counter {
        Counter::event(name, pmu_type, config)
    }

    #[test]
    fn the_event_name_drops_the_pmu_prefix_and_modifiers() {
        for (name, event) in [
            ("cpu_core/INST_RETIRED.ANY/u", "INST_RETIRED.ANY"),
            ("cpu_core/INST_RETIRED.ANY/", "INST_RETIRED.ANY"),
            ("msr/tsc/", "tsc"),
            ("INST_RETIRED.ANY:u", "INST_RETIRED.ANY"),
            ("cycles", "cycles"),
        ] {
            assert_eq!(named(name, 4, 0).event_name(), event, "{name}");
        }
    }

    #[test]
    fn counters_of_cycles_are_held_to_a_clock_s_rate_and_others_to_any_event_s() {
        let raw = 4;
        for cycles in [
            named("cycles", 0, 0),
            named("cpu_core/cycles/u", 0, 8 << 32),
            named("ref-cycles", 0, 9),
            named("cpu_atom/CPU_CLK_UNHALTED.THREAD/", raw, 0x3c),
            named("CYCLE_ACTIVITY.STALLS_L3_MISS:k", raw, 0x6a3),
            named("CPU_CYCLES", raw, 0x11),
            named("ls_not_halted_cyc", raw, 0x76),
            named("cpu_core/CPU_CLK_UNHALTED.THREAD/k", raw, 0x3c),
        ] {
            assert!(cycles.counts_cycles(), "{}", cycles.name);
            assert_eq!(cycles.most_per_ns(), MAX_CYCLES_PER_NS, "{}", cycles.name);
        }
        for other in [
            named("instructions", 0, 1),
            named("cpu_core/instructions/", 0, (8 << 32) | 1),
            named("TOPDOWN.SLOTS", raw, 0x1a4),
            named("STALL_SLOT", raw, 0x3f),
            named("L1D_PEND_MISS.PENDING", raw, 0x148),
            named("cpu-clock", 1, 0),
            named("msr/tsc/", 12, 0),
        ] {
            assert!(!other.counts_cycles(), "{}", other.name);
            assert_eq!(other.most_per_ns(), MAX_COUNT_PER_NS, "{}", other.name);
        }
    }

    #[test]
    fn slot_bounds_follow_the_counters_slots_and_overrides() {
        let mut set = CounterSet::empty("test", String::new());
        set.counters = vec![
            named("instructions", 0, 1),
            named("cycles", 0, 0),
            named("context-switches", 1, 3),
        ];
        let bounds = set.slot_bounds(&[]);
        assert_eq!(
            bounds[..5],
            [
                MAX_COUNT_PER_NS,
                MAX_COUNT_PER_NS,
                MAX_CYCLES_PER_NS,
                MAX_COUNT_PER_NS,
                MAX_COUNT_PER_NS
            ]
        );
        let overridden = set.slot_bounds(&[(2, 0), (MAX_COUNTERS, 0)]);
        assert_eq!(overridden[3], 0, "counter 2 is slot 3");
        assert_eq!(overridden[..3], bounds[..3]);
    }

    /// A PMU for a fixture: name, type, format files, event files.
    type FixturePmu<'a> = (
        &'a str,
        u32,
        &'a [(&'a str, &'a str)],
        &'a [(&'a str, &'a str)],
    );

    fn tree(pmus: &[FixturePmu<'_>]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, ty, formats, events) in pmus {
            let pmu = dir.path().join("sys/bus/event_source/devices").join(name);
            fs::create_dir_all(pmu.join("format")).unwrap();
            fs::create_dir_all(pmu.join("events")).unwrap();
            fs::write(pmu.join("type"), format!("{ty}\n")).unwrap();
            for (f, v) in *formats {
                fs::write(pmu.join("format").join(f), v).unwrap();
            }
            for (e, v) in *events {
                fs::write(pmu.join("events").join(e), v).unwrap();
            }
        }
        dir
    }

    #[test]
    fn vm_without_pmu_gets_the_clock_only() {
        let dir = tree(&[
            ("software", 1, &[], &[]),
            (
                "msr",
                11,
                &[("event", "config:0-63\n")],
                &[("tsc", "event=0x00\n")],
            ),
        ]);
        let set = CounterSet::for_machine(&SysRoot::at(dir.path())).unwrap();
        assert_eq!(set.name, "software");
        assert!(set.reason.starts_with("no hardware PMU"), "{}", set.reason);
        assert!(set.counters.is_empty(), "on-CPU time is no counter");
        assert_eq!(set.slot_mask(0), 1, "the kernel's clock slot only");
        let per_cpu = set.with_cpu_clock();
        assert_eq!(per_cpu.names().collect::<Vec<_>>(), ["cpu-clock"]);
        assert_eq!(per_cpu.counters[0].attr.pmu_type, PERF_TYPE_SOFTWARE);
        assert_eq!(per_cpu.counters[0].attr.config, PERF_COUNT_SW_CPU_CLOCK);
        assert_eq!(per_cpu.counters[0].unit, Unit::Nanoseconds);
    }

    #[test]
    fn hardware_pmu_is_named_in_the_reason() {
        let dir = tree(&[("cpu", 4, &[], &[])]);
        let set = CounterSet::for_machine(&SysRoot::at(dir.path())).unwrap();
        assert!(set.reason.contains("`cpu`"), "{}", set.reason);
    }
}
