//! The flat fields of a row: CSV's fields and Parquet's columns. One entry per field says its
//! name, its type, whether it may be missing, how text writes it, and which value of the row
//! (or of its window) it holds, so a header and its lines, or a schema and its cells, come
//! from the same entry and cannot drift apart. Two layouts: [`csv`] follows `perf stat -x`
//! (whose row it is, then per counter its scaled value and run %); [`parquet`] keeps what a
//! query needs to rescale a count (per counter the raw count, the scaled one, enabled and
//! running time) and holds threads and groups in one table told apart by `kind`. Value
//! columns ([`columns::columns`]) come into both as they are: a new one is an entry there.

use std::{borrow::Cow, collections::HashSet};

use crate::{
    attrib::{
        Window,
        named::KeyValue,
        neighbours::{Culprits, TOP_CULPRITS},
    },
    model::{
        columns::{self, Column, Kind, NodeColumn, Number, view_nodes},
        rows::{Row, RowOptions, Who},
    },
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// What text writes for a counter that has no count, as perf writes it.
pub const NOT_COUNTED: &str = "<not counted>";

/// A field's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// A whole number.
    Int,
    /// Nanoseconds since the Unix epoch, UTC.
    Time,
    /// A float, written with `decimals` digits after the point in text.
    Float {
        /// Digits after the point in text.
        decimals: usize,
    },
    /// Text.
    Text,
    /// True or false (`1` or `0` in text).
    Bool,
}

/// One field's value for one row (`None`: missing, never a 0 made of nothing).
#[derive(Clone, Debug, PartialEq)]
pub enum Cell<'a> {
    /// A whole number (or a time).
    Int(Option<i64>),
    /// A float.
    Float(Option<f64>),
    /// Text.
    Text(Option<Cow<'a, str>>),
    /// True or false.
    Bool(Option<bool>),
}

impl Cell<'_> {
    /// The same value, owning its text.
    pub fn into_owned(self) -> Cell<'static> {
        match self {
            Self::Int(v) => Cell::Int(v),
            Self::Float(v) => Cell::Float(v),
            Self::Text(v) => Cell::Text(v.map(|s| Cow::Owned(s.into_owned()))),
            Self::Bool(v) => Cell::Bool(v),
        }
    }
}

/// What a row's fields read beside the row: its window, and the run it belongs to.
pub struct At<'a> {
    /// The row's window.
    pub window: &'a Window,
    /// CSV's time: the window's end in seconds, or `total` for the run's totals.
    pub time_s: &'a str,
    /// The host's name.
    pub host: &'a str,
    /// When collection started, in nanoseconds since the Unix epoch.
    pub started_unix_ns: u64,
    /// The container, pod, service or user slice the row's cgroup belongs to.
    pub container: Option<&'a str>,
}

/// One flat field: its name, type and how it is written, and which value it holds.
#[derive(Clone, Debug)]
pub struct Field {
    /// The header's (or the column's) name.
    pub name: String,
    /// Its type.
    pub ty: Type,
    /// Whether a row may have no value for it.
    pub nullable: bool,
    /// What text writes where a row has no value.
    pub missing: &'static str,
    value: Value,
}

/// Which value a field holds.
#[derive(Clone, Debug)]
enum Value {
    /// The window's end in seconds, or `total`.
    TimeS,
    /// `thread` or `cgroup`.
    Kind,
    /// The window's start, since the Unix epoch.
    Time,
    WindowStartNs,
    WindowLengthNs,
    Host,
    /// The i-th of [`Who::key_names`].
    Key(usize),
    Tid,
    Pid,
    Comm,
    Exited,
    Cgroup,
    CgroupId,
    Container,
    Column(Column),
    /// A counter of the set, by slot.
    Counter(usize, Of),
    /// The share of the window's time the row's counters were running, in percent.
    RunPercent,
    /// The verdict's words, else the first part's TopDown bottleneck.
    Bottleneck,
    /// One part's TopDown bottleneck.
    PartBottleneck(usize),
    Node(NodeColumn),
    /// The k-th of [`wait_behind_names`].
    WaitBehind(usize),
    Verdict,
}

/// Which number of a counter.
#[derive(Clone, Copy, Debug)]
enum Of {
    /// Scaled to its enabled time; missing where it has no count.
    Scaled,
    /// Scaled, missing also where it never ran (Parquet's: beside its raw count).
    ScaledRan,
    /// Its share of the enabled time running, in percent.
    RunPercent,
    /// As read; missing where it never ran.
    Raw,
    Enabled,
    Running,
}

impl Field {
    fn new(name: impl Into<String>, ty: Type, nullable: bool, value: Value) -> Self {
        Self {
            name: name.into(),
            ty,
            nullable,
            missing: "",
            value,
        }
    }

    /// `row`'s value of this field, in `at`'s window.
    pub fn cell<'r>(&self, row: &'r Row, at: &At<'r>) -> Cell<'r> {
        let thread = row.who.thread();
        let text = |s: &'r str| Cell::Text(Some(Cow::Borrowed(s)));
        let int = |n: u64| Cell::Int(Some(n as i64));
        match &self.value {
            Value::TimeS => text(at.time_s),
            Value::Kind => text(if thread.is_some() { "thread" } else { "cgroup" }),
            Value::Time => Cell::Int(Some(
                (at.started_unix_ns as i64).saturating_add(at.window.start.as_nanos() as i64),
            )),
            Value::WindowStartNs => int(at.window.start.as_nanos() as u64),
            Value::WindowLengthNs => int(at.window.length.as_nanos() as u64),
            Value::Host => text(at.host),
            Value::Key(i) => match row.who.key_value(*i) {
                Some(KeyValue::Id(n)) => int(n),
                Some(KeyValue::Text(s)) => text(s),
                None => Cell::Text(None),
            },
            Value::Tid => Cell::Int(thread.map(|t| i64::from(t.tid.0))),
            Value::Pid => Cell::Int(thread.map(|t| i64::from(t.pid.0))),
            Value::Comm => Cell::Text(thread.map(|t| Cow::Borrowed(t.comm.as_str()))),
            Value::Exited => Cell::Bool(thread.map(|t| t.exited)),
            Value::Cgroup => match &row.who {
                Who::Thread(t) => text(&t.cgroup),
                Who::Group { group, .. } => text(&group.path),
            },
            Value::CgroupId => match &row.who {
                Who::Thread(t) => int(t.cgroup_id.0),
                Who::Group { group, .. } => int(group.id.0),
            },
            Value::Container => Cell::Text(at.container.map(Cow::Borrowed)),
            Value::Column(column) => match column.value(row) {
                Some(Number::Int(n)) => int(n),
                Some(Number::Float(x)) => Cell::Float(Some(x)),
                None if self.ty == Type::Int => Cell::Int(None),
                None => Cell::Float(None),
            },
            Value::Counter(slot, of) => counter(row, *slot, *of),
            Value::RunPercent => Cell::Float(Some(row.run_fraction * 100.0)),
            Value::Bottleneck => Cell::Text(row.bottleneck()),
            Value::PartBottleneck(part) => Cell::Text(
                row.topdown
                    .get(*part)
                    .and_then(|td| td.as_ref()?.bottleneck)
                    .map(Cow::Borrowed),
            ),
            Value::Node(column) => Cell::Float(column.value(row)),
            Value::WaitBehind(k) => wait_behind(row.behind.as_deref(), *k),
            Value::Verdict => Cell::Text(row.verdict_words()),
        }
    }
}

/// A counter's number `of` from `row`'s slot `slot`.
fn counter(row: &Row, slot: usize, of: Of) -> Cell<'_> {
    let value = row.counters.get(slot).copied().unwrap_or_default();
    let ran = value.reading.running_ns > 0;
    match of {
        Of::Scaled => Cell::Float(value.scaled()),
        Of::ScaledRan => Cell::Float(value.scaled().filter(|_| ran)),
        Of::RunPercent => Cell::Float(Some(value.reading.running_fraction() * 100.0)),
        Of::Raw => Cell::Int(ran.then_some(value.reading.count as i64)),
        Of::Enabled => Cell::Int(Some(value.reading.enabled_ns as i64)),
        Of::Running => Cell::Int(Some(value.reading.running_ns as i64)),
    }
}

/// A value column as a field: under its key, an integer or a float to its kind's decimals,
/// missing where the column can be.
fn column_field(column: Column) -> Field {
    let ty = match column.kind {
        Kind::Nanoseconds | Kind::Count => Type::Int,
        Kind::Ratio => Type::Float { decimals: 4 },
        Kind::Percent => Type::Float { decimals: 2 },
    };
    Field::new(
        column.key,
        ty,
        column.may_be_missing(),
        Value::Column(column),
    )
}

/// A TopDown node's value, a fraction of the slots.
const NODE: Type = Type::Float { decimals: 6 };

/// CSV's fields for rows of `options`' kind: the window's end, whose row it is
/// ([`Who::key_names`]), the value `columns`, each counter of `set` scaled (perf's `<not
/// counted>` where it has no count) with its run %, the TopDown nodes and each part's
/// bottleneck, the wait's split, the verdict, and for threads whether it exited.
pub fn csv(set: &CounterSet, columns: &[Column], options: &RowOptions) -> Vec<Field> {
    let mut fields = vec![Field::new("time_s", Type::Text, false, Value::TimeS)];
    for (i, name) in Who::key_names(options.group_by()).iter().enumerate() {
        // The ids among the keys ([`KeyValue::Id`]) are numbers; names and paths are text.
        let ty = if matches!(*name, "tid" | "pid" | "cgroup_id") {
            Type::Int
        } else {
            Type::Text
        };
        fields.push(Field::new(*name, ty, false, Value::Key(i)));
    }
    fields.extend(columns.iter().copied().map(column_field));
    for (slot, counter) in set.counters.iter().enumerate() {
        fields.push(Field {
            missing: NOT_COUNTED,
            ..Field::new(
                &counter.name,
                Type::Float { decimals: 0 },
                true,
                Value::Counter(slot, Of::Scaled),
            )
        });
        fields.push(Field::new(
            format!("{}:run_percent", counter.name),
            Type::Float { decimals: 2 },
            false,
            Value::Counter(slot, Of::RunPercent),
        ));
    }
    if let Some(view) = &options.topdown {
        for column in view_nodes(view) {
            let name = format!("{}{}", column.prefix, column.node.name);
            fields.push(Field::new(name, NODE, true, Value::Node(column)));
        }
        for (i, part) in view.parts.iter().enumerate() {
            let name = format!("{}bottleneck", part.prefix);
            fields.push(Field::new(name, Type::Text, true, Value::PartBottleneck(i)));
        }
    }
    fields.extend(wait_behind_fields());
    fields.push(Field::new("verdict", Type::Text, true, Value::Verdict));
    if options.group.is_none() {
        fields.push(Field::new("exited", Type::Bool, false, Value::Exited));
    }
    fields
}

/// Parquet's columns (schema `topdown-bpf/rows/v1`, docs/recordings.md): the window's, whose
/// row it is (a thread's fields null in a group's row), the value columns of `set`, the run %,
/// the bottleneck, the wait's split, four per counter (raw, scaled, enabled and running time),
/// then `view`'s TopDown nodes (`<pmu>_<node>` with several core types).
pub fn parquet(set: &CounterSet, view: Option<&TopdownView>) -> Vec<Field> {
    use Type::{Bool, Int, Text, Time};
    let mut fields: Vec<Field> = [
        ("kind", Text, false, Value::Kind),
        ("time", Time, false, Value::Time),
        ("window_start_ns", Int, false, Value::WindowStartNs),
        ("window_length_ns", Int, false, Value::WindowLengthNs),
        ("host", Text, false, Value::Host),
        ("tid", Int, true, Value::Tid),
        ("pid", Int, true, Value::Pid),
        ("comm", Text, true, Value::Comm),
        ("exited", Bool, true, Value::Exited),
        ("cgroup", Text, false, Value::Cgroup),
        ("cgroup_id", Int, false, Value::CgroupId),
        ("container", Text, true, Value::Container),
    ]
    .into_iter()
    .map(|(name, ty, nullable, value)| Field::new(name, ty, nullable, value))
    .collect();
    fields.extend(columns::columns(set).into_iter().map(column_field));
    fields.push(Field::new(
        "run_percent",
        Type::Float { decimals: 2 },
        false,
        Value::RunPercent,
    ));
    fields.push(Field::new("bottleneck", Text, true, Value::Bottleneck));
    fields.extend(wait_behind_fields());
    for (slot, prefix) in counter_prefixes(set).into_iter().enumerate() {
        let float = Type::Float { decimals: 0 };
        for (suffix, ty, nullable, of) in [
            ("value", Int, true, Of::Raw),
            ("scaled", float, true, Of::ScaledRan),
            ("enabled_ns", Int, false, Of::Enabled),
            ("running_ns", Int, false, Of::Running),
        ] {
            let name = format!("{prefix}_{suffix}");
            fields.push(Field::new(name, ty, nullable, Value::Counter(slot, of)));
        }
    }
    if let Some(view) = view {
        let several = view.parts.len() > 1;
        for column in view_nodes(view) {
            let name = if several {
                format!("{}_{}", column_name(&column.prefix), column.node.name)
            } else {
                column.node.name.to_owned()
            };
            fields.push(Field::new(name, NODE, true, Value::Node(column)));
        }
    }
    fields
}

/// The counters of a set as Parquet's columns name them ([`parquet`]'s `<prefix>_value`, ...),
/// one per counter, in slot order: made SQL-safe and unique.
pub fn counter_prefixes(set: &CounterSet) -> Vec<String> {
    let mut seen = HashSet::new();
    set.counters
        .iter()
        .map(|counter| {
            let base = column_name(&counter.name);
            let mut name = base.clone();
            let mut n = 2;
            while !seen.insert(name.clone()) {
                name = format!("{base}_{n}");
                n += 1;
            }
            name
        })
        .collect()
}

/// A column name SQL can use unquoted: lowercase letters, digits and `_`.
pub fn column_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    out.trim_matches('_').to_owned()
}

/// The wait's split as flat fields, in this order: the top culprits' names and nanoseconds
/// (`wait_behind_1`, `wait_behind_1_ns`, ...), what the rest waited (behind other culprits,
/// behind the idle task, not attributed), then the top culprit threads
/// (`wait_behind_thread_1`, `wait_behind_thread_1_ns`, ...). Missing where waits were not
/// split (no `--neighbours`); a culprit's nanoseconds are 0 where it has no culprit.
fn wait_behind_fields() -> Vec<Field> {
    let pairs = |kind: &str| {
        (1..=TOP_CULPRITS)
            .flat_map(|i| {
                [
                    format!("wait_behind{kind}_{i}"),
                    format!("wait_behind{kind}_{i}_ns"),
                ]
            })
            .collect::<Vec<_>>()
    };
    pairs("")
        .into_iter()
        .chain(
            [
                "wait_behind_other_ns",
                "wait_behind_idle_ns",
                "wait_unattributed_ns",
            ]
            .map(String::from),
        )
        .chain(pairs("_thread"))
        .enumerate()
        .map(|(k, name)| {
            let ty = if name.ends_with("_ns") {
                Type::Int
            } else {
                Type::Text
            };
            Field::new(name, ty, true, Value::WaitBehind(k))
        })
        .collect()
}

/// The k-th field of [`wait_behind_fields`] from a row's split.
fn wait_behind(behind: Option<&Culprits>, k: usize) -> Cell<'_> {
    let top = 2 * TOP_CULPRITS;
    match k {
        k if k < top => culprit_field(behind.map(|b| &b.top[..]), k),
        k if k < top + 3 => {
            Cell::Int(behind.map(|b| [b.other_ns, b.idle_ns, b.unattributed_ns][k - top] as i64))
        }
        k => culprit_field(behind.map(|b| &b.threads[..]), k - top - 3),
    }
}

/// Field `i` of a list of culprits, named and timed: the `i / 2`-th culprit's name, or its ns.
fn culprit_field<N: std::ops::Deref<Target = str>>(
    list: Option<&[(N, u64)]>,
    i: usize,
) -> Cell<'_> {
    let culprit = list.and_then(|list| list.get(i / 2));
    if i.is_multiple_of(2) {
        Cell::Text(culprit.map(|(name, _)| Cow::Borrowed(&**name)))
    } else {
        Cell::Int(list.map(|_| culprit.map_or(0, |(_, ns)| *ns as i64)))
    }
}

/// What the flat layouts' tests (and the docs' drift tests of CSV and Parquet) build rows of:
/// a set with every derived column (IPC, MPKI), and TopDown on it.
#[cfg(test)]
pub(crate) mod fixture {
    use crate::{
        attrib::groups::{GroupBy, GroupOptions},
        model::rows::RowOptions,
        pmu::counter_set::{Counter, CounterSet},
        tma::{Model, view::TopdownView},
    };

    /// The software set with cycles, instructions and cache misses beside it.
    pub fn every_derived_column() -> CounterSet {
        let mut set = CounterSet::software(String::new());
        for (name, config) in [("cycles", 0), ("instructions", 1), ("cache-misses", 3)] {
            set.counters.push(Counter::event(name, 0, config));
        }
        set
    }

    /// TopDown Level 1 and 2 of a Sapphire Rapids.
    pub fn topdown() -> TopdownView {
        TopdownView::single(Model::named("sapphirerapids").unwrap(), 2, 8, false)
    }

    /// Rows per thread (`None`) or grouped `by`, with `topdown`.
    pub fn options(by: Option<GroupBy>, topdown: &TopdownView) -> RowOptions {
        RowOptions {
            topdown: Some(topdown.clone()),
            group: by.map(|by| GroupOptions {
                by,
                rollup: false,
                keep: Vec::new(),
            }),
            ..RowOptions::default()
        }
    }

    /// Rows per thread, per cgroup and per container.
    pub const GROUPINGS: [Option<GroupBy>; 3] =
        [None, Some(GroupBy::Cgroup), Some(GroupBy::Container)];
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use topdown_common::cgroup::CgroupId;

    use super::*;
    use crate::{
        attrib::{
            cgroups::CgroupNames,
            usage::{CounterValue, ThreadUsage},
        },
        model::frame::Frame,
    };

    /// Whether `cell` is of `field`'s type, and missing only where the field may be.
    fn fits(field: &Field, cell: &Cell<'_>) -> bool {
        let missing = matches!(
            cell,
            Cell::Int(None) | Cell::Float(None) | Cell::Text(None) | Cell::Bool(None)
        );
        let typed = matches!(
            (cell, field.ty),
            (Cell::Int(_), Type::Int | Type::Time)
                | (Cell::Float(_), Type::Float { .. })
                | (Cell::Text(_), Type::Text)
                | (Cell::Bool(_), Type::Bool)
        );
        typed && (field.nullable || !missing)
    }

    /// Every cell a row gives is of its field's type (a Parquet column takes only its own), and
    /// missing only where its field says it may be: threads (one counted, one whose counter
    /// never ran, one exited) and groups (per cgroup, per container), with the wait split and
    /// without, TopDown nodes not computable, in both layouts. Names are each once.
    #[test]
    fn every_cell_is_of_its_fields_type_and_missing_only_where_allowed() {
        let set = fixture::every_derived_column();
        let mut counted = ThreadUsage::clocked(7, 7, CgroupId(1), 2_000_000, 3);
        counted.counters = vec![CounterValue::new(1_000, 400, 200); 3];
        let mut never_ran = ThreadUsage::clocked(8, 7, CgroupId(2), 1_000_000, 1);
        never_ran.counters = vec![CounterValue::new(0, 400, 0); 3];
        let mut gone = ThreadUsage::clocked(9, 7, CgroupId(2), 1_000, 1);
        gone.exited = true;
        gone.counters = vec![CounterValue::new(5, 5, 5); 3];
        let window = Window {
            start: Duration::from_secs(1),
            length: Duration::from_secs(1),
            threads: vec![counted, never_ran, gone],
            ..Window::default()
        };
        let view = fixture::topdown();
        let mut names = CgroupNames::at(None);
        let frame = Frame::new(&window, &mut names, &set, None);
        let at = At {
            window: &window,
            time_s: "2.000000",
            host: "h",
            started_unix_ns: 1,
            container: Some("docker:1a2b"),
        };
        let culprits = Culprits {
            top: [("batch".into(), 10)].into_iter().collect(),
            ..Culprits::default()
        };
        let mut checked = 0;
        for by in fixture::GROUPINGS {
            let options = fixture::options(by, &view);
            let columns = columns::for_rows(&columns::columns(&set), by.is_some());
            for fields in [csv(&set, &columns, &options), parquet(&set, Some(&view))] {
                let mut seen = HashSet::new();
                assert!(fields.iter().all(|f| seen.insert(&f.name)), "{fields:?}");
                for row in frame.rows(&options).rows {
                    for behind in [None, Some(Box::new(culprits.clone()))] {
                        let row = Row {
                            behind,
                            ..row.clone()
                        };
                        for field in &fields {
                            let cell = field.cell(&row, &at);
                            assert!(
                                fits(field, &cell),
                                "{} of {:?}: {cell:?}",
                                field.name,
                                row.who
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 500, "{checked}");
    }

    /// A row's split in the order its names say: each top culprit's name then its ns, what the
    /// rest waited, then the threads; ns 0 past the last culprit, all missing with no split.
    #[test]
    fn the_wait_split_fields_hold_what_their_names_say() {
        let behind = Culprits {
            top: [("a".into(), 10), ("b".into(), 7)].into_iter().collect(),
            threads: [("t/1".into(), 6)].into_iter().collect(),
            other_ns: 3,
            idle_ns: 2,
            unattributed_ns: 1,
            ..Culprits::default()
        };
        let fields = wait_behind_fields();
        let read = |name: &str| {
            let k = fields.iter().position(|f| f.name == name).unwrap();
            wait_behind(Some(&behind), k).into_owned()
        };
        let text = |s: &'static str| Cell::Text(Some(Cow::Borrowed(s)));
        for (name, expected) in [
            ("wait_behind_1", text("a")),
            ("wait_behind_1_ns", Cell::Int(Some(10))),
            ("wait_behind_2", text("b")),
            ("wait_behind_2_ns", Cell::Int(Some(7))),
            ("wait_behind_3", Cell::Text(None)),
            ("wait_behind_3_ns", Cell::Int(Some(0))),
            ("wait_behind_other_ns", Cell::Int(Some(3))),
            ("wait_behind_idle_ns", Cell::Int(Some(2))),
            ("wait_unattributed_ns", Cell::Int(Some(1))),
            ("wait_behind_thread_1", text("t/1")),
            ("wait_behind_thread_1_ns", Cell::Int(Some(6))),
            ("wait_behind_thread_2_ns", Cell::Int(Some(0))),
        ] {
            assert_eq!(read(name), expected, "{name}");
        }
        assert_eq!(fields.len(), 4 * TOP_CULPRITS + 3);
        for (k, field) in fields.iter().enumerate() {
            let none = wait_behind(None, k);
            assert!(
                matches!(none, Cell::Int(None) | Cell::Text(None)),
                "{}: {none:?}",
                field.name
            );
        }
    }
}
