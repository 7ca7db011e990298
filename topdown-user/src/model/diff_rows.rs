//! What `diff` compares, from a run's windows: per row and field, one value per window. Rows
//! are lined up across runs by name, never by id (tids, pids and cgroup ids differ between
//! runs): a thread by its process's name and its own (`nginx/worker`; same-named threads of a
//! process summed, as a pool is one row), a process by its name, a cgroup by its path, a
//! container by its key. Fields: %CPU, run-queue wait (% of the window), throttling (% of the
//! window, groups), IPC where the set counts cycles and instructions, and each TopDown node
//! measured (% of slots). A window where a row did not run is a 0 for the time fields and no
//! value for the ratios.

use std::collections::{BTreeMap, HashMap};

use compact_str::CompactString;
use topdown_common::thread::{Pid, Tid};

use super::{
    columns,
    diff::{CPU_FIELD, Samples},
    frame::Frame,
    rows::{Row, RowOptions},
    sort::SortKey,
};
use crate::{
    attrib::{
        Window,
        cgroups::CgroupNames,
        groups::{GroupBy, GroupOptions},
        named::Who,
    },
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// What a diff's rows are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffBy {
    /// Threads, by process and thread name.
    Thread,
    /// Processes, by name.
    Process,
    /// Cgroups, by path.
    Group(GroupBy),
}

/// Fields that are time (a window where the row did not run counts 0 for them).
const TIME_FIELDS: [&str; 3] = [CPU_FIELD, "wait_percent", "throttled_percent"];

/// The samples of `windows` (a run read back) for rows `by`.
pub fn samples(
    windows: &[Window],
    names: &mut CgroupNames,
    set: &CounterSet,
    topdown: Option<&TopdownView>,
    by: DiffBy,
) -> Samples {
    let processes = process_names(windows);
    let ipc = columns::ipc_slots(set);
    let options = RowOptions {
        sort: SortKey::Tid,
        top: None,
        topdown: topdown.cloned(),
        verbose: false,
        neighbours: false,
        group: match by {
            DiffBy::Group(by) => Some(GroupOptions {
                by,
                rollup: false,
                keep: Vec::new(),
            }),
            _ => None,
        },
    };
    let per_window: Vec<BTreeMap<String, BTreeMap<String, f64>>> = windows
        .iter()
        .map(|window| {
            let keyed = match by {
                DiffBy::Group(_) => None,
                _ => Some(keyed(window, &processes, by)),
            };
            let window = keyed.as_ref().unwrap_or(window);
            let frame = Frame::new(window, names, set, topdown);
            let rows = frame.rows(&options);
            let mut values = BTreeMap::new();
            for row in rows.rows {
                let key = key_of(row);
                let fields: &mut BTreeMap<String, f64> = values.entry(key).or_default();
                for (field, value) in fields_of(row, window, ipc) {
                    *fields.entry(field).or_default() += value;
                }
            }
            values
        })
        .collect();
    let mut samples = Samples::new();
    let keys: Vec<String> = {
        let mut keys: Vec<String> = per_window.iter().flat_map(|w| w.keys().cloned()).collect();
        keys.sort();
        keys.dedup();
        keys
    };
    for key in keys {
        let fields = samples.entry(key.clone()).or_default();
        for time in TIME_FIELDS {
            if per_window
                .iter()
                .any(|w| w.get(&key).is_some_and(|f| f.contains_key(time)))
            {
                fields.insert(time.to_owned(), Vec::new());
            }
        }
        for window in &per_window {
            let row = window.get(&key);
            for (field, values) in fields.iter_mut() {
                if TIME_FIELDS.contains(&field.as_str()) {
                    values.push(row.and_then(|f| f.get(field)).copied().unwrap_or(0.0));
                }
            }
            for (field, value) in row.into_iter().flatten() {
                if !TIME_FIELDS.contains(&field.as_str()) {
                    fields.entry(field.clone()).or_default().push(*value);
                }
            }
        }
    }
    samples
}

/// Each process's name: its main thread's (tid = pid), where that thread ran in some window.
fn process_names(windows: &[Window]) -> HashMap<Pid, CompactString> {
    let mut names = HashMap::new();
    for thread in windows.iter().flat_map(|w| &w.threads) {
        if thread.tid.0 == thread.pid.0 && thread.tid.0 != 0 {
            names
                .entry(thread.pid)
                .or_insert_with(|| thread.comm.clone());
        }
    }
    names
}

/// `window` with its threads renamed by key (`process/thread` or `process`) and those of one
/// key summed into one row, so the model computes each key's IPC and TopDown from its summed
/// counts as it does a thread's.
fn keyed(window: &Window, processes: &HashMap<Pid, CompactString>, by: DiffBy) -> Window {
    let mut ids: HashMap<CompactString, u32> = HashMap::new();
    let mut renamed = window.clone();
    for thread in &mut renamed.threads {
        let process = processes.get(&thread.pid).map_or_else(
            || CompactString::from(format!("pid:{}", thread.pid.0)),
            Clone::clone,
        );
        let name = if thread.folded > 0 || thread.tid.0 == 0 {
            CompactString::from("(exited threads)")
        } else {
            thread.comm.clone()
        };
        let key = match by {
            DiffBy::Process => process,
            _ => CompactString::from(format!("{process}/{name}")),
        };
        let next = ids.len() as u32 + 1;
        let id = *ids.entry(key.clone()).or_insert(next);
        thread.tid = Tid(id);
        thread.pid = Pid(id);
        thread.comm = key;
        thread.exited = false;
        thread.folded = 0;
    }
    // One window: threads of one key are summed (merge sums rows of the same tid, pid, name).
    Window::merge(std::slice::from_ref(&renamed)).unwrap_or(renamed)
}

/// A row's key: its (renamed) thread name, or its group's label.
fn key_of(row: &Row) -> String {
    match &row.who {
        Who::Thread(thread) => thread.comm.to_string(),
        Who::Group { group, .. } => group.label.clone(),
    }
}

/// A row's fields in `window`.
fn fields_of(row: &Row, window: &Window, ipc: Option<(usize, usize)>) -> Vec<(String, f64)> {
    let mut fields = vec![(CPU_FIELD.to_owned(), row.cpu_share * 100.0)];
    if let Some(wait) = row.wait_share {
        fields.push(("wait_percent".into(), wait * 100.0));
    }
    let length = window.length.as_secs_f64();
    if row.who.group().is_some()
        && let Some(throttled) = row.stalls.and_then(|s| s.throttled)
        && length > 0.0
    {
        fields.push((
            "throttled_percent".into(),
            throttled.as_secs_f64() / length * 100.0,
        ));
    }
    if let Some(value) = ipc.and_then(|(c, i)| columns::ipc(&row.counters, c, i)) {
        fields.push(("ipc".into(), value));
    }
    let parts = row.topdown.len();
    for (part, topdown) in row.topdown.iter().enumerate() {
        for node in topdown.iter().flat_map(|td| &td.nodes) {
            let name = if parts > 1 {
                format!("{part}:{}", node.node.name)
            } else {
                node.node.name.to_owned()
            };
            fields.push((name, node.value * 100.0));
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::fixtures::{names, set, thread, topdown_recording, window};

    #[test]
    fn every_topdown_node_measured_is_a_field_in_percent_of_slots() {
        let mut run = topdown_recording();
        let samples = samples(
            &run.windows,
            &mut run.names,
            &run.set,
            run.topdown.as_ref(),
            DiffBy::Thread,
        );
        // The fixture's process (pid 100) has no thread 100 that ran: named by its pid.
        let alpha = &samples["pid:100/alpha"];
        let backend = &alpha["tma_backend_bound"];
        assert_eq!(backend.len(), 5, "one value per window");
        assert!(
            backend.iter().all(|v| (v - 60.0).abs() < 1e-6),
            "{backend:?}"
        );
        assert!(alpha.contains_key("tma_retiring") && alpha.contains_key("tma_frontend_bound"));
    }

    #[test]
    fn threads_line_up_by_process_and_thread_name_and_pools_are_summed() {
        let mut windows: Vec<Window> = (1..=3).map(window).collect();
        // A pool: two threads of one process with one name; the process's main thread.
        for w in &mut windows {
            w.threads = vec![
                thread(40, "server", 8, 100),
                thread(41, "worker", 8, 1_000),
                thread(42, "worker", 8, 3_000),
            ];
            for t in &mut w.threads {
                t.pid = Pid(40);
            }
        }
        // The pool does not run in the last window.
        windows[2].threads.truncate(1);
        let samples = samples(&windows, &mut names(), &set(), None, DiffBy::Thread);
        let pool = &samples["server/worker"][CPU_FIELD];
        let length = windows[0].length.as_secs_f64();
        let percent = |ns: f64| ns / 1e9 / length * 100.0;
        assert_eq!(pool.len(), 3, "a window it did not run in counts 0");
        assert!((pool[0] - percent(4_000.0)).abs() < 1e-9, "{pool:?}");
        assert_eq!(pool[2], 0.0);
        let by_process = super::samples(&windows, &mut names(), &set(), None, DiffBy::Process);
        assert_eq!(by_process.keys().collect::<Vec<_>>(), ["server"]);
        assert!((by_process["server"][CPU_FIELD][0] - percent(4_100.0)).abs() < 1e-9);
    }
}
