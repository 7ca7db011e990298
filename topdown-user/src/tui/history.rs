//! Each row's recent values for its history panel (Enter): %CPU, switches and each TopDown
//! node, one sample per window, the last [`KEEP`] windows. Rows are known by their key columns
//! (a thread's tid, pid, name and cgroup; a group's path or label), in the view they were
//! recorded in.

use std::collections::{HashMap, VecDeque};

use crate::report::rows::Row;

/// Windows kept per row (five minutes at the default second).
pub const KEEP: usize = 300;

/// One window's values of one row.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// %CPU over the window.
    pub cpu_percent: f64,
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

    /// Adds a window's `rows`; forgets rows not seen for [`KEEP`] windows, so memory holds
    /// what the last minutes showed.
    pub fn record(&mut self, rows: &[Row]) {
        self.windows += 1;
        let now = self.windows;
        for row in rows {
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
                cpu_percent: row.cpu_percent,
                switches: row.switches,
                nodes,
            });
        }
        self.rows.retain(|_, (seen, _)| now - *seen < KEEP as u64);
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
