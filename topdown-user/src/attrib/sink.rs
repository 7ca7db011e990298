//! Where a session's windows go: a recording, Parquet parts, a report. Each sink takes every
//! window as attributed, with the names (cgroup paths) the tick may look up, and the run's
//! totals at the end; a new output is one sink. The live session hands each window to every
//! sink in turn (`commands::stat`).

use anyhow::Result;

use super::{Window, cgroups::CgroupNames};

/// A consumer of a session's windows.
pub trait WindowSink {
    /// One interval's window.
    fn window(&mut self, window: &Window, names: &mut CgroupNames) -> Result<()>;

    /// The run's totals: the sink writes its end; returns a line saying what it wrote, for
    /// standard error, if it has one.
    fn finish(self: Box<Self>, totals: &Window, names: &mut CgroupNames) -> Result<Option<String>>;

    /// Whether the sink's reader went away (`| head -1`): a session whose every sink is closed
    /// ends quietly.
    fn closed(&self) -> bool {
        false
    }
}
