//! Rows as Apache Parquet, for the engines a fleet already runs (DuckDB, Spark, Trino): one row
//! per thread and per cgroup per window, told apart by `kind`. The schema
//! (`topdown-bpf/rows/v1`) is in docs/recordings.md ("Parquet"): types, units, nullability.
//!
//! Nothing is written that was not measured: a counter that did not run (enabled while the
//! thread ran, never running, or never enabled) has a null value, never 0; a TopDown node that
//! could not be computed is null.

use std::{fs::File, io::BufWriter, path::Path, sync::Arc};

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
        export::{self, ExportRow, ExportWindow, RunMeta},
        flat::{self, At, Cell, Field},
        frame::Frame,
        sink::WindowSink,
    },
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// The schema's name, in the file's key-value metadata under `topdown-bpf.schema`.
pub const SCHEMA: &str = "topdown-bpf/rows/v1";

/// Rows buffered before they are written as one row group (and at the end).
const ROWS_PER_GROUP: usize = 64 * 1024;

/// A column: its field ([`flat::parquet`]) and the cells buffered for the next row group.
struct Column {
    field: Field,
    cells: Vec<Cell<'static>>,
}

impl Column {
    fn schema(&self) -> Result<Type> {
        let (physical, logical) = match self.field.ty {
            flat::Type::Int => (Physical::INT64, None),
            flat::Type::Time => (
                Physical::INT64,
                Some(LogicalType::timestamp(true, TimeUnit::NANOS)),
            ),
            flat::Type::Float { .. } => (Physical::DOUBLE, None),
            flat::Type::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
            flat::Type::Bool => (Physical::BOOLEAN, None),
        };
        Ok(Type::primitive_type_builder(&self.field.name, physical)
            .with_repetition(if self.field.nullable {
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
        let nullable = self.field.nullable;
        match self.field.ty {
            flat::Type::Int | flat::Type::Time => {
                write_cells::<Int64Type>(writer, cells, nullable, |c| {
                    if let Cell::Int(v) = c { v } else { None }
                })
            }
            flat::Type::Float { .. } => write_cells::<DoubleType>(writer, cells, nullable, |c| {
                if let Cell::Float(v) = c { v } else { None }
            }),
            flat::Type::Text => write_cells::<ByteArrayType>(writer, cells, nullable, |c| {
                if let Cell::Text(v) = c {
                    v.map(|s| ByteArray::from(s.into_owned().into_bytes()))
                } else {
                    None
                }
            }),
            flat::Type::Bool => write_cells::<BoolType>(writer, cells, nullable, |c| {
                if let Cell::Bool(v) = c { v } else { None }
            }),
        }
    }
}

/// Writes `cells` (as `value` reads each) with definition levels when the column is nullable.
fn write_cells<T: DataType>(
    writer: &mut SerializedColumnWriter<'_>,
    cells: Vec<Cell<'static>>,
    nullable: bool,
    value: impl Fn(Cell<'static>) -> Option<T::T>,
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

/// Writes rows into a Parquet file, a row group at a time.
pub struct ParquetWriter {
    writer: SerializedFileWriter<BufWriter<File>>,
    meta: RunMeta,
    columns: Vec<Column>,
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
        let columns: Vec<Column> = flat::parquet(set, view)
            .into_iter()
            .map(|field| Column {
                field,
                cells: Vec::new(),
            })
            .collect();
        let prefixes = flat::counter_prefixes(set);
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
            rows: 0,
        })
    }

    /// Buffers one window's rows; writes a row group when enough are buffered.
    pub fn window(&mut self, window: &Window, rows: &ExportWindow) -> Result<()> {
        for row in rows.threads.iter().chain(&rows.cgroups) {
            self.push(window, row);
        }
        if self.rows >= ROWS_PER_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    fn push(&mut self, window: &Window, export: &ExportRow) {
        let at = At {
            window,
            time_s: "",
            host: &self.meta.host,
            started_unix_ns: self.meta.started_unix_ns,
            container: export.container.as_deref(),
        };
        for column in &mut self.columns {
            column
                .cells
                .push(column.field.cell(export.row, &at).into_owned());
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
        assert_eq!(flat::column_name("cpu-clock"), "cpu_clock");
        assert_eq!(
            flat::column_name("cpu_core/topdown-retiring/"),
            "cpu_core_topdown_retiring"
        );
        assert_eq!(flat::column_name("r01C2:u"), "r01c2_u");
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
        let set = flat::fixture::every_derived_column();
        let view = flat::fixture::topdown();
        let meta = RunMeta {
            host: "h".into(),
            started_unix_ns: 0,
            tool_version: "0".into(),
        };
        let file = tempfile::tempfile().unwrap();
        let writer = ParquetWriter::to_file(file, meta, &set, Some(&view)).unwrap();
        let prefixes = flat::counter_prefixes(&set);
        let mut missing = Vec::new();
        for column in &writer.columns {
            let name = column.field.name.replace("_2", "_1").replace("_3", "_1");
            let pattern = if name.starts_with("tma_") {
                "tma_<node>".to_owned()
            } else if let Some(prefix) = prefixes.iter().find(|p| name.starts_with(p.as_str())) {
                name.replacen(prefix.as_str(), "<counter>", 1)
            } else {
                name
            };
            if !section.contains(&format!("`{pattern}`")) {
                missing.push(column.field.name.clone());
            }
        }
        assert!(writer.columns.len() > 40, "{}", writer.columns.len());
        assert!(missing.is_empty(), "docs/recordings.md lacks {missing:?}");
    }
}
