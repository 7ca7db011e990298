//! What the c2c browser shows (`c2c report` on a terminal, and live `c2c`): the Shared Data Cache
//! Line Table's lines in its order, each with its Pareto entries, every share computed here so
//! the view only lays them out.

use super::{
    options::{C2cDisplay, ReportOptions},
    pareto::ParetoLine,
};

/// One cache line of the browser.
#[derive(Clone, Debug, PartialEq)]
pub struct LineView {
    /// Its index in the table (perf's `Index`).
    pub index: usize,
    /// The line's virtual address.
    pub address: u64,
    /// NUMA nodes its data lived on.
    pub node: String,
    /// Its share of the ranked count over all lines (`Tot Hitm` %, or peers), in percent.
    pub share: f64,
    /// HITMs (or peer snoops): all, local, remote.
    pub contended: [u64; 3],
    /// Records, loads and stores.
    pub records: u64,
    /// Loads the table counts.
    pub loads: u64,
    /// Stores.
    pub stores: u64,
    /// The symbol of its entry with the most of the ranked count (`-` without one).
    pub hottest: String,
    /// Its Pareto entries, in perf's order.
    pub entries: Vec<EntryView>,
}

/// One Pareto entry: who touched which offset of the line, from where.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryView {
    /// Offset in the line.
    pub offset: u64,
    /// Its share of the line's remote and local HITMs (or peers), in percent.
    pub remote: f64,
    /// See `remote`.
    pub local: f64,
    /// Its share of the line's stores, in percent.
    pub stores: f64,
    /// Process and thread of its first sample, with the thread's name.
    pub pid: u32,
    /// See `pid`.
    pub tid: u32,
    /// See `pid`.
    pub comm: String,
    /// Code address.
    pub code: u64,
    /// Symbol (perf's `[.] name`), object and source line.
    pub symbol: String,
    /// See `symbol`.
    pub object: String,
    /// See `symbol`.
    pub source: String,
    /// Its records.
    pub records: u64,
}

/// The browser's lines: every line of `lines` (the table's, from [`super::pareto::lines`]),
/// with shares of `total` (the ranking's).
pub fn lines(lines: &[ParetoLine<'_>], total: u64, options: ReportOptions) -> Vec<LineView> {
    let display = options.display;
    let contended = |s: &topdown_common::c2c::C2cStats| {
        if display == C2cDisplay::Peer {
            [s.tot_peer, s.lcl_peer, s.rmt_peer]
        } else {
            [s.tot_hitm, s.lcl_hitm, s.rmt_hitm]
        }
    };
    let percent = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 * 100.0 / whole as f64
        }
    };
    lines
        .iter()
        .enumerate()
        .map(|(index, pareto)| {
            let s = &pareto.stats;
            let [all, local, remote] = contended(s);
            let hottest = pareto
                .rows
                .iter()
                .min_by(|a, b| display.rank(&a.stats, &b.stats))
                .map_or_else(|| "-".to_owned(), |row| row.code.symbol.clone());
            LineView {
                index,
                address: pareto.line.address,
                node: pareto.line.phys.node_list(),
                share: percent(display.metric(s), total),
                contended: [all, local, remote],
                records: s.table_records(),
                loads: s.table_loads(),
                stores: s.store,
                hottest,
                entries: pareto
                    .rows
                    .iter()
                    .map(|row| {
                        let [_, entry_local, entry_remote] = contended(&row.stats);
                        EntryView {
                            offset: row.offset,
                            remote: percent(entry_remote, remote),
                            local: percent(entry_local, local),
                            stores: percent(row.stats.store, s.store),
                            pid: row.entry.first.pid,
                            tid: row.entry.first.tid,
                            comm: row.comm.clone(),
                            code: row.iaddr,
                            symbol: row.code.symbol.clone(),
                            object: row.code.object.clone(),
                            source: row.code.srcline.clone(),
                            records: row.stats.table_records(),
                        }
                    })
                    .collect(),
            }
        })
        .collect()
}
