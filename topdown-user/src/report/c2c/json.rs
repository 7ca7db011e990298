//! `c2c report --json`: the numbers of perf's four tables in one JSON document
//! (`topdown-bpf/c2c/v2`), counters named as perf names them (`lcl_hitm`, `st_l1hit`, ...), and
//! each line's sharing label and gain estimate ([`crate::c2c::sharing`]). v2 over v1: addresses are
//! hex strings, symbols have no `[.] ` prefix (their kind in `symbol_kind`).

use serde_json::{Map, Value, json};
use topdown_common::c2c::C2cStats;

use crate::{
    c2c::{
        lines::{C2cData, Cycles},
        options::ReportOptions,
        pareto::{ParetoLine, ParetoRow, nodes_touched},
        sharing,
    },
    symbols::{code::Code, data_names::NameSource},
};

/// Every counter, by perf's name.
fn stats(s: &C2cStats) -> Value {
    Value::Object(
        s.named()
            .into_iter()
            .map(|(name, value)| (name.to_owned(), json!(value)))
            .collect::<Map<_, _>>(),
    )
}

/// The document of `data` and its Pareto `lines` (see [`crate::c2c::pareto::lines`]), whose
/// shares are of `total` (the ranking's), from a recording of `events` on NUMA nodes with
/// `cpu_nodes`.
pub fn render(
    data: &C2cData,
    lines: &[ParetoLine<'_>],
    total: u64,
    fixes: &[sharing::LineFix],
    events: &[String],
    cpu_nodes: &[Vec<u32>],
    options: ReportOptions,
) -> String {
    let display = options.display;
    let (shared_lines, shared) = data.shared();
    let lines: Vec<Value> = lines
        .iter()
        .enumerate()
        .map(|(index, pareto_line)| {
            let line = pareto_line.line;
            let entries: Vec<Value> = pareto_line
                .rows
                .iter()
                .map(|row| entry(row, cpu_nodes))
                .collect();
            let fix = fixes.get(index);
            let words: Vec<Value> = fix.map(words).unwrap_or_default();
            json!({
                "index": index,
                "address": format!("{:#x}", line.address),
                "sharing": fix.map(|f| f.sharing.sharing.name()),
                "sharing_loads": fix.map(|f| json!({"true": f.sharing.true_loads, "false": f.sharing.false_loads})),
                "contended_cycles": fix.map(|f| f.gain.contended_cycles),
                "contended_latency_share": fix.map(|f| f.gain.latency_share),
                "estimated_gain": fix.map(|f| f.gain.estimate),
                "words": words,
                "fix": fix.and_then(|f| f.fix.as_deref()),
                "data_nodes": line.phys.node_list(),
                "pa_count": line.phys.changes,
                "share_percent": if total == 0 {
                    0.0
                } else {
                    display.line_metric(&line.contended) as f64 * 100.0 / total as f64
                },
                "stats": stats(&pareto_line.stats),
                "entries": entries,
            })
        })
        .collect();
    json!({
        "schema": "topdown-bpf/c2c/v2",
        "events": events,
        "display": display.title(),
        "show_all": options.show_all,
        "totals": stats(&data.total),
        "shared": {"lines": shared_lines, "stats": stats(&shared)},
        "lines": lines,
    })
    .to_string()
        + "\n"
}

/// One code row of a line: where the code is, the mean cycles of each class, the NUMA nodes
/// of the CPUs that ran it (`cpu_nodes`), its stats.
fn entry(row: &ParetoRow<'_>, cpu_nodes: &[Vec<u32>]) -> Value {
    let e = row.entry;
    let mean = |class: Cycles| row.mean_cycles[class as usize];
    let nodes: Vec<Value> = nodes_touched(e, cpu_nodes)
        .into_iter()
        .filter(|(_, cpus)| !cpus.is_empty())
        .map(|(node, cpus)| json!({"node": node, "cpus": cpus}))
        .collect();
    let (symbol, kind) = clean_symbol(&row.code);
    json!({
        "offset": row.offset,
        "code_address": format!("{:#x}", row.iaddr),
        "symbol": symbol,
        "symbol_kind": kind,
        "object": row.code.object,
        "source_line": row.code.srcline,
        "data_nodes": e.phys.node_list(),
        "pa_count": e.phys.changes,
        "mean_cycles": {
            "rmt_hitm": mean(Cycles::RmtHitm),
            "lcl_hitm": mean(Cycles::LclHitm),
            "rmt_peer": mean(Cycles::RmtPeer),
            "lcl_peer": mean(Cycles::LclPeer),
            "load": mean(Cycles::Load),
        },
        "cpu_count": e.cpus.len(),
        "cpu_nodes": nodes,
        "stats": stats(&row.stats),
    })
}

/// The words of a line's fix: each word's variable, how it was named, who stored to it and
/// who loaded it contended.
fn words(fix: &sharing::LineFix) -> Vec<Value> {
    fix.words
        .iter()
        .map(|w| {
            let through = w.name.as_ref().and_then(|n| match &n.source {
                NameSource::OperandType { pointer, function } => {
                    Some(json!({"pointer": pointer, "function": function}))
                }
                _ => None,
            });
            json!({
                "offset": w.offset,
                "variable": w.name.as_ref().map(|n| n.name.as_str()),
                "named_by": w.name.as_ref().map(|n| n.source.key()),
                "accessed_through": through,
                "stored_by": w.stored_by,
                "contended_loads_by": w.loaded_by,
            })
        })
        .collect()
}

/// A symbol without perf's level prefix (`[.] `, `[k] `), and its kind: `user` or `kernel`;
/// `null` for an address no symbol holds (its code address says where it is).
fn clean_symbol(code: &Code) -> (Option<&str>, &'static str) {
    let (kind, name) = match code.symbol.split_at_checked(4) {
        Some(("[k] ", name)) => ("kernel", name),
        Some(("[.] ", name)) => ("user", name),
        _ => ("user", code.symbol.as_str()),
    };
    (code.resolved.then_some(name), kind)
}
