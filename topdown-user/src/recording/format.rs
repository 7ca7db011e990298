//! The recording format, version 1: zstd-compressed JSON lines, one typed object per line
//! (`"type"`: `header`, `cgroups`, `window`, `totals`). docs/recordings.md.
//!
//! These types are the schema: the live run's usage is converted to them when written and
//! back when read, so the tool's internal types can change without changing the files.

use std::{collections::BTreeMap, time::Duration};
use topdown_common::cgroup::CgroupId;
use topdown_common::neighbours::WaitRest;
use topdown_common::reading::Reading;
use topdown_common::thread::{Pid, Tid};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use topdown_common::stats::Stat;

use crate::{
    attrib::{
        Window,
        neighbours::{Behind, BehindParts},
        stalls::CpuStalls,
        usage::{CgroupUsage, CounterValue, ThreadUsage, duration_ns},
    },
    collect::Stats,
    pmu::counter_set::{Counter, CounterSet, EventAttr, Unit},
    tma::{
        Model,
        view::{TopdownPart, TopdownView},
    },
};

/// What the first line's `format` says.
pub const FORMAT: &str = "topdown-bpf-recording";
/// The version this build writes and reads.
pub const VERSION: u32 = 2;

/// The oldest version this build reads (1: one zstd frame for the whole file, no checksum).
pub const OLDEST_VERSION: u32 = 1;

/// One line of a recording.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RecordLine {
    /// The first line: what was measured, where and how.
    Header(Header),
    /// cgroup ids and their paths, first seen in the window that follows.
    Cgroups {
        /// `[id, path]` pairs.
        names: Vec<(u64, String)>,
    },
    /// One interval's usage (deltas).
    Window(WindowLine),
    /// The run's totals, as the live run printed them (the last line of a complete recording).
    Totals(WindowLine),
}

/// The first line of a recording.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// The format's version ([`VERSION`]).
    pub version: u32,
    /// The topdown-bpf version that wrote it.
    pub tool_version: String,
    /// When collection started, in nanoseconds since the Unix epoch.
    pub started_unix_ns: u64,
    /// The period between windows, in milliseconds.
    pub interval_ms: u64,
    /// The command line that recorded it.
    pub command_line: Vec<String>,
    /// Where it was recorded.
    pub machine: MachineLine,
    /// The counters every window's values are in, in the kernel's slot order: the on-CPU clock
    /// (`cpu-clock`) first, then the set's counters.
    pub counter_set: SetLine,
    /// TopDown's model, level and literals, when the set measures it.
    pub topdown: Option<TopdownLine>,
    /// What bounds a window's thread rows; absent when every exit has its own row
    /// (`--every-exit`) and in recordings made before it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_bounds: Option<RowBounds>,
}

/// What bounds the thread rows of a recording's windows (and its totals): the live-thread
/// map's capacity (`--max-threads`), and the exited threads that keep their own rows, the rest
/// folding into at most as many process rows and one row for the rest
/// ([`crate::attrib::exited::ExitedThreads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowBounds {
    /// The live-thread map's capacity.
    pub max_threads: u32,
    /// Exited threads with their own rows, per window and in the totals.
    pub exited_rows: u64,
}

impl RowBounds {
    /// The most thread rows a window (or the totals) can hold.
    pub fn thread_rows(&self) -> u64 {
        u64::from(self.max_threads)
            .saturating_add(self.exited_rows.saturating_mul(2))
            .saturating_add(1)
    }
}

/// Where a recording was made.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MachineLine {
    /// Host name.
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPU identity, perfmon mapfile style.
    pub cpu: String,
    /// CPUs online.
    pub cpus: usize,
}

/// A counter set: its name, why it ran, and its counters.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SetLine {
    /// `software` or `topdown`.
    pub name: String,
    /// Why this set ran.
    pub reason: String,
    /// Each counter, in slot order.
    pub counters: Vec<CounterLine>,
}

/// One counter: its name, unit and how it was opened.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CounterLine {
    /// Name, as reports show it.
    pub name: String,
    /// `ns`, `cycles` or `events`.
    pub unit: String,
    /// `perf_event_attr.type`.
    pub pmu_type: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1`.
    pub config1: u64,
}

/// TopDown over the set: one model per core type.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TopdownLine {
    /// `(label, counter name prefix, model)` per core type; label and prefix empty for one.
    pub parts: Vec<(String, String, String)>,
    /// 1 or 2.
    pub level: u8,
    /// `#slots`.
    pub slots: u32,
    /// `#smt_on`.
    pub smt_on: bool,
    /// perf's `#core_wide` (per-core counts); absent in recordings made before it was
    /// written, which counted TopDown with SMT on per core only: `smt_on` then.
    #[serde(default)]
    pub core_wide: Option<bool>,
    /// perf's `#has_pmem` on the recording machine (read as `false` from recordings made
    /// before it was written, which took it from the machine that viewed them).
    #[serde(default)]
    pub has_pmem: bool,
}

/// One window: its time, every thread's and cgroup's usage, idle per CPU, kernel-side counts.
#[derive(Debug, Serialize, Deserialize)]
pub struct WindowLine {
    /// Start, in nanoseconds from the start of collection.
    pub start_ns: u64,
    /// Length in nanoseconds.
    pub length_ns: u64,
    /// Threads charged in the window.
    pub threads: Vec<ThreadLine>,
    /// Each CPU's idle time, `[ns, ns, ns]` (the clock's count, enabled and running time).
    pub idle: Vec<[u64; 3]>,
    /// cgroups charged in the window, each for itself.
    pub cgroups: Vec<CgroupLine>,
    /// Kernel-side counters since the start, by name.
    pub stats: BTreeMap<String, u64>,
    /// Slots (the clock's is 0) of the counters whose events this PMU did not count in the
    /// window (every row's value there is no count: see `collect::calibration`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub silent: Vec<usize>,
    /// Rows' `run_delay_ns` are measured (absent: this kernel had no `sched_info`, or the
    /// recording was made before waits were written; every row's wait is then no number).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waits_measured: bool,
    /// Rows' `behind` is measured (absent: `--no-neighbours`, or a recording made before the
    /// split was written; no row then says whom it waited behind).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub neighbours_measured: bool,
    /// CPU stalls per cgroup path, for the cgroups charged and their ancestors:
    /// `[nr_throttled, throttled_ns, pressure_some_ns, pressure_full_ns]`, null where the
    /// kernel did not provide one (left out when none were read).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stalls: BTreeMap<String, [Option<u64>; 4]>,
}

/// One thread's usage in a window.
#[derive(Debug, Serialize, Deserialize)]
pub struct ThreadLine {
    /// Thread id (0: a row folding exited threads).
    pub tid: u32,
    /// Process id.
    pub pid: u32,
    /// Thread name.
    pub comm: String,
    /// cgroup2 id at its latest charge.
    pub cgroup_id: u64,
    /// Switches out.
    pub switches: u64,
    /// Nanoseconds waiting in a run queue (see [`WindowLine::waits_measured`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub run_delay_ns: u64,
    /// Whom it waited behind, and its preemptions (see [`WindowLine::neighbours_measured`]).
    #[serde(default, skip_serializing_if = "BehindLine::is_empty")]
    pub behind: BehindLine,
    /// `[count, enabled_ns, running_ns]` per slot: the on-CPU clock's (nanoseconds, always
    /// enabled and running), then each counter's.
    pub counters: Vec<[u64; 3]>,
    /// It died.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exited: bool,
    /// Exited threads this row folds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub folded: u64,
}

/// One cgroup's usage in a window.
#[derive(Debug, Serialize, Deserialize)]
pub struct CgroupLine {
    /// cgroup2 id.
    pub id: u64,
    /// Switches out of its threads.
    pub switches: u64,
    /// Nanoseconds its threads waited in a run queue (see [`WindowLine::waits_measured`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub run_delay_ns: u64,
    /// Whom its threads waited behind, and their preemptions, as [`ThreadLine::behind`].
    #[serde(default, skip_serializing_if = "BehindLine::is_empty")]
    pub behind: BehindLine,
    /// `[count, enabled_ns, running_ns]` per slot, as [`ThreadLine::counters`].
    pub counters: Vec<[u64; 3]>,
}

/// A row's [`Behind`]: `[cgroup id, ns]` per culprit, then the parts no cgroup is charged.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct BehindLine {
    /// `[cgroup_id, ns]` per culprit cgroup.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by: Vec<[u64; 2]>,
    /// `[tid, ns]` per culprit thread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<[u64; 2]>,
    /// Behind cgroups the kernel kept no slot for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub other_ns: u64,
    /// Behind the idle task.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub idle_ns: u64,
    /// Before the CPU's remembered slices.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unknown_ns: u64,
    /// On a CPU left at a migration.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub migrated_ns: u64,
    /// Switches out while runnable.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preempted: u64,
    /// Of those, to another cgroup's thread.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preempted_by_other: u64,
}

impl BehindLine {
    fn of(behind: &Behind) -> Self {
        Self {
            by: behind.by.iter().map(|&(id, ns)| [id.0, ns]).collect(),
            threads: behind
                .threads
                .iter()
                .map(|&(tid, ns)| [u64::from(tid.0), ns])
                .collect(),
            other_ns: behind.rest.other_ns,
            idle_ns: behind.rest.idle_ns,
            unknown_ns: behind.rest.unknown_ns,
            migrated_ns: behind.rest.migrated_ns,
            preempted: behind.rest.preempted,
            preempted_by_other: behind.rest.preempted_by_other,
        }
    }

    fn into_behind(self) -> Behind {
        if self.is_empty() {
            return Behind::default();
        }
        Behind::from(BehindParts {
            by: self
                .by
                .into_iter()
                .map(|[id, ns]| (CgroupId(id), ns))
                .collect(),
            threads: self
                .threads
                .into_iter()
                .filter_map(|[tid, ns]| Some((Tid(u32::try_from(tid).ok()?), ns)))
                .collect(),
            rest: WaitRest {
                other_ns: self.other_ns,
                idle_ns: self.idle_ns,
                unknown_ns: self.unknown_ns,
                migrated_ns: self.migrated_ns,
                preempted: self.preempted,
                preempted_by_other: self.preempted_by_other,
            },
            index: Default::default(),
        })
    }

    fn is_empty(&self) -> bool {
        self.by.is_empty()
            && self.threads.is_empty()
            && self.other_ns == 0
            && self.idle_ns == 0
            && self.unknown_ns == 0
            && self.migrated_ns == 0
            && self.preempted == 0
            && self.preempted_by_other == 0
    }
}

const fn is_zero(value: &u64) -> bool {
    *value == 0
}

fn value_line(value: &CounterValue) -> [u64; 3] {
    value.reading.values()
}

/// The clock's slot for `on_cpu`: its count, always enabled and running.
fn clock_line(on_cpu: Duration) -> [u64; 3] {
    let ns = duration_ns(on_cpu);
    [ns, ns, ns]
}

/// A row's slots as written: the clock's, then each counter's.
fn slot_lines(on_cpu: Duration, counters: &[CounterValue]) -> Vec<[u64; 3]> {
    std::iter::once(clock_line(on_cpu))
        .chain(counters.iter().map(value_line))
        .collect()
}

fn value_of(line: [u64; 3]) -> CounterValue {
    CounterValue::of(Reading::from_values(line))
}

impl WindowLine {
    /// `window` as it is written.
    pub fn of(window: &Window) -> Self {
        Self {
            start_ns: duration_ns(window.start),
            length_ns: duration_ns(window.length),
            threads: window
                .threads
                .iter()
                .map(|t| ThreadLine {
                    tid: t.tid.0,
                    pid: t.pid.0,
                    comm: t.comm.to_string(),
                    cgroup_id: t.cgroup_id.0,
                    switches: t.switches,
                    run_delay_ns: duration_ns(t.waited),
                    behind: BehindLine::of(&t.behind),
                    counters: slot_lines(t.on_cpu, &t.counters),
                    exited: t.exited,
                    folded: t.folded,
                })
                .collect(),
            idle: window.idle.iter().copied().map(clock_line).collect(),
            cgroups: window
                .cgroups
                .iter()
                .map(|c| CgroupLine {
                    id: c.id.0,
                    switches: c.switches,
                    run_delay_ns: duration_ns(c.waited),
                    behind: BehindLine::of(&c.behind),
                    counters: slot_lines(c.on_cpu, &c.counters),
                })
                .collect(),
            stats: Stat::ALL
                .iter()
                .map(|&stat| (stat.name().to_owned(), window.stats.get(stat)))
                .collect(),
            silent: window
                .silent()
                .into_iter()
                .map(CounterSet::kernel_slot)
                .collect(),
            waits_measured: window.waits_measured,
            neighbours_measured: window.neighbours_measured,
            stalls: window
                .stalls
                .iter()
                .map(|(path, s)| {
                    let ns = |d: Option<Duration>| d.map(duration_ns);
                    (
                        path.clone(),
                        [
                            s.nr_throttled,
                            ns(s.throttled),
                            ns(s.pressure_some),
                            ns(s.pressure_full),
                        ],
                    )
                })
                .collect(),
        }
    }

    /// The window this line holds, for a set of `nr` counters: every row must carry exactly
    /// the clock's and `nr` counters' values (a file is not trusted).
    pub fn window(self, nr: usize) -> Result<Window> {
        let slots = nr + 1;
        if let Some(slot) = self
            .silent
            .iter()
            .find(|&&slot| slot >= slots || slot == CounterSet::CLOCK_SLOT)
        {
            bail!(
                "a window names slot {slot} as not counting and the set's counters are slots 1 \
                 to {nr}"
            );
        }
        let rows = RowValues {
            slots,
            silent: self.silent.iter().map(|slot| slot - 1).collect(),
        };
        let values = |lines, whose: &dyn Fn() -> String| rows.of(lines, whose);
        let threads = self
            .threads
            .into_iter()
            .map(|t| {
                let (on_cpu, counters) = values(t.counters, &|| format!("thread {}", t.tid))?;
                Ok(ThreadUsage {
                    tid: Tid(t.tid),
                    pid: Pid(t.pid),
                    comm: t.comm.into(),
                    cgroup_id: CgroupId(t.cgroup_id),
                    switches: t.switches,
                    on_cpu,
                    waited: Duration::from_nanos(t.run_delay_ns),
                    behind: t.behind.into_behind(),
                    counters,
                    exited: t.exited,
                    folded: t.folded,
                })
            })
            .collect::<Result<_>>()?;
        let cgroups = self
            .cgroups
            .into_iter()
            .map(|c| {
                let (on_cpu, counters) = values(c.counters, &|| format!("cgroup {}", c.id))?;
                Ok(CgroupUsage {
                    id: CgroupId(c.id),
                    switches: c.switches,
                    on_cpu,
                    waited: Duration::from_nanos(c.run_delay_ns),
                    behind: c.behind.into_behind(),
                    counters,
                })
            })
            .collect::<Result<_>>()?;
        let mut stats = Stats::default();
        for stat in Stat::ALL {
            stats.set(stat, self.stats.get(stat.name()).copied().unwrap_or(0));
        }
        Ok(Window {
            start: Duration::from_nanos(self.start_ns),
            length: Duration::from_nanos(self.length_ns),
            threads,
            idle: self
                .idle
                .into_iter()
                .map(|[ns, ..]| Duration::from_nanos(ns))
                .collect(),
            cgroups,
            removed_cgroups: Vec::new(),
            stats,
            waits_measured: self.waits_measured,
            neighbours_measured: self.neighbours_measured,
            stalls: self
                .stalls
                .into_iter()
                .map(|(path, [nr, throttled, some, full])| {
                    let d = |ns: Option<u64>| ns.map(Duration::from_nanos);
                    let stalls = CpuStalls {
                        nr_throttled: nr,
                        throttled: d(throttled),
                        pressure_some: d(some),
                        pressure_full: d(full),
                    };
                    (path, stalls)
                })
                .collect(),
        })
    }
}

/// How a window line's rows carry their values: the clock's and one per counter (`slots`),
/// the counters that did not count (`silent`, by counter index).
struct RowValues {
    slots: usize,
    silent: Vec<usize>,
}

impl RowValues {
    /// A row's on-CPU time and counter values from its `lines` (`whose` names the row in
    /// errors): exactly one per slot, or an error (a file is not trusted).
    fn of(
        &self,
        lines: Vec<[u64; 3]>,
        whose: &dyn Fn() -> String,
    ) -> Result<(Duration, Vec<CounterValue>)> {
        let slots = self.slots;
        if lines.len() != slots {
            bail!(
                "{} has {} values and the set has {slots} slots (the clock's and one per \
                 counter)",
                whose(),
                lines.len()
            );
        }
        let mut lines = lines.into_iter();
        let on_cpu = lines
            .next()
            .map_or(Duration::ZERO, |[ns, ..]| Duration::from_nanos(ns));
        let mut values: Vec<CounterValue> = lines.map(value_of).collect();
        for &index in &self.silent {
            values[index].silent = true;
        }
        Ok((on_cpu, values))
    }
}

impl SetLine {
    /// `set` as it is written: the kernel's slots, the clock's first.
    pub fn of(set: &CounterSet) -> Self {
        Self {
            name: set.name.to_owned(),
            reason: set.reason.clone(),
            counters: set
                .with_cpu_clock()
                .counters
                .iter()
                .map(|c| CounterLine {
                    name: c.name.clone(),
                    unit: c.unit.label().to_owned(),
                    pmu_type: c.attr.pmu_type,
                    config: c.attr.config,
                    config1: c.attr.config1,
                })
                .collect(),
        }
    }

    /// The set this line names (what reports need of it: names, units, what was opened).
    pub fn set(&self) -> Result<CounterSet> {
        let name = match self.name.as_str() {
            "software" => "software",
            "topdown" => "topdown",
            other => bail!("the recording's counter set `{other}` is not one this version knows"),
        };
        if self.counters.is_empty() || self.counters.len() > topdown_common::MAX_COUNTERS {
            bail!(
                "the recording's counter set has {} slots; 1 to {} fit",
                self.counters.len(),
                topdown_common::MAX_COUNTERS
            );
        }
        let (clock, counters) = self.counters.split_at(1);
        if clock[0].name != "cpu-clock" || clock[0].unit != Unit::Nanoseconds.label() {
            bail!(
                "the recording's first slot is `{}` ({}), not the on-CPU clock `cpu-clock` (ns)",
                clock[0].name,
                clock[0].unit
            );
        }
        let counters = counters
            .iter()
            .map(|c| {
                let unit = match c.unit.as_str() {
                    "ns" => Unit::Nanoseconds,
                    "cycles" => Unit::Cycles,
                    "events" => Unit::Events,
                    other => bail!("counter {} has an unknown unit `{other}`", c.name),
                };
                Ok(Counter {
                    name: c.name.clone(),
                    unit,
                    attr: EventAttr {
                        pmu_type: c.pmu_type,
                        config: c.config,
                        config1: c.config1,
                        ..EventAttr::default()
                    },
                    cpus: None,
                })
            })
            .collect::<Result<_>>()?;
        Ok(CounterSet {
            name,
            reason: self.reason.clone(),
            counters,
        })
    }
}

impl TopdownLine {
    /// `view` as it is written.
    pub fn of(view: &TopdownView) -> Self {
        Self {
            parts: view
                .parts
                .iter()
                .map(|p| {
                    (
                        p.label.to_owned(),
                        p.prefix.clone(),
                        p.model.name.to_owned(),
                    )
                })
                .collect(),
            level: view.level,
            slots: view.slots,
            smt_on: view.smt_on,
            core_wide: Some(view.core_wide),
            has_pmem: view.has_pmem,
        }
    }

    /// The view this line names; its models must be ones this build knows.
    pub fn view(&self) -> Result<TopdownView> {
        if !(1..=2).contains(&self.level) || self.parts.is_empty() {
            bail!(
                "the recording's TopDown view is malformed (level {}, {} parts)",
                self.level,
                self.parts.len()
            );
        }
        let parts = self
            .parts
            .iter()
            .map(|(label, prefix, model)| {
                let label = match label.as_str() {
                    "" => "",
                    "P" => "P",
                    "E" => "E",
                    other => bail!("the recording's TopDown part `{other}` is not P or E"),
                };
                Ok(TopdownPart {
                    label,
                    prefix: prefix.clone(),
                    model: Model::named(model)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(TopdownView {
            parts,
            level: self.level,
            slots: self.slots,
            smt_on: self.smt_on,
            core_wide: self.core_wide.unwrap_or(self.smt_on),
            has_pmem: self.has_pmem,
        })
    }
}
