//! The full-screen live view (ratatui + crossterm): on a terminal, the live table opens on the
//! alternate screen, redraws in place, fits the terminal, and takes keys (`?` lists them). The
//! terminal is restored when the view is dropped (quit, Ctrl-C, SIGTERM, an error) and on a
//! panic (ratatui's hook). Pipes, files, `-I`, `--json` and `--csv` keep the text outputs.

pub mod c2c;
pub mod cores;
pub mod draw;
pub mod history;
pub mod state;

use std::rc::Rc;

use anyhow::{Context as _, Result};
use ratatui::{
    DefaultTerminal,
    crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers},
};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use self::{
    draw::Screenful,
    history::History,
    state::{Key, View, ViewState},
};
use crate::{
    attrib::{Window, cgroups::CgroupNames, groups::GroupOptions},
    model::{
        columns::{self, Column},
        frame::Frame,
        rows::{Row, RowOptions},
        sink::WindowSink,
        sort::{self, SortKey},
        suspects::{self, Ranking, Suspects},
        tree,
    },
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// The terminal taken over (alternate screen, raw mode) and its keys, read on a thread of their
/// own; restored when dropped.
pub struct Screen {
    terminal: DefaultTerminal,
    keys: UnboundedReceiver<Key>,
}

impl Screen {
    /// Takes over the terminal and starts reading keys.
    pub fn open() -> Result<Self> {
        let terminal =
            ratatui::try_init().context("opening the terminal for the full-screen view")?;
        let (send, keys) = unbounded_channel();
        std::thread::Builder::new()
            .name("topdown-keys".into())
            .spawn(move || {
                while let Ok(event) = event::read() {
                    let key = match event {
                        Event::Key(key) if key.kind != KeyEventKind::Release => {
                            match (key.code, key.modifiers.contains(KeyModifiers::CONTROL)) {
                                (KeyCode::Char('c'), true) => Key::Interrupt,
                                (KeyCode::Char(c), _) => Key::Char(c),
                                (KeyCode::Enter, _) => Key::Enter,
                                (KeyCode::Esc, _) => Key::Esc,
                                (KeyCode::Backspace, _) => Key::Backspace,
                                (KeyCode::Up, _) => Key::Up,
                                (KeyCode::Down, _) => Key::Down,
                                (KeyCode::Left, _) => Key::Left,
                                (KeyCode::Right, _) => Key::Right,
                                (KeyCode::PageUp, _) => Key::PageUp,
                                (KeyCode::PageDown, _) => Key::PageDown,
                                (KeyCode::Home, _) => Key::Home,
                                (KeyCode::End, _) => Key::End,
                                _ => continue,
                            }
                        }
                        Event::Resize(..) => Key::Resize,
                        _ => continue,
                    };
                    if send.send(key).is_err() {
                        break;
                    }
                }
            })
            .context("starting the key reader")?;
        Ok(Self { terminal, keys })
    }

    /// The next key (pending forever once the reader is gone).
    pub async fn key(&mut self) -> Key {
        match self.keys.recv().await {
            Some(key) => key,
            None => std::future::pending().await,
        }
    }

    /// Draws one frame.
    pub fn draw(&mut self, frame: impl FnOnce(&mut ratatui::Frame<'_>)) -> Result<()> {
        self.terminal
            .draw(frame)
            .map(drop)
            .context("drawing the full-screen view")
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// A full-screen view: the terminal taken over and the state its keys change. Each view adds
/// how it draws its data (`impl FullScreen<CoresState>`); the live view holds a [`Screen`] with
/// its model instead, as it is also a session's sink.
pub struct FullScreen<S> {
    screen: Screen,
    /// What the view shows and where: selection, scroll, help.
    pub state: S,
}

impl<S: Default> FullScreen<S> {
    /// Takes over the terminal, the view in its first state.
    pub fn open() -> Result<Self> {
        Ok(Self {
            screen: Screen::open()?,
            state: S::default(),
        })
    }
}

impl<S> FullScreen<S> {
    /// The next key.
    pub async fn key(&mut self) -> Key {
        self.screen.key().await
    }

    /// Draws `data` with the view's `draw`.
    fn show<D: ?Sized>(
        &mut self,
        data: &D,
        draw: impl FnOnce(&mut ratatui::Frame<'_>, &mut S, &D),
    ) -> Result<()> {
        let state = &mut self.state;
        self.screen.draw(|frame| draw(frame, state, data))
    }
}

/// The bands every full-screen view has, top to bottom: its title, a body (the view draws
/// into it), a status line (dim) and the keys it takes (reversed). The live view, the per-core
/// view and the c2c browser share them.
pub struct Bands {
    /// Where the view draws what it shows.
    pub body: ratatui::layout::Rect,
    title: ratatui::layout::Rect,
    status: ratatui::layout::Rect,
    keys: ratatui::layout::Rect,
}

impl Bands {
    /// `frame`'s area cut into the bands.
    pub fn of(frame: &ratatui::Frame<'_>) -> Self {
        use ratatui::layout::{Constraint, Layout};
        let [title, body, status, keys] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(1),
            Constraint::Length(1),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        Self {
            body,
            title,
            status,
            keys,
        }
    }

    /// Draws the `title`, the `status` line and the `keys` in their bands.
    pub fn draw<'t>(
        &self,
        frame: &mut ratatui::Frame<'_>,
        title: impl Into<ratatui::text::Text<'t>>,
        status: impl Into<ratatui::text::Text<'t>>,
        keys: impl Into<ratatui::text::Text<'t>>,
    ) {
        use ratatui::{
            style::{Modifier, Style},
            widgets::Paragraph,
        };
        frame.render_widget(Paragraph::new(title), self.title);
        frame.render_widget(
            Paragraph::new(status).style(Style::new().add_modifier(Modifier::DIM)),
            self.status,
        );
        frame.render_widget(
            Paragraph::new(keys).style(Style::new().add_modifier(Modifier::REVERSED)),
            self.keys,
        );
    }
}

/// The open view: the terminal and its keys, and what it shows. As a live session's sink it
/// takes each window's frame and draws it; it also reads keys, so the session holds it apart
/// from its other sinks.
pub struct LiveView {
    screen: Screen,
    /// What it shows, and how.
    pub model: ViewModel,
    set: CounterSet,
    /// The command line's TopDown, sort and cgroup options.
    base: RowOptions,
    grouping: Option<GroupOptions>,
}

impl LiveView {
    /// Takes over the terminal (alternate screen, raw mode) and starts reading keys, to show
    /// rows of `set` in `state`, with the command line's `base` options and `grouping`.
    pub fn open(
        state: ViewState,
        set: &CounterSet,
        base: &RowOptions,
        grouping: Option<&GroupOptions>,
    ) -> Result<Self> {
        Ok(Self {
            screen: Screen::open()?,
            model: ViewModel::new(state, set, base.topdown.as_ref()),
            set: set.clone(),
            base: base.clone(),
            grouping: grouping.cloned(),
        })
    }

    /// The next key (pending forever once the reader is gone).
    pub async fn key(&mut self) -> Key {
        self.screen.key().await
    }

    /// Draws the latest window on the terminal (see [`ViewModel::frame`]).
    pub fn draw(&mut self) -> Result<()> {
        let (model, set, base, grouping) = (
            &mut self.model,
            &self.set,
            &self.base,
            self.grouping.as_ref(),
        );
        self.screen
            .draw(|frame| model.frame(frame, set, base, grouping))
    }
}

impl WindowSink for LiveView {
    fn window(&mut self, frame: &Frame<'_>) -> Result<()> {
        self.model.update(frame, self.grouping.as_ref());
        self.draw()
    }

    /// The view closes before the totals: they follow on the normal screen.
    fn finish(self: Box<Self>, _: &Frame<'_>) -> Result<Option<String>> {
        Ok(None)
    }
}

/// Every view of one window, when it arrives: its thread, cgroup and container rows as the
/// frame computed them (named, TopDown per row, shared with the other outputs; the only place
/// the view reads cgroup names; keys and draws never do).
#[derive(Clone, Debug)]
struct NamedWindow {
    window: Window,
    threads: Rc<Vec<Row>>,
    /// The cgroup and container rows, indexed by [`group_index`].
    groups: [Rc<Vec<Row>>; 2],
}

/// Where a grouped view's named usage is kept in [`NamedWindow::groups`].
const fn group_index(view: View) -> Option<usize> {
    match view {
        View::Threads => None,
        View::Cgroups => Some(0),
        View::Containers => Some(1),
    }
}

impl NamedWindow {
    /// `frame`'s window in every view (`grouping`: the command line's roll-up and subtrees).
    fn of(frame: &Frame<'_>, grouping: Option<&GroupOptions>) -> Self {
        let groups = [View::Cgroups, View::Containers].map(|view| {
            let group = group_options(view, grouping);
            match group.as_ref().and_then(|group| frame.groups(group)) {
                Some(rows) => Rc::clone(rows),
                // Past the groupings a frame keeps: computed for the view.
                None => {
                    let options = RowOptions {
                        group,
                        ..RowOptions::default()
                    };
                    Rc::new(frame.rows(&options).rows.into_iter().cloned().collect())
                }
            }
        });
        Self {
            window: frame.window().clone(),
            threads: Rc::clone(frame.threads()),
            groups,
        }
    }
}

/// The rows of one view and sort of the latest window, computed once (TopDown per row), until
/// the window, the view or the sort changes; and the rows shown (filtered, in a tree with its
/// parents summed), until the filter, the order or the tree changes too.
struct Computed {
    view: View,
    sort: SortKey,
    /// The view's rows of the window, shared with it (not copied: with two copies of 20,000
    /// rows a window, copying was 17 % of the view's samples and dropping 9 %).
    all: Rc<Vec<Row>>,
    /// Their order: places in `all`, sorted.
    order: Vec<usize>,
    /// The filter, reversed, tree: what `shown` was selected with.
    selection: Option<(String, bool, bool)>,
    shown: Vec<Row>,
}

impl Computed {
    /// The view's rows in their order.
    fn rows(&self) -> impl Iterator<Item = &Row> + Clone {
        self.order.iter().map(|&at| &self.all[at])
    }
}

/// What the windows recorded in one view leave: each row's recent values (its history panel)
/// and, in a grouped view, the groups' suspects ([`crate::model::suspects`]).
struct Recent {
    history: History,
    /// The view the windows were recorded in.
    view: View,
    /// The latest windows' groups, for suspects.
    suspects: Suspects,
    /// Their ranking, as of the latest window recorded (`None`: not ranked since; a replay
    /// records hundreds of windows and ranks once).
    ranking: Option<Ranking>,
}

impl Recent {
    /// Adds a window's `rows` (in [`Recent::view`]), whose value `columns` are these.
    fn record<'r, I>(&mut self, rows: I, columns: &[Column])
    where
        I: IntoIterator<Item = &'r Row>,
        I::IntoIter: Clone,
    {
        let rows = rows.into_iter();
        self.history.record(rows.clone());
        if group_index(self.view).is_some() {
            self.suspects
                .push(suspects::samples(rows, columns, |row| row.who.label()));
        }
        self.ranking = None;
    }

    /// What a frame shows of the windows recorded: the rows' histories, and the suspects'
    /// ranking (ranked once per new window).
    fn shown(&mut self) -> (&History, &Ranking) {
        let ranking = self.ranking.get_or_insert_with(|| self.suspects.ranking());
        (&self.history, ranking)
    }

    /// Forgets every window: the view changed to `view`, whose rows are other rows.
    fn forget(&mut self, view: View) {
        self.history.clear();
        self.suspects.clear();
        self.ranking = None;
        self.view = view;
    }
}

/// What the full-screen view shows, without a terminal: the state the keys change, the latest
/// window, and the rows' histories. It draws into any frame (the terminal, or a picture).
pub struct ViewModel {
    /// Sort, filter, scroll, pause, view.
    pub state: ViewState,
    /// The latest window drawn (kept while paused, and for redraws on keys), named.
    latest: Option<NamedWindow>,
    /// Its rows in the view and sort shown.
    computed: Option<Computed>,
    /// The latest window is not in `recent` yet.
    fresh: bool,
    /// Each row's recent values and the groups' suspects, in the view shown.
    recent: Recent,
    /// The value columns of the set's rows, built once.
    columns: Vec<Column>,
}

impl ViewModel {
    /// Nothing shown yet, in `state`, for rows of `set` with TopDown `view`.
    pub fn new(state: ViewState, set: &CounterSet, view: Option<&TopdownView>) -> Self {
        let columns = columns::columns(set);
        Self {
            recent: Recent {
                history: History::new(columns.clone(), view),
                view: state.view,
                suspects: Suspects::default(),
                ranking: None,
            },
            columns,
            state,
            latest: None,
            computed: None,
            fresh: false,
        }
    }

    /// Takes the latest window's frame, unless paused, in every view (the collector's tick: the
    /// only time cgroup names are looked up).
    pub fn update(&mut self, frame: &Frame<'_>, grouping: Option<&GroupOptions>) {
        if !self.state.paused || self.latest.is_none() {
            self.latest = Some(NamedWindow::of(frame, grouping));
            self.computed = None;
            self.fresh = true;
        }
    }

    /// Shows the last of `windows` (a recording's, up to the position in time), its rows'
    /// history made from the windows before it, in the view the state shows. A recording's
    /// names come from the file: nothing is read from /sys.
    pub fn replay(
        &mut self,
        windows: &[Window],
        set: &CounterSet,
        base: &RowOptions,
        grouping: Option<&GroupOptions>,
        names: &mut CgroupNames,
    ) {
        self.recent.forget(self.state.view);
        let options = self.options(base, grouping);
        let first = windows.len().saturating_sub(history::KEEP);
        let (before, last) = match &windows[first..] {
            [before @ .., last] => (before, Some(last)),
            [] => (&[][..], None),
        };
        let topdown = base.topdown.as_ref();
        for window in before {
            let frame = Frame::new(window, names, set, topdown);
            self.recent.record(frame.rows(&options).rows, &self.columns);
        }
        self.latest = last.map(|window| {
            let frame = Frame::new(window, names, set, topdown);
            self.recent.record(frame.rows(&options).rows, &self.columns);
            NamedWindow::of(&frame, grouping)
        });
        self.computed = None;
        self.fresh = false;
    }

    /// The rows' options in the state's view and sort, over the command line's `base`.
    fn options(&self, base: &RowOptions, grouping: Option<&GroupOptions>) -> RowOptions {
        RowOptions {
            sort: self.state.sort_key().clone(),
            top: None,
            group: group_options(self.state.view, grouping),
            ..base.clone()
        }
    }

    /// Draws the latest window into `frame` as the state asks: `base` gives TopDown and the
    /// cgroup options of the command line, the state the view, sort, filter and tree. Rows are
    /// computed once per window, view and sort, and selected once per filter, order and tree; a
    /// draw (a key that scrolls, a resize) only lays them out.
    pub fn frame(
        &mut self,
        frame: &mut ratatui::Frame<'_>,
        set: &CounterSet,
        base: &RowOptions,
        grouping: Option<&GroupOptions>,
    ) {
        let options = self.options(base, grouping);
        let Some(latest) = &self.latest else {
            return;
        };
        let (view, sort) = (self.state.view, self.state.sort_key().clone());
        let stale = self
            .computed
            .as_ref()
            .is_none_or(|c| c.view != view || c.sort != sort);
        if stale {
            let all = match group_index(view) {
                Some(at) => &latest.groups[at],
                None => &latest.threads,
            };
            // Sorted as places, not copies: sorting copies moved 280-byte rows (a third of the
            // view's time at 20,000 rows a window); only the rows shown are copied, once
            // (`select`).
            let order = sort::places(all, set, &options.sort);
            self.computed = Some(Computed {
                view,
                sort,
                all: Rc::clone(all),
                order,
                selection: None,
                shown: Vec::new(),
            });
        }
        let Some(computed) = &mut self.computed else {
            return;
        };
        if self.recent.view != view {
            self.recent.forget(view);
            self.fresh = true;
        }
        if std::mem::take(&mut self.fresh) {
            self.recent.record(computed.rows(), &self.columns);
        }
        let selection = (
            self.state.filter.clone(),
            self.state.reverse,
            self.state.shows_tree(),
        );
        if computed.selection.as_ref() != Some(&selection) {
            let mut shown = self.state.select(computed.rows());
            if selection.2 {
                shown = tree::arrange(shown, set, &options, selection.1);
            }
            computed.shown = shown;
            computed.selection = Some(selection);
        }
        let (history, suspects) = self.recent.shown();
        draw::draw(
            frame,
            &mut self.state,
            &Screenful {
                window: &latest.window,
                rows: &computed.shown,
                total: computed.order.len(),
                set,
                columns: &columns::for_rows(&self.columns, options.group.is_some()),
                options: &options,
                history,
                suspects,
            },
        );
    }
}

/// The grouping of `view`, with the command line's roll-up and subtrees.
fn group_options(view: View, grouping: Option<&GroupOptions>) -> Option<GroupOptions> {
    view.group_by().map(|by| GroupOptions {
        by,
        rollup: grouping.is_some_and(|g| g.rollup),
        keep: grouping.map(|g| g.keep.clone()).unwrap_or_default(),
    })
}

/// The view a session opens in: threads, or the grouping the command line asked for.
pub fn first_view(grouping: Option<&GroupOptions>) -> View {
    match grouping.map(|g| g.by) {
        None => View::Threads,
        Some(crate::attrib::groups::GroupBy::Cgroup) => View::Cgroups,
        Some(crate::attrib::groups::GroupBy::Container) => View::Containers,
    }
}
