//! Where a session's windows go: a recording, Parquet parts, a report, a trace, the
//! full-screen view. Each sink takes every window's [`Frame`] (rows computed once, on first
//! use, for all of them) and the run's totals at the end; a new output is one sink. One road:
//! the live session hands each interval's frame to every sink ([`to_every`], `commands::stat`)
//! and `report` a recording's windows the same way ([`replay`]).

use anyhow::Result;

use super::frame::Frame;
use crate::{
    attrib::{Window, cgroups::CgroupNames},
    pmu::counter_set::CounterSet,
    recording::{store::writer::StoreWriter, writer::Recorder},
    tma::view::TopdownView,
};

/// The sinks of one run.
pub type Sinks<'a> = Vec<Box<dyn WindowSink + 'a>>;

/// Hands one window's frame to every sink, in order.
pub fn to_every(sinks: &mut Sinks<'_>, frame: &Frame<'_>) -> Result<()> {
    for sink in sinks {
        sink.window(frame)?;
    }
    Ok(())
}

/// Hands the run's totals to every sink, which ends it; the lines they say, in order.
pub fn finish_every(sinks: Sinks<'_>, totals: &Frame<'_>) -> Result<Vec<String>> {
    let mut said = Vec::new();
    for sink in sinks {
        said.extend(sink.finish(totals)?);
    }
    Ok(said)
}

/// A finished run through `sinks`: each of `windows` as a frame, then `totals`, as the live
/// session hands them at each interval and at its end. The lines the sinks say.
pub fn replay(
    mut sinks: Sinks<'_>,
    windows: &[Window],
    totals: &Window,
    names: &mut CgroupNames,
    set: &CounterSet,
    view: Option<&TopdownView>,
) -> Result<Vec<String>> {
    for window in windows {
        to_every(&mut sinks, &Frame::new(window, names, set, view))?;
    }
    finish_every(sinks, &Frame::new(totals, names, set, view))
}

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
