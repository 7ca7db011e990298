//! Separated values (`--csv`, `-x SEP`), one line per thread (or group) per window.

use super::Shown;
use crate::{
    attrib::Window,
    model::{
        flat::{self, At, Cell, Field, Type},
        rows::Row,
    },
    prefetch,
};

/// The fields of `shown`'s rows.
fn fields(shown: &Shown<'_>) -> Vec<Field> {
    flat::csv(shown.set, shown.columns, shown.options)
}

/// The header line.
pub fn header(shown: &Shown<'_>, sep: u8) -> String {
    let names = fields(shown).into_iter().map(|f| f.name);
    records(sep, std::iter::once(names.collect()))
}

/// One line per row; the time field is the window's end, or `total` for the run summary.
/// Fields are formatted into one buffer and handed to the CSV writer as they come (a window of
/// 20,000 rows made a `String` per field, and a `Vec` per row, each interval).
pub fn lines(window: &Window, rows: &[&Row], shown: &Shown<'_>, sep: u8, is_final: bool) -> String {
    let fields = fields(shown);
    let time = if is_final {
        "total".to_owned()
    } else {
        format!("{:.6}", (window.start + window.length).as_secs_f64())
    };
    let at = At {
        window,
        time_s: &time,
        host: "",
        started_unix_ns: 0,
        container: None,
    };
    let mut line = Line {
        writer: writer(sep, rows.len() * LINE_BYTES),
        field: String::new(),
    };
    for (i, row) in rows.iter().enumerate() {
        // Rows in a report's order lie all over the window's memory (prefetch's note).
        if let Some(ahead) = rows.get(i + prefetch::AHEAD) {
            prefetch::read(*ahead);
        }
        for field in &fields {
            line.put(field, field.cell(row, &at));
        }
        line.end();
    }
    text(line.writer)
}

/// About how many bytes a line takes (a thread's line of the software set: ~100).
const LINE_BYTES: usize = 128;

/// The line being written: the CSV writer and the buffer each field is formatted into.
struct Line {
    writer: csv::Writer<Vec<u8>>,
    field: String,
}

impl Line {
    /// Writes one field's cell as text (quoted where CSV needs it): floats to the field's
    /// decimals, booleans as `1` or `0`, a missing value as the field says.
    fn put(&mut self, field: &Field, cell: Cell<'_>) {
        use std::fmt::Write as _;
        self.field.clear();
        // Writing to a String cannot fail.
        let _ = match (cell, field.ty) {
            (Cell::Int(Some(n)), _) => write!(self.field, "{n}"),
            (Cell::Float(Some(x)), Type::Float { decimals }) => {
                write!(self.field, "{x:.decimals$}")
            }
            (Cell::Float(Some(x)), _) => write!(self.field, "{x}"),
            (Cell::Text(Some(s)), _) => self.field.write_str(&s),
            (Cell::Bool(Some(b)), _) => write!(self.field, "{}", u8::from(b)),
            (Cell::Int(None) | Cell::Float(None) | Cell::Text(None) | Cell::Bool(None), _) => {
                self.field.write_str(field.missing)
            }
        };
        // Writing to memory cannot fail.
        let _ = self.writer.write_field(&self.field);
    }

    /// Ends the line.
    fn end(&mut self) {
        let _ = self.writer.write_record(None::<&[u8]>);
    }
}

/// A CSV writer with separator `sep` into memory, `capacity` bytes reserved.
fn writer(sep: u8, capacity: usize) -> csv::Writer<Vec<u8>> {
    csv::WriterBuilder::new()
        .delimiter(sep)
        .from_writer(Vec::with_capacity(capacity))
}

/// What `writer` wrote.
fn text(writer: csv::Writer<Vec<u8>>) -> String {
    let bytes = writer.into_inner().unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `records` written with separator `sep`, fields quoted where CSV needs it (the separator, a
/// quote or a line break in them: event names such as `cpu/event=0xc2,umask=0x2/u`, comms).
fn records(sep: u8, records: impl Iterator<Item = Vec<String>>) -> String {
    let mut writer = writer(sep, 0);
    for record in records {
        // Writing to memory cannot fail.
        let _ = writer.write_record(&record);
    }
    text(writer)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use topdown_common::cgroup::CgroupId;

    use super::*;
    use crate::{
        attrib::{
            cgroups::CgroupNames,
            usage::{CounterValue, ThreadUsage},
        },
        model::rows::RowOptions,
        model::{columns, frame::Frame},
        pmu::counter_set::{Counter, CounterSet, EventAttr, Unit},
        report::NOT_COUNTED,
    };

    /// Every field of a thread's line, read back by a CSV reader under the header's names:
    /// who (a name holding the separator quoted), the value columns, each counter scaled to its
    /// enabled time with its running share, `<not counted>` for one never running, the exited
    /// flag; the window's end as the time, `total` for the run's totals.
    #[test]
    fn lines_carry_every_field_under_the_headers_names() {
        let mut set = CounterSet::software(String::new());
        set.counters
            .extend(["cycles", "instructions"].map(|name| Counter {
                name: name.to_owned(),
                unit: Unit::Events,
                attr: EventAttr::default(),
                cpus: None,
            }));
        let mut busy = ThreadUsage::clocked(7, 7, CgroupId(1), 2_000_000, 3);
        busy.comm = "a,b".into();
        // Cycles ran half its enabled time: scaled twice; instructions never ran.
        busy.counters = vec![
            CounterValue::new(1_000, 400, 200),
            CounterValue::new(0, 400, 0),
        ];
        let mut gone = ThreadUsage::clocked(9, 7, CgroupId(1), 1_000_000, 1);
        gone.exited = true;
        gone.counters = vec![CounterValue::new(10, 5, 5), CounterValue::new(30, 5, 5)];
        let window = Window {
            start: Duration::from_secs(1),
            length: Duration::from_millis(500),
            threads: vec![busy, gone],
            ..Window::default()
        };
        let options = RowOptions::default();
        let mut names = CgroupNames::at(None);
        let frame = Frame::new(&window, &mut names, &set, None);
        let rows = frame.rows(&options).rows;
        let columns = columns::columns(&set);
        let shown = Shown {
            set: &set,
            columns: &columns,
            options: &options,
            suspects: &crate::model::suspects::Ranking::default(),
        };
        for (is_final, time) in [(false, "1.500000"), (true, "total")] {
            let text = header(&shown, b',') + &lines(&window, &rows, &shown, b',', is_final);
            let mut reader = csv::Reader::from_reader(text.as_bytes());
            let names = reader.headers().unwrap().clone();
            let lines: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
            assert_eq!(lines.len(), 2, "{text}");
            let field = |line: &csv::StringRecord, name: &str| -> String {
                let at = names
                    .iter()
                    .position(|n| n == name)
                    .unwrap_or_else(|| panic!("{name}"));
                line.get(at).unwrap().to_owned()
            };
            let line = |tid: &str| lines.iter().find(|l| field(l, "tid") == tid).unwrap();
            let (busy, gone) = (line("7"), line("9"));
            assert!(lines.iter().all(|l| l.len() == names.len()), "{text}");
            for (line, name, expected) in [
                (busy, "time_s", time),
                (busy, "comm", "a,b"),
                (busy, "pid", "7"),
                (busy, "on_cpu_ns", "2000000"),
                (busy, "switches", "3"),
                (busy, "cycles", "2000"),
                (busy, "cycles:run_percent", "50.00"),
                (busy, "instructions", NOT_COUNTED),
                (busy, "instructions:run_percent", "0.00"),
                (busy, "exited", "0"),
                (gone, "instructions", "30"),
                (gone, "cycles:run_percent", "100.00"),
                (gone, "exited", "1"),
            ] {
                assert_eq!(field(line, name), expected, "{name} of {line:?}");
            }
        }
    }

    /// docs/live.md's CSV table names every field the header has, for threads, cgroups and
    /// containers with every derived column and TopDown: each by its name in backticks, or by
    /// its pattern (`<counter>`, `<counter>:run_percent`, `<node>`), numbered ones by their
    /// first; value columns are the table above it (its own drift test). A field added
    /// without its line fails.
    #[test]
    fn the_docs_csv_table_names_every_field() {
        use crate::model::flat::fixture;
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/live.md"),
        )
        .unwrap();
        let start = docs.find("## CSV fields").expect("the CSV section");
        let section = &docs[start..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
        let set = fixture::every_derived_column();
        let view = fixture::topdown();
        let all = columns::columns(&set);
        let mut missing = Vec::new();
        for by in fixture::GROUPINGS {
            let options = fixture::options(by, &view);
            let columns = columns::for_rows(&all, by.is_some());
            let shown = Shown {
                set: &set,
                columns: &columns,
                options: &options,
                suspects: &crate::model::suspects::Ranking::default(),
            };
            let header = header(&shown, b',');
            for name in header.trim_end().split(',') {
                let name = name.replace("_2", "_1").replace("_3", "_1");
                let pattern = if name.starts_with("tma_") {
                    "<node>".to_owned()
                } else if let Some(counter) =
                    set.counters.iter().find(|c| name.starts_with(&c.name))
                {
                    name.replacen(&counter.name, "<counter>", 1)
                } else {
                    name
                };
                let documented = section.contains(&format!("`{pattern}`"))
                    || all.iter().any(|c| c.key == pattern);
                if !documented {
                    missing.push(pattern);
                }
            }
        }
        assert!(
            missing.is_empty(),
            "docs/live.md's CSV section lacks {missing:?}"
        );
    }

    #[test]
    fn fields_holding_the_separator_or_quotes_are_quoted() {
        let text = records(
            b',',
            [
                vec!["cpu/event=0xc2,umask=0x2/u".into(), "plain".into()],
                vec!["say \"x\"".into(), "two\nlines".into()],
            ]
            .into_iter(),
        );
        assert_eq!(
            text,
            "\"cpu/event=0xc2,umask=0x2/u\",plain\n\"say \"\"x\"\"\",\"two\nlines\"\n"
        );
        let parsed: Vec<csv::StringRecord> = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.as_bytes())
            .records()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(parsed[0].get(0), Some("cpu/event=0xc2,umask=0x2/u"));
        assert_eq!(parsed[1].get(1), Some("two\nlines"));
        assert_eq!(records(b';', [vec!["a,b".into()]].into_iter()), "a,b\n");
    }
}
