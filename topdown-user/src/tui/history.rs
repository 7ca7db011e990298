//! Each row's recent values for its history panel (Enter): every value column (on-CPU time,
//! %CPU, switches, IPC where counted) and each TopDown node of the view, one sample per window,
//! the last [`KEEP`] windows. Rows are known by their key columns (a thread's tid, pid, name and
//! cgroup; a group's path or label), in the view they were recorded in.

use std::collections::{HashMap, VecDeque};

use crate::{
    model::{
        columns::{self, Column, NodeColumn, Number},
        rows::Row,
    },
    tma::view::TopdownView,
};

/// Windows kept per row (five minutes at the default second).
pub const KEEP: usize = 300;

/// Rows recorded per window: the first ones in the view's order (the hottest by default). With
/// thousands of threads coming and going each second, recording all of them would hold
/// millions of one-sample histories for five minutes.
pub const ROWS: usize = 1000;

/// One window's values of one row.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Each value column's value, in [`History::columns`] order.
    pub values: Vec<Option<Number>>,
    /// The TopDown nodes measured in the window: (index in [`History::nodes`], fraction).
    pub nodes: Vec<(u16, f64)>,
}

/// The samples of every row seen in the last [`KEEP`] windows.
#[derive(Debug)]
pub struct History {
    rows: HashMap<String, (u64, VecDeque<Sample>)>,
    windows: u64,
    columns: Vec<Column>,
    nodes: Vec<NodeColumn>,
    /// A node column's index by part and node name.
    node_at: HashMap<(usize, &'static str), u16>,
}

impl History {
    /// Nothing recorded yet, of rows with these value `columns` and TopDown `view`.
    pub fn new(columns: Vec<Column>, view: Option<&TopdownView>) -> Self {
        let nodes = view.map(columns::view_nodes).unwrap_or_default();
        let node_at = nodes
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some(((c.part, c.node.name), u16::try_from(i).ok()?)))
            .collect();
        Self {
            rows: HashMap::new(),
            windows: 0,
            columns,
            nodes,
            node_at,
        }
    }

    /// The value columns samples hold, in order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The TopDown node columns samples name.
    pub fn nodes(&self) -> &[NodeColumn] {
        &self.nodes
    }

    /// What names `row` across windows.
    pub fn key(row: &Row) -> String {
        row.who.key_values(false).join("\u{1f}")
    }

    /// Adds the first [`ROWS`] of a window's `rows` that are still alive (an exited thread
    /// has no future to watch); forgets rows not recorded for [`KEEP`] windows, and, past
    /// twice [`ROWS`] rows, those not recorded in this window. Memory is then bounded by
    /// `2 * ROWS * KEEP` samples, whatever the churn.
    pub fn record<'r>(&mut self, rows: impl IntoIterator<Item = &'r Row>) {
        self.windows += 1;
        let now = self.windows;
        let alive = rows
            .into_iter()
            .filter(|row| row.who.thread().is_none_or(|t| !t.exited))
            .take(ROWS);
        for row in alive {
            let nodes = row
                .topdown
                .iter()
                .enumerate()
                .filter_map(|(part, td)| Some((part, td.as_ref()?)))
                .flat_map(|(part, td)| td.nodes.iter().map(move |n| (part, n)))
                .filter(|(_, n)| n.value.is_finite())
                .filter_map(|(part, n)| Some((*self.node_at.get(&(part, n.node.name))?, n.value)))
                .collect();
            let values = self.columns.iter().map(|c| c.value(row)).collect();
            let (seen, samples) = self.rows.entry(Self::key(row)).or_default();
            *seen = now;
            if samples.len() == KEEP {
                samples.pop_front();
            }
            samples.push_back(Sample { values, nodes });
        }
        let horizon = if self.rows.len() > 2 * ROWS {
            1
        } else {
            KEEP as u64
        };
        self.rows.retain(|_, (seen, _)| now - *seen < horizon);
    }

    /// `row`'s samples, oldest first.
    pub fn of(&self, row: &Row) -> Option<&VecDeque<Sample>> {
        self.rows.get(&Self::key(row)).map(|(_, samples)| samples)
    }

    /// Forgets everything (the view changed: its rows are other rows).
    pub fn clear(&mut self) {
        self.rows.clear();
    }
}

#[cfg(test)]
mod tests {
    use topdown_common::cgroup::CgroupId;
    use topdown_common::thread::{Pid, Tid};

    use crate::tma::view::RowTopDown;

    use super::*;
    use crate::{
        attrib::usage::CounterValue,
        model::rows::{ThreadKey, Who},
        pmu::counter_set::CounterSet,
    };

    fn row(tid: u32, exited: bool) -> Row {
        Row {
            who: Who::Thread(ThreadKey {
                tid: Tid(tid),
                pid: Pid(1),
                comm: "t".into(),
                cgroup: "/".into(),
                cgroup_id: CgroupId(1),
                exited,
                folded: 0,
            }),
            on_cpu: std::time::Duration::from_nanos(1),
            cpu_share: 0.01,
            waited: None,
            behind: Default::default(),
            wait_share: None,
            verdict: crate::model::verdict::Verdict::Ran,
            stalls: None,
            switches: 1,
            counters: vec![CounterValue::default()],
            topdown: RowTopDown::default(),
            run_fraction: 1.0,
            tree: None,
        }
    }

    #[test]
    fn memory_stays_bounded_under_churn() {
        let mut history =
            History::new(columns::columns(&CounterSet::software(String::new())), None);
        let live = row(1, false);
        // Every window: one long-lived thread, and 3,000 new threads, half already dead.
        for window in 0..50u32 {
            let mut rows = vec![live.clone()];
            rows.extend((0..3000).map(|i| row(10 + window * 3000 + i, i % 2 == 0)));
            history.record(&rows);
            assert!(
                history.rows.len() <= 2 * ROWS,
                "{} rows kept",
                history.rows.len()
            );
        }
        assert_eq!(history.of(&live).map(VecDeque::len), Some(50));
        assert!(
            history.of(&row(10, true)).is_none(),
            "dead threads are not recorded"
        );
    }

    /// Each sample holds every value column's value and the nodes the row measured, by their
    /// place in the view's node list: read back, they are the row's own.
    #[test]
    fn samples_hold_the_rows_columns_and_measured_nodes() {
        let mut recording = crate::recording::fixtures::topdown_recording();
        let view = recording
            .topdown
            .clone()
            .expect("the fixture measures TopDown");
        let set = recording.set.clone();
        let mut history = History::new(columns::columns(&set), Some(&view));
        let window = recording.windows[0].clone();
        let frame =
            crate::model::frame::Frame::new(&window, &mut recording.names, &set, Some(&view));
        let rows = frame.threads().clone();
        history.record(rows.iter());
        let mut nodes_seen = 0;
        for row in rows.iter() {
            let sample = history.of(row).and_then(|s| s.back()).expect("recorded");
            let values: Vec<Option<Number>> =
                history.columns().iter().map(|c| c.value(row)).collect();
            assert_eq!(sample.values, values);
            let got: Vec<(&str, f64)> = sample
                .nodes
                .iter()
                .map(|&(at, v)| (history.nodes()[usize::from(at)].node.name, v))
                .collect();
            let expected: Vec<(&str, f64)> = row
                .topdown
                .iter()
                .flatten()
                .flat_map(|td| td.nodes.iter().map(|n| (n.node.name, n.value)))
                .collect();
            assert_eq!(got, expected);
            nodes_seen += got.len();
        }
        assert!(nodes_seen > 0, "the fixture's rows measure nodes");
    }
}
