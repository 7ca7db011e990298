//! The per-cgroup (or per-container) split of the shared lines (`c2c report --per-cgroup`,
//! `--per-container`) and its summary, as text, from `crate::c2c::groups`.

use std::fmt::Write as _;

use topdown_common::c2c::C2cStats;

use crate::{attrib::groups::GroupBy, c2c::groups::Grouped};

/// `Tot Hitm, LclHitm, RmtHitm, Stores, records` of some samples.
fn columns(s: &C2cStats) -> [u64; 5] {
    [
        s.tot_hitm,
        s.lcl_hitm,
        s.rmt_hitm,
        s.table_stores(),
        s.nr_entries,
    ]
}

/// Both tables, as text.
pub fn render(grouped: &Grouped) -> String {
    let who = match grouped.by {
        GroupBy::Cgroup => "cgroup",
        GroupBy::Container => "container",
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "=================================================\n\
         \x20    Shared Data Cache Lines by {who}\n\
         =================================================\n\
         #\n\
         # {:>5}  {:>18}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {}",
        "Index", "Address", "TotHitm", "LclHitm", "RmtHitm", "Stores", "records", who
    );
    for line in &grouped.lines {
        let index = line.index;
        for (name, stats) in &line.groups {
            let [tot, lcl, rmt, stores, records] = columns(stats);
            let _ = writeln!(
                out,
                "  {index:>5}  {:>18}  {tot:>7}  {lcl:>7}  {rmt:>7}  {stores:>7}  {records:>7}  {name}",
                format!("{:#x}", line.address)
            );
        }
    }
    let _ = writeln!(
        out,
        "\n=================================================\n\
         \x20      Shared cache lines per {who}\n\
         =================================================\n\
         #\n\
         # {:>5}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {}",
        "Lines", "TotHitm", "LclHitm", "RmtHitm", "Stores", "records", who
    );
    for group in &grouped.summary {
        let [tot, lcl, rmt, stores, records] = columns(&group.stats);
        let (lines, name) = (group.lines, &group.name);
        let _ = writeln!(
            out,
            "  {lines:>5}  {tot:>7}  {lcl:>7}  {rmt:>7}  {stores:>7}  {records:>7}  {name}"
        );
    }
    out
}
