//! Text cells in aligned columns, as comfy_table draws a table with its borderless `NOTHING`
//! preset, for tables of thousands of rows: comfy_table made four to five strings per cell
//! (its lines, the alignment, the padding, the line's copy), three quarters of a `record -I 1000`
//! at 20,000 busy threads (BENCHMARKS.md); this writes each line once into one buffer. The
//! output is comfy_table's, byte for byte (the unit tests draw both): each column as wide as
//! its widest line (in terminal columns, at least one), a cell's lines (split at `\n`) padded
//! to that width on the side away from the column's alignment, a space either side of every
//! cell, rows' lines joined by `\n` with none after the last. One difference is left: comfy_table
//! caps a column at 65,535 terminal columns and wraps longer lines; no cell of ours comes near
//! (a cgroup path is at most 4,096 bytes), and here such a line stays whole.

use unicode_width::UnicodeWidthStr as _;

/// A table of text cells: a header row, then rows, each column left-aligned unless
/// [`Aligned::align_right`] says otherwise. The cells' text lies in one buffer (a window of
/// 20,000 rows is a quarter million cells: one string each cost as much to free as to draw).
#[derive(Default)]
pub struct Aligned {
    text: String,
    /// Each cell's end in `text`, its width (its widest line's) and whether it has several
    /// lines.
    cells: Vec<Cell>,
    /// Each row's first cell in `cells`.
    rows: Vec<usize>,
    right: Vec<bool>,
}

#[derive(Clone, Copy)]
struct Cell {
    end: usize,
    width: usize,
    lines: bool,
}

impl Aligned {
    /// A table whose first row is `header`.
    pub fn new<S: AsRef<str>>(header: impl IntoIterator<Item = S>) -> Self {
        let mut table = Self::default();
        table.add_row(header);
        table
    }

    /// Adds a row (a row shorter than the widest is padded with empty columns).
    pub fn add_row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.begin_row();
        for cell in cells {
            self.push(cell.as_ref());
        }
    }

    /// Starts a row, whose cells [`Aligned::push`] and [`Aligned::push_with`] add.
    pub fn begin_row(&mut self) {
        self.rows.push(self.cells.len());
    }

    /// Adds a cell of `text` to the latest row.
    pub fn push(&mut self, text: &str) {
        self.push_with(|out| out.push_str(text));
    }

    /// Adds a cell to the latest row, its text written by `write`.
    pub fn push_with(&mut self, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        let text = &self.text[start..];
        let lines = text.contains('\n');
        let width = if lines {
            text.split('\n').map(str::width).max().unwrap_or(0)
        } else {
            text.width()
        };
        self.cells.push(Cell {
            end: self.text.len(),
            width,
            lines,
        });
    }

    /// Aligns column `column` to the right.
    pub fn align_right(&mut self, column: usize) {
        if self.right.len() <= column {
            self.right.resize(column + 1, false);
        }
        self.right[column] = true;
    }

    /// How many columns the widest row has.
    pub fn columns(&self) -> usize {
        self.row_ranges().map(|r| r.len()).max().unwrap_or(0)
    }

    /// Each row's cells, as a range of `cells`.
    fn row_ranges(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        self.rows
            .iter()
            .enumerate()
            .map(|(i, &first)| first..self.rows.get(i + 1).copied().unwrap_or(self.cells.len()))
    }

    /// Cell `i`'s text.
    fn text(&self, i: usize) -> &str {
        let start = i.checked_sub(1).map_or(0, |before| self.cells[before].end);
        &self.text[start..self.cells[i].end]
    }

    /// Appends the table to `out`.
    pub fn write_to(&self, out: &mut String) {
        let mut widths = vec![1; self.columns()];
        for row in self.row_ranges() {
            for (width, cell) in widths.iter_mut().zip(&self.cells[row]) {
                *width = (*width).max(cell.width);
            }
        }
        let line_width: usize = widths.iter().map(|w| w + 2).sum();
        out.reserve(self.rows.len() * (line_width + 1));
        for (i, row) in self.row_ranges().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let cells = &self.cells[row.clone()];
            if cells.len() == widths.len() && !cells.iter().any(|c| c.lines) {
                for (column, (cell, &width)) in cells.iter().zip(&widths).enumerate() {
                    let pad = width - cell.width;
                    push_cell(out, self.text(row.start + column), pad, self.right(column));
                }
                continue;
            }
            self.write_lines(out, row, &widths);
        }
    }

    /// A row with a cell of several lines, or missing cells (a line of spaces each).
    fn write_lines(&self, out: &mut String, row: std::ops::Range<usize>, widths: &[usize]) {
        let missing = usize::from(row.len() < widths.len());
        let height = row
            .clone()
            .map(|i| self.text(i).split('\n').count())
            .fold(missing, usize::max);
        for at in 0..height {
            if at > 0 {
                out.push('\n');
            }
            for (column, &width) in widths.iter().enumerate() {
                let line = (column < row.len())
                    .then(|| self.text(row.start + column).split('\n').nth(at))
                    .flatten();
                match line {
                    Some(line) => {
                        let pad = width.saturating_sub(line.width());
                        push_cell(out, line, pad, self.right(column));
                    }
                    None => spaces(out, width + 2),
                }
            }
        }
    }

    fn right(&self, column: usize) -> bool {
        self.right.get(column).copied().unwrap_or(false)
    }
}

impl std::fmt::Display for Aligned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        self.write_to(&mut out);
        f.write_str(&out)
    }
}

/// One cell's line, `pad` spaces on the side away from its alignment, and a space either side.
fn push_cell(out: &mut String, line: &str, pad: usize, right: bool) {
    out.push(' ');
    if right {
        spaces(out, pad);
        out.push_str(line);
    } else {
        out.push_str(line);
        spaces(out, pad);
    }
    out.push(' ');
}

fn spaces(out: &mut String, n: usize) {
    const SPACES: &str = "                                                                ";
    let mut left = n;
    while left > 0 {
        let now = left.min(SPACES.len());
        out.push_str(&SPACES[..now]);
        left -= now;
    }
}

#[cfg(test)]
mod tests {
    use comfy_table::{CellAlignment, Table, presets::NOTHING};

    use super::*;

    /// The same cells drawn by comfy_table with the `NOTHING` preset.
    fn comfy(rows: &[Vec<String>], right: &[usize]) -> String {
        let mut table = Table::new();
        table.load_preset(NOTHING);
        table.set_header(rows[0].clone());
        for row in &rows[1..] {
            table.add_row(row.clone());
        }
        for (i, column) in table.column_iter_mut().enumerate() {
            if right.contains(&i) {
                column.set_cell_alignment(CellAlignment::Right);
            }
        }
        table.to_string()
    }

    fn ours(rows: &[Vec<String>], right: &[usize]) -> String {
        let mut table = Aligned::new(&rows[0]);
        for row in &rows[1..] {
            table.add_row(row);
        }
        for &i in right {
            table.align_right(i);
        }
        table.to_string()
    }

    #[test]
    fn draws_what_comfy_table_draws_byte_for_byte() {
        // Cells drawn from pieces that exercise widths: empty, ASCII, wide (CJK: two columns),
        // combining (zero width), emoji, a control character, lines split at `\n`.
        let pieces = [
            "",
            "a",
            "tid",
            "12345",
            "kworker/0:1",
            "日本",
            "e\u{301}",
            "😀",
            "\t",
            "x\ny",
            "\n",
            "a\n\nbb",
            " ",
            "-",
            "a name longer than the sixty-four spaces pushed at a time, to pad past them",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..500 {
            let columns = 1 + next(5);
            let rows: Vec<Vec<String>> = (0..1 + next(6))
                .map(|r| {
                    // Rows after the header may be short, even empty (comfy_table pads them).
                    let len = if r == 0 { columns } else { next(columns + 1) };
                    (0..len)
                        .map(|_| (0..next(3)).map(|_| pieces[next(pieces.len())]).collect())
                        .collect()
                })
                .collect();
            let right: Vec<usize> = (0..columns).filter(|_| next(2) == 0).collect();
            assert_eq!(
                ours(&rows, &right),
                comfy(&rows, &right),
                "rows {rows:?}, right-aligned {right:?}"
            );
        }
    }

    #[test]
    fn an_empty_table_is_an_empty_line() {
        assert_eq!(ours(&[Vec::new()], &[]), comfy(&[Vec::new()], &[]));
        assert_eq!(ours(&[vec!["A".into()]], &[0]), " A ");
    }
}
