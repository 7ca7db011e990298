//! Draws the full-screen view: a title line, the table fitted to the terminal, a status line
//! (losses, switches the kernel did not report, the counter set) and a footer of keys. Rows arrive
//! computed, sorted and filtered; this only lays them out.

use ratatui::{
    Frame,
    layout::{Alignment, Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Clear, Paragraph, Row as TableRow, Sparkline, Table},
};
use topdown_common::stats::Stat;

use super::{
    history::{History, KEEP, Sample},
    state::ViewState,
};
use crate::{
    attrib::{Window, groups::GroupBy},
    model::{
        columns::{Column as ValueColumn, Kind, Number, shown_nodes},
        rows::{Row, RowOptions, TreeMark, Who},
        suspects::Ranking,
    },
    pmu::counter_set::CounterSet,
    report::cells::{
        bottleneck_cell, losses_line, no_suspects, node_cell, not_counting_line, shows_bottleneck,
        suspects_said, wait_behind_cell, wait_behind_parts, wait_behind_thread_parts,
    },
    tma::TopDown,
};

/// What one frame shows besides the state.
pub struct Screenful<'a> {
    /// The window the rows come from.
    pub window: &'a Window,
    /// Its rows, sorted, filtered and ordered as the state asks.
    pub rows: &'a [Row],
    /// Rows before filtering.
    pub total: usize,
    /// The counter set.
    pub set: &'a CounterSet,
    /// The value columns of its rows.
    pub columns: &'a [ValueColumn],
    /// TopDown and grouping of the rows.
    pub options: &'a RowOptions,
    /// The rows' recent values.
    pub history: &'a History,
    /// In a grouped view, the groups with suspects of slowing them down over the latest
    /// windows ([`crate::model::suspects`]), shown in the panel of whom rows waited behind.
    pub suspects: &'a Ranking,
}

/// One column: its header, each row's cell, right-aligned or not, and its width.
struct Column {
    header: String,
    cells: Vec<Line<'static>>,
    right: bool,
    width: usize,
    /// Lower is dropped first when the terminal is too narrow; `u8::MAX` is never dropped.
    keep: u8,
}

/// Widest a cgroup path or container label is shown; longer ones keep their tail, as the
/// last components name the workload.
const PATH_WIDTH: usize = 40;
/// Widest a thread name is (the kernel's `comm` holds 15 characters).
const COMM_WIDTH: usize = 16;

/// Draws `data` in `state` on `frame`, and records how many rows fit.
pub fn draw(frame: &mut Frame<'_>, state: &mut ViewState, data: &Screenful<'_>) {
    let bands = super::Bands::of(frame);
    let body = bands.body;
    let page = usize::from(body.height.saturating_sub(1));
    state.clamp(data.rows.len(), page);
    draw_table(frame, body, state, data);
    if state.detail
        && let Some(row) = data.rows.get(state.selected)
    {
        draw_history(frame, body, row, data.history);
    }
    if state.neighbours {
        draw_neighbours(
            frame,
            body,
            &data.rows[state.selected.min(data.rows.len())..],
            data,
        );
    }
    let keys = match &state.editing {
        Some(text) => format!("filter: {text}_   (Enter applies, Esc clears)"),
        None if state.detail => "Enter or Esc closes the history  q quit  ? help".to_owned(),
        None if state.neighbours => {
            "n or Esc closes whom they waited behind  arrows select  q quit  ? help".to_owned()
        }
        None if state.timeline.is_some() => {
            "q quit  [ ] time  / filter  s < > sort  r reverse  t tree  v view  arrows select  \
             Enter history  n behind  ? help"
                .to_owned()
        }
        None => "q quit  p pause  / filter  s < > sort  r reverse  t tree  v view  arrows select  \
                 Enter history  n behind  ? help"
            .to_owned(),
    };
    bands.draw(frame, title_line(state, data), status_line(data), keys);
    if state.help {
        draw_help(frame, state);
    }
}

fn title_line(state: &ViewState, data: &Screenful<'_>) -> String {
    let end = (data.window.start + data.window.length).as_secs_f64();
    // A tree's process rows sum threads shown beside them: only real rows are counted.
    let shown = data
        .rows
        .iter()
        .filter(|r| !(r.who.thread().is_some() && r.tree.is_some_and(|m| m.children > 0)))
        .count();
    let mut title = format!(
        "topdown-bpf  {}  {end:.1} s  {shown}/{} {}",
        data.set.name,
        data.total,
        state.view.name(),
    );
    if let Some(timeline) = state.timeline {
        title.push_str(&format!("  window {}/{}", timeline.at + 1, timeline.len));
    }
    if !state.filter.is_empty() {
        title.push_str(&format!("  /{}", state.filter));
    }
    if state.shows_tree() {
        title.push_str("  tree");
    }
    if state.paused {
        title.push_str("  PAUSED");
    }
    let order = if state.reverse { "up" } else { "down" };
    title.push_str(&format!("  sort {} {order}", state.sort_name()));
    title
}

fn status_line(data: &Screenful<'_>) -> String {
    let unreported = data.window.stats.get(Stat::SwitchesUnreported);
    // Idle is measured only when every thread is (not for a command or -p).
    let idle = if data.window.idle.is_empty() {
        "idle not measured".to_owned()
    } else {
        let idle: std::time::Duration = data.window.idle.iter().sum();
        format!("idle {:.1} ms", idle.as_secs_f64() * 1e3)
    };
    let not_counting = not_counting_line(data.window, data.set)
        .map(|line| format!("{line}  |  "))
        .unwrap_or_default();
    format!(
        "{not_counting}{}  |  {idle}  |  switches {}, not reported by the kernel {unreported}  \
         |  {}: {}",
        losses_line(data.window),
        data.window.stats.get(Stat::Switches),
        data.set.name,
        data.set.reason,
    )
}

fn draw_table(frame: &mut Frame<'_>, area: Rect, state: &ViewState, data: &Screenful<'_>) {
    let visible = &data.rows[state.scroll.min(data.rows.len())..];
    let visible = &visible[..visible.len().min(state.page)];
    let columns = fit(columns(visible, data), usize::from(area.width));
    let header = TableRow::new(
        columns
            .iter()
            .map(|c| aligned(Line::from(c.header.clone()), c.right)),
    )
    .style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED));
    let selected = state.selected.checked_sub(state.scroll);
    let rows = (0..visible.len()).map(|i| {
        let style = if Some(i) == selected {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        TableRow::new(columns.iter().map(|c| aligned(c.cells[i].clone(), c.right))).style(style)
    });
    let widths = columns
        .iter()
        .map(|c| Constraint::Length(u16::try_from(c.width).unwrap_or(u16::MAX)));
    frame.render_widget(Table::new(rows, widths).header(header), area);
}

fn aligned(line: Line<'static>, right: bool) -> Cell<'static> {
    Cell::from(if right {
        line.alignment(Alignment::Right)
    } else {
        line
    })
}

/// Every column the rows could show, widest content first measured.
fn columns(rows: &[Row], data: &Screenful<'_>) -> Vec<Column> {
    let mut columns = key_columns(rows, data.options.group_by());
    for value in data.columns {
        columns.push(column(
            value.header.into(),
            rows.iter().map(|r| value.cell(r)).collect(),
            true,
            value.keep,
        ));
    }
    for node in shown_nodes(rows.iter(), data.options) {
        columns.push(column(
            node.header(),
            rows.iter()
                .map(|r| node_cell(r, &node, data.options.verbose))
                .collect(),
            true,
            if node.node.level == 1 { 5 } else { 4 },
        ));
    }
    if data.window.neighbours_measured {
        columns.push(column(
            "WAIT BEHIND".into(),
            rows.iter().map(wait_behind_cell).collect(),
            false,
            // Dropped before the pid on a narrow terminal: the verdict names the culprit too.
            1,
        ));
    }
    if shows_bottleneck(data.window, data.options) {
        let red = Style::new().fg(Color::Red);
        columns.push(styled_column(
            "BOTTLENECK".into(),
            rows.iter()
                .map(
                    |r| match bottleneck_cell(r, data.options.topdown.as_ref()) {
                        none if none == "-" => Line::from(none),
                        name => Line::styled(name, red),
                    },
                )
                .collect(),
            false,
            // With TopDown it says where the pipeline stalled; without, only when a row did
            // not run, and a narrow terminal keeps the pid first.
            if data.options.topdown.is_some() { 4 } else { 2 },
        ));
    }
    if data.options.topdown.is_some() {
        columns.push(styled_column(
            "TOPDOWN L1".into(),
            rows.iter()
                .map(|r| level1_bar(r.topdown.iter().flatten().next()))
                .collect(),
            false,
            4,
        ));
    }
    columns
}

/// The columns of the rows' keys (grouped `by`, or threads): the name column carries a row's
/// place in a tree, long paths and names are shortened, and each says when a narrow terminal
/// drops it.
fn key_columns(rows: &[Row], by: Option<GroupBy>) -> Vec<Column> {
    let keys = Who::key_names(by);
    let values: Vec<Vec<String>> = rows.iter().map(|r| r.who.key_values(true)).collect();
    keys.iter()
        .enumerate()
        .map(|(i, key)| {
            // The row's name column carries its place in a tree (`t`).
            let named = match by {
                None => "comm",
                Some(GroupBy::Cgroup) => "cgroup",
                Some(GroupBy::Container) => "container",
            };
            let cells: Vec<String> = values
                .iter()
                .zip(rows)
                .map(|(values, row)| {
                    let value = values[i].clone();
                    let mark = row.tree.filter(|_| *key == named);
                    match (*key, mark) {
                        (_, Some(mark)) => tree_cell(&value, mark, by.is_some()),
                        ("cgroup" | "container", None) => shorten(&value, PATH_WIDTH),
                        ("comm", None) => shorten(&value, COMM_WIDTH + 9),
                        _ => value,
                    }
                })
                .collect();
            // Dropped first: a thread's cgroup, a container's pod and QoS; then pids, kinds
            // and ids; names and the key that identifies the row stay.
            let keep = match *key {
                "cgroup" if by != Some(GroupBy::Cgroup) => 1,
                "pod" | "qos" => 1,
                "pid" | "kind" | "cgroup_id" => 2,
                _ => u8::MAX,
            };
            column(
                key.to_uppercase().replace('_', "-"),
                cells,
                matches!(*key, "tid" | "pid" | "cgroup_id"),
                keep,
            )
        })
        .collect()
}

/// Cells of the Level 1 bar.
const BAR: usize = 20;

/// The colour of a Level 1 node in bars, as in plots: frontend magenta, bad speculation red,
/// backend blue, retiring green.
const fn node_colour(name: &str) -> Color {
    match name.as_bytes() {
        b"tma_frontend_bound" => Color::Magenta,
        b"tma_bad_speculation" => Color::Red,
        b"tma_backend_bound" => Color::Blue,
        b"tma_retiring" => Color::Green,
        _ => Color::Gray,
    }
}

/// Level 1 as a bar of [`BAR`] cells, each node's share in its colour (values outside
/// 0..1 clamped for the picture only; the numbers beside it are as computed); `-` without
/// TopDown.
pub(super) fn level1_bar(td: Option<&TopDown>) -> Line<'static> {
    let Some(td) = td else {
        return Line::from("-");
    };
    let shares: Vec<(&str, f64)> = td
        .nodes
        .iter()
        .filter(|n| n.node.level == 1)
        .map(|n| (n.node.name, n.value.clamp(0.0, 1.0)))
        .collect();
    let sum: f64 = shares.iter().map(|(_, v)| v).sum();
    if shares.is_empty() || sum <= 0.0 {
        return Line::from("-");
    }
    // Largest remainder: whole cells first, the rest to the largest fractions.
    let exact: Vec<f64> = shares.iter().map(|(_, v)| v / sum * BAR as f64).collect();
    let mut cells: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..exact.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    for &i in order.iter().take(BAR.saturating_sub(cells.iter().sum())) {
        cells[i] += 1;
    }
    Line::from(
        shares
            .iter()
            .zip(cells)
            .filter(|(_, n)| *n > 0)
            .map(|((name, _), n)| Span::styled("█".repeat(n), Style::new().fg(node_colour(name))))
            .collect::<Vec<_>>(),
    )
}

fn column(header: String, cells: Vec<String>, right: bool, keep: u8) -> Column {
    styled_column(
        header,
        cells.into_iter().map(Line::from).collect(),
        right,
        keep,
    )
}

fn styled_column(header: String, cells: Vec<Line<'static>>, right: bool, keep: u8) -> Column {
    let width = cells
        .iter()
        .map(Line::width)
        .chain([header.chars().count(), if right { 6 } else { 0 }])
        .max()
        .unwrap_or(0);
    Column {
        header,
        cells,
        right,
        width,
        keep,
    }
}

/// Drops the columns that do not fit in `width` (one space between columns), lowest `keep`
/// first and, among equals, the rightmost first.
fn fit(mut columns: Vec<Column>, width: usize) -> Vec<Column> {
    let needed = |cs: &[Column]| cs.iter().map(|c| c.width + 1).sum::<usize>();
    while needed(&columns) > width {
        let Some((drop, _)) = columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.keep < u8::MAX)
            .min_by_key(|(i, c)| (c.keep, usize::MAX - i))
        else {
            break;
        };
        columns.remove(drop);
    }
    columns
}

/// A name in a tree: a root as it is (a process, a top cgroup); below it, indented under
/// `├─`/`└─`, a thread's name or the last component of a cgroup's path.
fn tree_cell(name: &str, mark: TreeMark, is_path: bool) -> String {
    let width = if is_path { PATH_WIDTH } else { COMM_WIDTH + 9 };
    if mark.depth == 0 {
        return shorten(name, width);
    }
    let leaf = if is_path {
        name.rsplit('/').next().unwrap_or(name)
    } else {
        name
    };
    let indent = "   ".repeat(usize::from(mark.depth - 1));
    let branch = if mark.last { "└─ " } else { "├─ " };
    shorten(&format!("{indent}{branch}{leaf}"), width)
}

/// `text` in at most `width` characters: its tail after `…` when longer (the last components
/// of a path name the workload).
fn shorten(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_owned();
    }
    let tail: String = text.chars().skip(count - (width - 1)).collect();
    format!("…{tail}")
}

/// The history panel over the table: one line per series (each value column, each TopDown node
/// measured in the latest window), a sparkline of the last windows and the latest value.
fn draw_history(frame: &mut Frame<'_>, area: Rect, row: &Row, history: &History) {
    let samples = history.of(row);
    let mut series: Vec<(String, Vec<u64>, String)> = Vec::new();
    if let Some(samples) = samples {
        let last = samples.back();
        let grouped = row.who.group().is_some();
        for (i, column) in history.columns().iter().enumerate() {
            if column.groups_only && !grouped {
                continue;
            }
            let value = |s: &Sample| s.values.get(i).copied().flatten();
            series.push((
                column.header.to_owned(),
                samples
                    .iter()
                    .map(|s| value(s).map_or(0, |v| spark_level(column.kind, v)))
                    .collect(),
                last.map_or_else(String::new, |s| column.show(value(s))),
            ));
        }
        let measured = last.map(|s| s.nodes.iter().map(|&(at, _)| at).collect::<Vec<_>>());
        for at in measured.unwrap_or_default() {
            let Some(node) = history.nodes().get(usize::from(at)) else {
                continue;
            };
            let value = |s: &Sample| s.nodes.iter().find(|(n, _)| *n == at).map(|&(_, v)| v);
            let label = if node.label.is_empty() {
                node.node.name.to_owned()
            } else {
                format!("{}.{}", node.label, node.node.name)
            };
            series.push((
                label,
                samples
                    .iter()
                    .map(|s| (value(s).unwrap_or(0.0).clamp(0.0, 1.0) * 1000.0) as u64)
                    .collect(),
                last.and_then(value)
                    .map_or_else(String::new, |v| format!("{:.1} %", v * 100.0)),
            ));
        }
    }
    let who = row.who.key_values(true).join("  ");
    let title = format!(
        " {who}: the last {} windows (at most {KEEP}) ",
        samples.map_or(0, |s| s.len())
    );
    frame.render_widget(Clear, area);
    let block = Block::new().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if series.is_empty() {
        frame.render_widget(Paragraph::new("nothing recorded yet"), inner);
        return;
    }
    let lines = Layout::vertical(series.iter().map(|_| Constraint::Length(1))).split(inner);
    for ((name, data, last), line) in series.iter().zip(lines.iter()) {
        let [label, spark, value] = Layout::horizontal([
            Constraint::Length(24),
            Constraint::Min(8),
            Constraint::Length(10),
        ])
        .areas(*line);
        frame.render_widget(Paragraph::new(name.as_str()), label);
        // The newest samples that fit, at the right.
        let fit = data.len().saturating_sub(usize::from(spark.width));
        frame.render_widget(
            Sparkline::default()
                .data(&data[fit..])
                .style(Style::new().fg(Color::Cyan)),
            spark,
        );
        frame.render_widget(
            Paragraph::new(last.as_str()).alignment(Alignment::Right),
            value,
        );
    }
}

/// The panel of whom rows waited behind (`n`), over the table: from `rows`' first (the
/// selected row) on, each row that waited, its wait and its culprits, largest first.
fn draw_neighbours(frame: &mut Frame<'_>, area: Rect, rows: &[Row], data: &Screenful<'_>) {
    frame.render_widget(Clear, area);
    let title = if data.options.group.is_some() {
        " waited behind: WAIT ms, then each culprit's ms and share of the wait; suspects: CPI \
         rose with their CPU use (a correlation, not a verdict) "
    } else {
        " waited behind: WAIT ms, then each culprit's ms and share of the wait "
    };
    let block = Block::new().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut lines: Vec<Line> = if data.window.neighbours_measured {
        rows.iter()
            .flat_map(|row| {
                let label = row.who.label();
                let behind = row.behind.as_deref().filter(|b| b.total_ns() > 0);
                let threads = behind.map(wait_behind_thread_parts).unwrap_or_default();
                let suspected = data.suspects.victims.iter().find(|v| v.name == label);
                behind
                    .map(|behind| {
                        Line::from(format!(
                            "{:<28} {:>10.3}  {}",
                            shorten(&label, 28),
                            behind.total_ns() as f64 / 1e6,
                            wait_behind_parts(behind).join(", ")
                        ))
                    })
                    .into_iter()
                    .chain((!threads.is_empty()).then(|| {
                        Line::from(format!("{:40}  threads: {}", "", threads.join(", ")))
                            .style(Style::new().add_modifier(Modifier::DIM))
                    }))
                    .chain(suspected.map(|victim| {
                        let name = if behind.is_some() {
                            String::new()
                        } else {
                            shorten(&label, 28)
                        };
                        Line::from(format!(
                            "{name:<40}  suspects: {}",
                            suspects_said(&victim.suspects).join(", ")
                        ))
                    }))
            })
            .collect()
    } else {
        vec![Line::from(
            "not measured (--no-neighbours, no sched_info, or a recording without it)",
        )]
    };
    if lines.is_empty() {
        lines.push(Line::from("no row from the selected one on waited"));
    }
    if data.options.group.is_some() && data.suspects.victims.is_empty() {
        lines.push(
            Line::from(format!(
                "suspects: {}",
                no_suspects(data.suspects.ipc_measured)
            ))
            .style(Style::new().add_modifier(Modifier::DIM)),
        );
    }
    frame.render_widget(Paragraph::new(lines), inner);
}

/// A value as a whole number for a sparkline, keeping the resolution its column shows.
fn spark_level(kind: Kind, value: Number) -> u64 {
    let scaled = match kind {
        Kind::Nanoseconds => value.as_f64() / 1e3,
        Kind::Percent => value.as_f64() * 10.0,
        Kind::Count => value.as_f64(),
        Kind::Ratio => value.as_f64() * 1e3,
    };
    scaled.max(0.0) as u64
}

fn draw_help(frame: &mut Frame<'_>, state: &ViewState) {
    let lines = [
        "q           quit: the run's totals go to the normal screen",
        "space, p    pause the table (collection goes on)",
        "/           filter by a substring of comm, pid, tid, cgroup or container",
        "            (Enter applies, Esc clears)",
        "s, >, <     next / previous sort column",
        "r           reverse the order",
        "t           tree: threads under their process, cgroups under their parent",
        "            (TopDown L1 bars: frontend magenta, bad speculation red,",
        "             backend blue, retiring green)",
        "v           threads / cgroups / containers",
        "arrows, PgUp, PgDn, Home, End   select a row",
        "Enter       the selected row's history (%CPU, switches, TopDown)",
        "n           whom the rows waited behind, from the selected one on, and",
        "            the groups' suspects of slowing them down",
        "?           this help (any key closes it)",
    ];
    let time = [
        "[ ], left, right   previous / next window of the recording",
        "{ }         ten windows back / forward",
    ];
    let views = if state.can_group {
        ""
    } else {
        "(v: needs the unified cgroup2 hierarchy)"
    };
    let text: Vec<Line> = lines
        .iter()
        .copied()
        .chain(time.iter().copied().filter(|_| state.timeline.is_some()))
        .chain((!views.is_empty()).then_some(views))
        .map(Line::from)
        .collect();
    help_popup(frame, text);
}

/// `text` in a bordered box titled " keys " in the middle of the screen (`?` in every view).
pub(super) fn help_popup(frame: &mut Frame<'_>, text: Vec<Line<'_>>) {
    let area = frame.area();
    let width = area.width.min(76);
    let height = area.height.min(u16::try_from(text.len()).unwrap_or(12) + 2);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(text).block(Block::new().borders(Borders::ALL).title(" keys ")),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use topdown_common::cgroup::CgroupId;

    use crate::model::sort::SortKey;
    use crate::tma::view::RowTopDown;
    use topdown_common::thread::{Pid, Tid};

    use std::time::Duration;

    use ratatui::{Terminal, backend::TestBackend};

    use super::*;
    use crate::{
        attrib::{neighbours::Culprits, usage::CounterValue},
        model::rows::ThreadKey,
        pmu::counter_set::{Counter, EventAttr, Unit},
        tui::state::{Action, Key, View},
    };

    fn thread(tid: u32, comm: &str, cgroup: &str, ms: u64) -> Row {
        Row {
            who: Who::Thread(ThreadKey {
                tid: Tid(tid),
                pid: Pid(100),
                comm: comm.into(),
                cgroup: cgroup.into(),
                cgroup_id: CgroupId(1),
                exited: false,
                folded: 0,
            }),
            on_cpu: Duration::from_millis(ms),
            cpu_share: ms as f64 / 1000.0,
            waited: None,
            behind: Default::default(),
            wait_share: None,
            verdict: crate::model::verdict::Verdict::Ran,
            stalls: None,
            switches: 7,
            counters: vec![],
            topdown: RowTopDown::default(),
            run_fraction: 1.0,
            tree: None,
        }
    }

    /// A history of rows of the software set, nothing recorded.
    fn no_history() -> History {
        History::new(
            crate::model::columns::for_rows(
                &crate::model::columns::columns(&CounterSet::software(String::new())),
                false,
            ),
            None,
        )
    }

    /// The screen's lines after drawing `rows` at `width` x `height` in `state`.
    fn screen(rows: &[Row], width: u16, height: u16, state: &mut ViewState) -> Vec<String> {
        screen_with(rows, width, height, state, &no_history())
    }

    fn screen_with(
        rows: &[Row],
        width: u16,
        height: u16,
        state: &mut ViewState,
        history: &History,
    ) -> Vec<String> {
        let options = RowOptions::default();
        let buffer = render(
            rows,
            width,
            height,
            state,
            history,
            (&options, &Ranking::default()),
        );
        lines(&buffer, width, height)
            .into_iter()
            .map(|line| line.trim_end().to_owned())
            .collect()
    }

    /// The terminal's cells as lines of text.
    fn lines(buffer: &ratatui::buffer::Buffer, width: u16, height: u16) -> Vec<String> {
        (0..height)
            .map(|y| (0..width).map(|x| buffer[(x, y)].symbol()).collect())
            .collect()
    }

    /// The terminal's cells after drawing `rows` with `options` and `suspects`.
    fn render(
        rows: &[Row],
        width: u16,
        height: u16,
        state: &mut ViewState,
        history: &History,
        (options, suspects): (&RowOptions, &Ranking),
    ) -> ratatui::buffer::Buffer {
        let set = CounterSet::software("no hardware PMU".into());
        let window = Window {
            length: Duration::from_secs(1),
            threads: vec![],
            waits_measured: rows.iter().any(|r| r.waited.is_some()),
            neighbours_measured: rows.iter().any(|r| r.behind.is_some()),
            ..Window::default()
        };
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal
            .draw(|frame| {
                draw(
                    frame,
                    state,
                    &Screenful {
                        window: &window,
                        rows,
                        total: rows.len(),
                        set: &set,
                        columns: &crate::model::columns::for_rows(
                            &crate::model::columns::columns(&set),
                            false,
                        ),
                        options,
                        history,
                        suspects,
                    },
                );
            })
            .unwrap();
        terminal.backend().buffer().clone()
    }

    /// The status line names the events this PMU does not count, first.
    #[test]
    fn the_status_line_names_events_the_pmu_does_not_count() {
        let mut row = thread(1, "a", "/", 5);
        let set = CounterSet {
            name: "topdown",
            reason: "test".into(),
            counters: vec![Counter {
                name: "STALL_SLOT_BACKEND".into(),
                unit: Unit::Events,
                attr: EventAttr::default(),
                cpus: None,
            }],
        };
        let silent = CounterValue {
            silent: true,
            ..CounterValue::new(0, 5, 5)
        };
        row.counters.push(silent);
        let usage = crate::attrib::usage::ThreadUsage {
            tid: Tid(1),
            pid: Pid(100),
            comm: "a".into(),
            cgroup_id: CgroupId(1),
            switches: 7,
            on_cpu: row.on_cpu,
            waited: std::time::Duration::ZERO,
            behind: Default::default(),
            counters: row.counters.clone(),
            exited: false,
            folded: 0,
        };
        let window = Window {
            length: Duration::from_secs(1),
            threads: vec![usage],
            ..Window::default()
        };
        let options = RowOptions::default();
        let line = status_line(&Screenful {
            window: &window,
            rows: std::slice::from_ref(&row),
            total: 1,
            set: &set,
            columns: &crate::model::columns::for_rows(&crate::model::columns::columns(&set), false),
            options: &options,
            history: &no_history(),
            suspects: &Ranking::default(),
        });
        assert!(
            line.starts_with("NOT COUNTING on this PMU: STALL_SLOT_BACKEND"),
            "{line}"
        );
    }

    #[test]
    fn topdown_level_1_is_a_bar_of_coloured_cells_beside_the_numbers() {
        use crate::tma::{Model, NodeValue, TopDown, node::Node, view::TopdownView};
        let level1 = [
            ("tma_frontend_bound", 0.10),
            ("tma_bad_speculation", 0.05),
            ("tma_backend_bound", 0.62),
            // Inconsistent counts can put a node past its range: the bar clamps it.
            ("tma_retiring", -0.02),
        ];
        let mut row = thread(7, "busy", "/", 900);
        row.topdown = RowTopDown::from(vec![Some(TopDown {
            nodes: level1
                .iter()
                .map(|(name, value)| NodeValue {
                    node: Node::named(name).unwrap(),
                    value: *value,
                    over_threshold: *value > 0.2,
                    run_fraction: 1.0,
                    multiplexed_apart: false,
                })
                .collect::<Vec<_>>()
                .into(),
            bottleneck: Some("tma_backend_bound"),
            out_of_range: Vec::new(),
        })]);
        let options = RowOptions {
            sort: SortKey::ON_CPU,
            top: None,
            topdown: Some(TopdownView::single(
                Model::named("sapphirerapids").unwrap(),
                1,
                8,
                false,
            )),
            verbose: false,
            neighbours: false,
            group: None,
        };
        let mut state = ViewState::new(
            View::Threads,
            true,
            SortKey::ON_CPU,
            crate::model::sort::choices(&CounterSet::software(String::new()), &[]),
        );
        let buffer = render(
            &[row],
            160,
            10,
            &mut state,
            &no_history(),
            (&options, &Ranking::default()),
        );
        let header: String = (0..160).map(|x| buffer[(x, 1)].symbol()).collect();
        assert!(
            header.contains("TOPDOWN L1") && header.contains("Backend%"),
            "{header}"
        );
        let mut colours = std::collections::HashMap::new();
        for x in 0..160 {
            let cell = &buffer[(x, 2)];
            if cell.symbol() == "█" {
                *colours.entry(cell.fg).or_insert(0) += 1;
            }
        }
        // 0.10 + 0.05 + 0.62 (+ 0 clamped) = 0.77 of 20 cells: 2.6, 1.3, 16.1 -> 3, 1, 16.
        assert_eq!(colours.get(&Color::Magenta), Some(&3), "{colours:?}");
        assert_eq!(colours.get(&Color::Red), Some(&1), "{colours:?}");
        assert_eq!(colours.get(&Color::Blue), Some(&16), "{colours:?}");
        assert_eq!(colours.get(&Color::Green), None, "{colours:?}");
        assert_eq!(colours.values().sum::<i32>(), 20);
    }

    /// `n` names, under each row, the suspects of slowing it down with their odds; in a
    /// grouped view without any, why there are none.
    #[test]
    fn n_names_each_rows_suspects_with_their_odds_or_why_there_are_none() {
        let mut victim = thread(1000, "victim", "/a", 100);
        victim.waited = Some(Duration::ZERO);
        victim.behind = Some(Box::default());
        let rows = [victim, thread(1001, "quiet", "/b", 50)];
        let suspected = Ranking {
            victims: vec![crate::model::suspects::Victim {
                name: rows[0].who.label(),
                suspects: vec![crate::model::suspects::Suspect {
                    name: "docker:antagonist".into(),
                    correlation: 0.91,
                    windows: 24,
                    p: 1e-9,
                }],
            }],
            ipc_measured: true,
        };
        let options = RowOptions {
            group: Some(crate::attrib::groups::GroupOptions {
                by: GroupBy::Cgroup,
                rollup: false,
                keep: Vec::new(),
            }),
            ..RowOptions::default()
        };
        let mut state = ViewState::new(
            View::Threads,
            true,
            SortKey::ON_CPU,
            crate::model::sort::choices(&CounterSet::software(String::new()), &[]),
        );
        assert_eq!(state.on_key(Key::Char('n')), Action::Redraw);
        let (width, height) = (160, 12);
        let mut panel = |suspects: &Ranking| -> Vec<String> {
            let buffer = render(
                &rows,
                width,
                height,
                &mut state,
                &no_history(),
                (&options, suspects),
            );
            lines(&buffer, width, height)
        };
        let named = panel(&suspected);
        eprintln!("{}", named.join("\n"));
        assert!(
            named.iter().any(|l| l.contains("victim/1000")
                && l.contains("suspects: docker:antagonist r=0.91 over 24 windows (p=1e-9)")),
            "{named:#?}"
        );
        assert!(
            !named.iter().any(|l| l.contains("quiet/1001")),
            "{named:#?}"
        );
        assert!(
            !named.iter().any(|l| l.contains("suspects: none")),
            "{named:#?}"
        );
        let none = panel(&Ranking::default());
        eprintln!("{}", none.join("\n"));
        assert!(
            none.iter().any(|l| l.contains(
                "suspects: none named (no group's IPC is measured: the set counts no cycles"
            )),
            "the software set measures no IPC: {none:#?}"
        );
    }

    #[test]
    fn t_shows_threads_under_their_process() {
        let rows = crate::model::tree::arrange(
            vec![
                thread(11, "worker", "/", 500),
                thread(100, "main", "/", 100),
            ],
            &CounterSet::software(String::new()),
            &RowOptions::default(),
            false,
        );
        let mut state = ViewState::new(
            View::Threads,
            true,
            SortKey::ON_CPU,
            crate::model::sort::choices(&CounterSet::software(String::new()), &[]),
        );
        state.on_key(Key::Char('t'));
        let lines = screen(&rows, 100, 10, &mut state);
        assert!(lines[0].contains("  tree"), "{}", lines[0]);
        assert!(
            lines[2].contains(" main ") && lines[2].contains("60.0"),
            "the process: {lines:?}"
        );
        assert!(lines[3].contains("├─ worker"), "{lines:?}");
        assert!(lines[4].contains("└─ main"), "{lines:?}");
    }

    #[test]
    fn wait_behind_names_the_largest_culprit_and_n_lists_whom_rows_waited_behind() {
        let ms = |ms: u64| ms * 1_000_000;
        let mut victim = thread(1000, "victim", "/a", 100);
        victim.waited = Some(Duration::from_millis(300));
        victim.verdict = crate::model::verdict::Verdict::WaitingForCpu;
        victim.behind = Some(Box::new(Culprits {
            top: [("docker:batch".into(), ms(213)), ("/".into(), ms(60))]
                .into_iter()
                .collect(),
            threads: [("batch-worker/77".into(), ms(150))].into_iter().collect(),
            other_ns: ms(20),
            idle_ns: ms(5),
            unattributed_ns: ms(2),
            preempted: 4,
            preempted_by_other: 3,
        }));
        let mut calm = thread(1001, "calm", "/b", 50);
        calm.waited = Some(Duration::ZERO);
        calm.behind = Some(Box::default());
        let rows = [victim, calm];
        let mut state = ViewState::new(
            View::Threads,
            true,
            SortKey::ON_CPU,
            crate::model::sort::choices(&CounterSet::software(String::new()), &[]),
        );
        let table = screen(&rows, 200, 12, &mut state);
        eprintln!("{}", table.join("\n"));
        assert!(table[1].contains("WAIT BEHIND"), "{table:#?}");
        assert!(
            table[2].contains("docker:batch (71%)")
                && table[2].contains("waiting for CPU behind docker:batch")
                && table[2].contains(" 4 ")
                && table[2].contains(" 3 "),
            "the victim: {}",
            table[2]
        );
        assert!(
            table[3].contains("calm") && !table[3].contains('%'),
            "a row that did not wait names no culprit: {}",
            table[3]
        );
        assert_eq!(state.on_key(Key::Char('n')), Action::Redraw);
        let panel = screen(&rows, 200, 12, &mut state);
        eprintln!("{}", panel.join("\n"));
        let victim_line = panel
            .iter()
            .find(|l| l.contains("victim/1000"))
            .unwrap_or_else(|| panic!("the victim in the panel: {panel:#?}"));
        assert!(
            victim_line.contains("300.000")
                && victim_line.contains("docker:batch 213.000 (71%), / 60.000 (20%)")
                && victim_line
                    .contains("other 20.000 (7%), idle 5.000 (2%), unattributed 2.000 (1%)"),
            "{victim_line}"
        );
        assert!(
            panel.iter().any(|l| l
                .contains("threads: batch-worker/77 150.000 (50%), other threads 143.000 (48%)")),
            "the victim's culprit threads: {panel:#?}"
        );
        assert!(!panel.iter().any(|l| l.contains("calm/1001")), "{panel:#?}");
        assert!(panel[11].starts_with("n or Esc closes"), "{}", panel[11]);
        assert_eq!(state.on_key(Key::Esc), Action::Redraw);
        assert!(!state.neighbours);
    }

    #[test]
    fn the_table_fits_the_terminal_and_scrolls() {
        let long = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0123.slice/cri-containerd-abcdef.scope";
        let rows: Vec<Row> = (0..50)
            .map(|i| thread(1000 + i, &format!("worker-{i}"), long, 500 - u64::from(i)))
            .collect();
        let mut state = ViewState::new(
            View::Threads,
            true,
            SortKey::ON_CPU,
            crate::model::sort::choices(&CounterSet::software(String::new()), &[]),
        );
        let wide = screen(&rows, 120, 40, &mut state);
        assert!(wide[0].starts_with("topdown-bpf  software"), "{}", wide[0]);
        assert!(
            wide[1].trim_start().starts_with("TID") && wide[1].contains("CGROUP"),
            "{wide:#?}"
        );
        assert!(
            wide[2].contains("worker-0") && wide[2].contains("…"),
            "{}",
            wide[2]
        );
        assert!(
            wide[1].trim_end().ends_with("PREEMPT") && wide[2].contains(" 7 "),
            "switches, then the preemptions (not measured here; PREEMPT-X dropped first) \
             last: {wide:#?}"
        );
        assert!(wide[2].trim_end().ends_with('-'), "{}", wide[2]);
        assert_eq!(
            state.page, 36,
            "40 lines: title, table header, status, footer"
        );
        assert!(wide[39].starts_with("q quit"), "{}", wide[39]);
        // 80 columns: the cgroup column goes, the rest stays on one line each.
        let narrow = screen(&rows, 80, 24, &mut state);
        assert!(!narrow[1].contains("CGROUP"), "{}", narrow[1]);
        assert!(narrow[1].contains("SWITCHES") && narrow[2].contains("worker-0"));
        assert_eq!(state.page, 20);
        state.on_key(Key::End);
        let end = screen(&rows, 80, 24, &mut state);
        assert!(
            end[21].contains("worker-49"),
            "the last row at the bottom: {end:?}"
        );
        assert_eq!((state.selected, state.scroll), (49, 50 - 20));
        state.on_key(Key::Char('?'));
        let help = screen(&rows, 80, 24, &mut state);
        assert!(
            help.iter().any(|l| l.contains("filter by a substring")),
            "{help:?}"
        );
    }

    #[test]
    fn long_paths_keep_their_tail_and_columns_drop_in_order() {
        assert_eq!(shorten("/a/b", 10), "/a/b");
        let short = shorten("/kubepods/burstable/pod1234/abcdef", 12);
        assert_eq!(short.chars().count(), 12);
        assert!(
            short.starts_with('…') && short.ends_with("1234/abcdef"),
            "{short}"
        );
        let col = |name: &str, width, keep| Column {
            header: name.into(),
            cells: vec![],
            right: true,
            width,
            keep,
        };
        let all = || {
            vec![
                col("TID", 6, u8::MAX),
                col("PID", 6, 2),
                col("CGROUP", 20, 1),
                col("SWITCHES", 8, 3),
            ]
        };
        let names = |cs: Vec<Column>| cs.into_iter().map(|c| c.header).collect::<Vec<_>>();
        assert_eq!(names(fit(all(), 80)), ["TID", "PID", "CGROUP", "SWITCHES"]);
        assert_eq!(names(fit(all(), 30)), ["TID", "PID", "SWITCHES"]);
        assert_eq!(names(fit(all(), 20)), ["TID", "SWITCHES"]);
        assert_eq!(names(fit(all(), 3)), ["TID"]);
    }

    #[test]
    fn enter_shows_the_selected_rows_history() {
        let mut history = no_history();
        for ms in [100, 300, 900] {
            history.record(&[thread(7, "busy", "/", ms), thread(8, "idle", "/", 1)]);
        }
        let rows = [thread(7, "busy", "/", 900), thread(8, "idle", "/", 1)];
        let mut state = ViewState::new(
            View::Threads,
            true,
            SortKey::ON_CPU,
            crate::model::sort::choices(&CounterSet::software(String::new()), &[]),
        );
        state.on_key(Key::Enter);
        let lines = screen_with(&rows, 100, 20, &mut state, &history);
        let text = lines.join("\n");
        assert!(
            text.contains("busy") && text.contains("the last 3 windows"),
            "{text}"
        );
        let cpu = lines
            .iter()
            .find(|l| l.contains("%CPU"))
            .expect("a %CPU line");
        let cpu = cpu.trim_end_matches(['│', ' ']);
        assert!(cpu.ends_with("90.0"), "the latest value: {cpu}");
        // Every value column has its line, with its latest value as the table writes it.
        let latest = |header: &str| {
            lines
                .iter()
                .find(|l| l.contains(header) && l.contains('│'))
                .map(|l| l.trim_end_matches(['│', ' ']).to_owned())
        };
        assert!(
            latest("ON-CPU ms").is_some_and(|l| l.ends_with("900.000")),
            "{text}"
        );
        assert!(
            latest("SWITCHES").is_some_and(|l| l.ends_with('7')),
            "{text}"
        );
        state.on_key(Key::Esc);
        let table = screen_with(&rows, 100, 20, &mut state, &history).join("\n");
        assert!(!table.contains("windows (at most"), "closed: {table}");
    }
}
