//! What `topdown-bpf plot` draws, computed: the rows with the most of the metric over the run,
//! one value per window, and TopDown Level 1 over every row where it was measured
//! (`crate::picture::timelines` lays it out). The windows come through frames, as every other
//! output's do, and a metric is any value column of the recording's rows (`cpu_percent`,
//! `ipc`, `run_delay_ns`, ...) or a TopDown node.

use std::collections::HashMap;

use anyhow::{Result, bail};

use super::{
    columns::{self, Column, Kind},
    frame::Frame,
    rows::{Row, RowOptions, Who},
    sort::SortKey,
};
use crate::{
    attrib::{
        Window,
        groups::{GroupBy, GroupOptions},
        usage::{CounterValue, add_counters},
    },
    pmu::counter_set::CounterSet,
    recording::reader::Recording,
    tma::view::TopdownView,
};

/// One line: whose, and its value in each window (`None`: not measured there).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// What the legend calls it.
    pub label: String,
    /// One value per window, in the metric's unit as the y axis says it (percent of one CPU
    /// or of pipeline slots, milliseconds, a ratio, a count).
    pub values: Vec<Option<f64>>,
}

/// What a plot shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Timelines {
    /// The title.
    pub title: String,
    /// Each window's end, in seconds from the start of the recording.
    pub times: Vec<f64>,
    /// What the lines' values are, with their unit (the y axis: `%CPU`, `IPC`, `WAIT ms`).
    pub metric: String,
    /// The rows with the most of the metric over the run, most first.
    pub lines: Vec<Series>,
    /// TopDown Level 1 over every row, in percent of slots, one series per node in tree
    /// order (stacked); empty when the recording has no TopDown.
    pub level1: Vec<Series>,
}

/// What the lines show: a value column, or a TopDown node.
enum Metric {
    Column(Column),
    Node(String),
}

impl Metric {
    /// `name` among the value columns of `recording`'s rows (`grouped`: of cgroups, which have
    /// their stalls too) and its TopDown nodes; `cpu` is `cpu_percent`.
    fn of(name: &str, recording: &Recording, grouped: bool) -> Result<Self> {
        let columns = columns::for_rows(&columns::columns(&recording.set), grouped);
        let key = if name == "cpu" { "cpu_percent" } else { name };
        if let Some(column) = columns.iter().find(|c| c.key == key) {
            return Ok(Self::Column(*column));
        }
        let nodes = recording
            .topdown
            .as_ref()
            .map(|v| v.node_names())
            .unwrap_or_default();
        if nodes.contains(&name) {
            return Ok(Self::Node(name.to_owned()));
        }
        let keys: Vec<&str> = columns.iter().map(|c| c.key).collect();
        let nodes = if recording.topdown.is_none() {
            format!(
                "this recording measured no TopDown (counter set `{}`)",
                recording.set.name
            )
        } else {
            format!("or a node it measured ({})", nodes.join(", "))
        };
        bail!(
            "unknown metric `{name}`: use cpu, a column of these rows ({}), {nodes}",
            keys.join(", ")
        )
    }

    /// The row's value in the unit the axis says: a column's as tables scale it (nanoseconds
    /// in milliseconds), a node's fraction of slots in percent (the first core type that
    /// measured it).
    fn value(&self, row: &Row) -> Option<f64> {
        match self {
            Self::Column(column) => {
                let value = column.value(row)?.as_f64();
                Some(match column.kind {
                    Kind::Nanoseconds => value / 1e6,
                    Kind::Percent | Kind::Count | Kind::Ratio => value,
                })
            }
            Self::Node(name) => row
                .topdown
                .iter()
                .flatten()
                .find_map(|td| td.value(name))
                .map(|v| v * 100.0),
        }
    }

    /// What the axis says.
    fn label(&self) -> String {
        match self {
            Self::Column(column) => column.header.to_owned(),
            Self::Node(name) => format!("{name} %"),
        }
    }

    /// Whether a row that was not charged in a window, between its first and last, had 0
    /// there: a column every row has (on-CPU time, %CPU, switches: the kernel charged it
    /// nothing); not one that can be unmeasured (a ratio, a wait) or a node.
    fn zero_when_idle(&self) -> bool {
        matches!(self, Self::Column(c) if !c.may_be_missing())
    }
}

/// The timelines of `recording`: the `top` rows (threads, or the groups `grouping` asks for)
/// with the most of `metric` (`cpu`, a value column's key or a TopDown node's name) summed
/// over the windows.
pub fn timelines(
    recording: &mut Recording,
    grouping: Option<&GroupOptions>,
    metric: &str,
    top: usize,
) -> Result<Timelines> {
    let metric = Metric::of(metric, recording, grouping.is_some())?;
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
    let (set, view, names) = (
        &recording.set,
        recording.topdown.as_ref(),
        &mut recording.names,
    );
    for (i, window) in recording.windows.iter().enumerate() {
        times.push((window.start + window.length).as_secs_f64());
        let frame = Frame::new(window, names, set, view);
        for row in frame.rows(&options).rows {
            let Some(value) = metric.value(row) else {
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
        if let Some(view) = view {
            add_level1(&mut level1, (i, count), window, set, view);
        }
    }
    // Between its first and last window, a row that did not run in one used no CPU there.
    if metric.zero_when_idle() {
        for (series, _) in by_row.values_mut() {
            fill_gaps_with_zero(&mut series.values);
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
    let metric = metric.label();
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

/// Window `i` of `count`: TopDown Level 1 of every thread's counters summed, in percent of
/// slots, one series per node (added as first seen).
fn add_level1(
    level1: &mut Vec<Series>,
    (i, count): (usize, usize),
    window: &Window,
    set: &CounterSet,
    view: &TopdownView,
) {
    let mut sum: Vec<CounterValue> = Vec::new();
    for thread in &window.threads {
        add_counters(&mut sum, &thread.counters);
    }
    let parts = view.of(set, &sum);
    let td = parts.iter().flatten().next();
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
        level1[at].values[i] = Some(node.value * 100.0);
    }
}

/// 0 in every window without a value between the first and the last that have one.
fn fill_gaps_with_zero(values: &mut [Option<f64>]) {
    let first = values.iter().position(Option::is_some);
    let last = values.iter().rposition(Option::is_some);
    if let (Some(first), Some(last)) = (first, last) {
        for value in &mut values[first..=last] {
            value.get_or_insert(0.0);
        }
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
