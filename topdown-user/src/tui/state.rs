//! What the full-screen view shows and how keys change it: sort, filter, selection and
//! scrolling, pause, view, a row's history, help. Pure state: no terminal here, so every key is tested without one.

use crate::{
    attrib::groups::GroupBy,
    model::{
        rows::Row,
        sort::{SortChoice, SortKey},
    },
};

/// A key the view reacts to (the terminal's key events, reduced to what matters here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Enter.
    Enter,
    /// Escape.
    Esc,
    /// Backspace.
    Backspace,
    /// Arrow up.
    Up,
    /// Arrow down.
    Down,
    /// Arrow left.
    Left,
    /// Arrow right.
    Right,
    /// Page up.
    PageUp,
    /// Page down.
    PageDown,
    /// Home.
    Home,
    /// End.
    End,
    /// Ctrl-C (raw mode turns it into a key).
    Interrupt,
    /// Not a key: the terminal was resized.
    Resize,
}

/// What the session does after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing changed.
    None,
    /// Draw again with the new state.
    Redraw,
    /// Leave the view and print the run's totals.
    Quit,
    /// A recording's view moved to another window ([`ViewState::timeline`]).
    Seek,
}

/// Where a recording's view is in time: which of its windows it shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeline {
    /// The window shown (0 is the first).
    pub at: usize,
    /// Windows in the recording.
    pub len: usize,
}

impl Timeline {
    /// Moves by `step` windows, within the recording; whether it moved.
    fn step(&mut self, step: isize) -> bool {
        let last = self.len.saturating_sub(1);
        let to = self.at.saturating_add_signed(step).min(last);
        std::mem::replace(&mut self.at, to) != to
    }
}

/// Which rows the view shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// One row per thread.
    Threads,
    /// One row per cgroup.
    Cgroups,
    /// One row per container (pod, service, user slice).
    Containers,
}

impl View {
    /// How rows of this view are grouped.
    pub const fn group_by(self) -> Option<GroupBy> {
        match self {
            Self::Threads => None,
            Self::Cgroups => Some(GroupBy::Cgroup),
            Self::Containers => Some(GroupBy::Container),
        }
    }

    /// Its name in the title.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Threads => "threads",
            Self::Cgroups => "cgroups",
            Self::Containers => "containers",
        }
    }
}

/// The view's state.
#[derive(Clone, Debug)]
pub struct ViewState {
    /// Rows of threads, cgroups or containers.
    pub view: View,
    /// Whether `v` may switch to cgroups and containers (needs the unified cgroup2 hierarchy).
    pub can_group: bool,
    /// What `s`, `<` and `>` cycle through (columns only groups have are skipped while the
    /// view shows threads).
    pub sort_keys: Vec<SortChoice>,
    /// Index of the sort key in `sort_keys`.
    pub sort: usize,
    /// Reversed order.
    pub reverse: bool,
    /// Rows whose name, ids or cgroup contain this (empty: all rows).
    pub filter: String,
    /// The filter being typed after `/`, until Enter applies it or Esc drops it.
    pub editing: Option<String>,
    /// First row shown.
    pub scroll: usize,
    /// The selected row (index among the rows shown); the table scrolls to keep it visible.
    pub selected: usize,
    /// The selected row's history is open (Enter).
    pub detail: bool,
    /// Whom the rows waited behind is open (`n`), from the selected row on.
    pub neighbours: bool,
    /// Rows that fit on the screen (set by each draw; scrolling moves by it).
    pub page: usize,
    /// The table keeps its last window while paused (collection goes on).
    pub paused: bool,
    /// The help overlay is shown.
    pub help: bool,
    /// A recording's position in time (`None` live).
    pub timeline: Option<Timeline>,
    /// Rows as a tree: threads under their process, cgroups under their parent.
    pub tree: bool,
}

impl ViewState {
    /// The first state: sorted by `sort` (added to the cycle `choices` when not in it, as a
    /// counter or a share of the window is not), in `view`.
    pub fn new(view: View, can_group: bool, sort: SortKey, mut choices: Vec<SortChoice>) -> Self {
        let index = choices
            .iter()
            .position(|c| c.key == sort)
            .unwrap_or_else(|| {
                let name = match &sort {
                    SortKey::Field(name) => name.to_string(),
                    other => format!("{other:?}").to_lowercase(),
                };
                choices.push(SortChoice {
                    key: sort,
                    name,
                    groups_only: false,
                });
                choices.len() - 1
            });
        let sort_keys = choices;
        Self {
            view,
            can_group,
            sort_keys,
            sort: index,
            reverse: false,
            filter: String::new(),
            editing: None,
            scroll: 0,
            selected: 0,
            detail: false,
            neighbours: false,
            page: 10,
            paused: false,
            help: false,
            timeline: None,
            tree: false,
        }
    }

    /// Whether rows are shown as a tree (asked, and the view has one: containers do not).
    pub fn shows_tree(&self) -> bool {
        self.tree && self.view != View::Containers
    }

    /// The sort key in force.
    pub fn sort_key(&self) -> &SortKey {
        &self.sort_keys[self.sort].key
    }

    /// How the title names the sort in force.
    pub fn sort_name(&self) -> &str {
        &self.sort_keys[self.sort].name
    }

    /// Moves the sort `step` stops along the cycle (1 or `len - 1`), past what the view's rows
    /// do not have.
    fn next_sort(&mut self, step: usize) {
        let len = self.sort_keys.len();
        for _ in 0..len {
            self.sort = (self.sort + step) % len;
            if self.view != View::Threads || !self.sort_keys[self.sort].groups_only {
                return;
            }
        }
    }

    /// Applies `key`.
    pub fn on_key(&mut self, key: Key) -> Action {
        match key {
            Key::Interrupt => return Action::Quit,
            Key::Resize => return Action::Redraw,
            _ => {}
        }
        if let Some(text) = &mut self.editing {
            match key {
                Key::Char(c) => text.push(c),
                Key::Backspace => {
                    text.pop();
                }
                Key::Enter => {
                    self.filter = self.editing.take().unwrap_or_default();
                    self.top();
                }
                Key::Esc => {
                    self.editing = None;
                    self.filter.clear();
                    self.top();
                }
                _ => return Action::None,
            }
            return Action::Redraw;
        }
        if self.help {
            self.help = false;
            return if key == Key::Char('q') {
                Action::Quit
            } else {
                Action::Redraw
            };
        }
        if let Some(timeline) = &mut self.timeline {
            let step = match key {
                Key::Left | Key::Char('[') => Some(-1),
                Key::Right | Key::Char(']') => Some(1),
                Key::Char('{') => Some(-10),
                Key::Char('}') => Some(10),
                _ => None,
            };
            if let Some(step) = step {
                return if timeline.step(step) {
                    Action::Seek
                } else {
                    Action::None
                };
            }
        }
        match key {
            Key::Char('q') => return Action::Quit,
            Key::Char(' ' | 'p') => self.paused = !self.paused,
            Key::Char('/') => self.editing = Some(String::new()),
            Key::Enter => {
                self.detail = !self.detail;
                self.neighbours = false;
            }
            Key::Char('n') => {
                self.neighbours = !self.neighbours;
                self.detail = false;
            }
            Key::Esc if self.detail || self.neighbours => {
                self.detail = false;
                self.neighbours = false;
            }
            Key::Esc => {
                self.filter.clear();
                self.top();
            }
            Key::Char('s' | '>') => self.next_sort(1),
            Key::Char('<') => self.next_sort(self.sort_keys.len() - 1),
            Key::Char('r') => self.reverse = !self.reverse,
            Key::Char('t') if self.view != View::Containers => {
                self.tree = !self.tree;
                self.top();
            }
            Key::Char('v') if self.can_group => {
                self.view = match self.view {
                    View::Threads => View::Cgroups,
                    View::Cgroups => View::Containers,
                    View::Containers => View::Threads,
                };
                // Threads have no group's column: back to the first stop.
                if self.view == View::Threads && self.sort_keys[self.sort].groups_only {
                    self.sort = 0;
                }
                self.top();
                self.detail = false;
            }
            Key::Char('?' | 'h') => self.help = true,
            Key::Up => self.selected = self.selected.saturating_sub(1),
            Key::Down => self.selected = self.selected.saturating_add(1),
            Key::PageUp => self.selected = self.selected.saturating_sub(self.page),
            Key::PageDown => self.selected = self.selected.saturating_add(self.page),
            Key::Home => self.top(),
            Key::End => self.selected = usize::MAX,
            _ => return Action::None,
        }
        Action::Redraw
    }

    /// The rows the filter keeps, in the order asked (rows come sorted by [`Self::sort_key`]).
    pub fn select<'r>(&self, rows: impl IntoIterator<Item = &'r Row>) -> Vec<Row> {
        let needle = self.filter.to_lowercase();
        let mut kept: Vec<Row> = rows
            .into_iter()
            .filter(|row| {
                needle.is_empty()
                    || row
                        .who
                        .key_values(false)
                        .iter()
                        .any(|value| value.to_lowercase().contains(&needle))
            })
            .cloned()
            .collect();
        // A tree reverses each level itself.
        if self.reverse && !self.shows_tree() {
            kept.reverse();
        }
        kept
    }

    /// Keeps the selection within `rows` rows and the scroll position where the selection is
    /// visible, `page` rows fitting.
    pub fn clamp(&mut self, rows: usize, page: usize) {
        self.page = page.max(1);
        self.selected = self.selected.min(rows.saturating_sub(1));
        if self.selected < self.scroll {
            self.scroll = self.selected;
        } else if self.selected >= self.scroll + self.page {
            self.scroll = self.selected + 1 - self.page;
        }
        self.scroll = self.scroll.min(rows.saturating_sub(self.page));
    }

    /// Back to the first row.
    fn top(&mut self) {
        self.selected = 0;
        self.scroll = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmu::counter_set::CounterSet;

    fn choices(nodes: &[&'static str]) -> Vec<SortChoice> {
        crate::model::sort::choices(&CounterSet::software(String::new()), nodes)
    }

    fn state() -> ViewState {
        ViewState::new(
            View::Threads,
            true,
            SortKey::ON_CPU,
            choices(&["tma_retiring"]),
        )
    }

    #[test]
    fn sort_keys_cycle_both_ways_and_reverse() {
        let mut s = state();
        assert_eq!(s.sort_key(), &SortKey::ON_CPU);
        assert_eq!(s.sort_name(), "ON-CPU ms", "the column's header");
        assert_eq!(s.on_key(Key::Char('<')), Action::Redraw);
        assert_eq!(s.sort_key(), &SortKey::Field("tma_retiring".into()));
        s.on_key(Key::Char('s'));
        s.on_key(Key::Char('>'));
        assert_eq!(s.sort_key(), &SortKey::WAIT);
        s.on_key(Key::Char('>'));
        assert_eq!(s.sort_key(), &SortKey::SWITCHES);
        s.on_key(Key::Char('r'));
        assert!(s.reverse);
        let other = ViewState::new(
            View::Threads,
            false,
            "msr/tsc/".parse().unwrap(),
            choices(&[]),
        );
        assert_eq!(other.sort_key(), &SortKey::Field("msr/tsc/".into()));
        assert_eq!(other.sort_name(), "msr/tsc/");
    }

    /// Threads have no group's columns (throttling, pressure): the cycle passes them by while
    /// the view shows threads, stops at each in a group view, and leaves one for the first stop
    /// when the view comes back to threads.
    #[test]
    fn the_sort_cycle_skips_group_columns_in_the_thread_view() {
        let mut s = state();
        let stops = |s: &mut ViewState| {
            (0..s.sort_keys.len())
                .map(|_| {
                    s.on_key(Key::Char('s'));
                    s.sort
                })
                .collect::<std::collections::BTreeSet<usize>>()
        };
        let groups_only = s.sort_keys.iter().filter(|c| c.groups_only).count();
        assert!(groups_only >= 4, "throttling and pressure");
        let threads = stops(&mut s);
        assert_eq!(threads.len(), s.sort_keys.len() - groups_only);
        assert!(threads.iter().all(|&i| !s.sort_keys[i].groups_only));
        s.on_key(Key::Char('v'));
        assert_eq!(
            stops(&mut s).len(),
            s.sort_keys.len(),
            "every stop for cgroups"
        );
        while !s.sort_keys[s.sort].groups_only {
            s.on_key(Key::Char('s'));
        }
        s.on_key(Key::Char('v'));
        assert_eq!(s.view, View::Containers);
        assert!(s.sort_keys[s.sort].groups_only, "kept for containers");
        s.on_key(Key::Char('v'));
        assert_eq!(s.sort_key(), &SortKey::ON_CPU);
    }

    #[test]
    fn filter_is_typed_applied_and_cleared() {
        let mut s = state();
        s.on_key(Key::Char('/'));
        for c in "ab".chars() {
            s.on_key(Key::Char(c));
        }
        s.on_key(Key::Backspace);
        assert_eq!(s.filter, "", "not applied while typed");
        // 'q' while typing is text, not quit.
        assert_eq!(s.on_key(Key::Char('q')), Action::Redraw);
        s.on_key(Key::Enter);
        assert_eq!(s.filter, "aq");
        assert_eq!(s.editing, None);
        s.on_key(Key::Char('/'));
        s.on_key(Key::Esc);
        assert_eq!(s.filter, "", "Esc clears");
    }

    #[test]
    fn view_pause_help_quit_and_scrolling() {
        let mut s = state();
        s.on_key(Key::Char('v'));
        assert_eq!(s.view, View::Cgroups);
        s.on_key(Key::Char('v'));
        s.on_key(Key::Char('v'));
        assert_eq!(s.view, View::Threads);
        let mut flat = ViewState::new(View::Threads, false, SortKey::ON_CPU, choices(&[]));
        assert_eq!(
            flat.on_key(Key::Char('v')),
            Action::None,
            "no cgroup2: threads only"
        );
        assert_eq!(s.on_key(Key::Char('t')), Action::Redraw);
        assert!(s.shows_tree(), "threads under their process");
        s.view = View::Containers;
        assert!(!s.shows_tree(), "containers have no tree");
        assert_eq!(s.on_key(Key::Char('t')), Action::None);
        s.view = View::Threads;
        s.on_key(Key::Char('t'));
        assert!(!s.shows_tree());
        s.on_key(Key::Char(' '));
        assert!(s.paused);
        s.on_key(Key::Char('p'));
        assert!(!s.paused);
        s.on_key(Key::Char('?'));
        assert!(s.help);
        assert_eq!(s.on_key(Key::Down), Action::Redraw);
        assert!(!s.help, "any key closes help");
        s.clamp(100, 20);
        s.on_key(Key::PageDown);
        s.on_key(Key::Down);
        s.clamp(100, 20);
        assert_eq!(
            (s.selected, s.scroll),
            (21, 2),
            "the selection stays in view"
        );
        s.on_key(Key::Up);
        s.clamp(100, 20);
        assert_eq!((s.selected, s.scroll), (20, 2));
        s.on_key(Key::End);
        s.clamp(100, 20);
        assert_eq!((s.selected, s.scroll), (99, 80));
        s.on_key(Key::Enter);
        assert!(s.detail, "Enter opens the row's history");
        s.on_key(Key::Esc);
        assert!(!s.detail, "Esc closes it");
        s.on_key(Key::Home);
        assert_eq!((s.selected, s.scroll), (0, 0));
        assert_eq!(s.on_key(Key::Char('q')), Action::Quit);
        assert_eq!(s.on_key(Key::Interrupt), Action::Quit);
    }

    #[test]
    fn a_recording_moves_in_time_within_its_windows() {
        let mut s = state();
        assert_eq!(
            s.on_key(Key::Right),
            Action::None,
            "live: no time to move in"
        );
        s.timeline = Some(Timeline { at: 4, len: 12 });
        assert_eq!(s.on_key(Key::Right), Action::Seek);
        assert_eq!(s.on_key(Key::Char('}')), Action::Seek);
        assert_eq!(s.timeline.unwrap().at, 11, "stops at the last window");
        assert_eq!(s.on_key(Key::Char(']')), Action::None, "already there");
        s.on_key(Key::Char('{'));
        s.on_key(Key::Left);
        s.on_key(Key::Char('['));
        assert_eq!(s.timeline.unwrap().at, 0);
        assert_eq!(s.on_key(Key::Left), Action::None);
    }
}
