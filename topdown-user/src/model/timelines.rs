//! What `topdown-bpf plot` draws, computed: the rows with the most of the metric over the run,
//! one value per window, and TopDown Level 1 over every row where it was measured
//! (`crate::picture::timelines` lays it out).

use std::collections::HashMap;

use anyhow::{Result, bail};

use super::{
    rows::{Row, RowOptions, Who, rows},
    sort::SortKey,
};
use crate::{
    attrib::{
        groups::{GroupBy, GroupOptions},
        named,
        usage::{CounterValue, add_counters},
    },
    recording::reader::Recording,
};

/// One line: whose, and its value in each window (`None`: not measured there).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// What the legend calls it.
    pub label: String,
    /// One value per window: a fraction (of one CPU, of pipeline slots); the picture writes
    /// it in percent.
    pub values: Vec<Option<f64>>,
}

/// What a plot shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Timelines {
    /// The title.
    pub title: String,
    /// Each window's end, in seconds from the start of the recording.
    pub times: Vec<f64>,
    /// What the lines' values are (the y axis, in percent).
    pub metric: String,
    /// The rows with the most of the metric over the run, most first.
    pub lines: Vec<Series>,
    /// TopDown Level 1 over every row, fractions of slots, one series per node in tree
    /// order (stacked); empty when the recording has no TopDown.
    pub level1: Vec<Series>,
}

/// The timelines of `recording`: the `top` rows (threads, or the groups `grouping` asks for)
/// with the most of `metric` (`cpu`, or a TopDown node's name) summed over the windows.
pub fn timelines(
    recording: &mut Recording,
    grouping: Option<&GroupOptions>,
    metric: &str,
    top: usize,
) -> Result<Timelines> {
    let nodes = recording
        .topdown
        .as_ref()
        .map(|v| v.node_names())
        .unwrap_or_default();
    let node = match metric {
        "cpu" => None,
        name if nodes.contains(&name) => Some(name.to_owned()),
        name if recording.topdown.is_none() => bail!(
            "`{name}`: this recording measured no TopDown (counter set `{}`), only --metric cpu",
            recording.set.name
        ),
        name => bail!(
            "unknown metric `{name}`: use cpu or a node the recording measured ({})",
            nodes.join(", ")
        ),
    };
    if recording.windows.is_empty() {
        bail!("the recording holds no window: nothing to plot");
    }
    let options = RowOptions {
        sort: SortKey::ON_CPU,
        top: None,
        topdown: recording.topdown.clone(),
        verbose: false,
        neighbours: false,
        group: grouping.cloned(),
    };
    let count = recording.windows.len();
    let mut by_row: HashMap<String, (Series, f64)> = HashMap::new();
    let mut level1: Vec<Series> = Vec::new();
    let mut times = Vec::with_capacity(count);
    for (i, window) in recording.windows.iter().enumerate() {
        times.push((window.start + window.length).as_secs_f64());
        let named = named::name(window, &mut recording.names, grouping);
        let (all, _) = rows(window, named, &recording.set, &options);
        for row in &all {
            let Some(value) = row_value(row, node.as_deref()) else {
                continue;
            };
            let key = row.who.key_values(false).join("\u{1f}");
            let (series, sum) = by_row.entry(key).or_insert_with(|| {
                (
                    Series {
                        label: label(&row.who),
                        values: vec![None; count],
                    },
                    0.0,
                )
            });
            series.values[i] = Some(value);
            *sum += value;
        }
        if let Some(view) = &recording.topdown {
            let mut sum: Vec<CounterValue> = Vec::new();
            for thread in &window.threads {
                add_counters(&mut sum, &thread.counters);
            }
            let td = view.of(&recording.set, &sum).into_iter().flatten().next();
            for node in td
                .iter()
                .flat_map(|td| &td.nodes)
                .filter(|n| n.node.level == 1)
            {
                let at = level1
                    .iter()
                    .position(|s| s.label == node.node.name)
                    .unwrap_or_else(|| {
                        level1.push(Series {
                            label: node.node.name.to_owned(),
                            values: vec![None; count],
                        });
                        level1.len() - 1
                    });
                level1[at].values[i] = Some(node.value);
            }
        }
    }
    // Between its first and last window, a row that did not run in one used no CPU there.
    if node.is_none() {
        for (series, _) in by_row.values_mut() {
            let first = series.values.iter().position(Option::is_some);
            let last = series.values.iter().rposition(Option::is_some);
            if let (Some(first), Some(last)) = (first, last) {
                for value in &mut series.values[first..=last] {
                    value.get_or_insert(0.0);
                }
            }
        }
    }
    let mut ranked: Vec<(Series, f64)> = by_row.into_values().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.label.cmp(&b.0.label)));
    ranked.truncate(top);
    let noun = match grouping.map(|g| g.by) {
        None => "thread",
        Some(GroupBy::Cgroup) => "cgroup",
        Some(GroupBy::Container) => "container",
    };
    let metric = node.map_or_else(|| "%CPU".to_owned(), |n| format!("{n} %"));
    let machine = &recording.header.machine;
    Ok(Timelines {
        title: format!(
            "{metric} per {noun}, top {} - {} ({}, {} CPUs)",
            ranked.len(),
            machine.hostname,
            machine.kernel,
            machine.cpus
        ),
        times,
        metric,
        lines: ranked.into_iter().map(|(series, _)| series).collect(),
        level1,
    })
}

/// The row's value of the metric: its share of one CPU, or a node's fraction (the first core
/// type that measured it).
fn row_value(row: &Row, node: Option<&str>) -> Option<f64> {
    match node {
        None => Some(row.cpu_share),
        Some(name) => row.topdown.iter().flatten().find_map(|td| td.value(name)),
    }
}

/// A row's name in the legend: `comm (tid)`, or the group's label.
fn label(who: &Who) -> String {
    match who {
        Who::Thread(t) if t.folded > 0 => t.comm.to_string(),
        Who::Thread(t) => format!("{} ({})", t.comm, t.tid),
        Who::Group { group, .. } => group.label.clone(),
    }
}
