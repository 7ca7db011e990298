//! The model step: what every view shows, computed once from a window's attribution (rows named,
//! processes and tree parents summed, TopDown per row), from per-core counts, and from a
//! recording's windows (timelines). Renderers (`report`, `tui`, `picture`) only format it.

pub mod cgroups;
pub mod columns;
pub mod cores;
pub mod export;
pub mod rows;
pub mod timelines;
pub mod tree;

use crate::{
    attrib::{Window, cgroups::CgroupNames, named},
    pmu::counter_set::CounterSet,
};

use self::rows::{Row, RowOptions};

/// A window's rows, computed once: named, TopDown per row, sorted, cut to `--top`.
#[derive(Clone, Debug, Default)]
pub struct WindowRows {
    /// The rows shown.
    pub rows: Vec<Row>,
    /// How many there were before the cut.
    pub total: usize,
}

/// The model step of one window, on the collector's tick (or a recording's window): its usage
/// named (the only place that may read /sys/fs/cgroup) and its rows computed as `options` ask.
pub fn step(
    window: &Window,
    names: &mut CgroupNames,
    set: &CounterSet,
    options: &RowOptions,
) -> WindowRows {
    let named = named::name(window, names, options.group.as_ref());
    let (rows, total) = rows::rows(window, named, set, options);
    WindowRows { rows, total }
}
