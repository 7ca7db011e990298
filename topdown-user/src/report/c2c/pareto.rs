//! perf c2c's "Shared Cache Line Distribution Pareto", as `perf c2c report --stdio` prints it
//! with its defaults (`-d tot`, coalesced by offset and code address): for every line of the
//! Shared Data Cache Line Table, its totals, then one row per (offset, code address) that has
//! HITMs or stores, with its shares of the line's HITMs and stores, where its data lived, mean
//! load latencies, CPU count, symbol, object, source line and the NUMA nodes of its CPUs.
//!
//! Column widths follow perf: Symbol, Object and Source:Line are as wide as their widest entry
//! in each line (Symbol at most 30), and the header is drawn once, with the first line's widths.

use std::fmt::Write as _;

use topdown_common::c2c::C2cStats;

use super::fill_line;
use crate::{
    c2c::{
        lines::Cycles,
        options::{C2cDisplay, Field, ReportOptions},
        pareto::{ParetoLine, ParetoRow, Widths, nodes_touched},
    },
    pmu::machine::cpu_list,
};

/// The Pareto section of `lines` (see [`crate::c2c::pareto::lines`]), title included; `cpu_nodes` are the
/// recording's NUMA nodes' CPUs.
pub fn render(lines: &[ParetoLine<'_>], cpu_nodes: &[Vec<u32>], options: ReportOptions) -> String {
    let display = options.display;
    let columns = columns(options);
    let mut out = String::from(
        "=================================================\n      Shared Cache Line Distribution \
         Pareto      \n=================================================\n#\n",
    );
    for (index, pareto) in lines.iter().enumerate() {
        let ParetoLine {
            line,
            stats,
            rows,
            widths,
        } = pareto;
        let (line, widths) = (*line, *widths);
        if index == 0 {
            out.push_str(&header(&columns, widths, options));
        } else {
            out.push('\n');
        }
        let dashes = format!("  {}\n", "-".repeat(70));
        let s = stats;
        let (remote, local) = if display == C2cDisplay::Peer {
            (s.rmt_peer, s.lcl_peer)
        } else {
            (s.rmt_hitm, s.lcl_hitm)
        };
        out.push_str(&dashes);
        let _ = writeln!(
            out,
            "  {index:>5}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>18}",
            remote,
            local,
            s.st_l1hit,
            s.st_l1miss,
            s.st_na,
            format!("{:#x}", line.address)
        );
        out.push_str(&dashes);
        for row in rows {
            out.push_str(&row_text(&columns, row, stats, widths, cpu_nodes, options));
        }
    }
    out
}

/// A header column: width, its two header lines, and how many following columns its first
/// line spans (perf draws a spanning text after the last column it spans, with no separators).
struct Head {
    width: usize,
    top: String,
    low: &'static str,
    span: usize,
}

fn head(width: usize, top: &str, low: &'static str, span: usize) -> Head {
    Head {
        width,
        top: top.to_owned(),
        low,
        span,
    }
}

/// The Pareto table's columns, as perf's `cl_output` lists them for these options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Column {
    Num,
    Remote,
    Local,
    StoreL1Hit,
    StoreL1Miss,
    StoreNa,
    Offset,
    OffsetNode,
    PaCount,
    Pid,
    Tid,
    CodeAddress,
    MeanRemote,
    MeanLocal,
    MeanLoad,
    Records,
    CpuCount,
    Symbol,
    Object,
    Source,
    Node,
}

fn columns(options: ReportOptions) -> Vec<Column> {
    use Column::*;
    let c = options.coalesce;
    let iaddr = c.has(Field::Iaddr);
    // The line's shares, where its data lived, then the coalesce fields.
    let mut out = vec![Num, Remote, Local, StoreL1Hit, StoreL1Miss, StoreNa];
    out.extend([Offset, OffsetNode, PaCount]);
    out.extend(c.has(Field::Pid).then_some(Pid));
    out.extend(c.has(Field::Tid).then_some(Tid));
    out.extend(iaddr.then_some(CodeAddress));
    out.extend([MeanRemote, MeanLocal, MeanLoad, Records, CpuCount]);
    out.extend(iaddr.then_some(Symbol));
    out.extend((iaddr || c.has(Field::Dso)).then_some(Object));
    out.extend((iaddr && !options.no_source).then_some(Source));
    out.push(Node);
    out
}

/// A column's header: width, its two lines, and its span.
fn head_of(column: Column, widths: Widths, options: ReportOptions) -> Head {
    let peer = options.display == C2cDisplay::Peer;
    match column {
        Column::Num => head(5, "", "Num", 0),
        Column::Remote if peer => head(7, "-- Peer Snoop --", "Rmt", 1),
        Column::Remote => head(7, "----- HITM -----", "RmtHitm", 1),
        Column::Local => head(7, "", if peer { "Lcl" } else { "LclHitm" }, 0),
        Column::StoreL1Hit => head(7, "------- Store Refs ------", "L1 Hit", 2),
        Column::StoreL1Miss => head(7, "", "L1 Miss", 0),
        Column::StoreNa => head(7, "", "N/A", 0),
        Column::Offset => {
            let top = fill_line("Data address", 18 + widths.offset_node + 6 + 4);
            head(18, &top, "Offset", 2)
        }
        Column::OffsetNode => head(widths.offset_node, "", "Node", 0),
        Column::PaCount => head(6, "", "PA cnt", 0),
        Column::Pid => head(7, "", "Pid", 0),
        Column::Tid => head(widths.thread, "", "Tid", 0),
        Column::CodeAddress => head(18, "", "Code address", 0),
        Column::MeanRemote => head(
            8,
            "---------- cycles ----------",
            if peer { "rmt peer" } else { "rmt hitm" },
            2,
        ),
        Column::MeanLocal => head(8, "", if peer { "lcl peer" } else { "lcl hitm" }, 0),
        Column::MeanLoad => head(8, "", "load", 0),
        Column::Records => head(7, "Total", "records", 0),
        Column::CpuCount => head(8, "cpu", "cnt", 0),
        Column::Symbol => head(widths.symbol, "", "Symbol", 0),
        Column::Object => head(widths.object, "Shared", "Object", 0),
        Column::Source => head(widths.srcline, "", "Source:Line", 0),
        Column::Node => head(
            4,
            "",
            match (options.node_info, peer) {
                (0, _) => "Node",
                (1, false) => "Node{cpus %hitms %stores}",
                (1, true) => "Node{cpus %peers %stores}",
                _ => "Node{cpu list}",
            },
            0,
        ),
    }
}

/// The three header lines and the closing `#`, with `widths`.
fn header(columns: &[Column], widths: Widths, options: ReportOptions) -> String {
    let heads: Vec<Head> = columns
        .iter()
        .map(|&c| head_of(c, widths, options))
        .collect();
    let mut out = String::new();
    for top in [true, false] {
        out.push_str("# ");
        let mut pending: Option<(usize, String)> = None;
        for (i, h) in heads.iter().enumerate() {
            if let Some((left, text)) = pending.take() {
                // Inside a span: nothing drawn, no separator; the text after its last column.
                if left > 1 {
                    pending = Some((left - 1, text));
                } else {
                    out.push_str(&text);
                }
                continue;
            }
            if i > 0 {
                out.push_str("  ");
            }
            let text = if top { h.top.as_str() } else { h.low };
            let cell = format!("{text:>width$}", width = h.width);
            if top && h.span > 0 {
                pending = Some((h.span, cell));
            } else {
                out.push_str(&cell);
            }
        }
        out.push('\n');
    }
    let dots: Vec<String> = heads.iter().map(|h| ".".repeat(h.width)).collect();
    let _ = writeln!(out, "# {}\n#", dots.join("  "));
    out
}

/// One row of a line, as perf's `%.2F%%`, hex and `%6.0f` columns print it.
fn row_text(
    columns: &[Column],
    row: &ParetoRow<'_>,
    line_stats: &C2cStats,
    widths: Widths,
    cpu_nodes: &[Vec<u32>],
    options: ReportOptions,
) -> String {
    let peer = options.display == C2cDisplay::Peer;
    let (s, total) = (&row.stats, line_stats);
    let percent = |value: u64, of: u64| {
        let share = if of == 0 {
            0.0
        } else {
            value as f64 * 100.0 / of as f64
        };
        format!("{:>7}", format!("{share:.2}%"))
    };
    let mean =
        |class: Cycles| format!("{:>8}", format!("{:>6.0}", row.mean_cycles[class as usize]));
    let first = row.entry.first;
    let cells: Vec<String> = columns
        .iter()
        .map(|column| match column {
            Column::Num => " ".repeat(5),
            Column::Remote if peer => percent(s.rmt_peer, total.rmt_peer),
            Column::Remote => percent(s.rmt_hitm, total.rmt_hitm),
            Column::Local if peer => percent(s.lcl_peer, total.lcl_peer),
            Column::Local => percent(s.lcl_hitm, total.lcl_hitm),
            Column::StoreL1Hit => percent(s.st_l1hit, total.st_l1hit),
            Column::StoreL1Miss => percent(s.st_l1miss, total.st_l1miss),
            Column::StoreNa => percent(s.st_na, total.st_na),
            Column::Offset => format!("{:>18}", format!("{:#x}", row.offset)),
            Column::OffsetNode => {
                format!("{:>w$}", row.entry.phys.node_list(), w = widths.offset_node)
            }
            Column::PaCount => format!("{:>6}", row.entry.phys.changes),
            Column::Pid => format!("{:>7}", first.pid),
            Column::Tid => format!(
                "{:>7}:{:<w$.w$}",
                first.tid,
                row.comm,
                w = widths.thread.saturating_sub(8)
            ),
            Column::CodeAddress => format!("{:>18}", format!("{:#x}", row.iaddr)),
            Column::MeanRemote => mean(if peer {
                Cycles::RmtPeer
            } else {
                Cycles::RmtHitm
            }),
            Column::MeanLocal => mean(if peer {
                Cycles::LclPeer
            } else {
                Cycles::LclHitm
            }),
            Column::MeanLoad => mean(Cycles::Load),
            Column::Records => format!("{:>7}", s.table_records()),
            Column::CpuCount => format!("{:>8}", row.entry.cpus.len()),
            Column::Symbol if row.code.resolved => {
                let name = row.code.symbol.get(4..).unwrap_or_default();
                let width = widths.symbol.saturating_sub(4);
                format!("{}{name:<width$.width$}", &row.code.symbol[..4])
            }
            Column::Symbol => row.code.symbol.clone(),
            Column::Object => format!("{:<w$.w$}", row.code.object, w = widths.object),
            Column::Source => format!("{:<w$.w$}", row.code.srcline, w = widths.srcline),
            Column::Node => node_cell(row, cpu_nodes, options),
        })
        .collect();
    format!("  {}\n", cells.join("  "))
}

/// perf's `node_entry`: for each NUMA node the entry's CPUs touch, its number (`-N` 0), with
/// its CPU count and shares of the ranked count and the stores (1; 21 blanks for a node not
/// touched), or with its CPU list (2).
fn node_cell(row: &ParetoRow<'_>, cpu_nodes: &[Vec<u32>], options: ReportOptions) -> String {
    let share = |part: u64, all: u64| part as f64 * 100.0 / all as f64;
    let mut out = String::new();
    let mut first = true;
    for (node, touched) in nodes_touched(row.entry, cpu_nodes) {
        if touched.is_empty() {
            if options.node_info == 1 {
                out.push_str(&" ".repeat(21));
            }
            continue;
        }
        if !first {
            out.push(' ');
        }
        first = false;
        let _ = write!(out, "{node:>2}");
        match options.node_info {
            0 => {}
            1 => {
                let here = row.node_stats.get(node).copied().unwrap_or_default();
                let _ = write!(out, "{{{:>2} ", touched.len());
                let (part, all) = (
                    options.display.metric(&here),
                    options.display.metric(&row.stats),
                );
                let _ = if all == 0 {
                    write!(out, "{:>6} ", "n/a")
                } else {
                    write!(out, "{:5.1}% ", share(part, all))
                };
                let _ = if row.stats.store == 0 {
                    write!(out, "{:>6}}}", "n/a")
                } else {
                    write!(out, "{:5.1}%}}", share(here.store, row.stats.store))
                };
            }
            _ => {
                let _ = write!(out, "{{{}}}", cpu_list(touched));
            }
        }
    }
    out
}
