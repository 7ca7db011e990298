//! Rows as Apache Parquet, for the engines a fleet already runs (DuckDB, Spark, Trino): one row
//! per thread and per cgroup per window, told apart by `kind`. The schema
//! (`topdown-bpf/rows/v1`) is in docs/recordings.md ("Parquet"): types, units, nullability.
//!
//! Nothing is written that was not measured: a counter that did not run (enabled while the
//! thread ran, never running, or never enabled) has a null value, never 0; a TopDown node that
//! could not be computed is null.

use std::{collections::HashSet, fs::File, io::BufWriter, path::Path, sync::Arc};

use anyhow::{Context as _, Result};
use parquet::{
    basic::{Compression, LogicalType, Repetition, TimeUnit, Type as Physical, ZstdLevel},
    data_type::{BoolType, ByteArray, ByteArrayType, DataType, DoubleType, Int64Type},
    file::{
        metadata::KeyValue,
        properties::WriterProperties,
        writer::{SerializedColumnWriter, SerializedFileWriter},
    },
    schema::types::Type,
};

use crate::{
    attrib::Window,
    model::{
        columns::{self, Column as ValueColumn, Kind as ValueKind, NodeColumn, Number, view_nodes},
        export::{self, ExportRow, ExportWindow, RunMeta},
        frame::Frame,
        rows::Who,
        sink::WindowSink,
    },
    pmu::counter_set::CounterSet,
    report::cells::{SplitField, wait_behind_fields, wait_behind_keys},
    tma::view::TopdownView,
};

/// The schema's name, in the file's key-value metadata under `topdown-bpf.schema`.
pub const SCHEMA: &str = "topdown-bpf/rows/v1";

/// Rows buffered before they are written as one row group (and at the end).
const ROWS_PER_GROUP: usize = 64 * 1024;

/// A column's Parquet type.
#[derive(Clone, Copy)]
enum Kind {
    Int,
    /// Nanoseconds since the Unix epoch, UTC.
    Time,
    Float,
    Text,
    Bool,
}

/// One value of a row in its column's type (`None`: null).
enum Cell {
    Int(Option<i64>),
    Float(Option<f64>),
    Text(Option<String>),
    Bool(Option<bool>),
}

/// A column: its name, type, whether it may be null, and the cells buffered for the next row
/// group.
struct Column {
    name: String,
    kind: Kind,
    nullable: bool,
    cells: Vec<Cell>,
}

impl Column {
    fn new(name: impl Into<String>, kind: Kind, nullable: bool) -> Self {
        Self {
            name: name.into(),
            kind,
            nullable,
            cells: Vec::new(),
        }
    }

    fn schema(&self) -> Result<Type> {
        let (physical, logical) = match self.kind {
            Kind::Int => (Physical::INT64, None),
            Kind::Time => (
                Physical::INT64,
                Some(LogicalType::timestamp(true, TimeUnit::NANOS)),
            ),
            Kind::Float => (Physical::DOUBLE, None),
            Kind::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
            Kind::Bool => (Physical::BOOLEAN, None),
        };
        Ok(Type::primitive_type_builder(&self.name, physical)
            .with_repetition(if self.nullable {
                Repetition::OPTIONAL
            } else {
                Repetition::REQUIRED
            })
            .with_logical_type(logical)
            .build()?)
    }

    /// Writes the buffered cells as this column's chunk of a row group.
    fn write(&mut self, writer: &mut SerializedColumnWriter<'_>) -> Result<()> {
        let cells = std::mem::take(&mut self.cells);
        match self.kind {
            Kind::Int | Kind::Time => write_cells::<Int64Type>(writer, cells, self.nullable, |c| {
                if let Cell::Int(v) = c { v } else { None }
            }),
            Kind::Float => write_cells::<DoubleType>(writer, cells, self.nullable, |c| {
                if let Cell::Float(v) = c { v } else { None }
            }),
            Kind::Text => write_cells::<ByteArrayType>(writer, cells, self.nullable, |c| {
                if let Cell::Text(v) = c {
                    v.map(|s| ByteArray::from(s.into_bytes()))
                } else {
                    None
                }
            }),
            Kind::Bool => write_cells::<BoolType>(writer, cells, self.nullable, |c| {
                if let Cell::Bool(v) = c { v } else { None }
            }),
        }
    }
}

/// Writes `cells` (as `value` reads each) with definition levels when the column is nullable.
fn write_cells<T: DataType>(
    writer: &mut SerializedColumnWriter<'_>,
    cells: Vec<Cell>,
    nullable: bool,
    value: impl Fn(Cell) -> Option<T::T>,
) -> Result<()> {
    let values: Vec<Option<T::T>> = cells.into_iter().map(value).collect();
    let levels: Option<Vec<i16>> =
        nullable.then(|| values.iter().map(|v| i16::from(v.is_some())).collect());
    let dense: Vec<T::T> = values.into_iter().flatten().collect();
    writer
        .typed::<T>()
        .write_batch(&dense, levels.as_deref(), None)?;
    Ok(())
}

/// The columns before the value columns, in the order [`ParquetWriter::push`] fills them.
const FIXED_COLUMNS: [(&str, Kind, bool); 12] = [
    ("kind", Kind::Text, false),
    ("time", Kind::Time, false),
    ("window_start_ns", Kind::Int, false),
    ("window_length_ns", Kind::Int, false),
    ("host", Kind::Text, false),
    ("tid", Kind::Int, true),
    ("pid", Kind::Int, true),
    ("comm", Kind::Text, true),
    ("exited", Kind::Bool, true),
    ("cgroup", Kind::Text, false),
    ("cgroup_id", Kind::Int, false),
    ("container", Kind::Text, true),
];

/// A column name SQL can use unquoted: lowercase letters, digits and `_`.
fn column_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    out.trim_matches('_').to_owned()
}

/// The counters' column prefixes, one per counter of the set, made unique.
fn counter_prefixes(set: &CounterSet) -> Vec<String> {
    let mut seen = HashSet::new();
    set.counters
        .iter()
        .map(|counter| {
            let base = column_name(&counter.name);
            let mut name = base.clone();
            let mut n = 2;
            while !seen.insert(name.clone()) {
                name = format!("{base}_{n}");
                n += 1;
            }
            name
        })
        .collect()
}

/// The TopDown columns: every node of every part, named `<pmu>_<node>` with several core
/// types.
fn node_columns(view: Option<&TopdownView>) -> Vec<(NodeColumn, String)> {
    let Some(view) = view else {
        return Vec::new();
    };
    let several = view.parts.len() > 1;
    view_nodes(view)
        .into_iter()
        .map(|column| {
            let name = if several {
                format!("{}_{}", column_name(&column.prefix), column.node.name)
            } else {
                column.node.name.to_owned()
            };
            (column, name)
        })
        .collect()
}

/// Writes rows into a Parquet file, a row group at a time.
pub struct ParquetWriter {
    writer: SerializedFileWriter<BufWriter<File>>,
    meta: RunMeta,
    columns: Vec<Column>,
    /// The value columns of the set's rows, after the fixed ones (then `run_percent`).
    values: Vec<ValueColumn>,
    /// How many counters the set has (four columns each).
    counters: usize,
    /// The TopDown columns, in column order.
    nodes: Vec<NodeColumn>,
    rows: usize,
}

impl ParquetWriter {
    /// Writes rows of `set` (and `view`'s TopDown nodes) into `file`.
    pub fn to_file(
        file: File,
        meta: RunMeta,
        set: &CounterSet,
        view: Option<&TopdownView>,
    ) -> Result<Self> {
        let mut columns: Vec<Column> = FIXED_COLUMNS
            .iter()
            .map(|&(name, kind, nullable)| Column::new(name, kind, nullable))
            .collect();
        let values = columns::columns(set);
        for value in &values {
            let kind = match value.kind {
                ValueKind::Nanoseconds | ValueKind::Count => Kind::Int,
                ValueKind::Percent | ValueKind::Ratio => Kind::Float,
            };
            columns.push(Column::new(value.key, kind, value.may_be_missing()));
        }
        columns.push(Column::new("run_percent", Kind::Float, false));
        columns.push(Column::new("bottleneck", Kind::Text, true));
        for key in wait_behind_keys() {
            let kind = if key.ends_with("_ns") {
                Kind::Int
            } else {
                Kind::Text
            };
            columns.push(Column::new(key, kind, true));
        }
        let prefixes = counter_prefixes(set);
        for prefix in &prefixes {
            columns.push(Column::new(format!("{prefix}_value"), Kind::Int, true));
            columns.push(Column::new(format!("{prefix}_scaled"), Kind::Float, true));
            columns.push(Column::new(
                format!("{prefix}_enabled_ns"),
                Kind::Int,
                false,
            ));
            columns.push(Column::new(
                format!("{prefix}_running_ns"),
                Kind::Int,
                false,
            ));
        }
        let node_columns = node_columns(view);
        for (_, name) in &node_columns {
            columns.push(Column::new(name.clone(), Kind::Float, true));
        }
        let fields = columns
            .iter()
            .map(|c| c.schema().map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let schema = Type::group_type_builder("schema")
            .with_fields(fields)
            .build()?;
        let counters: serde_json::Map<String, serde_json::Value> = prefixes
            .iter()
            .zip(&set.counters)
            .map(|(prefix, counter)| (prefix.clone(), counter.name.clone().into()))
            .collect();
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_created_by(format!("topdown-bpf {}", meta.tool_version))
            .set_key_value_metadata(Some(vec![
                KeyValue::new("topdown-bpf.schema".to_owned(), SCHEMA.to_owned()),
                KeyValue::new("topdown-bpf.counter_set".to_owned(), set.name.to_owned()),
                KeyValue::new(
                    "topdown-bpf.counters".to_owned(),
                    serde_json::Value::Object(counters).to_string(),
                ),
            ]))
            .build();
        let writer = SerializedFileWriter::new(
            BufWriter::new(file),
            Arc::new(schema),
            Arc::new(properties),
        )?;
        Ok(Self {
            writer,
            meta,
            columns,
            values,
            counters: set.counters.len(),
            nodes: node_columns.into_iter().map(|(column, _)| column).collect(),
            rows: 0,
        })
    }

    /// Buffers one window's rows; writes a row group when enough are buffered.
    pub fn window(&mut self, window: &Window, rows: &ExportWindow) -> Result<()> {
        for row in &rows.threads {
            self.push(window, row, "thread");
        }
        for row in &rows.cgroups {
            self.push(window, row, "cgroup");
        }
        if self.rows >= ROWS_PER_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    fn push(&mut self, window: &Window, export: &ExportRow, kind: &str) {
        let row = export.row;
        let start_ns = window.start.as_nanos() as i64;
        let (tid, pid, comm, exited, cgroup, cgroup_id) = match &row.who {
            Who::Thread(t) => (
                Some(i64::from(t.tid.0)),
                Some(i64::from(t.pid.0)),
                Some(t.comm.to_string()),
                Some(t.exited),
                t.cgroup.to_string(),
                t.cgroup_id,
            ),
            Who::Group { group, .. } => (None, None, None, None, group.path.clone(), group.id),
        };
        // In column order: FIXED_COLUMNS, the value columns, run_percent, the bottleneck, the
        // wait's split, four per counter, then the nodes.
        let mut cells = vec![
            Cell::Text(Some(kind.to_owned())),
            Cell::Int(Some(
                (self.meta.started_unix_ns as i64).saturating_add(start_ns),
            )),
            Cell::Int(Some(start_ns)),
            Cell::Int(Some(window.length.as_nanos() as i64)),
            Cell::Text(Some(self.meta.host.clone())),
            Cell::Int(tid),
            Cell::Int(pid),
            Cell::Text(comm),
            Cell::Bool(exited),
            Cell::Text(Some(cgroup)),
            Cell::Int(Some(cgroup_id.0 as i64)),
            Cell::Text(export.container.clone()),
        ];
        for value in &self.values {
            cells.push(match (value.value(row), value.kind) {
                (Some(Number::Int(n)), _) => Cell::Int(Some(n as i64)),
                (Some(Number::Float(x)), _) => Cell::Float(Some(x)),
                (None, ValueKind::Nanoseconds | ValueKind::Count) => Cell::Int(None),
                (None, ValueKind::Percent | ValueKind::Ratio) => Cell::Float(None),
            });
        }
        cells.push(Cell::Float(Some(row.run_fraction * 100.0)));
        cells.push(Cell::Text(
            row.bottleneck().map(std::borrow::Cow::into_owned),
        ));
        for field in wait_behind_fields(row) {
            cells.push(match field {
                SplitField::Name(name) => Cell::Text(name.map(str::to_owned)),
                SplitField::Ns(ns) => Cell::Int(ns.map(|ns| ns as i64)),
            });
        }
        for i in 0..self.counters {
            let value = row.counters.get(i).copied().unwrap_or_default();
            let counted = value.reading.running_ns > 0;
            cells.push(Cell::Int(counted.then_some(value.reading.count as i64)));
            cells.push(Cell::Float(value.scaled().filter(|_| counted)));
            cells.push(Cell::Int(Some(value.reading.enabled_ns as i64)));
            cells.push(Cell::Int(Some(value.reading.running_ns as i64)));
        }
        for column in &self.nodes {
            cells.push(Cell::Float(column.value(row)));
        }
        debug_assert_eq!(cells.len(), self.columns.len());
        for (column, cell) in self.columns.iter_mut().zip(cells) {
            column.cells.push(cell);
        }
        self.rows += 1;
    }

    /// Writes the buffered rows as one row group.
    fn flush(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut group = self.writer.next_row_group()?;
        for column in &mut self.columns {
            let Some(mut writer) = group.next_column()? else {
                break;
            };
            column.write(&mut writer)?;
            writer.close()?;
        }
        group.close()?;
        self.writer.flush().context("writing a row group")?;
        self.rows = 0;
        Ok(())
    }

    /// Writes what is buffered and the file's footer.
    pub fn finish(mut self) -> Result<()> {
        self.flush()?;
        self.writer.close().context("writing the Parquet footer")?;
        Ok(())
    }
}

/// A long run's rows as it goes: a folder of Parquet files, one per `per` windows, each a
/// whole file (footer and all) once its windows are in, named `part-NNNNNN.parquet` only then
/// (a part being written is `.part-NNNNNN.RANDOM.partial`, made with `O_EXCL` and renamed
/// without replacing: a planted name or link makes the run refuse, never write through it).
/// A run killed mid-way leaves every
/// finished part readable and loses only the windows of the part being written (they are in
/// the recording too). Engines read the folder as one table (`read_parquet('DIR/*.parquet')`).
pub struct ParquetParts {
    dir: std::path::PathBuf,
    /// The folder, opened once: parts are made and named through it, so a run that gave up
    /// root (`--user`) needs no way to the folder from `/`, only the folder itself.
    dir_fd: std::os::fd::OwnedFd,
    meta: RunMeta,
    set: CounterSet,
    view: Option<TopdownView>,
    per: usize,
    /// The part being written, its windows so far and its temporary name.
    current: Option<(ParquetWriter, usize, String)>,
    written: usize,
}

impl ParquetParts {
    /// Makes (or reuses, when empty of parts) the folder `dir`.
    pub fn create(
        dir: &Path,
        meta: RunMeta,
        set: &CounterSet,
        view: Option<&TopdownView>,
        per: usize,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot make the Parquet folder {}", dir.display()))?;
        let taken = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .flatten()
            .any(|entry| entry.file_name().to_string_lossy().ends_with(".parquet"));
        if taken {
            anyhow::bail!(
                "{} already holds Parquet files: give a new folder (engines read every part \
                 in it as one table)",
                dir.display()
            );
        }
        let dir_fd = File::open(dir)
            .with_context(|| format!("cannot open the Parquet folder {}", dir.display()))?
            .into();
        Ok(Self {
            dir: dir.to_path_buf(),
            dir_fd,
            meta,
            set: set.clone(),
            view: view.cloned(),
            per: per.max(1),
            current: None,
            written: 0,
        })
    }

    /// Adds one window's rows; closes the part when it holds `per` windows.
    pub fn window(&mut self, window: &Window, rows: &ExportWindow) -> Result<()> {
        if self.current.is_none() {
            let name = self.in_progress()?;
            let file = self.make(&name)?;
            let writer =
                ParquetWriter::to_file(file, self.meta.clone(), &self.set, self.view.as_ref())?;
            self.current = Some((writer, 0, name));
        }
        if let Some((writer, windows, _)) = self.current.as_mut() {
            writer.window(window, rows)?;
            *windows += 1;
            if *windows >= self.per {
                self.close_part()?;
            }
        }
        Ok(())
    }

    /// A name for the part to write: hidden, not `*.parquet` until it is whole, and not one
    /// anyone can guess ahead.
    fn in_progress(&self) -> Result<String> {
        let mut random = [0u8; 8];
        // SAFETY: writes at most 8 bytes into a live buffer of 8.
        let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
        if got != random.len() as isize {
            return Err(std::io::Error::last_os_error()).context("naming a Parquet part");
        }
        Ok(format!(
            ".part-{:06}.{:016x}.partial",
            self.written,
            u64::from_ne_bytes(random)
        ))
    }

    /// Creates `name` in the folder: a new file, never one that exists or a link.
    fn make(&self, name: &str) -> Result<File> {
        use std::os::fd::{AsRawFd as _, FromRawFd as _};
        let c_name = std::ffi::CString::new(name)?;
        // SAFETY: a valid directory fd and NUL-terminated name; the fd returned is owned by the
        // File.
        let fd = unsafe {
            libc::openat(
                self.dir_fd.as_raw_fd(),
                c_name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot write {}", self.dir.join(name).display()));
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn close_part(&mut self) -> Result<()> {
        use std::os::fd::AsRawFd as _;
        if let Some((writer, _, name)) = self.current.take() {
            writer.finish()?;
            let done = format!("part-{:06}.parquet", self.written);
            let from = std::ffi::CString::new(name)?;
            let to = std::ffi::CString::new(done.as_str())?;
            let dir = self.dir_fd.as_raw_fd();
            // SAFETY: a valid directory fd and NUL-terminated names.
            let mut renamed = unsafe {
                libc::renameat2(dir, from.as_ptr(), dir, to.as_ptr(), libc::RENAME_NOREPLACE)
            };
            if renamed != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
            {
                // A filesystem without RENAME_NOREPLACE: a hard link refuses a name that
                // exists just the same.
                // SAFETY: as above.
                renamed = unsafe { libc::linkat(dir, from.as_ptr(), dir, to.as_ptr(), 0) };
                if renamed == 0 {
                    // SAFETY: as above.
                    unsafe { libc::unlinkat(dir, from.as_ptr(), 0) };
                }
            }
            if renamed != 0 {
                // The part stays under its temporary name.
                return Err(std::io::Error::last_os_error()).with_context(|| {
                    format!(
                        "naming {} (something else took the name; the part is left as {})",
                        self.dir.join(&done).display(),
                        from.to_string_lossy()
                    )
                });
            }
            self.written += 1;
        }
        Ok(())
    }

    /// Closes the last part; returns how many parts the folder holds.
    pub fn finish(mut self) -> Result<usize> {
        self.close_part()?;
        Ok(self.written)
    }
}

/// Each window's rows, a row group at a time; the footer at the end.
impl WindowSink for ParquetWriter {
    fn window(&mut self, frame: &Frame<'_>) -> Result<()> {
        ParquetWriter::window(self, frame.window(), &export::rows(frame))
    }

    fn finish(self: Box<Self>, _totals: &Frame<'_>) -> Result<Option<String>> {
        ParquetWriter::finish(*self)?;
        Ok(None)
    }
}

impl WindowSink for ParquetParts {
    fn window(&mut self, frame: &Frame<'_>) -> Result<()> {
        ParquetParts::window(self, frame.window(), &export::rows(frame))
    }

    fn finish(self: Box<Self>, _: &Frame<'_>) -> Result<Option<String>> {
        let dir = self.dir.clone();
        let files = ParquetParts::finish(*self)?;
        Ok(Some(format!(
            "wrote {files} Parquet files to {} (`read_parquet('{0}/*.parquet')`)",
            dir.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_names_are_plain_sql_identifiers() {
        assert_eq!(column_name("cpu-clock"), "cpu_clock");
        assert_eq!(
            column_name("cpu_core/topdown-retiring/"),
            "cpu_core_topdown_retiring"
        );
        assert_eq!(column_name("r01C2:u"), "r01c2_u");
    }

    /// docs/recordings.md's Parquet table names every column the writer makes, for a set with
    /// every derived column (IPC, MPKI) and TopDown: each by its name in backticks, numbered
    /// ones by their first (`wait_behind_1` .. `wait_behind_3`), a counter's and a node's by
    /// their pattern (`<counter>_value`, `tma_<node>`). A column added without its line fails.
    #[test]
    fn the_docs_parquet_table_names_every_column() {
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/recordings.md"),
        )
        .unwrap();
        let start = docs.find("## Parquet").expect("the Parquet section");
        let section = &docs[start..];
        let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
        let mut set = CounterSet::software(String::new());
        for (name, config) in [("cycles", 0), ("instructions", 1), ("cache-misses", 3)] {
            set.counters
                .push(crate::pmu::counter_set::Counter::event(name, 0, config));
        }
        let model = crate::tma::Model::named("sapphirerapids").unwrap();
        let view = TopdownView::single(model, 2, 8, false);
        let meta = RunMeta {
            host: "h".into(),
            started_unix_ns: 0,
            tool_version: "0".into(),
        };
        let file = tempfile::tempfile().unwrap();
        let writer = ParquetWriter::to_file(file, meta, &set, Some(&view)).unwrap();
        let prefixes = counter_prefixes(&set);
        let mut missing = Vec::new();
        for column in &writer.columns {
            let name = column.name.replace("_2", "_1").replace("_3", "_1");
            let pattern = if name.starts_with("tma_") {
                "tma_<node>".to_owned()
            } else if let Some(prefix) = prefixes.iter().find(|p| name.starts_with(p.as_str())) {
                name.replacen(prefix.as_str(), "<counter>", 1)
            } else {
                name
            };
            if !section.contains(&format!("`{pattern}`")) {
                missing.push(column.name.clone());
            }
        }
        assert!(writer.columns.len() > 40, "{}", writer.columns.len());
        assert!(missing.is_empty(), "docs/recordings.md lacks {missing:?}");
    }
}
