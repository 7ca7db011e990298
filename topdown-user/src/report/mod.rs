//! Renderers: a refreshing table, interval blocks, JSON lines and CSV. They draw rows and never
//! reach back into collection.

mod csv;
mod json;
pub mod rows;
mod table;
pub mod topdown;

use std::io::Write;

use anyhow::{Context as _, Result};

use self::rows::{RowOptions, rows};
use crate::{
    attrib::{Window, cgroups::CgroupNames},
    pmu::counter_set::CounterSet,
};

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
        /// Field separator.
        separator: String,
    },
}

/// Writes windows of usage in one format to one output.
pub struct Renderer {
    out: Box<dyn Write>,
    format: Format,
    rows: RowOptions,
    set: CounterSet,
    cgroups: CgroupNames,
    csv_header_written: bool,
}

impl Renderer {
    /// A renderer for `set`'s windows.
    pub fn new(
        out: Box<dyn Write>,
        format: Format,
        rows: RowOptions,
        set: CounterSet,
        cgroups: CgroupNames,
    ) -> Self {
        Self {
            out,
            format,
            rows,
            set,
            cgroups,
            csv_header_written: false,
        }
    }

    /// Whether windows are drawn as they come (otherwise only the summary is).
    pub const fn wants_windows(&self) -> bool {
        !matches!(self.format, Format::Summary)
    }

    /// The first line: which counter set is live, and why.
    pub fn header(&mut self) -> Result<()> {
        match self.format {
            Format::Json | Format::Csv { .. } => Ok(()),
            _ => self.write(&format!("{}\n", table::set_line(&self.set))),
        }
    }

    /// Draws one interval.
    pub fn window(&mut self, window: &Window) -> Result<()> {
        self.draw(window, false)
    }

    /// Draws the totals of the whole run.
    pub fn summary(&mut self, window: &Window) -> Result<()> {
        self.draw(window, true)
    }

    fn draw(&mut self, window: &Window, is_final: bool) -> Result<()> {
        let (rows, total) = rows(window, &self.set, &mut self.cgroups, &self.rows);
        let text = match &self.format {
            Format::Refresh if !is_final => {
                format!(
                    "\x1b[H\x1b[2J{}\n{}",
                    table::set_line(&self.set),
                    table::block(window, &rows, total, &self.set, false)
                )
            }
            Format::Refresh | Format::Interval | Format::Summary => {
                table::block(window, &rows, total, &self.set, is_final)
            }
            Format::Json => json::document(window, &rows, &self.set, is_final)? + "\n",
            Format::Csv { separator } => {
                let mut text = String::new();
                if !self.csv_header_written {
                    self.csv_header_written = true;
                    text = csv::header(&self.set, separator);
                }
                text + &csv::lines(window, &rows, &self.set, separator, is_final)
            }
        };
        self.write(&text)
    }

    fn write(&mut self, text: &str) -> Result<()> {
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .context("writing the report")
    }
}
