//! A window as rows for other engines (Parquet files, trace timelines): every thread and every
//! cgroup it charged, named, TopDown per row, none cut, each with the container it belongs to.

use crate::{
    attrib::{
        Window,
        cgroups::CgroupNames,
        containers::Owner,
        groups::{GroupBy, GroupOptions},
    },
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

use super::rows::{Row, RowOptions, SortKey, Who};
use crate::recording::format::Header;

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
pub struct ExportRow {
    /// The row, as every view computes it.
    pub row: Row,
    /// The container, pod, service or user slice its cgroup belongs to
    /// (`docker:1a2b3c4d5e6f`, `pod:<uid>`, `nginx.service`); `None` for anything else.
    pub container: Option<String>,
}

/// A window's exported rows: threads by tid, cgroups by id.
#[derive(Clone, Debug, Default)]
pub struct ExportWindow {
    /// Every thread that ran or exited in the window.
    pub threads: Vec<ExportRow>,
    /// Every cgroup charged in the window, each for itself (no descendants).
    pub cgroups: Vec<ExportRow>,
}

/// The export rows of `window` (the model step twice: per thread, per cgroup).
pub fn rows(
    window: &Window,
    names: &mut CgroupNames,
    set: &CounterSet,
    topdown: Option<&TopdownView>,
) -> ExportWindow {
    let options = |group: Option<GroupOptions>| RowOptions {
        sort: SortKey::Tid,
        top: None,
        topdown: topdown.cloned(),
        verbose: false,
        group,
    };
    let per_cgroup = GroupOptions {
        by: GroupBy::Cgroup,
        rollup: false,
        keep: Vec::new(),
    };
    let with_container = |row: Row| {
        let container = match &row.who {
            Who::Thread(thread) => Owner::of(&thread.cgroup).key(),
            Who::Group { group, .. } => group.owner.key(),
        };
        ExportRow { row, container }
    };
    let threads = super::step(window, names, set, &options(None)).rows;
    let cgroups = super::step(window, names, set, &options(Some(per_cgroup))).rows;
    ExportWindow {
        threads: threads.into_iter().map(with_container).collect(),
        cgroups: cgroups.into_iter().map(with_container).collect(),
    }
}
