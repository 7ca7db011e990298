//! The rows of perf c2c's "Shared Cache Line Distribution Pareto" (`perf c2c report --stdio`
//! with its defaults (`-d tot`, coalesced by offset and code address): for every line of the
//! Shared Data Cache Line Table, its totals, then one row per (offset, code address) that has
//! HITMs or stores, with its shares of the line's HITMs and stores, where its data lived, mean
//! load latencies, CPU count, symbol, object, source line and the NUMA nodes of its CPUs.
//!
//! Column widths follow perf: Symbol, Object and Source:Line are as wide as their widest entry
//! in each line (Symbol at most 30), and the header is drawn once, with the first line's widths.

use topdown_common::c2c::C2cStats;

use super::{
    lines::{C2cData, CacheLine, Cycles, Entry},
    options::{Field, ReportOptions},
    rank::Ranking,
};
use crate::{
    perf_file::contents::PerfData,
    symbols::code::{Code, CodeNames},
};

/// perf's `SYMBOL_WIDTH`: symbols are cut there unless `--full-symbols`.
const SYMBOL_WIDTH: usize = 30;
/// Width of an unresolved address: `BITS_PER_LONG / 4` digits, `0x`, and the `[.] ` level.
const UNRESOLVED_SYMBOL_WIDTH: usize = 16 + 4 + 2;

/// Column widths that depend on the content: perf sizes them over every entry of a line, the
/// rows not shown included, so they are taken here, where the entries are named.
#[derive(Clone, Copy, Debug)]
pub struct Widths {
    /// The data's NUMA node list (at least 4, over all lines shown).
    pub offset_node: usize,
    /// `tid:comm`.
    pub thread: usize,
    /// The symbol (cut at 30 unless `--full-symbols`).
    pub symbol: usize,
    /// The object.
    pub object: usize,
    /// The source line.
    pub srcline: usize,
}

/// One row: its entry and the names of its code.
pub struct ParetoRow<'a> {
    /// Offset of its data in the line.
    pub offset: u64,
    /// Its code address.
    pub iaddr: u64,
    /// Its samples.
    pub entry: &'a Entry,
    /// Their classification.
    pub stats: C2cStats,
    /// Their classification per NUMA node of the sampling CPU (the recording's node order).
    pub node_stats: Vec<C2cStats>,
    /// The names of its code.
    pub code: Code,
    /// Mean latency of its loads per [`Cycles`] class, indexed by it (0 without any).
    pub mean_cycles: [f64; 5],
    /// Its first sample's thread name.
    pub comm: String,
}

/// One line of the table and its rows.
pub struct ParetoLine<'a> {
    /// The line.
    pub line: &'a CacheLine,
    /// Its samples' classification.
    pub stats: C2cStats,
    /// Its rows, in perf's order.
    pub rows: Vec<ParetoRow<'a>>,
    /// Its columns' widths.
    pub widths: Widths,
}

/// The ranked lines (same order, same indexes), each with the rows perf shows for it, their code
/// named.
pub fn lines<'a>(
    data: &'a C2cData,
    ranking: &Ranking<'a>,
    recording: &PerfData,
    options: ReportOptions,
) -> Vec<ParetoLine<'a>> {
    lines_top(data, ranking, recording, options, usize::MAX)
}

/// The first `top` of [`lines`] (the live browser's hottest lines: only their code is
/// symbolized).
pub fn lines_top<'a>(
    data: &'a C2cData,
    ranking: &Ranking<'a>,
    recording: &PerfData,
    options: ReportOptions,
    top: usize,
) -> Vec<ParetoLine<'a>> {
    let mut names = CodeNames::new(recording);
    let lines = &ranking.lines[..ranking.lines.len().min(top)];
    let offset_node = lines
        .iter()
        .flat_map(|l| data.entries_of(l))
        .map(|(_, e)| e.phys.node_list().len())
        .fold(4, usize::max);
    lines
        .iter()
        .map(|&line| {
            let nodes = recording.numa_cpus.len();
            let (rows, widths) = rows(data, line, &mut names, offset_node, nodes, options);
            ParetoLine {
                line,
                stats: data.line_stats(line),
                rows,
                widths,
            }
        })
        .collect()
}

/// The rows perf shows for `line` (entries with stores or the display's count; by offset, then
/// the display's ranking, then code address), and the line's column widths (computed over all
/// its entries).
fn rows<'a>(
    data: &'a C2cData,
    line: &'a CacheLine,
    names: &mut CodeNames<'_>,
    offset_node: usize,
    nodes: usize,
    options: ReportOptions,
) -> (Vec<ParetoRow<'a>>, Widths) {
    let display = options.display;
    let mut widths = Widths {
        offset_node,
        thread: 0,
        symbol: 0,
        object: 0,
        srcline: "Source:Line".len(),
    };
    let mut rows = Vec::new();
    for (key, entry) in data.entries_of(line) {
        let first = entry.first;
        let code = names.code(first.pid, first.ip, first.kernel);
        let comm = names.comm(first.tid);
        widths.thread = widths.thread.max(comm.len() + 8);
        let symbol_width = if code.resolved {
            code.symbol.len()
        } else {
            UNRESOLVED_SYMBOL_WIDTH
        };
        widths.symbol = widths.symbol.max(symbol_width);
        widths.object = widths.object.max(if code.object == "[unknown]" {
            16
        } else {
            code.object.len()
        });
        widths.srcline = widths.srcline.max(code.srcline.len());
        let stats = data.entry_stats(entry, None);
        if stats.store > 0 || display.metric(&stats) > 0 {
            rows.push(ParetoRow {
                offset: key.offset,
                iaddr: first.ip,
                entry,
                stats,
                node_stats: (0..nodes)
                    .map(|node| data.entry_stats(entry, Some(node as u32)))
                    .collect(),
                code,
                comm,
                mean_cycles: [
                    Cycles::RmtHitm,
                    Cycles::LclHitm,
                    Cycles::RmtPeer,
                    Cycles::LclPeer,
                    Cycles::Load,
                ]
                .map(|class| data.mean_cycles(entry, class)),
            });
        }
    }
    if !options.full_symbols {
        widths.symbol = widths.symbol.min(SYMBOL_WIDTH);
    }
    // Ties keep perf's collapse order: by each coalesce field in turn, in the direction of
    // its comparison in perf (pid descending; thread, code address and object ascending).
    rows.sort_by(|a, b| {
        let (fa, fb) = (a.entry.first, b.entry.first);
        let by_field = |field: Field| match field {
            Field::Pid => fb.pid.cmp(&fa.pid),
            Field::Tid => fa.tid.cmp(&fb.tid),
            Field::Iaddr => a.iaddr.cmp(&b.iaddr),
            Field::Dso => a.code.object.cmp(&b.code.object),
        };
        options.coalesce.fields().fold(
            a.offset
                .cmp(&b.offset)
                .then(display.rank(&a.stats, &b.stats)),
            |order, field| order.then_with(|| by_field(field)),
        )
    });
    (rows, widths)
}

/// The NUMA nodes (the recording's node order) whose CPUs sampled `entry`, and those CPUs.
pub fn nodes_touched(entry: &Entry, cpu_nodes: &[Vec<u32>]) -> Vec<(usize, Vec<u64>)> {
    cpu_nodes
        .iter()
        .enumerate()
        .map(|(node, cpus)| {
            let touched = cpus
                .iter()
                .filter(|&&c| entry.cpus.contains(c))
                .map(|&c| u64::from(c))
                .collect();
            (node, touched)
        })
        .collect()
}
