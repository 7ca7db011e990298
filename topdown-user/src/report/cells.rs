//! The cells and lines every renderer of rows writes alike (the table, the full-screen view):
//! a TopDown node's value with its flags, each part's bottleneck, the losses and not-counting
//! lines. They format what the model computed; nothing here computes a value.

use crate::{
    attrib::Window,
    model::{
        columns::NodeColumn,
        rows::{Row, RowOptions},
    },
    pmu::counter_set::CounterSet,
    tma::{node::Node, view::TopdownView},
};

/// Below this share of its enabled time, a node's least measured input makes it marked `?`.
pub const LOW_RUN: f64 = 0.25;

/// A node's value in percent; `<` marks the thread's bottleneck; Level 2 values under their
/// threshold are left blank unless verbose; `!`, `?` and `~` flag how sure it is.
pub fn node_cell(row: &Row, column: &NodeColumn, verbose: bool) -> String {
    let Some(Some(td)) = row.topdown.get(column.part) else {
        return "-".into();
    };
    let Some(value) = column.of(row) else {
        return "-".into();
    };
    let node = &column.node;
    if node.level > 1 && !value.over_threshold && !verbose {
        return String::new();
    }
    let mark = if td.bottleneck == Some(node.name) {
        " <"
    } else {
        ""
    };
    // Outside [0, 1]: counts that contradict each other (multiplexing); JSON says which.
    // `?`: its inputs ran less than a quarter of the time (scaled from little). `~`: its
    // inputs were in counter groups multiplexed apart (not counted over the same moments).
    let flag = if td.out_of_range.iter().any(|o| o.node == node.name) {
        "!"
    } else if value.run_fraction < LOW_RUN {
        "?"
    } else if td.multiplexed_apart.contains(&node.name) {
        "~"
    } else {
        ""
    };
    format!("{:.1}{flag}{mark}", value.value * 100.0)
}

/// Each part's bottleneck (`P:Backend E:Frontend` on hybrid parts), `-` where there is none.
pub fn bottlenecks(row: &Row, view: &TopdownView) -> String {
    let names: Vec<String> = view
        .parts
        .iter()
        .zip(&row.topdown)
        .filter_map(|(part, td)| {
            let short = td.as_ref()?.bottleneck.and_then(Node::named)?.short();
            Some(if part.label.is_empty() {
                short.to_owned()
            } else {
                format!("{}:{short}", part.label)
            })
        })
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(" ")
    }
}

/// The BOTTLENECK cell: the verdict (`throttled`, `waiting for CPU`), else TopDown's
/// bottleneck per part of `view`, else `-`.
pub fn bottleneck_cell(row: &Row, view: Option<&TopdownView>) -> String {
    match (row.verdict.words(), view) {
        (Some(words), _) => words.to_owned(),
        (None, Some(view)) => bottlenecks(row, view),
        (None, None) => "-".into(),
    }
}

/// Whether a BOTTLENECK column can say anything of `window`'s rows: TopDown is measured, or a
/// verdict can be reached (waits measured, or cgroups' throttling read).
pub fn shows_bottleneck(window: &Window, options: &RowOptions) -> bool {
    options.topdown.is_some() || window.waits_measured || !window.stalls.is_empty()
}

/// `losses: none` or the non-zero loss counters.
pub fn losses_line(window: &Window) -> String {
    let lost: Vec<String> = window
        .stats
        .losses()
        .filter(|(_, v)| *v > 0)
        .map(|(stat, v)| format!("{} {v}", stat.name()))
        .collect();
    if lost.is_empty() {
        "losses: none".to_owned()
    } else {
        format!("LOSSES: {}", lost.join(", "))
    }
}

/// `not counting on this PMU: ...` for the events of `set` the window's rows have as silent
/// (see `collect::calibration`); `None` when there are none.
pub fn not_counting_line(window: &Window, set: &CounterSet) -> Option<String> {
    let silent = window.silent();
    if silent.is_empty() {
        return None;
    }
    let names = set.names_of(&silent);
    Some(format!(
        "NOT COUNTING on this PMU: {} (read 0 while others counted; no TopDown node built on \
         them is shown)",
        names.join(", ")
    ))
}
