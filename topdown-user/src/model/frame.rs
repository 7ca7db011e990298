//! One window's model, computed once for everything that shows it: every thread's row (named,
//! TopDown per row) and every cgroup's, on first use, shared by the report, the full-screen
//! view, Parquet and the trace, so a window's TopDown is computed once however many outputs a
//! run writes. The sinks of a live session (`attrib::sink::WindowSink`) each take the frame.

use std::{
    cell::{OnceCell, RefCell, RefMut},
    rc::Rc,
};

use super::{
    WindowRows,
    rows::{self, Row, RowOptions},
    sort::{self, SortKey},
};
use crate::{
    attrib::{
        Window,
        cgroups::CgroupNames,
        groups::{GroupBy, GroupOptions},
        named,
    },
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// Groupings a frame keeps the rows of ([`Frame::rows`]): a frame is asked for a few (a
/// report's, the full-screen view's cgroups and containers); beyond them, rows are computed
/// per call.
const GROUPINGS: usize = 4;

/// A window and the rows computed from it, each kind on first use.
pub struct Frame<'a> {
    window: &'a Window,
    set: &'a CounterSet,
    topdown: Option<&'a TopdownView>,
    names: RefCell<&'a mut CgroupNames>,
    threads: OnceCell<Rc<Vec<Row>>>,
    cgroups: OnceCell<Vec<Row>>,
    /// Every group's row (TopDown per group) per grouping asked for, computed once.
    groupings: [OnceCell<(GroupOptions, Rc<Vec<Row>>)>; GROUPINGS],
    /// Rows of groups asked for beyond [`GROUPINGS`] groupings, kept as long as the frame.
    grouped: typed_arena::Arena<Row>,
}

impl<'a> Frame<'a> {
    /// The frame of `window`, counted by `set`, with TopDown per row where `topdown` is given;
    /// `names` names its cgroups (the collector's tick: the only time /sys/fs/cgroup is read;
    /// a recording's names come from the file).
    pub fn new(
        window: &'a Window,
        names: &'a mut CgroupNames,
        set: &'a CounterSet,
        topdown: Option<&'a TopdownView>,
    ) -> Self {
        Self {
            window,
            set,
            topdown,
            names: RefCell::new(names),
            threads: OnceCell::new(),
            cgroups: OnceCell::new(),
            groupings: Default::default(),
            grouped: typed_arena::Arena::new(),
        }
    }

    /// The window.
    pub const fn window(&self) -> &'a Window {
        self.window
    }

    /// The cgroup names (for a sink that records them).
    pub fn names(&self) -> RefMut<'_, &'a mut CgroupNames> {
        self.names.borrow_mut()
    }

    /// Every thread that ran or exited in the window, named, TopDown per row, in tid order.
    pub fn threads(&self) -> &Rc<Vec<Row>> {
        self.threads.get_or_init(|| {
            let options = self.options(SortKey::Tid, None);
            let mut names = self.names.borrow_mut();
            let named = named::name_threads(self.window, &mut names);
            Rc::new(rows::rows(self.window, named, self.set, &options).0)
        })
    }

    /// Every cgroup charged in the window, each for itself (no descendants), by id.
    pub fn cgroups(&self) -> &[Row] {
        self.cgroups.get_or_init(|| {
            let per_cgroup = GroupOptions {
                by: GroupBy::Cgroup,
                rollup: false,
                keep: Vec::new(),
            };
            self.grouped(&self.options(SortKey::Tid, Some(per_cgroup)))
                .0
        })
    }

    /// The rows `options` ask for (sort, `--top`, grouping; TopDown is the frame's): threads
    /// from [`Frame::threads`], groups from [`Frame::groups`], sorted and cut, nothing computed
    /// or copied again.
    pub fn rows(&self, options: &RowOptions) -> WindowRows<'_> {
        let all: &[Row] = match &options.group {
            None => self.threads(),
            Some(group) => match self.groups(group) {
                Some(groups) => groups.as_slice(),
                None => return self.rows_once(options),
            },
        };
        let mut rows: Vec<&Row> = all.iter().collect();
        sort::sort_refs(&mut rows, self.set, &options.sort);
        let total = rows.len();
        rows.truncate(options.top.unwrap_or(total));
        WindowRows { rows, total }
    }

    /// Every group of `group`'s grouping (named, summed, TopDown per group), in id order,
    /// computed on its first use, shared as the thread rows are; `None` past [`GROUPINGS`]
    /// groupings.
    pub fn groups(&self, group: &GroupOptions) -> Option<&Rc<Vec<Row>>> {
        for cell in &self.groupings {
            let (grouping, rows) = cell.get_or_init(|| {
                let options = self.options(SortKey::Tid, Some(group.clone()));
                (group.clone(), Rc::new(self.grouped(&options).0))
            });
            if grouping == group {
                return Some(rows);
            }
        }
        None
    }

    /// Rows of a grouping beyond those kept: computed for this call, kept with the frame.
    fn rows_once(&self, options: &RowOptions) -> WindowRows<'_> {
        let grouped = RowOptions {
            top: options.top,
            ..self.options(options.sort.clone(), options.group.clone())
        };
        let (rows, total) = self.grouped(&grouped);
        let rows = self.grouped.alloc_extend(rows);
        WindowRows {
            rows: rows.iter().collect(),
            total,
        }
    }

    fn grouped(&self, options: &RowOptions) -> (Vec<Row>, usize) {
        let named = named::name(
            self.window,
            &mut self.names.borrow_mut(),
            options.group.as_ref(),
        );
        rows::rows(self.window, named, self.set, options)
    }

    fn options(&self, sort: SortKey, group: Option<GroupOptions>) -> RowOptions {
        RowOptions {
            sort,
            top: None,
            topdown: self.topdown.cloned(),
            verbose: false,
            neighbours: false,
            group,
        }
    }
}

#[cfg(test)]
mod tests {
    use topdown_common::cgroup::CgroupId;

    use std::time::Duration;

    use super::*;
    use crate::attrib::usage::{CgroupUsage, ThreadUsage};

    fn usage(tid: u32, ns: u64, switches: u64, cgroup_id: u64) -> ThreadUsage {
        ThreadUsage::clocked(tid, 100 + tid % 2, CgroupId(cgroup_id), ns, switches)
    }

    fn window() -> Window {
        let threads = vec![
            usage(3, 300, 1, 7),
            usage(1, 100, 5, 7),
            usage(2, 900, 2, 8),
            usage(4, 50, 9, 8),
        ];
        let mut cgroups = vec![
            CgroupUsage::new(CgroupId(7), 0),
            CgroupUsage::new(CgroupId(8), 0),
        ];
        for t in &threads {
            let cgroup = &mut cgroups[(t.cgroup_id.0 - 7) as usize];
            cgroup.switches += t.switches;
            cgroup.on_cpu += t.on_cpu;
            crate::attrib::usage::add_counters(&mut cgroup.counters, &t.counters);
        }
        Window {
            length: Duration::from_secs(1),
            threads,
            cgroups,
            ..Window::default()
        }
    }

    /// Every output's rows are the ones it would have computed for itself (the same rows, in
    /// the same order, cut the same), and the frame computes its thread rows once however many
    /// outputs ask.
    #[test]
    fn outputs_get_the_rows_they_would_compute_and_threads_are_computed_once() {
        let window = window();
        let set = CounterSet::software(String::new());
        let mut names = CgroupNames::at(None);
        let frame = Frame::new(&window, &mut names, &set, None);
        let tids = |rows: &[&Row]| -> Vec<u32> {
            rows.iter().map(|r| r.who.thread().unwrap().tid.0).collect()
        };
        let first = Rc::as_ptr(frame.threads());
        assert_eq!(
            tids(&frame.threads().iter().collect::<Vec<_>>()),
            [1, 2, 3, 4]
        );
        for (sort, top, expected) in [
            (SortKey::ON_CPU, None, vec![2, 3, 1, 4]),
            (SortKey::SWITCHES, Some(2), vec![4, 1]),
            (SortKey::Tid, Some(3), vec![1, 2, 3]),
        ] {
            let options = RowOptions {
                sort: sort.clone(),
                top,
                ..RowOptions::default()
            };
            let shown = frame.rows(&options);
            assert_eq!(tids(&shown.rows), expected, "{sort:?}");
            assert_eq!(shown.total, 4);
            // The same as computing them for this output alone.
            let mut alone = CgroupNames::at(None);
            let named = named::name(&window, &mut alone, None);
            let (own, total) = rows::rows(&window, named, &set, &options);
            assert_eq!(tids(&own.iter().collect::<Vec<_>>()), expected);
            assert_eq!(total, 4);
        }
        assert_eq!(Rc::as_ptr(frame.threads()), first, "computed once");
        // Groups: summed per cgroup, sorted and cut as asked; each cgroup for itself.
        let per_cgroup = RowOptions {
            sort: SortKey::ON_CPU,
            top: Some(1),
            group: Some(GroupOptions {
                by: GroupBy::Cgroup,
                rollup: false,
                keep: Vec::new(),
            }),
            ..RowOptions::default()
        };
        let grouped = frame.rows(&per_cgroup);
        assert_eq!(grouped.total, 2);
        assert_eq!(grouped.rows.len(), 1);
        assert_eq!(grouped.rows[0].on_cpu, Duration::from_nanos(950));
        assert_eq!(grouped.rows[0].switches, 11);
        let by_id = RowOptions {
            sort: SortKey::Tid,
            top: None,
            ..per_cgroup.clone()
        };
        let again = frame.rows(&by_id);
        assert_eq!(again.rows.len(), 2);
        assert_eq!(again.rows[0].on_cpu, Duration::from_nanos(400));
        assert!(
            std::ptr::eq(again.rows[1], grouped.rows[0]),
            "a grouping's rows computed once, sorted and cut per call"
        );
        let cgroups: Vec<(u64, u64)> = frame
            .cgroups()
            .iter()
            .map(|r| (r.on_cpu.as_nanos() as u64, r.switches))
            .collect();
        assert_eq!(cgroups, [(400, 6), (950, 11)]);
    }
}
