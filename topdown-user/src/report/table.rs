//! Human-readable tables.

use std::fmt::Write as _;

use comfy_table::{CellAlignment, Table, presets::NOTHING};

use super::{Shown, count_cell};
use crate::tma::view::TopdownView;
use crate::{
    attrib::{Window, usage},
    model::rows::{Row, RowOptions, Who},
    pmu::counter_set::{CounterSet, Unit},
    tma::node::Node,
};

/// `counter set: software (no hardware PMU: software counters only)`.
pub fn set_line(set: &CounterSet) -> String {
    format!(
        "topdown-bpf: counter set `{}`: {} [{}]",
        set.name,
        set.reason,
        set.names().collect::<Vec<_>>().join(", ")
    )
}

/// A title line, the thread table, and the idle and loss lines.
pub fn block(
    window: &Window,
    rows: &[Row],
    total: usize,
    shown: &Shown<'_>,
    is_final: bool,
) -> String {
    let Shown {
        set,
        columns,
        options,
    } = *shown;
    let mut out = String::new();
    let end = (window.start + window.length).as_secs_f64();
    let noun = options.noun();
    if is_final {
        let _ = writeln!(
            out,
            "\n# totals over {:.3} s, {total} {noun}",
            window.length.as_secs_f64()
        );
    } else {
        let _ = writeln!(out, "# {end:>10.3} s  ({total} {noun})");
    }
    let mut table = Table::new();
    table.load_preset(NOTHING);
    let keys = Who::key_names(options.group_by());
    let mut header: Vec<String> = keys
        .iter()
        .map(|k| k.to_uppercase().replace('_', "-"))
        .chain(columns.iter().map(|c| c.header.to_owned()))
        .collect();
    let nodes = node_columns(rows, options);
    header.extend(nodes.iter().map(|(label, _, n)| {
        if label.is_empty() {
            format!("{}%", n.short())
        } else {
            format!("{label}.{}%", n.short())
        }
    }));
    if options.topdown.is_some() {
        header.push("BOTTLENECK".into());
    }
    let show_run = rows.iter().any(|r| r.run_fraction < 1.0);
    if show_run {
        header.push("RUN%".into());
    }
    let show_counters = options.topdown.is_none() || options.verbose;
    if show_counters {
        header.extend(set.further().iter().map(|c| match c.unit {
            Unit::Events => c.name.clone(),
            unit => format!("{} ({})", c.name, unit.label()),
        }));
    }
    table.set_header(header);
    for row in rows {
        let mut cells = row.who.key_values(true);
        cells.extend(columns.iter().map(|c| c.cell(row)));
        for (_, part, node) in &nodes {
            cells.push(node_cell(row, *part, node, options.verbose));
        }
        if let Some(view) = &options.topdown {
            cells.push(bottlenecks(row, view));
        }
        if show_run {
            cells.push(format!("{:.0}", row.run_fraction * 100.0));
        }
        if show_counters {
            for value in usage::further(&row.counters) {
                let fraction = value.running_fraction();
                let count = count_cell(value.scaled());
                cells.push(if fraction < 1.0 && !value.not_counted() {
                    format!("{count} ({:.0}%)", fraction * 100.0)
                } else {
                    count
                });
            }
        }
        table.add_row(cells);
    }
    for (i, column) in table.column_iter_mut().enumerate() {
        let text = keys
            .get(i)
            .is_some_and(|k| !matches!(*k, "tid" | "pid" | "cgroup_id"));
        if !text {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let _ = writeln!(out, "{table}");
    if total > rows.len() {
        let _ = writeln!(out, "  ... {} more {noun} (see --top)", total - rows.len());
    }
    let idle: Vec<String> = window
        .idle
        .iter()
        .enumerate()
        .map(|(cpu, v)| format!("cpu{cpu} {:.1} ms", v.raw as f64 / 1e6))
        .collect();
    if !idle.is_empty() {
        let _ = writeln!(out, "  idle: {}", idle.join(", "));
    }
    let _ = writeln!(out, "  {}", losses_line(window));
    if let Some(line) = not_counting_line(window, set) {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// `not counting on this PMU: ...` for the events of `set` the window's rows have as silent
/// (see `collect::calibration`); `None` when there are none.
pub fn not_counting_line(window: &Window, set: &CounterSet) -> Option<String> {
    let silent = window.silent();
    if silent.is_empty() {
        return None;
    }
    let names = set.names_of(&silent);
    Some(format!(
        "NOT COUNTING on this PMU: {} (read 0 while others counted; no TopDown node built on \
         them is shown)",
        names.join(", ")
    ))
}

/// The node columns as (part label, part index, node): every Level 1 node the rows have; Level 2
/// nodes only where some row is over the node's threshold, unless verbose.
pub(crate) fn node_columns(rows: &[Row], options: &RowOptions) -> Vec<(&'static str, usize, Node)> {
    let Some(view) = &options.topdown else {
        return Vec::new();
    };
    let mut columns = Vec::new();
    for (index, part) in view.parts.iter().enumerate() {
        for node in part.model.nodes(view.level) {
            let mut values = rows
                .iter()
                .filter_map(|r| r.topdown.get(index)?.as_ref())
                .flat_map(|td| td.nodes.iter().filter(|n| n.node.name == node.name))
                .peekable();
            if values.peek().is_some()
                && (node.level == 1 || options.verbose || values.any(|n| n.over_threshold))
            {
                columns.push((part.label, index, node));
            }
        }
    }
    columns
}

/// Each part's bottleneck (`P:Backend E:Frontend` on hybrid parts), `-` where there is none.
pub(crate) fn bottlenecks(row: &Row, view: &TopdownView) -> String {
    let names: Vec<String> = view
        .parts
        .iter()
        .zip(&row.topdown)
        .filter_map(|(part, td)| {
            let short = td.as_ref()?.bottleneck.and_then(Node::named)?.short();
            Some(if part.label.is_empty() {
                short.to_owned()
            } else {
                format!("{}:{short}", part.label)
            })
        })
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(" ")
    }
}

/// A node's value in percent; `<` marks the thread's bottleneck; Level 2 values under their
/// threshold are left blank unless verbose.
/// Below this share of its enabled time, a node's least measured input makes it marked `?`.
pub const LOW_RUN: f64 = 0.25;

pub(crate) fn node_cell(row: &Row, part: usize, node: &Node, verbose: bool) -> String {
    let Some(Some(td)) = row.topdown.get(part) else {
        return "-".into();
    };
    let Some(value) = td.nodes.iter().find(|n| n.node.name == node.name) else {
        return "-".into();
    };
    if node.level > 1 && !value.over_threshold && !verbose {
        return String::new();
    }
    let mark = if td.bottleneck == Some(node.name) {
        " <"
    } else {
        ""
    };
    // Outside [0, 1]: counts that contradict each other (multiplexing); JSON says which.
    // `?`: its inputs ran less than a quarter of the time (scaled from little). `~`: its
    // inputs were in counter groups multiplexed apart (not counted over the same moments).
    let flag = if td.out_of_range.iter().any(|o| o.node == node.name) {
        "!"
    } else if value.run_fraction < LOW_RUN {
        "?"
    } else if td.multiplexed_apart.contains(&node.name) {
        "~"
    } else {
        ""
    };
    format!("{:.1}{flag}{mark}", value.value * 100.0)
}

/// `losses: none` or the non-zero loss counters.
pub fn losses_line(window: &Window) -> String {
    let lost: Vec<String> = window
        .stats
        .losses()
        .filter(|(_, v)| *v > 0)
        .map(|(stat, v)| format!("{} {v}", stat.name()))
        .collect();
    if lost.is_empty() {
        "losses: none".to_owned()
    } else {
        format!("LOSSES: {}", lost.join(", "))
    }
}
