//! The value columns of a row, built once per counter set: on-CPU time, %CPU, run-queue wait
//! (time and % of the window), switches, where the set counts both cycles and instructions, IPC,
//! and for groups (cgroups, containers) the CPU stalls the kernel books for them: throttling
//! and CPU pressure. Each says its machine name (JSON key, CSV
//! header, Parquet column), its header in tables and the live view, what it holds, and how a
//! value is written for people and for machines; the table, the live view, CSV, JSON and Parquet
//! format these columns, so adding one is an entry here. Key, thread and TopDown columns are
//! their own (they are not one number per row).

use crate::{
    attrib::usage::CounterValue,
    model::rows::{Row, RowOptions},
    pmu::counter_set::{Counter, CounterSet},
    tma::{NodeValue, node::Node, view::TopdownView},
};

/// `PERF_TYPE_HARDWARE`.
const PERF_TYPE_HARDWARE: u32 = 0;
/// `PERF_COUNT_HW_CPU_CYCLES` and `PERF_COUNT_HW_INSTRUCTIONS` (the low 32 bits of `config`; a
/// hybrid part's PMU type sits above them).
const HW_CYCLES: u64 = 0;
const HW_INSTRUCTIONS: u64 = 1;

/// Core cycles, as perf's generic name and each vendor's table spell them (lower case, without
/// a PMU prefix or modifiers).
const CYCLES: [&str; 6] = [
    "cycles",
    "cpu-cycles",
    "cpu_cycles",
    "cpu_clk_unhalted.thread",
    "cpu_clk_unhalted.core",
    "ls_not_halted_cyc",
];

/// Instructions retired, spelt the same ways.
const INSTRUCTIONS: [&str; 5] = [
    "instructions",
    "inst_retired",
    "inst_retired.any",
    "inst_retired.any_p",
    "ex_ret_instr",
];

/// Last-level cache misses, as perf's generic event and the vendors' MPKI metrics count them
/// (pmu-events: Intel's `tma_info_memory_l3mpki`, Arm's `ll_cache_read_mpki`), spelt the same
/// ways.
const CACHE_MISSES: [&str; 4] = [
    "cache-misses",
    "mem_load_retired.l3_miss",
    "longest_lat_cache.miss",
    "ll_cache_miss_rd",
];
/// `PERF_COUNT_HW_CACHE_MISSES`.
const HW_CACHE_MISSES: u64 = 3;

/// A column's value: exact integers stay integers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// A count or a time in nanoseconds.
    Int(u64),
    /// A share or a ratio.
    Float(f64),
}

impl Number {
    /// The value as a float.
    pub fn as_f64(self) -> f64 {
        match self {
            Self::Int(n) => n as f64,
            Self::Float(x) => x,
        }
    }
}

/// What a column holds: how it is scaled for people and how precisely it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Nanoseconds; milliseconds for people.
    Nanoseconds,
    /// Percent: of one CPU, or of the window.
    Percent,
    /// A whole count.
    Count,
    /// A ratio of two counts.
    Ratio,
}

/// How `serve` exports a column: a metric family per cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metric {
    /// The family's name (`topdown_cgroup_cpu`; the exposition adds the unit and `_total`).
    pub name: &'static str,
    /// Its help line.
    pub help: &'static str,
    /// A total since the exporter started, or the latest window's value.
    pub total: bool,
}

/// Which value of a row a column reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    OnCpu,
    CpuPercent,
    Wait,
    WaitPercent,
    Switches,
    Preempted,
    PreemptedByOther,
    NrThrottled,
    Throttled,
    PressureSome,
    PressureFull,
    /// Instructions over cycles, from these slots of the set.
    Ipc {
        cycles: usize,
        instructions: usize,
    },
    /// Cache misses per thousand instructions, from these slots of the set.
    Mpki {
        misses: usize,
        instructions: usize,
    },
}

/// One value column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// Its machine name: JSON key, CSV header, Parquet column.
    pub key: &'static str,
    /// Its header in tables and the live view.
    pub header: &'static str,
    /// What it holds (docs, the exporter's help).
    pub help: &'static str,
    /// How it is written.
    pub kind: Kind,
    /// In the live view, columns are dropped lowest `keep` first when the terminal is narrow
    /// (`u8::MAX`: never).
    pub keep: u8,
    /// Its metric family in `serve`; `None` for a column a query derives (%CPU is a rate of
    /// on-CPU time).
    pub metric: Option<Metric>,
    /// Only rows of groups (cgroups, containers) have it: tables and the live view show it in
    /// their group views only.
    pub groups_only: bool,
    source: Source,
}

impl Column {
    /// The row's value; `None` where it was not measured (IPC of a row whose cycles or
    /// instructions did not run, or ran no cycle).
    pub fn value(&self, row: &Row) -> Option<Number> {
        // A thread row carries its cgroup's stalls for its verdict, not as its own numbers.
        if self.groups_only && row.who.group().is_none() {
            return None;
        }
        match self.source {
            Source::OnCpu => nanos(Some(row.on_cpu)),
            Source::CpuPercent => Some(Number::Float(row.cpu_share * 100.0)),
            Source::Wait => nanos(row.waited),
            Source::WaitPercent => row.wait_share.map(|w| Number::Float(w * 100.0)),
            Source::Switches => Some(Number::Int(row.switches)),
            Source::Preempted => row.behind.as_ref().map(|b| Number::Int(b.preempted)),
            Source::PreemptedByOther => row
                .behind
                .as_ref()
                .map(|b| Number::Int(b.preempted_by_other)),
            Source::NrThrottled => row.stalls?.nr_throttled.map(Number::Int),
            Source::Throttled => nanos(row.stalls?.throttled),
            Source::PressureSome => nanos(row.stalls?.pressure_some),
            Source::PressureFull => nanos(row.stalls?.pressure_full),
            Source::Ipc { .. } | Source::Mpki { .. } => self.of_counters(&row.counters)?,
        }
    }

    /// The value from `counters` (the set's, in slot order), for a column made of counters
    /// alone ([`counter_columns`]: rows that are no thread or group have it too, a core's):
    /// `Some(None)` where not measured; `None` for other columns.
    pub fn of_counters(&self, counters: &[CounterValue]) -> Option<Option<Number>> {
        Some(match self.source {
            Source::Ipc {
                cycles,
                instructions,
            } => ipc(counters, cycles, instructions).map(Number::Float),
            Source::Mpki {
                misses,
                instructions,
            } => mpki(counters, misses, instructions).map(Number::Float),
            _ => return None,
        })
    }

    /// Whether a row can have no value in it (not measured).
    pub fn may_be_missing(&self) -> bool {
        !matches!(
            self.source,
            Source::OnCpu | Source::CpuPercent | Source::Switches
        )
    }

    /// The value as tables and the live view show it (`-` where not measured).
    pub fn cell(&self, row: &Row) -> String {
        self.show(self.value(row))
    }

    /// Appends [`Column::cell`] to `out` (a table of 20,000 rows writes its cells into one
    /// buffer).
    pub fn write_cell(&self, row: &Row, out: &mut String) {
        self.write_shown(self.value(row), out);
    }

    /// A value of this column as tables and the live view show it (`-` where not measured).
    pub fn show(&self, value: Option<Number>) -> String {
        let mut out = String::new();
        self.write_shown(value, &mut out);
        out
    }

    /// Appends [`Column::show`] to `out`.
    fn write_shown(&self, value: Option<Number>, out: &mut String) {
        use std::fmt::Write as _;
        let _ = match (self.kind, value) {
            (_, None) => {
                out.push('-');
                Ok(())
            }
            (Kind::Nanoseconds, Some(v)) => write!(out, "{:.3}", v.as_f64() / 1e6),
            (Kind::Percent, Some(v)) => write!(out, "{:.1}", v.as_f64()),
            (Kind::Count, Some(v)) => write!(out, "{:.0}", v.as_f64()),
            (Kind::Ratio, Some(v)) => write!(out, "{:.2}", v.as_f64()),
        };
    }

    /// Appends the value as CSV writes it to `out` (nothing where not measured): a window of
    /// 20,000 rows writes each into one buffer, not a `String` per field.
    pub fn write_field(&self, row: &Row, out: &mut String) {
        use std::fmt::Write as _;
        // Writing to a String cannot fail.
        let _ = match self.value(row) {
            None => Ok(()),
            Some(Number::Int(n)) => write!(out, "{n}"),
            Some(Number::Float(x)) if self.kind == Kind::Ratio => write!(out, "{x:.4}"),
            Some(Number::Float(x)) => write!(out, "{x:.2}"),
        };
    }
}

fn nanos(d: Option<std::time::Duration>) -> Option<Number> {
    d.map(|d| Number::Int(crate::attrib::usage::duration_ns(d)))
}

/// Which of `columns` rows of groups (`grouped`) or of threads have.
pub fn for_rows(columns: &[Column], grouped: bool) -> Vec<Column> {
    columns
        .iter()
        .filter(|c| grouped || !c.groups_only)
        .copied()
        .collect()
}

/// Instructions per cycle from a row's counters: `None` unless both counted and cycles ran.
pub fn ipc(counters: &[CounterValue], cycles: usize, instructions: usize) -> Option<f64> {
    let cycles = counters.get(cycles)?.scaled()?;
    let instructions = counters.get(instructions)?.scaled()?;
    (cycles > 0.0).then(|| instructions / cycles)
}

/// Cache misses per thousand instructions from a row's counters: `None` unless both counted
/// and instructions retired.
fn mpki(counters: &[CounterValue], misses: usize, instructions: usize) -> Option<f64> {
    let misses = counters.get(misses)?.scaled()?;
    let instructions = counters.get(instructions)?.scaled()?;
    (instructions > 0.0).then(|| misses * 1e3 / instructions)
}

/// The slots of `set`'s cycles and instructions when it counts one of each over the same CPUs
/// and privilege levels (a hybrid set counting them per core type has no one IPC: none).
pub fn ipc_slots(set: &CounterSet) -> Option<(usize, usize)> {
    alike_pair(set, (&CYCLES, HW_CYCLES), (&INSTRUCTIONS, HW_INSTRUCTIONS))
}

/// The slots of the one event of `set` each of `a` and `b` (names, generic config) spells, when
/// both count over the same CPUs and privilege levels.
fn alike_pair(set: &CounterSet, a: (&[&str], u64), b: (&[&str], u64)) -> Option<(usize, usize)> {
    let find = |(names, generic): (&[&str], u64)| {
        let mut slots = set
            .counters
            .iter()
            .enumerate()
            .filter(|(_, c)| is_event(c, names, generic))
            .map(|(i, _)| i);
        match (slots.next(), slots.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    };
    let (a, b) = (find(a)?, find(b)?);
    let (c, i) = (&set.counters[a], &set.counters[b]);
    let alike = c.cpus == i.cpus
        && c.attr.exclude_user == i.attr.exclude_user
        && c.attr.exclude_kernel == i.attr.exclude_kernel;
    alike.then_some((a, b))
}

/// Whether `counter` is perf's generic hardware event `generic`, or an event `names` spell.
fn is_event(counter: &Counter, names: &[&str], generic: u64) -> bool {
    if counter.attr.pmu_type == PERF_TYPE_HARDWARE {
        return counter.attr.config & 0xffff_ffff == generic;
    }
    // `cpu_core/INST_RETIRED.ANY/` or `INST_RETIRED.ANY`; modifiers (`:u`) are in the attr.
    let name = counter.event_name();
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// The value columns for rows of `set`, in the order they are shown: times, switches, what the
/// set's counters make, groups' stalls.
pub fn columns(set: &CounterSet) -> Vec<Column> {
    let mut columns = time_columns().to_vec();
    columns.extend(switch_columns());
    columns.extend(counter_columns(set));
    columns.extend(stall_columns());
    columns
}

/// On-CPU time and run-queue wait, each as a time and a share of the window.
fn time_columns() -> [Column; 4] {
    [
        Column {
            key: "on_cpu_ns",
            header: "ON-CPU ms",
            help: "on-CPU time (nanoseconds; milliseconds in tables)",
            kind: Kind::Nanoseconds,
            keep: u8::MAX,
            metric: Some(Metric {
                name: "topdown_cgroup_cpu",
                help: "On-CPU time of the cgroup's threads, charged in the kernel at every \
                       context switch",
                total: true,
            }),
            groups_only: false,
            source: Source::OnCpu,
        },
        Column {
            key: "cpu_percent",
            header: "%CPU",
            help: "on-CPU time over the window's wall time, in percent of one CPU",
            kind: Kind::Percent,
            keep: u8::MAX,
            metric: None,
            groups_only: false,
            source: Source::CpuPercent,
        },
        Column {
            key: "run_delay_ns",
            header: "WAIT ms",
            help: "time waiting in a run queue, runnable but not running (the kernel's \
                   sched_info.run_delay, booked when the thread next runs; nanoseconds, \
                   milliseconds in tables)",
            kind: Kind::Nanoseconds,
            keep: 5,
            metric: Some(Metric {
                name: "topdown_cgroup_run_delay",
                help: "Time the cgroup's threads waited in a run queue, runnable but not \
                       running (sched_info.run_delay, charged at their next context switch)",
                total: true,
            }),
            groups_only: false,
            source: Source::Wait,
        },
        Column {
            key: "wait_percent",
            header: "WAIT%",
            help: "run-queue wait over the window's wall time, in percent",
            kind: Kind::Percent,
            keep: 1,
            metric: None,
            groups_only: false,
            source: Source::WaitPercent,
        },
    ]
}

/// Switches out, and of those the preemptions (by another cgroup's thread).
fn switch_columns() -> [Column; 3] {
    [
        Column {
            key: "switches",
            header: "SWITCHES",
            help: "switches out",
            kind: Kind::Count,
            keep: 3,
            metric: Some(Metric {
                name: "topdown_cgroup_context_switches",
                help: "Context switches out of the cgroup's threads",
                total: true,
            }),
            groups_only: false,
            source: Source::Switches,
        },
        Column {
            key: "preemptions",
            header: "PREEMPT",
            help: "switches out while still runnable: preempted, or yielding (the kernel's \
                   nivcsw, /proc/PID/status nonvoluntary_ctxt_switches)",
            kind: Kind::Count,
            keep: 1,
            metric: Some(Metric {
                name: "topdown_cgroup_preemptions",
                help: "Switches out of the cgroup's threads while still runnable (preempted, \
                       or yielding: the kernel's nivcsw)",
                total: true,
            }),
            groups_only: false,
            source: Source::Preempted,
        },
        Column {
            key: "preemptions_by_other",
            header: "PREEMPT-X",
            help: "of those, switches to a thread of another cgroup",
            kind: Kind::Count,
            keep: 1,
            metric: Some(Metric {
                name: "topdown_cgroup_preemptions_by_other_cgroup",
                help: "Switches out of the cgroup's threads while still runnable, to a thread \
                       of another cgroup",
                total: true,
            }),
            groups_only: false,
            source: Source::PreemptedByOther,
        },
    ]
}

/// The value columns of `set` made of counters alone ([`Column::of_counters`]): IPC and MPKI
/// where the set counts their events alike. Rows of cores have these too.
pub fn counter_columns(set: &CounterSet) -> Vec<Column> {
    let mut columns = Vec::new();
    if let Some((cycles, instructions)) = ipc_slots(set) {
        columns.push(Column {
            key: "ipc",
            header: "IPC",
            help: "instructions retired per cycle, both scaled as perf scales them; a column \
                   only where the set counts cycles and instructions alike (`-e \
                   cycles,instructions`, an Arm PMU's `CPU_CYCLES` and `INST_RETIRED`; a hybrid \
                   set counting them per core type has no one IPC), `-` where either did not \
                   run",
            kind: Kind::Ratio,
            keep: 4,
            metric: Some(Metric {
                name: "topdown_cgroup_ipc",
                help: "Instructions retired per cycle of the cgroup's threads over the latest \
                       window in which both counted (a set that counts cycles and instructions \
                       alike: -e cycles,instructions)",
                total: false,
            }),
            groups_only: false,
            source: Source::Ipc {
                cycles,
                instructions,
            },
        });
    }
    if let Some((misses, instructions)) = alike_pair(
        set,
        (&CACHE_MISSES, HW_CACHE_MISSES),
        (&INSTRUCTIONS, HW_INSTRUCTIONS),
    ) {
        columns.push(Column {
            key: "mpki",
            header: "MPKI",
            help: "last-level cache misses per thousand instructions retired, both scaled as \
                   perf scales them (perf's `cache-misses`, Intel's `MEM_LOAD_RETIRED.L3_MISS` \
                   or `LONGEST_LAT_CACHE.MISS`, Arm's `LL_CACHE_MISS_RD`, as the pmu-events \
                   metrics `tma_info_memory_l3mpki` and `ll_cache_read_mpki` count them); a \
                   column only where the set counts one of them and instructions alike (`-e \
                   cache-misses,instructions`), `-` where either did not run or no instruction \
                   retired",
            kind: Kind::Ratio,
            keep: 3,
            metric: Some(Metric {
                name: "topdown_cgroup_mpki",
                help: "Last-level cache misses per thousand instructions retired of the \
                       cgroup's threads over the latest window in which both counted (a set \
                       that counts them alike: -e cache-misses,instructions)",
                total: false,
            }),
            groups_only: false,
            source: Source::Mpki {
                misses,
                instructions,
            },
        });
    }
    columns
}

/// The CPU stalls of groups: throttling by `cpu.max` and CPU pressure (`attrib::stalls`).
fn stall_columns() -> [Column; 4] {
    let column = |key, header, help, kind, keep, metric: Metric, source| Column {
        key,
        header,
        help,
        kind,
        keep,
        metric: Some(metric),
        groups_only: true,
        source,
    };
    [
        column(
            "throttled_ns",
            "THROTTLED ms",
            "time the group's runnable tasks were held back by its cpu.max quota (cpu.stat \
             throttled_usec; nanoseconds, milliseconds in tables)",
            Kind::Nanoseconds,
            4,
            Metric {
                name: "topdown_cgroup_throttled",
                help: "Time the cgroup's runnable tasks were held back by its cpu.max quota \
                       (cpu.stat throttled_usec)",
                total: true,
            },
            Source::Throttled,
        ),
        column(
            "nr_throttled",
            "THROTTLES",
            "periods in which the group's cpu.max quota ran out (cpu.stat nr_throttled)",
            Kind::Count,
            1,
            Metric {
                name: "topdown_cgroup_throttled_periods",
                help: "Periods in which the cgroup's cpu.max quota ran out (cpu.stat \
                       nr_throttled)",
                total: true,
            },
            Source::NrThrottled,
        ),
        column(
            "cpu_pressure_some_ns",
            "PSI-SOME ms",
            "time at least one of the group's tasks was runnable and waiting for a CPU \
             (cpu.pressure some total; nanoseconds, milliseconds in tables)",
            Kind::Nanoseconds,
            2,
            Metric {
                name: "topdown_cgroup_cpu_pressure_some",
                help: "Time at least one of the cgroup's tasks was runnable and waiting for a \
                       CPU (cpu.pressure some)",
                total: true,
            },
            Source::PressureSome,
        ),
        column(
            "cpu_pressure_full_ns",
            "PSI-FULL ms",
            "time all of the group's non-idle tasks were waiting for a CPU at once \
             (cpu.pressure full total, Linux 5.13 and newer)",
            Kind::Nanoseconds,
            1,
            Metric {
                name: "topdown_cgroup_cpu_pressure_full",
                help: "Time all of the cgroup's non-idle tasks were waiting for a CPU at once \
                       (cpu.pressure full)",
                total: true,
            },
            Source::PressureFull,
        ),
    ]
}

/// One TopDown node of one part (core type) of a view: a column of every output that writes
/// node values (CSV, Parquet, the per-core views write all of a view's; the table and the live
/// view those [`shown_nodes`] picks).
#[derive(Clone, Debug)]
pub struct NodeColumn {
    /// The part's index in the view (and in each row's `topdown`).
    pub part: usize,
    /// The part's label in tables: empty for the only part, `P` or `E` on hybrid parts.
    pub label: &'static str,
    /// What the part's counters' names start with (`cpu_core/`), empty for the only part.
    pub prefix: String,
    /// The node.
    pub node: Node,
}

impl NodeColumn {
    /// Its header in tables and the live view: `Backend%`, `P.Backend%` on hybrid parts.
    pub fn header(&self) -> String {
        if self.label.is_empty() {
            format!("{}%", self.node.short())
        } else {
            format!("{}.{}%", self.label, self.node.short())
        }
    }

    /// The node's value in `row` (a fraction of the part's slots); `None` where the row did not
    /// measure it (the part never ran, an input not counted).
    pub fn value(&self, row: &Row) -> Option<f64> {
        self.of(row).map(|n| n.value).filter(|v| v.is_finite())
    }

    /// The node as `row` has it: its value, threshold verdict and how sure it is. Found by
    /// its place in the part's tree order (a row's nodes are in that order, each once), not by
    /// name.
    pub fn of<'r>(&self, row: &'r Row) -> Option<&'r NodeValue> {
        let td = row.topdown.get(self.part)?.as_ref()?;
        let at = td
            .nodes
            .binary_search_by_key(&self.node.order, |n| n.node.order)
            .ok()?;
        td.nodes.get(at)
    }
}

/// Every node of every part of `view`, down to its level, in tree order per part.
pub fn view_nodes(view: &TopdownView) -> Vec<NodeColumn> {
    view.parts
        .iter()
        .enumerate()
        .flat_map(|(part, p)| {
            p.model
                .nodes(view.level)
                .into_iter()
                .map(move |node| NodeColumn {
                    part,
                    label: p.label,
                    prefix: p.prefix.clone(),
                    node,
                })
        })
        .collect()
}

/// The node columns a table of `rows` shows: every Level 1 node the rows have; Level 2 nodes
/// only where some row is over the node's threshold, unless verbose.
pub fn shown_nodes<'r>(
    rows: impl Iterator<Item = &'r Row> + Clone,
    options: &RowOptions,
) -> Vec<NodeColumn> {
    let Some(view) = &options.topdown else {
        return Vec::new();
    };
    view_nodes(view)
        .into_iter()
        .filter(|column| {
            let mut values = rows.clone().filter_map(|r| column.of(r)).peekable();
            values.peek().is_some()
                && (column.node.level == 1 || options.verbose || values.any(|n| n.over_threshold))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(name: &str, pmu_type: u32, config: u64) -> Counter {
        Counter::event(name, pmu_type, config)
    }

    fn set(counters: Vec<Counter>) -> CounterSet {
        let mut set = CounterSet::software(String::new());
        set.counters.extend(counters);
        set
    }

    /// The columns rows of cores have are exactly those a row's counters make alone.
    #[test]
    fn counter_columns_are_the_columns_counters_make() {
        let set = set(vec![
            counter("cycles", 0, 0),
            counter("instructions", 0, 1),
            counter("cache-misses", 0, 3),
        ]);
        let values = vec![CounterValue::new(0, 1, 1); 3];
        let made: Vec<&str> = columns(&set)
            .into_iter()
            .filter(|c| c.of_counters(&values).is_some())
            .map(|c| c.key)
            .collect();
        let listed: Vec<&str> = counter_columns(&set).iter().map(|c| c.key).collect();
        assert_eq!(made, listed);
        assert_eq!(listed, ["ipc", "mpki"]);
    }

    #[test]
    fn ipc_is_a_column_where_the_set_counts_cycles_and_instructions_alike() {
        let generic = set(vec![counter("cycles", 0, 0), counter("instructions", 0, 1)]);
        assert_eq!(ipc_slots(&generic), Some((0, 1)));
        let keys: Vec<&str> = columns(&generic).iter().map(|c| c.key).collect();
        assert_eq!(
            keys,
            [
                "on_cpu_ns",
                "cpu_percent",
                "run_delay_ns",
                "wait_percent",
                "switches",
                "preemptions",
                "preemptions_by_other",
                "ipc",
                "throttled_ns",
                "nr_throttled",
                "cpu_pressure_some_ns",
                "cpu_pressure_full_ns"
            ]
        );
        // Threads have no stall columns of their own.
        let threads: Vec<&str> = for_rows(&columns(&generic), false)
            .iter()
            .map(|c| c.key)
            .collect();
        assert_eq!(
            threads,
            [
                "on_cpu_ns",
                "cpu_percent",
                "run_delay_ns",
                "wait_percent",
                "switches",
                "preemptions",
                "preemptions_by_other",
                "ipc"
            ]
        );

        let arm = set(vec![
            counter("INST_RETIRED", 8, 0x08),
            counter("CPU_CYCLES", 8, 0x11),
        ]);
        assert_eq!(ipc_slots(&arm), Some((1, 0)));
        let intel = set(vec![
            counter("cpu/CPU_CLK_UNHALTED.THREAD/", 4, 0x3c),
            counter("cpu/INST_RETIRED.ANY/", 4, 0xc0),
        ]);
        assert_eq!(ipc_slots(&intel), Some((0, 1)));

        assert_eq!(ipc_slots(&set(vec![counter("cycles", 0, 0)])), None);
        assert_eq!(
            for_rows(&columns(&set(vec![])), false).len(),
            7,
            "no IPC without both"
        );
        // Two core types, each with its own pair: no one IPC.
        let hybrid = set(vec![
            counter("cpu_core/cycles/", 0, 4 << 32),
            counter("cpu_atom/cycles/", 0, 8 << 32),
            counter("cpu_core/instructions/", 0, (4 << 32) | 1),
            counter("cpu_atom/instructions/", 0, (8 << 32) | 1),
        ]);
        assert_eq!(ipc_slots(&hybrid), None);
        // User-only instructions over all cycles is no IPC.
        let mut user = set(vec![
            counter("cycles", 0, 0),
            counter("instructions:u", 0, 1),
        ]);
        user.counters[1].attr.exclude_kernel = true;
        assert_eq!(ipc_slots(&user), None);
    }

    #[test]
    fn ipc_is_measured_or_absent_never_a_zero() {
        let value = |raw: u64, running_ns: u64| CounterValue::new(raw, 100, running_ns);
        let counted = [value(0, 100), value(2_000, 50), value(3_000, 100)];
        // Cycles scaled to 4,000 (half the time on a counter), instructions 3,000.
        assert_eq!(ipc(&counted, 1, 2), Some(0.75));
        let not_running = [value(0, 100), value(0, 0), value(3_000, 100)];
        assert_eq!(ipc(&not_running, 1, 2), None);
        let no_cycles = [value(0, 100), value(0, 100), value(3_000, 100)];
        assert_eq!(ipc(&no_cycles, 1, 2), None);
        let mut silent = counted;
        silent[2].silent = true;
        assert_eq!(ipc(&silent, 1, 2), None);
    }

    /// MPKI is a column where the set counts last-level misses (perf's generic event or a
    /// vendor's name) and instructions alike: misses per thousand instructions, `-` where no
    /// instruction retired; none without both, or with two of either.
    #[test]
    fn mpki_is_a_column_where_the_set_counts_misses_and_instructions() {
        let mpki = |set: &CounterSet| columns(set).into_iter().find(|c| c.key == "mpki");
        let generic = set(vec![
            counter("instructions", 0, HW_INSTRUCTIONS),
            counter("cache-misses", 0, HW_CACHE_MISSES),
        ]);
        let column = mpki(&generic).expect("a column");
        assert!(
            columns(&generic).iter().all(|c| c.key != "ipc"),
            "no cycles"
        );
        let mut software = CounterSet::software(String::new());
        let row = |counts: [u64; 2]| {
            let usage = crate::attrib::usage::ThreadUsage {
                counters: counts.map(|n| CounterValue::new(n, 10, 10)).to_vec(),
                ..crate::attrib::usage::ThreadUsage::clocked(
                    1,
                    1,
                    topdown_common::cgroup::CgroupId(1),
                    1,
                    1,
                )
            };
            let window = crate::attrib::Window {
                length: std::time::Duration::from_secs(1),
                threads: vec![usage],
                ..crate::attrib::Window::default()
            };
            let mut names = crate::attrib::cgroups::CgroupNames::at(None);
            let named = crate::attrib::named::name(&window, &mut names, None);
            crate::model::rows::rows(&window, named, &generic, &RowOptions::default())
                .0
                .remove(0)
        };
        assert_eq!(column.value(&row([20_000, 50])), Some(Number::Float(2.5)));
        assert_eq!(column.value(&row([0, 50])), None, "no instruction retired");
        assert_eq!(column.cell(&row([4_000, 1])), "0.25");
        let intel = set(vec![
            counter("inst_retired.any", 4, 0xc0),
            counter("MEM_LOAD_RETIRED.L3_MISS", 4, 0x20d1),
        ]);
        assert!(mpki(&intel).is_some(), "Intel's names");
        software
            .counters
            .push(counter("cache-misses", 0, HW_CACHE_MISSES));
        assert!(mpki(&software).is_none(), "no instructions");
        let two = set(vec![
            counter("instructions", 0, HW_INSTRUCTIONS),
            counter("cache-misses", 0, HW_CACHE_MISSES),
            counter("ll_cache_miss_rd", 8, 0x37),
        ]);
        assert!(
            mpki(&two).is_none(),
            "two misses events: which is the last level's?"
        );
    }

    /// The value columns as docs/live.md's table shows them, from each entry's `help`.
    fn docs_table(columns: &[Column]) -> String {
        let mut table = String::from(
            "| header | key (JSON, CSV, Parquet, `--sort`) | rows | what it holds | `serve` |\n\
             |---|---|---|---|---|\n",
        );
        for c in columns {
            let metric = exposed(c).map_or("-".to_owned(), |name| format!("`{name}`"));
            let rows = if c.groups_only { "groups" } else { "all" };
            table.push_str(&format!(
                "| {} | `{}` | {rows} | {} | {metric} |\n",
                c.header, c.key, c.help
            ));
        }
        table
    }

    /// The exposed name of `column`'s metric family, as `serve` writes it: the unit and
    /// `_total` the exposition adds.
    fn exposed(column: &Column) -> Option<String> {
        let metric = column.metric?;
        let unit = if column.kind == Kind::Nanoseconds {
            "_seconds"
        } else {
            ""
        };
        let total = if metric.total { "_total" } else { "" };
        Some(format!("{}{unit}{total}", metric.name))
    }

    /// The value columns' metric families as docs/serve.md's table shows them, from each
    /// entry's metric help.
    fn serve_table(columns: &[Column]) -> String {
        let mut table = String::from("| metric | type | what |\n|---|---|---|\n");
        for c in columns {
            let (Some(metric), Some(name)) = (c.metric, exposed(c)) else {
                continue;
            };
            let kind = if metric.total { "counter" } else { "gauge" };
            table.push_str(&format!("| `{name}` | {kind} | {} |\n", metric.help));
        }
        table
    }

    /// Replaces what lies between `begin` and `end` in the docs file `path` with `expected`
    /// (`TOPDOWN_BLESS=1`), or asserts it is that.
    fn generated_section(path: &str, begin: &str, end: &str, expected: &str) {
        let docs = std::fs::read_to_string(path).unwrap();
        let (head, rest) = docs.split_once(begin).expect("the section's first marker");
        let (section, tail) = rest.split_once(end).expect("the section's last marker");
        if std::env::var_os("TOPDOWN_BLESS").is_some() {
            std::fs::write(path, format!("{head}{begin}{expected}{end}{tail}")).unwrap();
            return;
        }
        assert!(
            section == expected,
            "{path}'s generated section differs from model/columns.rs: run `TOPDOWN_BLESS=1 \
             cargo test -p topdown-user generated_from_the_entries` and read the diff"
        );
    }

    /// A set with every column: cycles, instructions and cache misses.
    fn every_column() -> CounterSet {
        set(vec![
            counter("cycles", 0, 0),
            counter("instructions", 0, 1),
            counter("cache-misses", 0, HW_CACHE_MISSES),
        ])
    }

    /// docs/live.md's column table is generated from the entries (`TOPDOWN_BLESS=1` rewrites
    /// it): a column added, renamed or described anew here fails this until the docs say it.
    #[test]
    fn the_docs_column_table_is_generated_from_the_entries() {
        generated_section(
            concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/live.md"),
            "<!-- value columns: generated from model/columns.rs -->\n",
            "<!-- end of value columns -->",
            &docs_table(&columns(&every_column())),
        );
    }

    /// docs/serve.md's table of the value columns' metrics is generated from the entries, as
    /// live.md's column table is.
    #[test]
    fn the_serve_metric_table_is_generated_from_the_entries() {
        generated_section(
            concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/serve.md"),
            "<!-- value metrics: generated from model/columns.rs -->\n",
            "<!-- end of value metrics -->",
            &serve_table(&columns(&every_column())),
        );
    }
}
