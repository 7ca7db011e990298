//! A recording as a zoomable timeline: the Trace Event Format (JSON) that ui.perfetto.dev and
//! chrome://tracing open. A process per pid, a track per thread with one slice per window it
//! ran in (named by its TopDown bottleneck where measured), counter tracks per thread for %CPU,
//! switches and each TopDown node, cgroup and container as slice arguments. docs/recordings.md
//! ("Timelines") says what each event holds.
//!
//! Only measured values are written: a counter that did not run is left out of a slice's
//! arguments, a node that could not be computed has no sample. A thread that was alive and did
//! not run in a window gets a 0 %CPU sample there (the kernel charged it nothing); one that
//! exited gets an `exit` instant and a 0 %CPU sample where its last window ends.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io::Write,
};

use anyhow::Result;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::{
    attrib::Window,
    model::{export::ExportWindow, rows::Who},
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// What the trace says about the run, in its `otherData`.
#[derive(Debug, Serialize)]
pub struct TraceMeta {
    /// Where it was recorded.
    pub host: String,
    /// When collection started, in nanoseconds since the Unix epoch (timestamps in the trace
    /// are microseconds from then).
    pub started_unix_ns: u64,
    /// The topdown-bpf version that recorded it.
    pub tool_version: String,
    /// The counter set's name.
    pub counter_set: String,
}

/// One trace event.
#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u32>,
    /// Counter events: the thread, so each thread has its own counter track.
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    /// Instant events: the thread's track.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    args: Value,
}

/// The name of the %CPU counter track.
pub const CPU_PERCENT: &str = "%CPU";
/// The name of the switches counter track.
pub const SWITCHES: &str = "switches";

/// Writes a trace window by window (never the whole run in memory as one document).
pub struct TraceWriter<'a> {
    out: &'a mut dyn Write,
    set: &'a CounterSet,
    view: Option<&'a TopdownView>,
    first: bool,
    /// pid -> process name (its main thread's, else the first thread seen).
    processes: BTreeMap<u32, String>,
    /// (pid, tid) -> thread name, the latest.
    threads: BTreeMap<(u32, u32), String>,
    /// Threads that ran in the previous window and did not exit: tid -> pid.
    running: HashMap<u32, u32>,
}

/// Microseconds, the format's time unit, from nanoseconds.
fn micros(ns: u128) -> f64 {
    ns as f64 / 1000.0
}

impl<'a> TraceWriter<'a> {
    /// Starts the document.
    pub fn new(
        out: &'a mut dyn Write,
        meta: &TraceMeta,
        set: &'a CounterSet,
        view: Option<&'a TopdownView>,
    ) -> Result<Self> {
        write!(
            out,
            "{{\"displayTimeUnit\":\"ms\",\"otherData\":{},\"traceEvents\":[",
            serde_json::to_string(meta)?
        )?;
        Ok(Self {
            out,
            set,
            view,
            first: true,
            processes: BTreeMap::new(),
            threads: BTreeMap::new(),
            running: HashMap::new(),
        })
    }

    fn event(&mut self, event: &Event) -> Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *self.out, event)?;
        Ok(())
    }

    fn counter(&mut self, name: &str, ts: f64, pid: u32, tid: u32, value: f64) -> Result<()> {
        self.event(&Event {
            name,
            ph: "C",
            cat: None,
            ts: Some(ts),
            dur: None,
            pid,
            tid: None,
            id: Some(tid.to_string()),
            s: None,
            args: json!({ "value": value }),
        })
    }

    /// The events of one window's thread rows.
    pub fn window(&mut self, window: &Window, rows: &ExportWindow) -> Result<()> {
        let start = micros(window.start.as_nanos());
        let end = micros((window.start + window.length).as_nanos());
        let mut running = HashMap::new();
        let mut charged = HashSet::new();
        for export in &rows.threads {
            let row = &export.row;
            let Who::Thread(thread) = &row.who else {
                continue;
            };
            let (pid, tid) = (thread.pid, thread.tid);
            charged.insert(tid);
            // The latest name: a thread that execs takes the program's.
            self.threads.insert((pid, tid), thread.comm.clone());
            if tid == pid || !self.processes.contains_key(&pid) {
                self.processes.insert(pid, thread.comm.clone());
            }
            let mut counters = Map::new();
            for (counter, value) in self.set.counters.iter().zip(&row.counters) {
                if value.not_counted() {
                    continue;
                }
                counters.insert(
                    counter.name.clone(),
                    json!({
                        "raw": value.raw,
                        "enabled_ns": value.enabled_ns,
                        "running_ns": value.running_ns,
                    }),
                );
            }
            let nodes = self.nodes(row.topdown.iter());
            let bottleneck = row.topdown.iter().flatten().find_map(|td| td.bottleneck);
            self.event(&Event {
                name: bottleneck.unwrap_or("on-CPU"),
                ph: "X",
                cat: Some("window"),
                ts: Some(start),
                dur: Some(end - start),
                pid,
                tid: Some(tid),
                id: None,
                s: None,
                args: json!({
                    "comm": thread.comm,
                    "cgroup": thread.cgroup,
                    "container": export.container,
                    "on_cpu_ns": row.on_cpu_ns,
                    "cpu_percent": row.cpu_percent,
                    "switches": row.switches,
                    "counters": counters,
                    "topdown": nodes,
                }),
            })?;
            self.counter(CPU_PERCENT, start, pid, tid, row.cpu_percent)?;
            self.counter(SWITCHES, start, pid, tid, row.switches as f64)?;
            for (name, value) in &nodes {
                if let Some(value) = value.as_f64() {
                    self.counter(name, start, pid, tid, value)?;
                }
            }
            if thread.exited {
                self.event(&Event {
                    name: "exit",
                    ph: "i",
                    cat: Some("thread"),
                    ts: Some(end),
                    dur: None,
                    pid,
                    tid: Some(tid),
                    id: None,
                    s: Some("t"),
                    args: json!({}),
                })?;
                self.counter(CPU_PERCENT, end, pid, tid, 0.0)?;
            } else {
                running.insert(tid, pid);
            }
        }
        // Alive in the previous window, not charged in this one: it did not run.
        let idle: Vec<(u32, u32)> = self
            .running
            .iter()
            .filter(|(tid, _)| !charged.contains(*tid))
            .map(|(&tid, &pid)| (tid, pid))
            .collect();
        for (tid, pid) in idle {
            self.counter(CPU_PERCENT, start, pid, tid, 0.0)?;
            self.counter(SWITCHES, start, pid, tid, 0.0)?;
        }
        self.running = running;
        Ok(())
    }

    /// `{node: fraction}` over the parts that measured it; with several core types, each
    /// node is named `<pmu>.<node>`.
    fn nodes<'r>(
        &self,
        parts: impl Iterator<Item = &'r Option<crate::tma::TopDown>>,
    ) -> Map<String, Value> {
        let mut nodes = Map::new();
        let Some(view) = self.view else {
            return nodes;
        };
        let several = view.parts.len() > 1;
        for (part, td) in view.parts.iter().zip(parts) {
            let Some(td) = td else { continue };
            for node in &td.nodes {
                let name = if several {
                    format!("{}.{}", part.prefix.trim_end_matches('/'), node.node.name)
                } else {
                    node.node.name.to_owned()
                };
                nodes.insert(name, json!(node.value));
            }
        }
        nodes
    }

    /// Names every process and thread, and ends the document.
    pub fn finish(mut self) -> Result<()> {
        let processes = std::mem::take(&mut self.processes);
        for (pid, name) in &processes {
            self.event(&Event {
                name: "process_name",
                ph: "M",
                cat: None,
                ts: None,
                dur: None,
                pid: *pid,
                tid: None,
                id: None,
                s: None,
                args: json!({ "name": name }),
            })?;
        }
        let threads = std::mem::take(&mut self.threads);
        for ((pid, tid), name) in &threads {
            self.event(&Event {
                name: "thread_name",
                ph: "M",
                cat: None,
                ts: None,
                dur: None,
                pid: *pid,
                tid: Some(*tid),
                id: None,
                s: None,
                args: json!({ "name": name }),
            })?;
        }
        self.out.write_all(b"]}\n")?;
        self.out.flush()?;
        Ok(())
    }
}
