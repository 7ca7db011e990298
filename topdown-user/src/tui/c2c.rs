//! The c2c browser (as `perf c2c report`'s TUI): the shared cache lines, hottest first, and on
//! Enter the selected line's Pareto entries (which offsets, which code, which threads). Used by
//! `c2c report` on a terminal and by live `c2c` while it records. Lines arrive computed
//! ([`crate::c2c::browse`]); this holds the keys' state and lays them out.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Modifier, Style},
    text::Line,
    widgets::{Cell, Paragraph, Row, Table},
};

use super::{
    draw::help_popup,
    state::{Action, Key},
};
use crate::c2c::browse::LineView;

/// Where the browser is: the selected line, the scroll, whether its entries are open.
#[derive(Clone, Debug, Default)]
pub struct C2cState {
    /// The selected line (index among the lines).
    pub selected: usize,
    /// First line shown.
    pub scroll: usize,
    /// Rows that fit (set by each draw).
    pub page: usize,
    /// The selected line's entries are shown.
    pub detail: bool,
    /// First entry shown.
    pub entry_scroll: usize,
    /// The keys are shown.
    pub help: bool,
}

impl C2cState {
    /// Applies `key`.
    pub fn on_key(&mut self, key: Key) -> Action {
        if self.help && !matches!(key, Key::Interrupt | Key::Resize) {
            self.help = false;
            return if key == Key::Char('q') {
                Action::Quit
            } else {
                Action::Redraw
            };
        }
        let page = self.page.max(1);
        let moved = |at: usize, key: Key| match key {
            Key::Up => Some(at.saturating_sub(1)),
            Key::Down => Some(at.saturating_add(1)),
            Key::PageUp => Some(at.saturating_sub(page)),
            Key::PageDown => Some(at.saturating_add(page)),
            Key::Home => Some(0),
            Key::End => Some(usize::MAX),
            _ => None,
        };
        match key {
            Key::Interrupt | Key::Char('q') => return Action::Quit,
            Key::Resize => {}
            Key::Enter => {
                self.detail = !self.detail;
                self.entry_scroll = 0;
            }
            Key::Esc if self.detail => self.detail = false,
            Key::Char('?' | 'h') => self.help = true,
            key => match (
                self.detail,
                moved(
                    if self.detail {
                        self.entry_scroll
                    } else {
                        self.selected
                    },
                    key,
                ),
            ) {
                (true, Some(to)) => self.entry_scroll = to,
                (false, Some(to)) => self.selected = to,
                (_, None) => return Action::None,
            },
        }
        Action::Redraw
    }

    /// Keeps the selection within `lines` lines, visible on a page of `page` rows.
    fn clamp(&mut self, lines: usize, page: usize) {
        self.page = page.max(1);
        self.selected = self.selected.min(lines.saturating_sub(1));
        if self.selected < self.scroll {
            self.scroll = self.selected;
        } else if self.selected >= self.scroll + self.page {
            self.scroll = self.selected + 1 - self.page;
        }
        self.scroll = self.scroll.min(lines.saturating_sub(self.page));
    }
}

/// What one frame shows.
pub struct C2cScreenful<'a> {
    /// The title line: what was recorded.
    pub title: &'a str,
    /// The status line: counts and losses.
    pub status: &'a str,
    /// The lines, in the table's order.
    pub lines: &'a [LineView],
}

/// Draws `data` in `state`.
pub fn draw(frame: &mut Frame<'_>, state: &mut C2cState, data: &C2cScreenful<'_>) {
    let keys = if state.detail {
        "Esc or Enter back to the lines  arrows scroll  q quit  ? help"
    } else {
        "q quit  arrows, PgUp, PgDn, Home, End select  Enter the line's entries  ? help"
    };
    let bands = super::Bands::of(frame);
    bands.draw(frame, data.title, data.status, keys);
    let body = bands.body;
    state.clamp(data.lines.len(), usize::from(body.height.saturating_sub(1)));
    match data.lines.get(state.selected) {
        Some(line) if state.detail => draw_entries(frame, body, state, line),
        _ => draw_lines(frame, body, state, data.lines),
    }
    if state.help {
        draw_help(frame);
    }
}

fn header(cells: &[&'static str]) -> Row<'static> {
    Row::new(cells.iter().map(|c| Cell::from(*c)))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED))
}

fn right(text: String) -> Cell<'static> {
    Cell::from(Line::from(text).right_aligned())
}

fn draw_lines(frame: &mut Frame<'_>, area: Rect, state: &C2cState, lines: &[LineView]) {
    let rows = lines
        .iter()
        .enumerate()
        .skip(state.scroll)
        .take(state.page)
        .map(|(i, line)| {
            let style = if i == state.selected {
                Style::new().add_modifier(Modifier::REVERSED)
            } else {
                Style::new()
            };
            Row::new([
                right(line.index.to_string()),
                right(format!("{:#x}", line.address)),
                right(line.node.clone()),
                right(format!("{:.2}%", line.share)),
                right(line.contended[0].to_string()),
                right(line.contended[1].to_string()),
                right(line.contended[2].to_string()),
                right(line.records.to_string()),
                right(line.loads.to_string()),
                right(line.stores.to_string()),
                Cell::from(line.hottest.clone()),
            ])
            .style(style)
        });
    let widths = [5, 18, 4, 8, 7, 7, 7, 8, 7, 7]
        .map(Constraint::Length)
        .into_iter()
        .chain([Constraint::Min(10)]);
    let table = Table::new(rows, widths).header(header(&[
        "INDEX",
        "ADDRESS",
        "NODE",
        "HITM%",
        "TOTAL",
        "LOCAL",
        "REMOTE",
        "RECORDS",
        "LOADS",
        "STORES",
        "HOTTEST SYMBOL",
    ]));
    frame.render_widget(table, area);
}

fn draw_entries(frame: &mut Frame<'_>, area: Rect, state: &mut C2cState, line: &LineView) {
    let [head, table_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(area);
    frame.render_widget(
        Paragraph::new(format!(
            "line {} at {:#x}: {} entries, {} contended loads ({} local, {} remote), {} stores",
            line.index,
            line.address,
            line.entries.len(),
            line.contended[0],
            line.contended[1],
            line.contended[2],
            line.stores
        ))
        .style(Style::new().add_modifier(Modifier::BOLD)),
        head,
    );
    let page = usize::from(table_area.height.saturating_sub(1)).max(1);
    state.entry_scroll = state
        .entry_scroll
        .min(line.entries.len().saturating_sub(page));
    let rows = line
        .entries
        .iter()
        .skip(state.entry_scroll)
        .take(page)
        .map(|e| {
            Row::new([
                right(format!("{:#x}", e.offset)),
                right(format!("{:.1}%", e.remote)),
                right(format!("{:.1}%", e.local)),
                right(format!("{:.1}%", e.stores)),
                right(e.pid.to_string()),
                Cell::from(format!("{}:{}", e.tid, e.comm)),
                right(format!("{:#x}", e.code)),
                right(e.records.to_string()),
                Cell::from(e.symbol.clone()),
                Cell::from(e.object.clone()),
                Cell::from(e.source.clone()),
            ])
        });
    let widths = [6, 6, 6, 6, 7, 16, 14, 7]
        .map(Constraint::Length)
        .into_iter()
        .chain([
            Constraint::Fill(3),
            Constraint::Fill(2),
            Constraint::Fill(2),
        ]);
    let table = Table::new(rows, widths).header(header(&[
        "OFFSET",
        "RMT%",
        "LCL%",
        "STORE%",
        "PID",
        "TID:COMM",
        "CODE",
        "RECORDS",
        "SYMBOL",
        "OBJECT",
        "SOURCE:LINE",
    ]));
    frame.render_widget(table, table_area);
}

fn draw_help(frame: &mut Frame<'_>) {
    let text = [
        "q           quit (live: stop recording; the report follows)",
        "arrows, PgUp, PgDn, Home, End   select a line (in a line: scroll)",
        "Enter       the line's Pareto entries: offsets, code, threads",
        "Esc         back to the lines",
        "HITM%: the line's share of all contended loads (the ranked count, -d)",
        "RMT% LCL%: an entry's share of the line's remote / local contended loads",
        "?           this help (any key closes it)",
    ];
    help_popup(frame, text.map(Line::from).to_vec());
}

/// The browser open on the terminal.
pub type C2cBrowser = super::FullScreen<C2cState>;

impl C2cBrowser {
    /// Draws `data`.
    pub fn draw(&mut self, data: &C2cScreenful<'_>) -> anyhow::Result<()> {
        self.show(data, draw)
    }
}

#[cfg(test)]
mod tests {
    use ratatui::{Terminal, backend::TestBackend};

    use super::*;
    use crate::c2c::browse::EntryView;

    fn line(index: usize, address: u64, entries: usize) -> LineView {
        LineView {
            index,
            address,
            node: "0".into(),
            share: 50.0 / (index as f64 + 1.0),
            contended: [40, 30, 10],
            records: 100,
            loads: 70,
            stores: 30,
            hottest: format!("[.] writer_{index}"),
            entries: (0..entries)
                .map(|i| EntryView {
                    offset: 8 * i as u64,
                    remote: 50.0,
                    local: 25.0,
                    stores: 12.5,
                    pid: 42,
                    tid: 43 + i as u32,
                    comm: "worker".into(),
                    code: 0x401000 + i as u64,
                    symbol: format!("[.] touch_{i}"),
                    object: "app".into(),
                    source: "app.c:10".into(),
                    records: 5,
                })
                .collect(),
        }
    }

    fn screen(lines: &[LineView], state: &mut C2cState) -> Vec<String> {
        let (width, height) = (120, 16);
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal
            .draw(|frame| {
                draw(
                    frame,
                    state,
                    &C2cScreenful {
                        title: "topdown-bpf c2c report: perf.data",
                        status: "1000 samples",
                        lines,
                    },
                );
            })
            .unwrap();
        let buffer = terminal.backend().buffer();
        (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect::<String>()
            })
            .collect()
    }

    #[test]
    fn lines_then_the_selected_lines_entries() {
        let lines: Vec<LineView> = (0..30)
            .map(|i| line(i, 0x1000 + 64 * i as u64, 3))
            .collect();
        let mut state = C2cState::default();
        let first = screen(&lines, &mut state);
        assert!(
            first[0].starts_with("topdown-bpf c2c report"),
            "{}",
            first[0]
        );
        assert!(first[1].contains("ADDRESS") && first[1].contains("HOTTEST SYMBOL"));
        assert!(
            first[2].contains("0x1000") && first[2].contains("50.00%"),
            "{}",
            first[2]
        );
        assert!(first[2].contains("[.] writer_0"));
        assert_eq!(state.page, 12, "16 lines: title, header, status, footer");
        for _ in 0..13 {
            state.on_key(Key::Down);
        }
        let scrolled = screen(&lines, &mut state);
        assert!(
            scrolled[13].contains("0x1340"),
            "line 13 selected, at the bottom: {scrolled:?}"
        );
        assert_eq!(state.on_key(Key::Enter), Action::Redraw);
        let entries = screen(&lines, &mut state);
        assert!(
            entries[1].contains("line 13 at 0x1340: 3 entries"),
            "{}",
            entries[1]
        );
        assert!(
            entries[2].contains("OFFSET") && entries[2].contains("SOURCE:LINE"),
            "{entries:#?}"
        );
        assert!(
            entries[4].contains("0x8") && entries[4].contains("[.] touch_1"),
            "{}",
            entries[4]
        );
        assert!(entries[4].contains("44:worker") && entries[4].contains("app.c:10"));
        state.on_key(Key::Esc);
        assert!(!state.detail);
        state.on_key(Key::Char('?'));
        let help = screen(&lines, &mut state).join("\n");
        assert!(help.contains("Pareto entries"), "{help}");
        assert_eq!(
            state.on_key(Key::Char('x')),
            Action::Redraw,
            "any key closes help"
        );
        assert_eq!(state.on_key(Key::Char('x')), Action::None);
        assert_eq!(state.on_key(Key::Char('q')), Action::Quit);
    }
}
