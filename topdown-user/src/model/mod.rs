//! The model step: what every view shows, computed once from a window's attribution (its
//! [`frame::Frame`]: rows named, TopDown per row, shared by every output; groups and tree parents
//! summed), from per-core counts, and from a recording's windows (timelines). Renderers
//! (`report`, `tui`, `picture`) only format it; a live session's outputs are
//! [`sink::WindowSink`]s of the frame.

pub mod columns;
pub mod cores;
pub mod diff;
pub mod diff_rows;
pub mod export;
pub mod flat;
pub mod frame;
pub mod rows;
pub mod sink;
pub mod sort;
pub mod suspects;
pub mod timelines;
pub mod tree;
pub mod verdict;

use self::rows::Row;

/// A window's rows as one output shows them: the frame's rows (computed once: named, TopDown
/// per row), sorted, cut to `--top`.
#[derive(Clone, Debug, Default)]
pub struct WindowRows<'a> {
    /// The rows shown, in order.
    pub rows: Vec<&'a Row>,
    /// How many there were before the cut.
    pub total: usize,
}
