//! One JSON document per window (schema in docs/live.md, `topdown-bpf/threads/v1`).

use std::{collections::BTreeMap, io::Write};

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use topdown_common::stats::Stat;

use super::Shown;
use crate::attrib::neighbours::Culprits;
use crate::model::suspects::Victim;
use crate::model::{
    columns::{Column, Number},
    rows::{Row, Who},
};
use crate::prefetch;
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
    /// With `--neighbours` and groups: the suspects of slowing groups down, over the latest
    /// windows (`[{name, suspects: [{name, correlation, windows, p}]}]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    suspects: Option<&'a [Victim]>,
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
    multiplexed_apart: Vec<&'static str>,
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
                    multiplexed_apart: td.multiplexed_apart().collect(),
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
        suspects: (shown.options.neighbours && group_by.is_some())
            .then_some(shown.suspects.victims.as_slice()),
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
    // Rows are serialized into a buffer of our own and written a batch at a time: serde_json
    // writes a row in dozens of small pieces, each a call through `dyn Write` otherwise.
    let mut batch = Vec::with_capacity(ROW_BATCH_BYTES + 4096);
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            batch.push(b',');
        }
        // Rows in a report's order lie all over the window's memory: each one's first touch
        // would miss the cache (prefetch's note).
        if let Some(ahead) = rows.get(i + prefetch::AHEAD) {
            prefetch::read(*ahead);
        }
        // Then, once a row is in, what it points to where waits were split: its culprits (out
        // of line), and a row later their names (each its own allocation).
        if window.neighbours_measured {
            prefetch_culprits(rows, i);
        }
        write_entry(&mut batch, row, shown.columns, set, &order, view)?;
        if batch.len() >= ROW_BATCH_BYTES {
            out.write_all(&batch)?;
            batch.clear();
        }
    }
    batch.extend_from_slice(b"]}\n");
    out.write_all(&batch)?;
    Ok(())
}

/// How many bytes of rows are serialized before they are written out.
const ROW_BATCH_BYTES: usize = 64 * 1024;

/// Asks for the culprits of the row half the prefetch distance ahead of row `i`, and for the
/// names of the next row's culprit cgroups (their rows and culprits asked for before; thread
/// names lie in the culprits themselves).
fn prefetch_culprits(rows: &[&Row], i: usize) {
    if let Some(culprits) = rows
        .get(i + prefetch::AHEAD / 2)
        .and_then(|r| r.behind.as_deref())
    {
        prefetch::read(culprits);
    }
    if let Some(culprits) = rows.get(i + 1).and_then(|r| r.behind.as_deref()) {
        for (name, _) in &culprits.top {
            prefetch::bytes(name.as_ptr(), name.len());
        }
    }
}

/// One row's object: who it is, then its values, in the order docs/live.md gives.
fn write_entry(
    out: &mut Vec<u8>,
    row: &Row,
    columns: &[Column],
    set: &CounterSet,
    order: &[usize],
    view: Option<&TopdownView>,
) -> Result<()> {
    let mut object = Object::open(out);
    match &row.who {
        Who::Thread(t) => {
            object.int("tid", u64::from(t.tid.0));
            object.int("pid", u64::from(t.pid.0));
            object.value("comm", t.comm.as_str())?;
            object.value("cgroup", &*t.cgroup)?;
            object.int("cgroup_id", t.cgroup_id.0);
            object.bool("exited", t.exited);
            object.int("folded_threads", t.folded);
        }
        Who::Group { group, .. } => {
            let (container_id, runtime) = match &group.owner {
                Owner::Container { id, runtime, .. } => (Some(id.as_str()), Some(*runtime)),
                _ => (None, None),
            };
            object.value("label", group.label.as_str())?;
            object.value("cgroup", group.path.as_str())?;
            object.int("cgroup_id", group.id.0);
            object.value("kind", group.owner.kind())?;
            object.value("container_id", &container_id)?;
            object.value("runtime", &runtime)?;
            object.value("pod_uid", &group.owner.pod().map(|p| p.uid.as_str()))?;
            object.value("qos", &group.owner.pod().map(|p| p.qos.name()))?;
        }
    }
    for column in columns {
        match column.value(row) {
            Some(Number::Int(n)) => object.int(column.key, n),
            Some(Number::Float(x)) => object.float(column.key, Some(x)),
            None => object.float(column.key, None),
        }
    }
    object.value("counters", &CountersDoc::new(set, &row.counters, order))?;
    object.float("run_percent", Some(row.run_fraction * 100.0));
    match row.bottleneck() {
        Some(bottleneck) => object.value("bottleneck", &*bottleneck)?,
        None => object.null("bottleneck"),
    }
    write_wait_behind(&mut object, row.behind.as_deref())?;
    match topdown(row, view) {
        Some(topdown) => object.value("topdown", &topdown)?,
        None => object.null("topdown"),
    }
    object.close();
    Ok(())
}

/// A row's `wait_behind` (`null` where not measured): whom its wait was spent behind, the top
/// culprits and threads as `{name, ns, share}` (share of the whole wait), then the rest; every
/// part adds up to `run_delay_ns`. Written field by field (serde's derive escaped each of a busy
/// host's 20,000 rows' dozen keys, a tenth of the document's instructions).
fn write_wait_behind(object: &mut Object<'_>, culprits: Option<&Culprits>) -> Result<()> {
    let Some(culprits) = culprits else {
        object.null("wait_behind");
        return Ok(());
    };
    object.key("wait_behind");
    let total = culprits.total_ns().max(1) as f64;
    let mut behind = Object::open(object.out);
    behind.parts("culprits", &culprits.top, total)?;
    behind.int("other_ns", culprits.other_ns);
    behind.int("idle_ns", culprits.idle_ns);
    behind.int("unattributed_ns", culprits.unattributed_ns);
    behind.parts("threads", &culprits.threads, total)?;
    behind.int("other_threads_ns", culprits.other_threads_ns());
    behind.close();
    Ok(())
}

/// A JSON object written field by field into a buffer: the text serde_json writes for a struct
/// of these fields, without its per-key escaping and calls. Keys are the schema's own
/// identifiers and columns' keys (letters, digits and `_`: checked in debug builds and by the
/// unit tests), written as they are; numbers go through serde_json's formatter, strings and
/// nested values through serde_json.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> Object<'a> {
    fn open(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, empty: true }
    }

    fn key(&mut self, key: &str) {
        debug_assert!(is_plain_key(key), "{key} needs escaping");
        let comma = !std::mem::replace(&mut self.empty, false);
        // `,"key":` written in place after one reservation: a push and three copies, each
        // checking the room again, were a tenth of a busy host's document.
        let key = key.as_bytes();
        let len = usize::from(comma) + key.len() + 3;
        self.out.reserve(len);
        // SAFETY: `len` bytes are reserved past the end; each written once, then counted.
        unsafe {
            let mut at = self.out.as_mut_ptr().add(self.out.len());
            if comma {
                at.write(b',');
                at = at.add(1);
            }
            at.write(b'"');
            std::ptr::copy_nonoverlapping(key.as_ptr(), at.add(1), key.len());
            at.add(1 + key.len()).write(b'"');
            at.add(2 + key.len()).write(b':');
            self.out.set_len(self.out.len() + len);
        }
    }

    fn int(&mut self, key: &str, value: u64) {
        use serde_json::ser::Formatter as _;
        self.key(key);
        // Writing to a Vec cannot fail.
        let _ = serde_json::ser::CompactFormatter.write_u64(self.out, value);
    }

    /// A float, `null` for none and for a value JSON cannot hold (as serde_json writes them).
    fn float(&mut self, key: &str, value: Option<f64>) {
        use serde_json::ser::Formatter as _;
        match value.filter(|x| x.is_finite()) {
            Some(x) => {
                self.key(key);
                let _ = serde_json::ser::CompactFormatter.write_f64(self.out, x);
            }
            None => self.null(key),
        }
    }

    /// `null`: nothing measured (serde_json's text for `None`, without its serializer).
    fn null(&mut self, key: &str) {
        self.key(key);
        self.out.extend_from_slice(b"null");
    }

    /// `true` or `false`, as serde_json writes them.
    fn bool(&mut self, key: &str, value: bool) {
        self.key(key);
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    /// Named parts under `key` as a list of `{name, ns, share}`, each share of `total`.
    fn parts<N: std::ops::Deref<Target = str>>(
        &mut self,
        key: &str,
        parts: &[(N, u64)],
        total: f64,
    ) -> Result<()> {
        self.key(key);
        self.out.push(b'[');
        for (i, (name, ns)) in parts.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            let mut part = Object::open(self.out);
            part.value("name", &**name)?;
            part.int("ns", *ns);
            part.float("share", Some(*ns as f64 / total));
            part.close();
        }
        self.out.push(b']');
        Ok(())
    }

    fn value<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<()> {
        self.key(key);
        serde_json::to_writer(&mut *self.out, value)?;
        Ok(())
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// Whether `key` is written the same escaped or not: ASCII letters, digits and `_` only.
fn is_plain_key(key: &str) -> bool {
    key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
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
    fn objects_are_the_json_serde_writes_for_the_same_fields() {
        let mut out = Vec::new();
        let mut object = Object::open(&mut out);
        object.int("tid", u64::MAX);
        object.value("comm", "a \"quoted\\ name\n").unwrap();
        object.float("cpu_percent", Some(12.5));
        object.float("not_a_number", Some(f64::NAN));
        object.float("infinite", Some(f64::INFINITY));
        object.float("missing", None);
        object.value("exited", &true).unwrap();
        object.value("runtime", &None::<&str>).unwrap();
        object.bool("folded", false);
        object.bool("seen", true);
        object.null("a_key_longer_than_any_column_of_the_schema_so_far_and_then_some_more");
        object.close();
        #[derive(Serialize)]
        struct Same<'a> {
            tid: u64,
            comm: &'a str,
            cpu_percent: f64,
            not_a_number: f64,
            infinite: f64,
            missing: Option<f64>,
            exited: bool,
            runtime: Option<&'a str>,
            folded: bool,
            seen: bool,
            a_key_longer_than_any_column_of_the_schema_so_far_and_then_some_more: Option<u64>,
        }
        let expected = serde_json::to_string(&Same {
            tid: u64::MAX,
            comm: "a \"quoted\\ name\n",
            cpu_percent: 12.5,
            not_a_number: f64::NAN,
            infinite: f64::INFINITY,
            missing: None,
            exited: true,
            runtime: None,
            folded: false,
            seen: true,
            a_key_longer_than_any_column_of_the_schema_so_far_and_then_some_more: None,
        })
        .unwrap();
        // serde_json's own text of the same object, keys in the same order.
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        let mut empty = Vec::new();
        Object::open(&mut empty).close();
        assert_eq!(empty, b"{}");
    }

    #[test]
    fn every_column_key_is_written_as_it_is() {
        let mut set = CounterSet::software("test".into());
        set.counters
            .extend(["cycles", "instructions", "cpu_core/cycles/u", "weird\"name"].map(counter));
        let columns = crate::model::columns::columns(&set);
        assert!(columns.len() > 5);
        for column in columns {
            assert!(is_plain_key(column.key), "{}", column.key);
        }
        assert!(!is_plain_key("a\"b") && !is_plain_key("a\\b") && !is_plain_key("é"));
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
