//! A window as rows for other engines (Parquet files, trace timelines): every thread and every
//! cgroup it charged, named, TopDown per row, none cut (the frame's rows), each with the
//! container it belongs to.

use super::{
    frame::Frame,
    rows::{Row, Who},
};
use crate::{attrib::containers::Owner, recording::format::Header};

/// What every exported row of a run shares.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunMeta {
    /// Host name.
    pub host: String,
    /// When collection started, in nanoseconds since the Unix epoch.
    pub started_unix_ns: u64,
    /// The topdown-bpf version that recorded it.
    pub tool_version: String,
}

impl RunMeta {
    /// The run a recording's header describes.
    pub fn of(header: &Header) -> Self {
        Self {
            host: header.machine.hostname.clone(),
            started_unix_ns: header.started_unix_ns,
            tool_version: header.tool_version.clone(),
        }
    }
}

/// One exported row: a thread's or a cgroup's usage over a window.
#[derive(Clone, Debug)]
pub struct ExportRow<'a> {
    /// The row, as every view computes it.
    pub row: &'a Row,
    /// The container, pod, service or user slice its cgroup belongs to
    /// (`docker:1a2b3c4d5e6f`, `pod:<uid>`, `nginx.service`); `None` for anything else.
    pub container: Option<String>,
}

/// A window's exported rows: threads by tid, cgroups by id.
#[derive(Clone, Debug, Default)]
pub struct ExportWindow<'a> {
    /// Every thread that ran or exited in the window.
    pub threads: Vec<ExportRow<'a>>,
    /// Every cgroup charged in the window, each for itself (no descendants).
    pub cgroups: Vec<ExportRow<'a>>,
}

/// The export rows of `frame`'s window: its thread and cgroup rows with their containers.
pub fn rows<'a>(frame: &'a Frame<'_>) -> ExportWindow<'a> {
    let with_container = |row: &'a Row| {
        let container = match &row.who {
            Who::Thread(thread) => Owner::of(&thread.cgroup).key(),
            Who::Group { group, .. } => group.owner.key(),
        };
        ExportRow { row, container }
    };
    ExportWindow {
        threads: frame.threads().iter().map(with_container).collect(),
        cgroups: frame.cgroups().iter().map(with_container).collect(),
    }
}
