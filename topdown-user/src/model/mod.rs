//! The model step: what every view shows, computed once from a window's attribution (rows named,
//! processes and tree parents summed, TopDown per row), from per-core counts, and from a
//! recording's windows (timelines). Renderers (`report`, `tui`, `picture`) only format it.

pub mod cores;
pub mod rows;
pub mod timelines;
pub mod tree;
