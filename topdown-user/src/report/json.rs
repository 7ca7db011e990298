//! One JSON document per window (schema in docs/live.md, `topdown-bpf/threads/v1`).

use std::{collections::BTreeMap, io::Write};

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use topdown_common::stats::Stat;

use super::Shown;
use crate::model::{
    columns::{Column, Number},
    rows::{Row, Who},
};
use crate::tma::view::TopdownView;
use crate::{
    attrib::{
        Window,
        containers::Owner,
        groups::GroupBy,
        usage::{self, CounterValue},
    },
    pmu::counter_set::CounterSet,
};

/// One counter of a row: `{value, raw, unit, enabled_ns, running_ns}`, and `not_counting`
/// for an event this PMU does not count.
#[derive(Serialize)]
pub struct CounterDoc {
    /// The count scaled to the enabled time (`raw * enabled / running`), as perf scales;
    /// `null` when the counter was enabled and never running (perf's `<not counted>`), or when
    /// this PMU does not count the event.
    value: Option<f64>,
    /// The count as read.
    raw: u64,
    /// `ns` or `events`.
    unit: &'static str,
    /// Time the counter was enabled while charged to this row.
    enabled_ns: u64,
    /// Time it was running (on a PMU counter) of that.
    running_ns: u64,
    /// The event does not count on this PMU (it read 0 while others counted): its `raw` 0 is
    /// no measurement. Present only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    not_counting: bool,
}

/// `{counter name: CounterDoc}` for one row of a set, keys in name order; written straight to
/// the serializer (a row's map used to allocate every name, for every row of every window).
pub struct CountersDoc<'a> {
    set: &'a CounterSet,
    values: &'a [CounterValue],
    order: &'a [usize],
}

impl<'a> CountersDoc<'a> {
    /// `values` (one per counter of `set`) under the names of `set`, in `order` (see
    /// [`name_order`]).
    pub fn new(set: &'a CounterSet, values: &'a [CounterValue], order: &'a [usize]) -> Self {
        Self { set, values, order }
    }
}

impl Serialize for CountersDoc<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let entries = self
            .order
            .iter()
            .filter_map(|&i| Some((self.set.counters.get(i)?, self.values.get(i)?)));
        let mut map = serializer.serialize_map(None)?;
        for (counter, value) in entries {
            map.serialize_entry(
                counter.name.as_str(),
                &CounterDoc {
                    value: value.scaled(),
                    raw: value.reading.count,
                    unit: counter.unit.label(),
                    enabled_ns: value.reading.enabled_ns,
                    running_ns: value.reading.running_ns,
                    not_counting: value.silent,
                },
            )?;
        }
        map.end()
    }
}

/// The indices of `set`'s counters in name order, one per name (the last counter of a name,
/// as a map of names keeps it).
pub fn name_order(set: &CounterSet) -> Vec<usize> {
    let by_name: BTreeMap<&str, usize> = set
        .counters
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    by_name.into_values().collect()
}

/// The head of a window's document, before its rows (`topdown-bpf/threads/v1` or
/// `topdown-bpf/groups/v1`; docs/live.md: "JSON schema").
#[derive(Serialize)]
struct Head<'a> {
    schema: &'static str,
    /// `cgroup` or `container`, for documents of groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    group_by: Option<&'static str>,
    /// The run's totals, not an interval.
    #[serde(rename = "final")]
    is_final: bool,
    counter_set: SetDoc<'a>,
    interval: IntervalDoc,
    /// Each CPU's idle time in the window.
    idle_ns: Vec<u64>,
    /// Every kernel-side counter of losses and activity, by name.
    kernel_stats: BTreeMap<String, u64>,
    lost_anything: bool,
}

#[derive(Serialize)]
struct SetDoc<'a> {
    name: &'a str,
    reason: &'a str,
    counters: Vec<&'a str>,
    /// Counters whose events this PMU does not count (as of this window): `null` in every row,
    /// and so is every TopDown node built on them.
    not_counting: Vec<&'a str>,
}

#[derive(Serialize)]
struct IntervalDoc {
    start_s: f64,
    length_s: f64,
}

/// What a thread row says about whose it is.
#[derive(Serialize)]
struct ThreadDoc<'a> {
    tid: u32,
    pid: u32,
    comm: &'a str,
    cgroup: &'a str,
    cgroup_id: u64,
    exited: bool,
    /// Exited threads this row folds (0: one thread's own row).
    folded_threads: u64,
    #[serde(flatten)]
    values: ValuesDoc<'a>,
}

/// What a group row says about whose it is.
#[derive(Serialize)]
struct GroupDoc<'a> {
    label: &'a str,
    cgroup: &'a str,
    cgroup_id: u64,
    kind: &'static str,
    container_id: Option<&'a str>,
    runtime: Option<&'static str>,
    pod_uid: Option<&'a str>,
    qos: Option<&'static str>,
    #[serde(flatten)]
    values: ValuesDoc<'a>,
}

/// A row's value columns, `{key: value}`, in column order (null where not measured).
struct ColumnsDoc<'a> {
    columns: &'a [Column],
    row: &'a Row,
}

impl Serialize for ColumnsDoc<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(self.columns.len()))?;
        for column in self.columns {
            match column.value(self.row) {
                Some(Number::Int(n)) => map.serialize_entry(column.key, &n)?,
                Some(Number::Float(x)) => map.serialize_entry(column.key, &x)?,
                None => map.serialize_entry(column.key, &None::<f64>)?,
            }
        }
        map.end()
    }
}

/// A row's values.
#[derive(Serialize)]
struct ValuesDoc<'a> {
    #[serde(flatten)]
    columns: ColumnsDoc<'a>,
    counters: CountersDoc<'a>,
    run_percent: f64,
    /// What held it back: `throttled`, `waiting for CPU`, else TopDown's bottleneck; null when
    /// none of them.
    bottleneck: Option<&'static str>,
    /// One entry per core type it ran on; null without TopDown.
    topdown: Option<Vec<TopdownDoc<'a>>>,
}

/// TopDown on one core type.
#[derive(Serialize)]
struct TopdownDoc<'a> {
    /// The core PMU (`cpu_core`), empty on machines with one.
    pmu: &'a str,
    model: &'static str,
    /// `{metric name: fraction}`, as the formulas give them (not clamped).
    nodes: Value,
    bottleneck: Option<&'static str>,
    /// Nodes outside [0, 1], with the counts their formulas read.
    out_of_range: Vec<OutOfRangeDoc<'a>>,
    /// `{metric name: percent}`: how much of the time each node's least measured input ran.
    run_percent: BTreeMap<&'static str, f64>,
    /// Nodes whose inputs were in counter groups the kernel multiplexed apart.
    multiplexed_apart: &'a [&'static str],
    /// perf's per-thread estimate with SMT on (Haswell to Cascade Lake; the set's reason says
    /// what it assumes), not an exact count.
    estimate: bool,
}

/// A node outside [0, 1] and the counts (by formula name) its formula reads.
#[derive(Serialize)]
struct OutOfRangeDoc<'a> {
    node: &'static str,
    value: f64,
    inputs: BTreeMap<&'a str, f64>,
}

/// One entry per core type the thread ran on: its PMU, model, nodes and bottleneck.
fn topdown<'a>(row: &'a Row, view: Option<&'a TopdownView>) -> Option<Vec<TopdownDoc<'a>>> {
    let view = view?;
    Some(
        view.parts
            .iter()
            .zip(&row.topdown)
            .filter_map(|(part, td)| {
                let td = td.as_ref()?;
                Some(TopdownDoc {
                    pmu: part.prefix.trim_end_matches('/'),
                    model: part.model.name,
                    nodes: super::topdown::values_json(td),
                    bottleneck: td.bottleneck,
                    out_of_range: td
                        .out_of_range
                        .iter()
                        .map(|o| OutOfRangeDoc {
                            node: o.node,
                            value: o.value,
                            inputs: o.inputs.iter().map(|(n, v)| (n.as_str(), *v)).collect(),
                        })
                        .collect(),
                    run_percent: td
                        .nodes
                        .iter()
                        .map(|n| (n.node.name, n.run_fraction * 100.0))
                        .collect(),
                    multiplexed_apart: &td.multiplexed_apart,
                    estimate: view.is_estimate(),
                })
            })
            .collect(),
    )
}

/// Writes the document for one window, one line: `topdown-bpf/threads/v1`, or
/// `topdown-bpf/groups/v1` for rows of cgroups or containers. Rows are serialized one at a time
/// after the rest of the document, so a window of many thousand threads never sits in memory
/// as one tree.
pub fn write_document(
    out: &mut dyn Write,
    window: &Window,
    rows: &[&Row],
    shown: &Shown<'_>,
    is_final: bool,
) -> Result<()> {
    let (set, view) = (shown.set, shown.options.topdown.as_ref());
    let group_by = shown.options.group_by();
    let head = Head {
        schema: match group_by {
            None => "topdown-bpf/threads/v1",
            Some(_) => "topdown-bpf/groups/v1",
        },
        group_by: group_by.map(|by| match by {
            GroupBy::Cgroup => "cgroup",
            GroupBy::Container => "container",
        }),
        is_final,
        counter_set: SetDoc {
            name: set.name,
            reason: &set.reason,
            counters: set.names().collect(),
            not_counting: set.names_of(&window.silent()),
        },
        interval: IntervalDoc {
            start_s: window.start.as_secs_f64(),
            length_s: window.length.as_secs_f64(),
        },
        idle_ns: window.idle.iter().map(|&d| usage::duration_ns(d)).collect(),
        kernel_stats: Stat::ALL
            .into_iter()
            .map(|stat| (stat.name().replace(' ', "_"), window.stats.get(stat)))
            .collect(),
        lost_anything: window.stats.lost_anything(),
    };
    let list = if group_by.is_some() {
        "groups"
    } else {
        "threads"
    };
    let head = serde_json::to_string(&head)?;
    let head = head.strip_suffix('}').unwrap_or(&head);
    write!(out, "{head},\"{list}\":[")?;
    let order = name_order(set);
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        write_entry(&mut *out, row, shown.columns, set, &order, view)?;
    }
    out.write_all(b"]}\n")?;
    Ok(())
}

/// One row's object: who it is, then its values.
fn write_entry(
    out: &mut dyn Write,
    row: &Row,
    columns: &[Column],
    set: &CounterSet,
    order: &[usize],
    view: Option<&TopdownView>,
) -> Result<()> {
    let values = ValuesDoc {
        columns: ColumnsDoc { columns, row },
        counters: CountersDoc::new(set, &row.counters, order),
        run_percent: row.run_fraction * 100.0,
        bottleneck: row.bottleneck(),
        topdown: topdown(row, view),
    };
    match &row.who {
        Who::Thread(t) => serde_json::to_writer(
            out,
            &ThreadDoc {
                tid: t.tid.0,
                pid: t.pid.0,
                comm: &t.comm,
                cgroup: &t.cgroup,
                cgroup_id: t.cgroup_id.0,
                exited: t.exited,
                folded_threads: t.folded,
                values,
            },
        )?,
        Who::Group { group, .. } => {
            let (container_id, runtime) = match &group.owner {
                Owner::Container { id, runtime, .. } => (Some(id.as_str()), Some(*runtime)),
                _ => (None, None),
            };
            serde_json::to_writer(
                out,
                &GroupDoc {
                    label: &group.label,
                    cgroup: &group.path,
                    cgroup_id: group.id.0,
                    kind: group.owner.kind(),
                    container_id,
                    runtime,
                    pod_uid: group.owner.pod().map(|p| p.uid.as_str()),
                    qos: group.owner.pod().map(|p| p.qos.name()),
                    values,
                },
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmu::counter_set::{Counter, EventAttr, Unit};

    fn counter(name: &str) -> Counter {
        Counter {
            name: name.to_owned(),
            unit: Unit::Events,
            attr: EventAttr::default(),
            cpus: None,
        }
    }

    #[test]
    fn counters_are_written_once_per_name_in_name_order() {
        let set = CounterSet {
            name: "test",
            reason: String::new(),
            counters: ["cpu-clock", "z-last", "a-first", "z-last"]
                .into_iter()
                .map(counter)
                .collect(),
        };
        let values: Vec<CounterValue> = (0..4u64).map(|i| CounterValue::new(i, 10, 10)).collect();
        let order = name_order(&set);
        let text = serde_json::to_string(&CountersDoc::new(&set, &values, &order)).unwrap();
        let names: Vec<&str> = text
            .match_indices("\":{")
            .map(|(end, _)| &text[text[..end].rfind('"').unwrap() + 1..end])
            .collect();
        assert_eq!(names, ["a-first", "cpu-clock", "z-last"]);
        let doc: Value = serde_json::from_str(&text).unwrap();
        // The last counter of a name, as a map of names keeps it.
        assert_eq!(doc["z-last"]["raw"], 3);
        assert_eq!(doc["a-first"]["raw"], 2);
        // Fewer values than counters: only the counters with a value.
        let short = serde_json::to_string(&CountersDoc::new(&set, &values[..2], &order)).unwrap();
        let short: Value = serde_json::from_str(&short).unwrap();
        assert_eq!(short.as_object().unwrap().len(), 1, "{short}");
    }
}
