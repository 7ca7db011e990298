//! Who touches each shared cache line: the ranked lines split by the cgroup or container of the
//! sampled tasks, and a summary per cgroup or container. Needs a recording with cgroups
//! (`perf c2c record -- --all-cgroups`).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Result, bail};
use topdown_common::c2c::C2cStats;

use super::lines::CacheLine;
use crate::attrib::{containers::Owner, groups::GroupBy};

/// One ranked line, split by group.
pub struct GroupedLine {
    /// Its index in the ranking (the Shared Data Cache Line Table's).
    pub index: usize,
    /// Its address.
    pub address: u64,
    /// Each group's samples of it, most total HITMs first (then by name).
    pub groups: Vec<(String, C2cStats)>,
}

/// One group over all ranked lines.
pub struct GroupSummary {
    /// The group's name.
    pub name: String,
    /// How many ranked lines it touches.
    pub lines: u64,
    /// Its samples of them.
    pub stats: C2cStats,
}

/// The ranked lines by group, and each group's summary (most total HITMs first).
pub struct Grouped {
    /// Cgroups or containers.
    pub by: GroupBy,
    /// The lines.
    pub lines: Vec<GroupedLine>,
    /// The groups.
    pub summary: Vec<GroupSummary>,
}

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

/// `lines` (ranked) split `by` cgroup or container; `cgroups` are the recording's cgroup paths
/// by id. One line of error for a recording without cgroups.
pub fn group(lines: &[&CacheLine], cgroups: &HashMap<u64, String>, by: GroupBy) -> Result<Grouped> {
    if cgroups.is_empty() {
        bail!(
            "this recording has no cgroups: record with `perf c2c record -- --all-cgroups ...` \
             to split cache lines by cgroup or container"
        );
    }
    let mut summary: BTreeMap<String, (u64, C2cStats)> = BTreeMap::new();
    let mut grouped = Vec::with_capacity(lines.len());
    for (index, line) in lines.iter().enumerate() {
        let mut groups: BTreeMap<String, C2cStats> = BTreeMap::new();
        for (id, stats) in &line.by_cgroup {
            groups
                .entry(group_name(cgroups, *id, by))
                .or_default()
                .add(stats);
        }
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_by(|a, b| b.1.tot_hitm.cmp(&a.1.tot_hitm).then(a.0.cmp(&b.0)));
        for (name, stats) in &groups {
            let entry = summary.entry(name.clone()).or_default();
            entry.0 += 1;
            entry.1.add(stats);
        }
        grouped.push(GroupedLine {
            index,
            address: line.address,
            groups,
        });
    }
    let mut summary: Vec<GroupSummary> = summary
        .into_iter()
        .map(|(name, (lines, stats))| GroupSummary { name, lines, stats })
        .collect();
    summary.sort_by(|a, b| {
        b.stats
            .tot_hitm
            .cmp(&a.stats.tot_hitm)
            .then(a.name.cmp(&b.name))
    });
    Ok(Grouped {
        by,
        lines: grouped,
        summary,
    })
}
