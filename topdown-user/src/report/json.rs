//! One JSON document per window (schema in the README, `topdown-bpf/threads/v1`).

use std::io::Write;

use anyhow::Result;
use serde_json::{Map, Value, json};
use topdown_common::stats::Stat;

use super::rows::{Row, Who};
use crate::tma::view::TopdownView;
use crate::{
    attrib::{Window, containers::Owner, groups::GroupBy, usage::CounterValue},
    pmu::counter_set::CounterSet,
};

/// `{counter name: {value, raw, unit, enabled_ns, running_ns}}` for one row of a set.
pub fn counters_json(set: &CounterSet, values: &[CounterValue]) -> Value {
    let counters: Map<String, Value> = set
        .counters
        .iter()
        .zip(values)
        .map(|(counter, value)| {
            let entry = json!({
                "value": value.scaled(),
                "raw": value.raw,
                "unit": counter.unit.label(),
                "enabled_ns": value.enabled_ns,
                "running_ns": value.running_ns,
            });
            (counter.name.clone(), entry)
        })
        .collect();
    Value::Object(counters)
}

/// One entry per core type the thread ran on: its PMU, model, nodes and bottleneck.
fn topdown(row: &Row, view: Option<&TopdownView>) -> Value {
    let Some(view) = view else {
        return Value::Null;
    };
    let parts: Vec<Value> = view
        .parts
        .iter()
        .zip(&row.topdown)
        .filter_map(|(part, td)| {
            let td = td.as_ref()?;
            Some(json!({
                "pmu": part.prefix.trim_end_matches('/'),
                "model": part.model.name,
                "nodes": super::topdown::values_json(td),
                "bottleneck": td.bottleneck,
            }))
        })
        .collect();
    Value::Array(parts)
}

/// Writes the document for one window, one line: `topdown-bpf/threads/v1`, or
/// `topdown-bpf/groups/v1` for rows of cgroups or containers. Rows are serialized one at a time
/// after the rest of the document, so a window of many thousand threads never sits in memory
/// as one tree.
pub fn write_document(
    out: &mut dyn Write,
    window: &Window,
    rows: &[Row],
    set: &CounterSet,
    view: Option<&TopdownView>,
    group_by: Option<GroupBy>,
    is_final: bool,
) -> Result<()> {
    let stats: Map<String, Value> = Stat::ALL
        .into_iter()
        .map(|stat| (stat.name().replace(' ', "_"), json!(window.stats.get(stat))))
        .collect();
    let mut doc = json!({
        "schema": "topdown-bpf/threads/v1",
        "final": is_final,
        "counter_set": { "name": set.name, "reason": set.reason,
                         "counters": set.names().collect::<Vec<_>>() },
        "interval": { "start_s": window.start.as_secs_f64(),
                      "length_s": window.length.as_secs_f64() },
        "idle_ns": window.idle.iter().map(|v| v.raw).collect::<Vec<_>>(),
        "kernel_stats": stats,
        "lost_anything": window.stats.lost_anything(),
    });
    let list = match group_by {
        None => "threads",
        Some(by) => {
            doc["schema"] = json!("topdown-bpf/groups/v1");
            doc["group_by"] = json!(match by {
                GroupBy::Cgroup => "cgroup",
                GroupBy::Container => "container",
            });
            "groups"
        }
    };
    let head = serde_json::to_string(&doc)?;
    let head = head.strip_suffix('}').unwrap_or(&head);
    write!(out, "{head},\"{list}\":[")?;
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        serde_json::to_writer(&mut *out, &entry(row, set, view))?;
    }
    out.write_all(b"]}\n")?;
    Ok(())
}

/// One row's object: who it is, then its values.
fn entry(row: &Row, set: &CounterSet, view: Option<&TopdownView>) -> Value {
    let mut entry = match &row.who {
        Who::Thread(t) => json!({
            "tid": t.tid,
            "pid": t.pid,
            "comm": t.comm,
            "cgroup": t.cgroup,
            "cgroup_id": t.cgroup_id,
            "exited": t.exited,
            "folded_threads": t.folded,
        }),
        Who::Group { group, .. } => json!({
            "label": group.label,
            "cgroup": group.path,
            "cgroup_id": group.id,
            "kind": group.owner.kind(),
            "container_id": match &group.owner {
                Owner::Container { id, .. } => Some(id.as_str()),
                _ => None,
            },
            "runtime": match &group.owner {
                Owner::Container { runtime, .. } => Some(*runtime),
                _ => None,
            },
            "pod_uid": group.owner.pod().map(|p| p.uid.as_str()),
            "qos": group.owner.pod().map(|p| p.qos.name()),
        }),
    };
    let values = json!({
        "on_cpu_ns": row.on_cpu_ns,
        "cpu_percent": row.cpu_percent,
        "switches": row.switches,
        "counters": counters_json(set, &row.counters),
        "run_percent": row.run_fraction * 100.0,
        "topdown": topdown(row, view),
    });
    if let (Some(entry), Value::Object(values)) = (entry.as_object_mut(), values) {
        entry.extend(values);
    }
    entry
}
