//! Who touches each shared cache line: the lines of the Shared Data Cache Line Table (same
//! indexes), split by the cgroup or container of the sampled tasks, and a summary per cgroup or
//! container. Needs a recording with cgroups (`perf c2c record -- --all-cgroups`).

use std::{collections::BTreeMap, fmt::Write as _};

use anyhow::{Result, bail};
use topdown_common::c2c::C2cStats;

use std::collections::HashMap;

use super::{display::ReportOptions, line_table, lines::C2cData};
use crate::attrib::{containers::Owner, groups::GroupBy};

/// The name a cgroup id gets: its path, or the container, pod, service or user slice the path
/// belongs to.
fn group_name(cgroups: &HashMap<u64, String>, id: u64, by: GroupBy) -> String {
    let Some(path) = cgroups.get(&id) else {
        return format!("cgroup:{id}");
    };
    match by {
        GroupBy::Cgroup => path.clone(),
        GroupBy::Container => Owner::of(path).key().unwrap_or_else(|| path.clone()),
    }
}

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

/// Both tables, as text; `cgroups` are the recording's cgroup paths by id.
pub fn render(
    data: &C2cData,
    cgroups: &HashMap<u64, String>,
    by: GroupBy,
    options: ReportOptions,
) -> Result<String> {
    if cgroups.is_empty() {
        bail!(
            "this recording has no cgroups: record with `perf c2c record -- --all-cgroups ...` \
             to split cache lines by cgroup or container"
        );
    }
    let who = match by {
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
    let mut summary: BTreeMap<String, (u64, C2cStats)> = BTreeMap::new();
    for (index, line) in line_table::displayed(data, options).iter().enumerate() {
        let mut groups: BTreeMap<String, C2cStats> = BTreeMap::new();
        for (id, stats) in &line.by_cgroup {
            groups
                .entry(group_name(cgroups, *id, by))
                .or_default()
                .add(stats);
        }
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_by(|a, b| b.1.tot_hitm.cmp(&a.1.tot_hitm).then(a.0.cmp(&b.0)));
        for (name, stats) in groups {
            let [tot, lcl, rmt, stores, records] = columns(&stats);
            let _ = writeln!(
                out,
                "  {index:>5}  {:>18}  {tot:>7}  {lcl:>7}  {rmt:>7}  {stores:>7}  {records:>7}  {name}",
                format!("{:#x}", line.address)
            );
            let entry = summary.entry(name).or_default();
            entry.0 += 1;
            entry.1.add(&stats);
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
    let mut summary: Vec<_> = summary.into_iter().collect();
    summary.sort_by(|a, b| b.1.1.tot_hitm.cmp(&a.1.1.tot_hitm).then(a.0.cmp(&b.0)));
    for (name, (lines, stats)) in summary {
        let [tot, lcl, rmt, stores, records] = columns(&stats);
        let _ = writeln!(
            out,
            "  {lines:>5}  {tot:>7}  {lcl:>7}  {rmt:>7}  {stores:>7}  {records:>7}  {name}"
        );
    }
    Ok(out)
}
