//! perf c2c's "Shared Data Cache Line Table", line for line as `perf c2c report --stdio` prints
//! it: lines ranked by the display's count (`-d`, total HITMs by default), those under 0.1 % of
//! it hidden unless `--show-all`.

use std::fmt::Write as _;

use super::fill_line;
use crate::c2c::{
    lines::C2cData,
    options::{C2cDisplay, ReportOptions},
    rank::Ranking,
    sharing::LineFix,
};

const HEADER: &str = "\
=================================================
           Shared Data Cache Line Table          
=================================================
#
#        ----------- Cacheline ----------      Tot  ------- Load Hitm -------    Total    Total    Total  --------- Stores --------  ----- Core Load Hit -----  - LLC Load Hit --  - RMT Load Hit --  --- Load Dram ----
# Index             Address  Node  PA cnt     Hitm    Total  LclHitm  RmtHitm  records    Loads   Stores    L1Hit   L1Miss      N/A       FB       L1       L2    LclHit  LclHitm    RmtHit  RmtHitm       Lcl       Rmt
# .....  ..................  ....  ......  .......  .......  .......  .......  .......  .......  .......  .......  .......  .......  .......  .......  .......  ........  .......  ........  .......  ........  ........
#
";

/// The header for `display`: its ranked column, and the HITM or peer columns.
fn header(options: ReportOptions) -> String {
    let display = options.display;
    let line = if options.double_cl {
        "Double-Cacheline"
    } else {
        "Cacheline"
    };
    let (rank, group) = match display {
        C2cDisplay::Tot => ("      Tot", "Hitm"),
        C2cDisplay::Lcl => ("      Lcl", "Hitm"),
        C2cDisplay::Rmt => ("      Rmt", "Hitm"),
        C2cDisplay::Peer => ("     Peer", "Peer"),
    };
    let low = if display == C2cDisplay::Peer {
        "    Snoop    Total    Local   Remote"
    } else {
        "     Hitm    Total  LclHitm  RmtHitm"
    };
    let header = HEADER
        .replace(
            "      Tot  ------- Load Hitm -------",
            &format!("{rank}  ------- Load {group} -------"),
        )
        .replace("     Hitm    Total  LclHitm  RmtHitm", low)
        .replace(
            "----------- Cacheline ----------",
            &fill_line(line, 18 + 4 + 6 + 4),
        );
    if !options.sharing {
        return header;
    }
    // perf's layout, and two columns after its last.
    header
        .lines()
        .map(|l| {
            let extra = if l.starts_with("#        -") {
                "  ---- Sharing ----"
            } else if l.starts_with("# Index") {
                "     Kind     Gain"
            } else if l.starts_with("# .....") {
                "  .......  ......."
            } else {
                ""
            };
            format!("{l}{extra}\n")
        })
        .collect()
}

/// The table of the ranked lines; with `--sharing`, each line's label and gain from `fixes`
/// (one per shown line, in the table's order).
pub fn render(
    data: &C2cData,
    ranking: &Ranking<'_>,
    options: ReportOptions,
    fixes: &[LineFix],
) -> String {
    let display = options.display;
    // Shares are of all samples' count (perf's `percent_costly_snoop`).
    let (lines, total) = (&ranking.lines, ranking.total);
    let mut out = header(options);
    for (index, line) in lines.iter().enumerate() {
        let stats = data.line_stats(line);
        let s = &stats;
        let loads = s.table_loads();
        let node = line.phys.node_list();
        let share = if total == 0 {
            0.0
        } else {
            display.metric(s) as f64 * 100.0 / total as f64
        };
        let hitm = format!("{share:.2}%");
        let (all, local, remote) = if display == C2cDisplay::Peer {
            (s.tot_peer, s.lcl_peer, s.rmt_peer)
        } else {
            (s.tot_hitm, s.lcl_hitm, s.rmt_hitm)
        };
        let _ = writeln!(
            out,
            "{index:>7}  {:>18}  {node:>4}  {:>6}  {hitm:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {loads:>7}  \
             {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>8}  {:>7}  {:>8}  {:>7}  {:>8}  \
             {:>8}",
            format!("{:#x}", line.address),
            line.phys.changes,
            all,
            local,
            remote,
            s.table_records(),
            s.store,
            s.st_l1hit,
            s.st_l1miss,
            s.st_na,
            s.ld_fbhit,
            s.ld_l1hit,
            s.ld_l2hit,
            s.ld_llchit,
            s.lcl_hitm,
            s.rmt_hit,
            s.rmt_hitm,
            s.lcl_dram,
            s.rmt_dram,
        );
        if let Some(fix) = fixes.get(index).filter(|_| options.sharing) {
            out.pop();
            let kind = fix.sharing.sharing.name();
            let gain = fix.gain.estimate * 100.0;
            let _ = writeln!(out, "  {kind:>7}  {:>7}", format!("{gain:.2}%"));
        }
    }
    out.push('\n');
    out
}
