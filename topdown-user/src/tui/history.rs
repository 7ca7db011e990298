//! Each row's recent values for its history panel (Enter): %CPU, switches and each TopDown
//! node, one sample per window, the last [`KEEP`] windows. Rows are known by their key columns
//! (a thread's tid, pid, name and cgroup; a group's path or label), in the view they were
//! recorded in.

use std::collections::{HashMap, VecDeque};

use crate::model::rows::Row;

/// Windows kept per row (five minutes at the default second).
pub const KEEP: usize = 300;

/// Rows recorded per window: the first ones in the view's order (the hottest by default). With
/// thousands of threads coming and going each second, recording all of them would hold
/// millions of one-sample histories for five minutes.
pub const ROWS: usize = 1000;

/// One window's values of one row.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// On-CPU time over the window's wall time (1.0: one CPU).
    pub cpu_share: f64,
    /// Switches out in the window.
    pub switches: u64,
    /// TopDown nodes measured in the window (`P.tma_...` on hybrid parts), fractions.
    pub nodes: Vec<(String, f64)>,
}

/// The samples of every row seen in the last [`KEEP`] windows.
#[derive(Debug, Default)]
pub struct History {
    rows: HashMap<String, (u64, VecDeque<Sample>)>,
    windows: u64,
}

impl History {
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
                .flatten()
                .flat_map(|td| td.nodes.iter())
                .map(|n| (n.node.name.to_owned(), n.value))
                .collect();
            let (seen, samples) = self.rows.entry(Self::key(row)).or_default();
            *seen = now;
            if samples.len() == KEEP {
                samples.pop_front();
            }
            samples.push_back(Sample {
                cpu_share: row.cpu_share,
                switches: row.switches,
                nodes,
            });
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

    use super::*;
    use crate::{
        attrib::usage::CounterValue,
        model::rows::{ThreadKey, Who},
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
            on_cpu_ns: 1,
            cpu_share: 0.01,
            switches: 1,
            counters: vec![CounterValue::default()],
            topdown: vec![],
            run_fraction: 1.0,
            tree: None,
        }
    }

    #[test]
    fn memory_stays_bounded_under_churn() {
        let mut history = History::default();
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
}
