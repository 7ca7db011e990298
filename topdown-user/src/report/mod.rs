//! Renderers: a refreshing table, interval blocks, JSON lines and CSV. They draw rows and never
//! reach back into collection.

mod aligned;
pub mod c2c;
pub mod cells;
pub mod cores;
mod csv;
pub mod diff;
mod json;
pub mod new_file;
pub mod parquet;
mod table;
pub mod topdown;
pub mod trace;

use std::io::{BufWriter, Write};

use anyhow::{Context as _, Result};

pub use crate::model::flat::NOT_COUNTED;

/// A scaled count as tables show it: whole, or [`NOT_COUNTED`].
pub fn count_cell(count: Option<f64>) -> String {
    count.map_or_else(|| NOT_COUNTED.to_owned(), |c| format!("{c:.0}"))
}
use crate::{
    attrib::Window,
    model::{
        WindowRows,
        columns::{self, Column},
        frame::Frame,
        rows::RowOptions,
        sink::WindowSink,
        suspects::{self, Ranking, Suspects},
    },
    pmu::counter_set::CounterSet,
};

/// Standard output for a report, unbuffered: the renderer buffers and flushes whole blocks, so
/// std's line buffering would only copy every block once more and search it for newlines (a
/// twentieth of the tool's time writing `--json` for 6,000 threads a second). `std::io::stdout`
/// where the descriptor cannot be duplicated.
pub fn stdout() -> Box<dyn Write> {
    use std::os::fd::AsFd as _;
    match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(std::io::stdout()),
    }
}

/// How a report is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// A table redrawn in place every interval (a terminal), then the final summary.
    Refresh,
    /// One table block per interval, then the final summary (`-I`).
    Interval,
    /// Only the final summary.
    Summary,
    /// One JSON document per line: per interval (with `-I`) and a final one.
    Json,
    /// Separated values: a header line, then one line per thread per interval and the totals.
    Csv {
        /// Field separator (one ASCII character).
        separator: u8,
    },
}

/// What a report shows of each row: the set, its value columns, how rows were chosen.
pub struct Shown<'a> {
    /// The counter set.
    pub set: &'a CounterSet,
    /// The value columns ([`columns::columns`] of the set).
    pub columns: &'a [Column],
    /// How rows were chosen (TopDown, grouping, verbosity).
    pub options: &'a RowOptions,
    /// Suspects of slowing groups down, over the latest windows (`--neighbours` with groups).
    pub suspects: &'a Ranking,
}

/// Bytes buffered before a write: a window's JSON for thousands of threads is megabytes, in
/// 64 KiB writes (a pipe's default capacity) rather than 8 KiB ones.
const OUTPUT_BUFFER: usize = 64 * 1024;

/// Writes windows of usage in one format to one output.
pub struct Renderer {
    out: BufWriter<Box<dyn Write>>,
    format: Format,
    rows: RowOptions,
    set: CounterSet,
    /// The value columns of `set`'s rows, built once.
    columns: Vec<Column>,
    csv_header_written: bool,
    /// The first line ([`Renderer::header`]) is written (or the format has none).
    header_written: bool,
    /// As a [`WindowSink`], draws each window, not only the totals.
    intervals: bool,
    /// The reader of the output went away (`| head -1`): nothing more is written.
    closed: bool,
    /// The latest windows' groups, for suspects (`--neighbours`).
    suspects: Suspects,
}

impl Renderer {
    /// A renderer for `set`'s windows.
    pub fn new(out: Box<dyn Write>, format: Format, rows: RowOptions, set: CounterSet) -> Self {
        Self {
            out: BufWriter::with_capacity(OUTPUT_BUFFER, out),
            format,
            columns: columns::for_rows(&columns::columns(&set), rows.group.is_some()),
            rows,
            set,
            csv_header_written: false,
            header_written: false,
            intervals: true,
            closed: false,
            suspects: Suspects::default(),
        }
    }

    /// As a [`WindowSink`], whether it draws each window (`-I`) or only the totals.
    #[must_use]
    pub fn drawing_intervals(mut self, intervals: bool) -> Self {
        self.intervals = intervals;
        self
    }

    /// Whether the output's reader went away (a closed pipe): the run can end quietly, as
    /// `perf` and `grep` do, or go on with what else it writes (a recording).
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// How the rows are chosen (TopDown, grouping): the model step computes them so.
    pub fn options(&self) -> &RowOptions {
        &self.rows
    }

    /// The first line: which counter set is live, and why (once; before the first block
    /// otherwise).
    pub fn header(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.header_written, true) {
            return Ok(());
        }
        match self.format {
            Format::Json | Format::Csv { .. } => Ok(()),
            _ => self.write(&format!("{}\n", table::set_line(&self.set))),
        }
    }

    /// Draws one interval's rows (see [`crate::model::frame::Frame::rows`]).
    pub fn window(&mut self, window: &Window, rows: &WindowRows<'_>) -> Result<()> {
        self.draw(window, rows, false)
    }

    /// Draws the totals of the whole run.
    pub fn summary(&mut self, window: &Window, rows: &WindowRows<'_>) -> Result<()> {
        self.draw(window, rows, true)
    }

    fn draw(&mut self, window: &Window, rows: &WindowRows<'_>, is_final: bool) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        // A refreshing table redraws the set's line with each screen; the totals follow it.
        if is_final || self.format != Format::Refresh {
            self.header()?;
        }
        let WindowRows { rows, total } = rows;
        let total = *total;
        if self.rows.neighbours && self.rows.group.is_some() && !is_final {
            self.suspects.push(suspects::samples(
                rows.iter().copied(),
                &self.columns,
                |row| row.who.label(),
            ));
        }
        let ranked = if self.rows.neighbours {
            self.suspects.ranking()
        } else {
            Ranking::default()
        };
        let shown = Shown {
            set: &self.set,
            columns: &self.columns,
            options: &self.rows,
            suspects: &ranked,
        };
        let text = match &self.format {
            Format::Refresh if !is_final => {
                format!(
                    "\x1b[H\x1b[2J{}\n{}",
                    table::set_line(&self.set),
                    table::block(window, rows, total, &shown, false)
                )
            }
            Format::Refresh | Format::Interval | Format::Summary => {
                table::block(window, rows, total, &shown, is_final)
            }
            Format::Json => {
                let written = json::write_document(&mut self.out, window, rows, &shown, is_final)
                    .and_then(|()| self.out.flush().map_err(anyhow::Error::from));
                return self.unless_closed(written);
            }
            Format::Csv { separator } => {
                let mut text = String::new();
                if !self.csv_header_written {
                    self.csv_header_written = true;
                    text = csv::header(&shown, *separator);
                }
                text + &csv::lines(window, rows, &shown, *separator, is_final)
            }
        };
        self.write(&text)
    }

    fn write(&mut self, text: &str) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let written = self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(anyhow::Error::from);
        self.unless_closed(written)
    }

    /// `written`, but a closed pipe is no error: it marks the output closed.
    fn unless_closed(&mut self, written: Result<()>) -> Result<()> {
        match written {
            Err(error) if is_broken_pipe(&error) => {
                self.closed = true;
                Ok(())
            }
            other => other.context("writing the report"),
        }
    }
}

impl WindowSink for Renderer {
    fn window(&mut self, frame: &Frame<'_>) -> Result<()> {
        if !self.intervals {
            return Ok(());
        }
        let rows = frame.rows(&self.rows);
        self.draw(frame.window(), &rows, false)
    }

    fn finish(mut self: Box<Self>, totals: &Frame<'_>) -> Result<Option<String>> {
        let rows = totals.rows(&self.rows);
        self.draw(totals.window(), &rows, true)?;
        Ok(None)
    }

    fn closed(&self) -> bool {
        self.closed
    }
}

/// Whether `error` comes from writing to a pipe nobody reads any more.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == Some(std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use topdown_common::cgroup::CgroupId;
    use topdown_common::thread::{Pid, Tid};

    use std::time::Duration;

    use crate::attrib::cgroups::CgroupNames;

    use super::*;
    use crate::model::{rows::Row, sort::SortKey};
    use crate::{
        attrib::usage::{CounterValue, ThreadUsage},
        pmu::counter_set::{Counter, EventAttr, Unit},
        tma::Model,
        tma::view::TopdownView,
    };

    /// The rows of `window` as every output gets them: through its frame (owned here).
    fn rows(
        window: &Window,
        names: &mut CgroupNames,
        set: &CounterSet,
        options: &RowOptions,
    ) -> (Vec<Row>, usize) {
        let frame = Frame::new(window, names, set, options.topdown.as_ref());
        let WindowRows { rows, total } = frame.rows(options);
        (rows.into_iter().cloned().collect(), total)
    }

    /// A thread that spent its slots 10 % frontend, 5 % bad speculation, 60 % backend, 25 %
    /// retiring, with one counter multiplexed half the time.
    fn spr_window() -> (Window, CounterSet) {
        let names = [
            "TOPDOWN.SLOTS",
            "topdown-retiring",
            "topdown-bad-spec",
            "topdown-fe-bound",
            "topdown-be-bound",
            "INT_MISC.UOP_DROPPING",
        ];
        let raw = [
            4_000_000_000u64,
            1_000_000_000,
            200_000_000,
            400_000_000,
            2_400_000_000,
            0,
        ];
        let counters = names
            .iter()
            .map(|name| Counter {
                name: (*name).into(),
                unit: Unit::Events,
                attr: EventAttr {
                    pmu_type: 4,
                    ..EventAttr::default()
                },
                cpus: None,
            })
            .collect();
        let set = CounterSet {
            name: "topdown",
            reason: "test".into(),
            counters,
        };
        let values = raw
            .iter()
            .enumerate()
            .map(|(i, &raw)| {
                CounterValue::new(
                    raw,
                    1_000_000_000,
                    if i == 5 { 500_000_000 } else { 1_000_000_000 },
                )
            })
            .collect();
        let thread = ThreadUsage {
            tid: Tid(7),
            pid: Pid(7),
            comm: "worker".into(),
            cgroup_id: CgroupId(1),
            switches: 3,
            on_cpu: Duration::from_secs(1),
            waited: std::time::Duration::ZERO,
            behind: Default::default(),
            counters: values,
            exited: false,
            folded: 0,
        };
        let window = Window {
            length: Duration::from_secs(1),
            threads: vec![thread],
            ..Window::default()
        };
        (window, set)
    }

    /// The JSON document of `rows` of `window`, as the live `--json` writes it.
    fn json_doc(
        window: &Window,
        rows: &[crate::model::rows::Row],
        set: &CounterSet,
    ) -> serde_json::Value {
        let mut out = Vec::new();
        showing(set, &options(), |shown| {
            let rows: Vec<_> = rows.iter().collect();
            json::write_document(&mut out, window, &rows, shown, false).unwrap();
        });
        serde_json::from_slice(&out).unwrap()
    }

    /// Calls `draw` with what a renderer of `set`'s rows chosen by `options` shows.
    fn showing<T>(set: &CounterSet, options: &RowOptions, draw: impl FnOnce(&Shown<'_>) -> T) -> T {
        let columns = columns::for_rows(&columns::columns(set), options.group.is_some());
        draw(&Shown {
            set,
            columns: &columns,
            options,
            suspects: &Ranking::default(),
        })
    }

    /// The table block of `rows`, as the live run prints it.
    fn block(
        window: &Window,
        rows: &[crate::model::rows::Row],
        total: usize,
        set: &CounterSet,
        options: &RowOptions,
    ) -> String {
        showing(set, options, |shown| {
            table::block(
                window,
                &rows.iter().collect::<Vec<_>>(),
                total,
                shown,
                false,
            )
        })
    }

    /// The CSV header and the final lines of `rows`.
    fn csv_text(
        window: &Window,
        rows: &[crate::model::rows::Row],
        set: &CounterSet,
        options: &RowOptions,
    ) -> String {
        showing(set, options, |shown| {
            let rows: Vec<_> = rows.iter().collect();
            csv::header(shown, b',') + &csv::lines(window, &rows, shown, b',', true)
        })
    }

    fn options() -> RowOptions {
        RowOptions {
            sort: SortKey::ON_CPU,
            top: None,
            topdown: Some(TopdownView::single(
                Model::named("sapphirerapids").unwrap(),
                1,
                8,
                false,
            )),
            verbose: false,
            neighbours: false,
            group: None,
        }
    }

    #[test]
    fn per_thread_topdown_shows_nodes_bottleneck_and_run_percent() {
        let (window, set) = spr_window();
        let mut names = CgroupNames::at(None);
        let (rows, total) = rows(&window, &mut names, &set, &options());
        let text = block(&window, &rows, total, &set, &options());
        let header = text.lines().nth(1).unwrap();
        for column in [
            "Frontend%",
            "BadSpec%",
            "Backend%",
            "Retiring%",
            "BOTTLENECK",
            "RUN%",
        ] {
            assert!(header.contains(column), "{column} in {header}");
        }
        assert!(
            !header.contains("INT_MISC"),
            "raw counters only with -v: {header}"
        );
        let line = text.lines().nth(2).unwrap();
        assert!(
            line.contains("60.0 <") && line.contains("Backend"),
            "{line}"
        );
        assert!(
            line.contains("10.0") && line.contains("25.0") && line.contains(" 50"),
            "{line}"
        );

        let csv_text = csv_text(&window, &rows, &set, &options());
        let mut lines = csv_text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let row: Vec<&str> = lines.next().unwrap().split(',').collect();
        let field = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(field("tma_backend_bound"), "0.600000");
        assert_eq!(field("bottleneck"), "tma_backend_bound");

        let doc = json_doc(&window, &rows, &set);
        let thread = &doc["threads"][0];
        assert_eq!(thread["topdown"][0]["nodes"]["tma_retiring"], 0.25);
        assert_eq!(thread["topdown"][0]["bottleneck"], "tma_backend_bound");
        assert_eq!(thread["topdown"][0]["model"], "sapphirerapids");
        assert_eq!(thread["run_percent"], 50.0);
    }

    /// IPC is one column entry: the table, CSV and JSON show it where the set counts cycles
    /// and instructions, from the scaled counts, and show no number for a row whose cycles
    /// never ran on a counter.
    #[test]
    fn ipc_is_shown_where_both_counted_and_nowhere_else() {
        let generic = |name: &str, config: u64| Counter::event(name, 0, config);
        let mut set = CounterSet::software(String::new());
        set.counters
            .extend([generic("cycles", 0), generic("instructions", 1)]);
        let value = |raw: u64, running_ns: u64| CounterValue::new(raw, 1_000_000, running_ns);
        let thread = |tid: u32, cycles: CounterValue| ThreadUsage {
            tid: Tid(tid),
            pid: Pid(tid),
            comm: format!("t{tid}").into(),
            cgroup_id: CgroupId(1),
            switches: 1,
            on_cpu: Duration::from_nanos(1_000_000 - u64::from(tid)),
            waited: std::time::Duration::ZERO,
            behind: Default::default(),
            // Cycles scaled to 4,000,000 when running half the time.
            counters: vec![cycles, value(3_000_000, 1_000_000)],
            exited: false,
            folded: 0,
        };
        let window = Window {
            length: Duration::from_secs(1),
            threads: vec![thread(1, value(2_000_000, 500_000)), thread(2, value(0, 0))],
            ..Window::default()
        };
        let plain = RowOptions::default();
        let mut names = CgroupNames::at(None);
        let (rows, total) = rows(&window, &mut names, &set, &plain);
        let text = block(&window, &rows, total, &set, &plain);
        let mut lines = text.lines().skip(1);
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert!(header.contains(&"IPC"), "{header:?}");
        let one = lines.next().unwrap();
        let two = lines.next().unwrap();
        assert!(one.contains(" 0.75 "), "{one}");
        assert!(!two.contains("0.00") && two.contains(" - "), "{two}");

        let csv_text = csv_text(&window, &rows, &set, &plain);
        let mut lines = csv_text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let at = header.iter().position(|h| *h == "ipc").unwrap();
        let ipc: Vec<String> = lines
            .map(|l| l.split(',').nth(at).unwrap().to_owned())
            .collect();
        assert_eq!(ipc, ["0.7500", ""]);

        let doc = json_doc(&window, &rows, &set);
        assert_eq!(doc["threads"][0]["ipc"], 0.75);
        assert!(doc["threads"][1]["ipc"].is_null());

        let software = CounterSet::software(String::new());
        let keys: Vec<&str> = columns::columns(&software).iter().map(|c| c.key).collect();
        assert!(!keys.contains(&"ipc"), "no column without both: {keys:?}");
    }

    /// Every value column of the set reaches the table (its header, its cell as
    /// `Column::cell` writes it), CSV (its key, the field as `Column::write_field` writes it)
    /// and JSON (its key, `Column::value`): a column added to `model::columns` needs nothing
    /// here. The set counts cycles, instructions and cache misses, so columns built from them
    /// are in.
    #[test]
    fn every_value_column_reaches_the_table_csv_and_json() {
        let generic = |name: &str, config: u64| Counter::event(name, 0, config);
        let mut set = CounterSet::software(String::new());
        set.counters.extend([
            generic("cycles", 0),
            generic("instructions", 1),
            generic("cache-misses", 3),
        ]);
        let value = |raw: u64| CounterValue::new(raw, 1_000_000, 1_000_000);
        let thread = ThreadUsage {
            waited: Duration::from_micros(250),
            counters: vec![value(4_000_000), value(3_000_000), value(7_500)],
            ..ThreadUsage::clocked(1, 1, CgroupId(1), 1_000_000, 3)
        };
        let window = Window {
            length: Duration::from_secs(1),
            threads: vec![thread],
            waits_measured: true,
            ..Window::default()
        };
        let plain = RowOptions::default();
        let mut names = CgroupNames::at(None);
        let (rows, total) = rows(&window, &mut names, &set, &plain);
        let row = &rows[0];
        let columns = columns::for_rows(&columns::columns(&set), false);
        assert!(columns.iter().any(|c| c.key == "ipc"));

        let text = block(&window, &rows, total, &set, &plain);
        let (header, line) = (text.lines().nth(1).unwrap(), text.lines().nth(2).unwrap());
        let csv_text = csv_text(&window, &rows, &set, &plain);
        let mut csv_lines = csv_text.lines();
        let csv_header: Vec<&str> = csv_lines.next().unwrap().split(',').collect();
        let csv_line: Vec<&str> = csv_lines.next().unwrap().split(',').collect();
        let doc = json_doc(&window, &rows, &set);
        for column in &columns {
            assert!(
                header.contains(column.header),
                "{} in {header}",
                column.header
            );
            let cell = column.cell(row);
            assert!(line.contains(&format!(" {cell} ")), "{cell} in {line}");
            let at = csv_header.iter().position(|h| *h == column.key);
            let mut field = String::new();
            column.write_field(row, &mut field);
            assert_eq!(
                at.map(|at| csv_line[at]),
                Some(field.as_str()),
                "{}",
                column.key
            );
            let json = &doc["threads"][0][column.key];
            match column.value(row) {
                Some(columns::Number::Int(n)) => assert_eq!(json, n, "{}", column.key),
                Some(columns::Number::Float(x)) => assert_eq!(json, x, "{}", column.key),
                None => assert!(json.is_null(), "{}", column.key),
            }
        }
    }

    #[test]
    fn nodes_outside_their_range_are_kept_as_computed_and_flagged_with_their_inputs() {
        let (mut window, set) = spr_window();
        // More slots dropped than the frontend had: perf's formula goes negative.
        window.threads[0].counters[5] =
            CounterValue::new(1_000_000_000, 1_000_000_000, 1_000_000_000);
        let mut names = CgroupNames::at(None);
        let (rows, total) = rows(&window, &mut names, &set, &options());
        let td = rows[0].topdown[0].as_ref().unwrap();
        let frontend = td.value("tma_frontend_bound").unwrap();
        assert!(
            (frontend - (0.1 - 0.25)).abs() < 1e-12,
            "not clamped: {frontend}"
        );
        let text = block(&window, &rows, total, &set, &options());
        assert!(text.contains("-15.0!"), "marked in the table: {text}");

        let doc = json_doc(&window, &rows, &set);
        let topdown = &doc["threads"][0]["topdown"][0];
        assert_eq!(topdown["nodes"]["tma_frontend_bound"], frontend);
        let flagged = &topdown["out_of_range"][0];
        assert_eq!(flagged["node"], "tma_frontend_bound");
        assert_eq!(flagged["inputs"]["INT_MISC.UOP_DROPPING"], 1e9);
        assert!(flagged["inputs"]["TOPDOWN.SLOTS"].is_number(), "{flagged}");
    }

    #[test]
    fn multiplexed_counts_are_scaled_back_and_each_node_says_how_long_its_inputs_ran() {
        // The true counts of spr_window; then the same thread with INT_MISC.UOP_DROPPING and
        // topdown-retiring counted only part of the time (raw = true x running / enabled).
        let (window, set) = spr_window();
        let mut names = CgroupNames::at(None);
        let (truth, _) = rows(&window, &mut names, &set, &options());
        let mut sampled = window.clone();
        let enabled = 1_000_000_000;
        for (slot, running) in [(1usize, 400_000_000u64), (5, 100_000_000)] {
            let value = &mut sampled.threads[0].counters[slot];
            value.reading.count = value.reading.count * running / enabled;
            value.reading.running_ns = running;
        }
        let (scaled, total) = rows(&sampled, &mut names, &set, &options());
        let (a, b) = (
            truth[0].topdown[0].as_ref().unwrap(),
            scaled[0].topdown[0].as_ref().unwrap(),
        );
        for node in &a.nodes {
            let back = b.value(node.node.name).unwrap();
            assert!(
                (back - node.value).abs() < 1e-12,
                "{}: {back}",
                node.node.name
            );
        }
        let run = |name: &str| {
            b.nodes
                .iter()
                .find(|n| n.node.name == name)
                .unwrap()
                .run_fraction
        };
        // SPR: frontend and bad speculation read UOP_DROPPING (10 %) and retiring (40 %);
        // backend reads the retiring count too (its denominator), not UOP_DROPPING.
        assert!((run("tma_frontend_bound") - 0.1).abs() < 1e-12);
        assert!((run("tma_bad_speculation") - 0.1).abs() < 1e-12);
        assert!((run("tma_backend_bound") - 0.4).abs() < 1e-12);
        assert!((run("tma_retiring") - 0.4).abs() < 1e-12);
        let text = block(&sampled, &scaled, total, &set, &options());
        assert!(
            text.contains("10.0?"),
            "frontend ran 10 % of the time: marked: {text}"
        );
        assert!(
            text.contains("25.0 "),
            "retiring ran 40 %: not marked: {text}"
        );

        let doc = json_doc(&sampled, &scaled, &set);
        let percent = &doc["threads"][0]["topdown"][0]["run_percent"];
        assert!((percent["tma_frontend_bound"].as_f64().unwrap() - 10.0).abs() < 1e-9);
        assert!((percent["tma_retiring"].as_f64().unwrap() - 40.0).abs() < 1e-9);
    }

    /// An event this PMU does not count (the calibration saw it read 0 while others counted)
    /// is no count in any view: `<not counted>` in the table and CSV, null and `not_counting`
    /// in JSON and named in the document's counter set and under the table; no TopDown node
    /// built on it, and no bottleneck (the nodes that split the slots are not all there). The
    /// nodes that do not read it are still shown.
    #[test]
    fn an_event_the_pmu_does_not_count_is_no_count_in_any_view_nor_in_a_node() {
        let (mut window, set) = spr_window();
        let dropping = 5;
        window.threads[0].counters[dropping] = CounterValue {
            silent: true,
            ..CounterValue::new(0, 1_000_000_000, 1_000_000_000)
        };
        let mut names = CgroupNames::at(None);
        let verbose = RowOptions {
            verbose: true,
            ..options()
        };
        let (rows, total) = rows(&window, &mut names, &set, &verbose);
        let td = rows[0].topdown[0].as_ref().unwrap();
        assert_eq!(td.value("tma_frontend_bound"), None, "reads UOP_DROPPING");
        assert_eq!(td.value("tma_bad_speculation"), None, "1 - the others");
        assert_eq!(
            td.value("tma_backend_bound"),
            Some(0.6),
            "reads no silent event"
        );
        assert_eq!(
            td.bottleneck, None,
            "not all of the slots are accounted for"
        );

        let text = block(&window, &rows, total, &set, &verbose);
        let line = text.lines().nth(2).unwrap();
        assert!(line.trim_end().ends_with(NOT_COUNTED), "{line}");
        assert!(
            text.contains("NOT COUNTING on this PMU: INT_MISC.UOP_DROPPING"),
            "{text}"
        );
        let csv_text = csv_text(&window, &rows, &set, &verbose);
        assert!(csv_text.contains(NOT_COUNTED), "{csv_text}");

        let doc = json_doc(&window, &rows, &set);
        assert_eq!(
            doc["counter_set"]["not_counting"],
            serde_json::json!(["INT_MISC.UOP_DROPPING"])
        );
        let counter = &doc["threads"][0]["counters"]["INT_MISC.UOP_DROPPING"];
        assert!(counter["value"].is_null(), "{counter}");
        assert_eq!(counter["not_counting"], true);
        let counted = &doc["threads"][0]["counters"]["topdown-be-bound"];
        assert!(counted.get("not_counting").is_none(), "said only when true");
        let topdown = &doc["threads"][0]["topdown"][0];
        assert!(
            topdown["nodes"].get("tma_frontend_bound").is_none(),
            "{topdown}"
        );
        assert!(topdown["bottleneck"].is_null(), "{topdown}");
    }
}
