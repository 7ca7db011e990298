//! The cells and lines every renderer of rows writes alike (the table, the full-screen view):
//! a TopDown node's value with its flags, each part's bottleneck, the losses and not-counting
//! lines. They format what the model computed; nothing here computes a value.

use crate::{
    attrib::{Window, neighbours::Culprits},
    model::{
        columns::NodeColumn,
        rows::{Row, RowOptions},
        suspects::{Suspect, WINDOWS},
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
    } else if value.multiplexed_apart {
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

/// The BOTTLENECK cell: the verdict (`throttled`, `waiting for CPU behind batch-7f3a`), else
/// TopDown's bottleneck per part of `view`, else `-`.
pub fn bottleneck_cell(row: &Row, view: Option<&TopdownView>) -> String {
    match (row.verdict_words(), view) {
        (Some(words), _) => words.into_owned(),
        (None, Some(view)) => bottlenecks(row, view),
        (None, None) => "-".into(),
    }
}

/// The WAIT BEHIND cell: the largest culprit and its share of the row's wait (`batch-7f3a
/// (71%)`); `-` where not measured or nothing was attributed.
pub fn wait_behind_cell(row: &Row) -> String {
    match row.behind.as_ref().and_then(|b| b.first()) {
        Some((culprit, share)) => format!("{culprit} ({:.0}%)", share * 100.0),
        None => "-".into(),
    }
}

/// One part of a row's wait for people: `name 1.234 (56%)` (ms, share of the whole wait).
fn share_part(name: &str, ns: u64, of: &Culprits) -> String {
    let total = of.total_ns().max(1) as f64;
    format!(
        "{name} {:.3} ({:.0}%)",
        ns as f64 / 1e6,
        ns as f64 / total * 100.0
    )
}

/// A row's split for people, largest first: each culprit's time (ms) and share of the wait,
/// then what the rest, idle and unattributed took (where any).
pub fn wait_behind_parts(behind: &Culprits) -> Vec<String> {
    let part = |name: &str, ns: u64| share_part(name, ns, behind);
    let mut parts: Vec<String> = behind
        .top
        .iter()
        .map(|(name, ns)| part(name, *ns))
        .collect();
    for (name, ns) in [
        ("other", behind.other_ns),
        ("idle", behind.idle_ns),
        ("unattributed", behind.unattributed_ns),
    ] {
        if ns > 0 {
            parts.push(part(name, ns));
        }
    }
    parts
}

/// A row's culprit threads for people, largest first: each one's time (ms) and share of the
/// wait (a split of the culprits' parts), then what other threads held; nothing where no
/// thread is named.
pub fn wait_behind_thread_parts(behind: &Culprits) -> Vec<String> {
    let part = |name: &str, ns: u64| share_part(name, ns, behind);
    let mut parts: Vec<String> = behind
        .threads
        .iter()
        .map(|(name, ns)| part(name, *ns))
        .collect();
    let other = behind.other_threads_ns();
    if !parts.is_empty() && other > 0 {
        parts.push(part("other threads", other));
    }
    parts
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

/// Each suspect as every view says it: its name, correlation, windows and p-value.
pub fn suspects_said(suspects: &[Suspect]) -> Vec<String> {
    suspects
        .iter()
        .map(|s| {
            format!(
                "{} r={:.2} over {} windows (p={:.0e})",
                s.name, s.correlation, s.windows, s.p
            )
        })
        .collect()
}

/// Why no group has a suspect: no group's IPC is `measured`, or none moved with another's
/// CPU use.
pub fn no_suspects(measured: bool) -> String {
    if measured {
        format!(
            "none (no group's CPI moved with another's CPU use over the latest {} windows)",
            WINDOWS
        )
    } else {
        "none named (no group's IPC is measured: the set counts no cycles and instructions)"
            .to_owned()
    }
}
