//! perf c2c's "Shared Data Cache Line Table", line for line as `perf c2c report --stdio` prints
//! it in its default display (lines sorted by total HITMs, lines under 0.1 % of them hidden).

use std::fmt::Write as _;

use super::lines::{C2cData, Line};

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

/// The lines the table shows, in its order (its indexes): those with a share of all HITMs of at
/// least 0.1 %, most HITMs first.
pub fn displayed(data: &C2cData) -> Vec<&Line> {
    let total_hitm = total_hitm(data);
    let mut lines: Vec<_> = data
        .lines
        .values()
        .filter(|l| total_hitm > 0 && l.stats.tot_hitm as f64 * 100.0 / total_hitm as f64 >= 0.1)
        .collect();
    lines.sort_by(|a, b| {
        b.stats
            .tot_hitm
            .cmp(&a.stats.tot_hitm)
            .then(a.address.cmp(&b.address))
    });
    lines
}

fn total_hitm(data: &C2cData) -> u64 {
    data.lines.values().map(|l| l.stats.tot_hitm).sum()
}

/// The table, for the lines with a share of all HITMs of at least 0.1 %.
pub fn render(data: &C2cData) -> String {
    let total_hitm = total_hitm(data);
    let lines = displayed(data);
    let mut out = String::from(HEADER);
    for (index, line) in lines.iter().enumerate() {
        let s = &line.stats;
        let (loads, stores) = (s.table_loads(), s.table_stores());
        let node = line.phys.node_list();
        let hitm = format!("{:.2}%", s.tot_hitm as f64 * 100.0 / total_hitm as f64);
        let _ = writeln!(
            out,
            "{index:>7}  {:>18}  {node:>4}  {:>6}  {hitm:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {loads:>7}  \
             {stores:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>8}  {:>7}  {:>8}  {:>7}  {:>8}  \
             {:>8}",
            format!("{:#x}", line.address),
            line.phys.changes,
            s.tot_hitm,
            s.lcl_hitm,
            s.rmt_hitm,
            loads + stores,
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
    }
    out.push('\n');
    out
}
