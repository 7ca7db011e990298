//! Where a session's windows go: a recording, Parquet parts, a report, the full-screen view.
//! Each sink takes every window's [`Frame`] (rows computed once, on first use, for all of
//! them) and the run's totals at the end; a new output is one sink. The live session hands each
//! frame to every sink in turn (`commands::stat`).

use anyhow::Result;

use super::frame::Frame;
use crate::recording::{store::writer::StoreWriter, writer::Recorder};

/// A consumer of a session's windows.
pub trait WindowSink {
    /// One interval's window.
    fn window(&mut self, frame: &Frame<'_>) -> Result<()>;

    /// The run's totals: the sink writes its end; returns a line saying what it wrote, for
    /// standard error, if it has one.
    fn finish(self: Box<Self>, totals: &Frame<'_>) -> Result<Option<String>>;

    /// Whether the sink's reader went away (`| head -1`): a session whose every sink is closed
    /// ends quietly.
    fn closed(&self) -> bool {
        false
    }
}

/// The store writes each window as counted, into its open segment, the wall clock judging
/// what `--keep` removes.
impl WindowSink for StoreWriter {
    fn window(&mut self, frame: &Frame<'_>) -> Result<()> {
        self.window_at(
            frame.window(),
            &mut frame.names(),
            std::time::SystemTime::now(),
        )
    }

    fn finish(self: Box<Self>, _totals: &Frame<'_>) -> Result<Option<String>> {
        Ok(Some(self.said()))
    }
}

/// The recording writes each window as counted, with the names of the cgroups it charged.
impl WindowSink for Recorder {
    fn window(&mut self, frame: &Frame<'_>) -> Result<()> {
        Recorder::window(self, frame.window(), &mut frame.names())
    }

    fn finish(self: Box<Self>, totals: &Frame<'_>) -> Result<Option<String>> {
        let path = self.path().to_owned();
        let windows = Recorder::finish(*self, totals.window(), &mut totals.names())?;
        Ok(Some(format!(
            "recorded {windows} windows to {} (`topdown-bpf report -i {0}`)",
            path.display()
        )))
    }
}
