//! Human-readable tables.

use std::fmt::Write as _;

use super::{
    Shown,
    aligned::Aligned,
    cells::{
        bottleneck_cell, losses_line, no_suspects, node_cell, not_counting_line, shows_bottleneck,
        suspects_said, wait_behind_cell, wait_behind_parts, wait_behind_thread_parts,
    },
    count_cell,
};
use crate::{
    attrib::{Window, usage::CounterValue},
    model::{
        columns::{NodeColumn, shown_nodes},
        rows::{Row, Who},
        suspects::Ranking,
    },
    pmu::counter_set::{CounterSet, Unit},
};

/// `topdown-bpf: counter set `software`: no hardware PMU: software counters only [on-CPU
/// time, switches]`: what every row measures, then the set's counters.
pub fn set_line(set: &CounterSet) -> String {
    let measured: Vec<&str> = ["on-CPU time", "switches"]
        .into_iter()
        .chain(set.names())
        .collect();
    format!(
        "topdown-bpf: counter set `{}`: {} [{}]",
        set.name,
        set.reason,
        measured.join(", ")
    )
}

/// `--neighbours`: for each row that waited, whom it waited behind, largest first, with each
/// part's time and share of its wait (every part adds up to WAIT ms).
fn neighbours_block(window: &Window, rows: &[&Row]) -> String {
    let mut out = String::new();
    if !window.neighbours_measured {
        let _ = writeln!(
            out,
            "  waited behind: not measured (--no-neighbours, no sched_info, or a recording \
             without it)"
        );
        return out;
    }
    let waited: Vec<&&Row> = rows
        .iter()
        .filter(|row| row.behind.as_ref().is_some_and(|b| b.total_ns() > 0))
        .collect();
    if waited.is_empty() {
        let _ = writeln!(out, "  waited behind: no row waited");
        return out;
    }
    let _ = writeln!(out, "  waited behind (ms, share of the row's wait):");
    let mut table = Aligned::default();
    for row in waited {
        let Some(behind) = row.behind.as_deref() else {
            continue;
        };
        let total = behind.total_ns() as f64;
        let parts = wait_behind_parts(behind);
        table.add_row(vec![
            format!("    {}", row.who.label()),
            format!("{:.3}", total / 1e6),
            parts.join(", "),
        ]);
        let threads = wait_behind_thread_parts(behind);
        if !threads.is_empty() {
            table.add_row(vec![
                String::new(),
                String::new(),
                format!("threads: {}", threads.join(", ")),
            ]);
        }
    }
    let _ = writeln!(out, "{table}");
    out
}

/// `--neighbours` with groups: the suspects of slowing each group down (its CPI rising with
/// their CPU use over the latest windows, `model::suspects`), or why there are none.
fn suspects_block(ranking: &Ranking) -> String {
    let mut out = String::new();
    if ranking.victims.is_empty() {
        let _ = writeln!(out, "  suspects: {}", no_suspects(ranking.ipc_measured));
        return out;
    }
    let _ = writeln!(
        out,
        "  suspects (CPI rose with their CPU use over the latest windows: a correlation, not a \
         verdict):"
    );
    for victim in &ranking.victims {
        let _ = writeln!(
            out,
            "    {}: {}",
            victim.name,
            suspects_said(&victim.suspects).join(", ")
        );
    }
    out
}

/// A title line, the thread table, and the idle and loss lines.
pub fn block(
    window: &Window,
    rows: &[&Row],
    total: usize,
    shown: &Shown<'_>,
    is_final: bool,
) -> String {
    let Shown {
        set,
        options,
        suspects,
        ..
    } = *shown;
    let noun = options.noun();
    let mut out = title(window, total, noun, is_final);
    rows_table(window, rows, shown).write_to(&mut out);
    out.push('\n');
    if total > rows.len() {
        let _ = writeln!(out, "  ... {} more {noun} (see --top)", total - rows.len());
    }
    if options.neighbours {
        out.push_str(&neighbours_block(window, rows));
        if options.group.is_some() {
            out.push_str(&suspects_block(suspects));
        }
    }
    out.push_str(&footer(window, set));
    out
}

/// A block's first line: the window's end and how many rows it had (`noun`), or the run's
/// length for the totals.
fn title(window: &Window, total: usize, noun: &str, is_final: bool) -> String {
    if is_final {
        format!(
            "\n# totals over {:.3} s, {total} {noun}\n",
            window.length.as_secs_f64()
        )
    } else {
        let end = (window.start + window.length).as_secs_f64();
        format!("# {end:>10.3} s  ({total} {noun})\n")
    }
}

/// The table of `rows`: their keys and value columns, the TopDown nodes they measured, whom
/// they waited behind, the bottleneck and the counters' running share where the window has
/// them, then the raw counters (without TopDown, or verbose).
fn rows_table(window: &Window, rows: &[&Row], shown: &Shown<'_>) -> Aligned {
    let Shown {
        set,
        columns,
        options,
        ..
    } = *shown;
    let keys = Who::key_names(options.group_by());
    let mut header: Vec<String> = keys
        .iter()
        .map(|k| k.to_uppercase().replace('_', "-"))
        .chain(columns.iter().map(|c| c.header.to_owned()))
        .collect();
    let nodes = shown_nodes(rows.iter().copied(), options);
    header.extend(nodes.iter().map(NodeColumn::header));
    let show_behind = window.neighbours_measured;
    if show_behind {
        header.push("WAIT BEHIND".into());
    }
    let show_bottleneck = shows_bottleneck(window, options);
    if show_bottleneck {
        header.push("BOTTLENECK".into());
    }
    let show_run = rows.iter().any(|r| r.run_fraction < 1.0);
    if show_run {
        header.push("RUN%".into());
    }
    let show_counters = options.topdown.is_none() || options.verbose;
    if show_counters {
        header.extend(set.counters.iter().map(|c| match c.unit {
            Unit::Events => c.name.clone(),
            unit => format!("{} ({})", c.name, unit.label()),
        }));
    }
    let mut table = Aligned::new(header);
    for row in rows {
        table.begin_row();
        row.who.each_key_value(true, |value| {
            table.push_with(|out| {
                let _ = out.write_fmt(value);
            });
        });
        for column in columns {
            table.push_with(|out| column.write_cell(row, out));
        }
        for column in &nodes {
            table.push(&node_cell(row, column, options.verbose));
        }
        if show_behind {
            table.push(&wait_behind_cell(row));
        }
        if show_bottleneck {
            table.push(&bottleneck_cell(row, options.topdown.as_ref()));
        }
        if show_run {
            table.push_with(|out| {
                let _ = write!(out, "{:.0}", row.run_fraction * 100.0);
            });
        }
        if show_counters {
            for counter in row.counters.iter() {
                table.push(&counter_cell(counter));
            }
        }
    }
    for i in 0..table.columns() {
        let text = keys
            .get(i)
            .is_some_and(|k| !matches!(*k, "tid" | "pid" | "cgroup_id"));
        if !text {
            table.align_right(i);
        }
    }
    table
}

/// A raw counter's cell: its scaled count, with its running share where it was multiplexed.
fn counter_cell(value: &CounterValue) -> String {
    let fraction = value.reading.running_fraction();
    let count = count_cell(value.scaled());
    if fraction < 1.0 && !value.not_counted() {
        format!("{count} ({:.0}%)", fraction * 100.0)
    } else {
        count
    }
}

/// A block's last lines: each CPU's idle time, what was lost, and the events that counted
/// nothing.
fn footer(window: &Window, set: &CounterSet) -> String {
    let mut out = String::new();
    let idle: Vec<String> = window
        .idle
        .iter()
        .enumerate()
        .map(|(cpu, d)| format!("cpu{cpu} {:.1} ms", d.as_secs_f64() * 1e3))
        .collect();
    if !idle.is_empty() {
        let _ = writeln!(out, "  idle: {}", idle.join(", "));
    }
    let _ = writeln!(out, "  {}", losses_line(window));
    if let Some(line) = not_counting_line(window, set) {
        let _ = writeln!(out, "  {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::suspects::{Suspect, Victim};

    #[test]
    fn suspects_are_said_with_their_odds_or_why_there_are_none() {
        let none = suspects_block(&Ranking::default());
        assert!(none.contains("no group's IPC is measured"), "{none}");
        let measured = suspects_block(&Ranking {
            victims: Vec::new(),
            ipc_measured: true,
        });
        assert!(measured.contains("no group's CPI moved"), "{measured}");
        let victims = vec![Victim {
            name: "docker:aaaa".into(),
            suspects: vec![Suspect {
                name: "docker:bbbb".into(),
                correlation: 0.873,
                windows: 30,
                p: 2.5e-9,
            }],
        }];
        let named = suspects_block(&Ranking {
            victims,
            ipc_measured: true,
        });
        assert!(
            named.contains("docker:aaaa: docker:bbbb r=0.87 over 30 windows (p=3e-9)")
                && named.contains("not a verdict"),
            "{named}"
        );
    }
}
