//! One JSON document per window (schema in the README, `topdown-bpf/threads/v1`).

use anyhow::Result;
use serde_json::{Map, Value, json};
use topdown_common::stats::Stat;

use super::rows::{Row, TopdownView};
use crate::{
    attrib::{Window, usage::CounterValue},
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

/// The document for one window.
pub fn document(
    window: &Window,
    rows: &[Row],
    set: &CounterSet,
    view: Option<&TopdownView>,
    is_final: bool,
) -> Result<String> {
    let threads: Vec<Value> = rows
        .iter()
        .map(|row| {
            let counters = counters_json(set, &row.counters);
            json!({
                "tid": row.tid,
                "pid": row.pid,
                "comm": row.comm,
                "cgroup": row.cgroup,
                "cgroup_id": row.cgroup_id,
                "on_cpu_ns": row.on_cpu_ns,
                "cpu_percent": row.cpu_percent,
                "switches": row.switches,
                "exited": row.exited,
                "counters": counters,
                "run_percent": row.run_fraction * 100.0,
                "topdown": topdown(row, view),
            })
        })
        .collect();
    let stats: Map<String, Value> = Stat::ALL
        .into_iter()
        .map(|stat| (stat.name().replace(' ', "_"), json!(window.stats.get(stat))))
        .collect();
    let doc = json!({
        "schema": "topdown-bpf/threads/v1",
        "final": is_final,
        "counter_set": { "name": set.name, "reason": set.reason,
                         "counters": set.names().collect::<Vec<_>>() },
        "interval": { "start_s": window.start.as_secs_f64(),
                      "length_s": window.length.as_secs_f64() },
        "threads": threads,
        "idle_ns": window.idle.iter().map(|v| v.raw).collect::<Vec<_>>(),
        "kernel_stats": stats,
        "lost_anything": window.stats.lost_anything(),
    });
    Ok(serde_json::to_string(&doc)?)
}
