//! The per-core view full-screen (`--per-core` on a terminal): one row per physical core, its
//! CPUs, TopDown nodes and bar where a TopDown set runs, and its counters, redrawn in place.
//! Rows arrive computed ([`crate::model::cores::rows`]); this lays them out.

use ratatui::{
    Frame,
    layout::Constraint,
    style::{Modifier, Style},
    text::Line,
    widgets::{Cell, Row, Table},
};

use super::{
    draw::level1_bar,
    state::{Action, Key},
};
use crate::{
    model::{columns::Column, cores::CoreRow},
    tma::node::Node,
};

/// Scroll position and page.
#[derive(Clone, Debug, Default)]
pub struct CoresState {
    /// First core shown.
    pub scroll: usize,
    /// Rows that fit (set by each draw).
    pub page: usize,
}

impl CoresState {
    /// Applies `key`: `q` and Ctrl-C quit, arrows and pages scroll.
    pub fn on_key(&mut self, key: Key) -> Action {
        let page = self.page.max(1);
        self.scroll = match key {
            Key::Interrupt | Key::Char('q') => return Action::Quit,
            Key::Resize => self.scroll,
            Key::Up => self.scroll.saturating_sub(1),
            Key::Down => self.scroll.saturating_add(1),
            Key::PageUp => self.scroll.saturating_sub(page),
            Key::PageDown => self.scroll.saturating_add(page),
            Key::Home => 0,
            Key::End => usize::MAX,
            _ => return Action::None,
        };
        Action::Redraw
    }
}

/// What one frame shows.
pub struct CoresScreenful<'a> {
    /// The title line.
    pub title: &'a str,
    /// The status line.
    pub status: &'a str,
    /// TopDown node columns (empty without TopDown).
    pub nodes: &'a [Node],
    /// The value columns a core's counters make (IPC, MPKI), each row's `values`.
    pub columns: &'a [Column],
    /// Counter names.
    pub counters: &'a [String],
    /// One row per core.
    pub rows: &'a [CoreRow],
}

/// Draws `data` in `state`.
pub fn draw(frame: &mut Frame<'_>, state: &mut CoresState, data: &CoresScreenful<'_>) {
    let bands = super::Bands::of(frame);
    let keys = "q quit (the totals follow)  arrows, PgUp, PgDn, Home, End scroll";
    bands.draw(frame, data.title, data.status, keys);
    let body = bands.body;
    state.page = usize::from(body.height.saturating_sub(1)).max(1);
    state.scroll = state.scroll.min(data.rows.len().saturating_sub(state.page));
    let topdown = !data.nodes.is_empty();
    let mut header: Vec<String> = vec!["CORE".into(), "CPUS".into()];
    header.extend(data.nodes.iter().map(|n| format!("{}%", n.short())));
    if topdown {
        header.push("TOPDOWN L1".into());
    }
    header.extend(data.columns.iter().map(|c| c.header.to_owned()));
    header.extend(data.counters.iter().cloned());
    let right = |text: String| Cell::from(Line::from(text).right_aligned());
    let rows = data
        .rows
        .iter()
        .skip(state.scroll)
        .take(state.page)
        .map(|row| {
            let mut cells = vec![Cell::from(row.core.clone()), Cell::from(row.cpus.clone())];
            let td = row.topdown.as_ref();
            for node in data.nodes {
                let value = td.and_then(|td| td.value(node.name));
                cells.push(right(
                    value.map_or_else(|| "-".into(), |v| format!("{:.1}", v * 100.0)),
                ));
            }
            if topdown {
                cells.push(Cell::from(level1_bar(td)));
            }
            let values = data.columns.iter().zip(&row.values);
            cells.extend(values.map(|(c, v)| right(c.show(*v))));
            cells.extend(
                row.counters
                    .iter()
                    .map(|c| right(crate::report::count_cell(*c))),
            );
            Row::new(cells)
        });
    let widths: Vec<Constraint> = header
        .iter()
        .enumerate()
        .map(|(i, h)| match i {
            0 => Constraint::Length(8),
            1 => Constraint::Length(12),
            _ if h == "TOPDOWN L1" => Constraint::Length(20),
            _ => Constraint::Length(u16::try_from(h.len().max(12)).unwrap_or(12)),
        })
        .collect();
    let header = Row::new(header.into_iter().map(Cell::from))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED));
    frame.render_widget(Table::new(rows, widths).header(header), body);
}

/// The per-core view open on the terminal.
pub type CoresView = super::FullScreen<CoresState>;

impl CoresView {
    /// Draws `data`.
    pub fn draw(&mut self, data: &CoresScreenful<'_>) -> anyhow::Result<()> {
        self.show(data, draw)
    }
}

#[cfg(test)]
mod tests {
    use ratatui::{Terminal, backend::TestBackend};

    use super::*;

    #[test]
    fn one_row_per_core_fitted_and_scrolled() {
        let mut set = crate::pmu::counter_set::CounterSet::software(String::new());
        set.counters = vec![
            crate::pmu::counter_set::Counter::event("cycles", 0, 0),
            crate::pmu::counter_set::Counter::event("instructions", 0, 1),
        ];
        let columns = crate::model::columns::counter_columns(&set);
        let rows: Vec<CoreRow> = (0..30)
            .map(|i| CoreRow {
                core: format!("S0-C{i}"),
                cpus: format!("{i},{}", i + 30),
                topdown: None,
                counters: vec![Some(1e9 + f64::from(i)), None],
                values: vec![Some(crate::model::columns::Number::Float(1.25))],
            })
            .collect();
        let mut state = CoresState::default();
        let counters = ["cycles".to_owned(), "instructions".to_owned()];
        let screen = |state: &mut CoresState| {
            let mut terminal = Terminal::new(TestBackend::new(80, 12)).unwrap();
            terminal
                .draw(|frame| {
                    draw(
                        frame,
                        state,
                        &CoresScreenful {
                            title: "topdown-bpf  software  per core",
                            status: "losses: none",
                            nodes: &[],
                            columns: &columns,
                            counters: &counters,
                            rows: &rows,
                        },
                    );
                })
                .unwrap();
            let buffer = terminal.backend().buffer().clone();
            (0..12)
                .map(|y| (0..80).map(|x| buffer[(x, y)].symbol()).collect::<String>())
                .collect::<Vec<_>>()
        };
        let first = screen(&mut state);
        assert!(
            first[1].starts_with("CORE") && first[1].contains("IPC") && first[1].contains("cycles"),
            "{first:?}"
        );
        assert!(
            first[2].contains("1.25"),
            "IPC as tables write it: {first:?}"
        );
        assert!(
            first[2].starts_with("S0-C0") && first[2].contains("0,30"),
            "{first:?}"
        );
        assert!(first[2].contains("1000000000"), "{first:?}");
        assert_eq!(state.page, 8, "12 lines: title, header, status, footer");
        state.on_key(Key::End);
        let end = screen(&mut state);
        assert!(
            end[9].starts_with("S0-C29"),
            "the last core at the bottom: {end:?}"
        );
        assert_eq!(state.on_key(Key::Char('q')), Action::Quit);
    }
}
