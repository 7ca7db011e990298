//! A recording as a zoomable timeline: the Trace Event Format (JSON) that ui.perfetto.dev and
//! chrome://tracing open. A process per pid, a track per thread with one slice per window it
//! ran in (named by its TopDown bottleneck where measured), counter tracks per thread for %CPU,
//! switches and each TopDown node, cgroup and container as slice arguments. docs/recordings.md
//! ("Timelines") says what each event holds.
//!
//! Only measured values are written: a counter that did not run is left out of a slice's
//! arguments, a node that could not be computed has no sample. A thread that was alive and did
//! not run in a window gets a 0 %CPU sample there (the kernel charged it nothing); one that
//! exited gets an `exit` instant and a 0 %CPU sample where its last window ends; exited threads
//! folded per process in a window (`--every-exit` not given) are one slice on the process's
//! track 0, named for how many it holds.

use std::{
    collections::{BTreeMap, HashSet},
    io::Write,
};

use anyhow::Result;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::{
    attrib::Window,
    model::{
        columns::{self, Column, Number},
        export::{self, ExportWindow, RunMeta},
        frame::Frame,
        rows::Who,
        sink::WindowSink,
    },
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// What the trace says about the run, in its `otherData` (timestamps are microseconds from
/// `started_unix_ns`).
#[derive(Serialize)]
struct OtherData<'a> {
    #[serde(flatten)]
    run: &'a RunMeta,
    counter_set: &'a str,
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

impl<'a> Event<'a> {
    /// A bare event of kind `ph` for `pid`; the constructors below fill in the rest.
    fn new(name: &'a str, ph: &'static str, pid: u32, args: Value) -> Self {
        Self {
            name,
            ph,
            cat: None,
            ts: None,
            dur: None,
            pid,
            tid: None,
            id: None,
            s: None,
            args,
        }
    }

    /// A sample of thread `tid`'s counter track `name`.
    fn counter(name: &'a str, ts: f64, pid: u32, tid: u32, value: f64) -> Self {
        Self {
            ts: Some(ts),
            id: Some(tid.to_string()),
            ..Self::new(name, "C", pid, json!({ "value": value }))
        }
    }

    /// Thread `tid`'s slice over a window.
    fn slice(name: &'a str, ts: f64, dur: f64, pid: u32, tid: u32, args: Value) -> Self {
        Self {
            cat: Some("window"),
            ts: Some(ts),
            dur: Some(dur),
            tid: Some(tid),
            ..Self::new(name, "X", pid, args)
        }
    }

    /// An instant on thread `tid`'s track.
    fn instant(name: &'a str, ts: f64, pid: u32, tid: u32) -> Self {
        Self {
            cat: Some("thread"),
            ts: Some(ts),
            tid: Some(tid),
            s: Some("t"),
            ..Self::new(name, "i", pid, json!({}))
        }
    }

    /// A `process_name` or `thread_name` metadata event.
    fn metadata(kind: &'a str, pid: u32, tid: Option<u32>, name: &str) -> Self {
        Self {
            tid,
            ..Self::new(kind, "M", pid, json!({ "name": name }))
        }
    }
}

/// The name of the %CPU counter track.
pub const CPU_PERCENT: &str = "%CPU";
/// The name of the switches counter track.
pub const SWITCHES: &str = "switches";

/// Writes a trace window by window (never the whole run in memory as one document); a
/// [`WindowSink`] of threads' rows.
pub struct TraceWriter<'a> {
    out: Box<dyn Write + 'a>,
    set: &'a CounterSet,
    view: Option<&'a TopdownView>,
    /// The value columns each slice carries.
    columns: Vec<Column>,
    first: bool,
    /// pid -> process name (its main thread's, else the first thread seen).
    processes: BTreeMap<u32, String>,
    /// (pid, tid) -> thread name, the latest.
    threads: BTreeMap<(u32, u32), String>,
    /// Threads that ran in the previous window and did not exit: tid -> pid, in tid order (the
    /// trace is the same bytes each time it is written).
    running: BTreeMap<u32, u32>,
}

/// Microseconds, the format's time unit, from nanoseconds.
fn micros(ns: u128) -> f64 {
    ns as f64 / 1000.0
}

impl<'a> TraceWriter<'a> {
    /// Starts the document in `out` (buffered by the caller).
    pub fn new(
        mut out: Box<dyn Write + 'a>,
        run: &RunMeta,
        set: &'a CounterSet,
        view: Option<&'a TopdownView>,
    ) -> Result<Self> {
        let other = OtherData {
            run,
            counter_set: set.name,
        };
        write!(
            out,
            "{{\"displayTimeUnit\":\"ms\",\"otherData\":{},\"traceEvents\":[",
            serde_json::to_string(&other)?
        )?;
        Ok(Self {
            out,
            set,
            view,
            // Slices are threads'.
            columns: columns::for_rows(&columns::columns(set), false),
            first: true,
            processes: BTreeMap::new(),
            threads: BTreeMap::new(),
            running: BTreeMap::new(),
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
        self.event(&Event::counter(name, ts, pid, tid, value))
    }

    /// The events of one window's thread rows.
    pub fn window(&mut self, window: &Window, rows: &ExportWindow) -> Result<()> {
        let start = micros(window.start.as_nanos());
        let end = micros((window.start + window.length).as_nanos());
        let mut running = BTreeMap::new();
        let mut charged = HashSet::new();
        for export in &rows.threads {
            let row = &export.row;
            let Who::Thread(thread) = &row.who else {
                continue;
            };
            let (pid, tid) = (thread.pid.0, thread.tid.0);
            charged.insert(tid);
            // The latest name: a thread that execs takes the program's.
            self.threads.insert((pid, tid), thread.comm.to_string());
            let own = thread.folded == 0;
            if own && (tid == pid || !self.processes.contains_key(&pid)) {
                self.processes.insert(pid, thread.comm.to_string());
            }
            let mut counters = Map::new();
            for (counter, value) in self.set.counters.iter().zip(&row.counters) {
                if value.not_counted() {
                    continue;
                }
                counters.insert(
                    counter.name.clone(),
                    json!({
                        "raw": value.reading.count,
                        "enabled_ns": value.reading.enabled_ns,
                        "running_ns": value.reading.running_ns,
                    }),
                );
            }
            let nodes = self.nodes(row.topdown.iter());
            let bottleneck = row.topdown.iter().flatten().find_map(|td| td.bottleneck);
            let name = bottleneck.unwrap_or("on-CPU");
            let mut args = Map::new();
            args.insert("comm".into(), json!(thread.comm.as_str()));
            args.insert("cgroup".into(), json!(&*thread.cgroup));
            args.insert("container".into(), json!(export.container));
            // The value columns, measured ones only.
            for column in &self.columns {
                let value = match column.value(row) {
                    Some(Number::Int(n)) => json!(n),
                    Some(Number::Float(x)) => json!(x),
                    None => continue,
                };
                args.insert(column.key.into(), value);
            }
            args.insert("counters".into(), Value::Object(counters));
            args.insert("topdown".into(), Value::Object(nodes.clone()));
            self.event(&Event::slice(
                name,
                start,
                end - start,
                pid,
                tid,
                Value::Object(args),
            ))?;
            self.counter(CPU_PERCENT, start, pid, tid, row.cpu_share * 100.0)?;
            self.counter(SWITCHES, start, pid, tid, row.switches as f64)?;
            for (name, value) in &nodes {
                if let Some(value) = value.as_f64() {
                    self.counter(name, start, pid, tid, value)?;
                }
            }
            if thread.exited {
                // A fold of exited threads (tid 0) is no one thread: no exit instant.
                if own {
                    self.event(&Event::instant("exit", end, pid, tid))?;
                }
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
            self.event(&Event::metadata("process_name", *pid, None, name))?;
        }
        let threads = std::mem::take(&mut self.threads);
        for ((pid, tid), name) in &threads {
            self.event(&Event::metadata("thread_name", *pid, Some(*tid), name))?;
        }
        self.out.write_all(b"]}\n")?;
        self.out.flush()?;
        Ok(())
    }
}

/// Each window's thread rows as slices and counter samples; the names at the end.
impl WindowSink for TraceWriter<'_> {
    fn window(&mut self, frame: &Frame<'_>) -> Result<()> {
        TraceWriter::window(self, frame.window(), &export::rows(frame))
    }

    fn finish(self: Box<Self>, _totals: &Frame<'_>) -> Result<Option<String>> {
        TraceWriter::finish(*self)?;
        Ok(None)
    }
}
