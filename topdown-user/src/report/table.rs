//! Human-readable tables.

use std::fmt::Write as _;

use comfy_table::{CellAlignment, Table, presets::NOTHING};

use super::rows::Row;
use crate::{
    attrib::Window,
    pmu::counter_set::{CounterSet, Unit},
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
    set: &CounterSet,
    is_final: bool,
) -> String {
    let mut out = String::new();
    let end = (window.start + window.length).as_secs_f64();
    if is_final {
        let _ = writeln!(
            out,
            "\n# totals over {:.3} s, {total} threads",
            window.length.as_secs_f64()
        );
    } else {
        let _ = writeln!(out, "# {end:>10.3} s  ({total} threads)");
    }
    let mut table = Table::new();
    table.load_preset(NOTHING);
    let mut header = vec![
        "TID",
        "PID",
        "COMM",
        "CGROUP",
        "ON-CPU ms",
        "%CPU",
        "SWITCHES",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    header.extend(set.counters.iter().skip(1).map(|c| match c.unit {
        Unit::Events => c.name.clone(),
        unit => format!("{} ({})", c.name, unit.label()),
    }));
    table.set_header(header);
    for row in rows {
        let mut cells = vec![
            row.tid.to_string(),
            row.pid.to_string(),
            if row.exited {
                format!("{} (exited)", row.comm)
            } else {
                row.comm.clone()
            },
            row.cgroup.clone(),
            format!("{:.3}", row.on_cpu_ns as f64 / 1e6),
            format!("{:.1}", row.cpu_percent),
            row.switches.to_string(),
        ];
        for value in row.counters.iter().skip(1) {
            let fraction = value.running_fraction();
            cells.push(if fraction < 1.0 {
                format!("{:.0} ({:.0}%)", value.scaled(), fraction * 100.0)
            } else {
                format!("{:.0}", value.scaled())
            });
        }
        table.add_row(cells);
    }
    for (i, column) in table.column_iter_mut().enumerate() {
        if i != 2 && i != 3 {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    let _ = writeln!(out, "{table}");
    if total > rows.len() {
        let _ = writeln!(out, "  ... {} more threads (see --top)", total - rows.len());
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
    out
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
