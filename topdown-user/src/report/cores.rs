//! Per-core reports (`--per-core`): a table or one JSON document per interval.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::aligned::Aligned;
use crate::{
    attrib::cores::CoreUsage,
    model::{
        columns::{Column, Number},
        cores::{CoreRow, node_columns},
    },
    pmu::counter_set::CounterSet,
    tma::{node::Node, view::TopdownView},
};

/// A title line and one row per core: its CPUs, TopDown nodes and bottleneck (with a TopDown
/// set), the value columns its counters make (`columns`: IPC, MPKI), and its counters.
pub fn block(
    rows: &[CoreRow],
    (set, columns): (&CounterSet, &[Column]),
    view: Option<&TopdownView>,
    title: &str,
) -> String {
    let mut header = vec!["CORE".to_owned(), "CPUS".to_owned()];
    let nodes = node_columns(view);
    header.extend(nodes.iter().map(|n| format!("{}%", n.short())));
    if view.is_some() {
        header.push("BOTTLENECK".into());
    }
    header.extend(columns.iter().map(|c| c.header.to_owned()));
    header.extend(set.names().map(str::to_owned));
    let mut table = Aligned::new(header);
    for row in rows {
        let mut cells = vec![row.core.clone(), row.cpus.clone()];
        if view.is_some() {
            let td = row.topdown.as_ref();
            for node in &nodes {
                let value = td.and_then(|td| td.value(node.name));
                cells.push(value.map_or_else(|| "-".into(), |v| format!("{:.1}", v * 100.0)));
            }
            let bottleneck = td.and_then(|td| td.bottleneck).and_then(Node::named);
            cells.push(bottleneck.map_or("-", |n| n.short()).to_owned());
        }
        cells.extend(columns.iter().zip(&row.values).map(|(c, v)| c.show(*v)));
        cells.extend(row.counters.iter().map(|c| super::count_cell(*c)));
        table.add_row(cells);
    }
    for i in 2..table.columns() {
        table.align_right(i);
    }
    let mut out = String::new();
    let _ = writeln!(out, "{title}\n{table}");
    out
}

/// One JSON document (`topdown-bpf/cores/v1`) of `cores` and their `rows` (same order): each
/// core's value `columns` by key (null where not measured), counters, TopDown.
pub fn document(
    cores: &[CoreUsage],
    rows: &[CoreRow],
    (set, columns): (&CounterSet, &[Column]),
    (start_s, length_s): (f64, f64),
    is_final: bool,
) -> String {
    let order = super::json::name_order(set);
    let rows_json: Vec<Value> = cores
        .iter()
        .zip(rows)
        .map(|(core, row)| {
            let counters = super::json::CountersDoc::new(set, &core.counters, &order);
            let td = row.topdown.as_ref();
            let mut doc = json!({
                "core": core.core.to_string(),
                "cpus": core.cpus,
                "counters": counters,
                "topdown": td.map(super::topdown::values_json),
                "bottleneck": td.and_then(|td| td.bottleneck),
            });
            for (column, value) in columns.iter().zip(&row.values) {
                doc[column.key] = match value {
                    Some(Number::Int(n)) => json!(n),
                    Some(Number::Float(x)) => json!(x),
                    None => Value::Null,
                };
            }
            doc
        })
        .collect();
    // Events this PMU does not count: null in every row (see `collect::calibration`).
    let not_counting: Vec<&str> = set
        .counters
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            cores
                .iter()
                .any(|core| core.counters.get(*i).is_some_and(|v| v.silent))
        })
        .map(|(_, counter)| counter.name.as_str())
        .collect();
    json!({
        "schema": "topdown-bpf/cores/v1",
        "final": is_final,
        "counter_set": {
            "name": set.name,
            "reason": set.reason,
            "counters": set.names().collect::<Vec<_>>(),
            "not_counting": not_counting,
        },
        "interval": {"start_s": start_s, "length_s": length_s},
        "cores": rows_json,
    })
    .to_string()
        + "\n"
}
