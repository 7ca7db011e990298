//! Reads a recording back: its header, counter set and TopDown view, every window, the run's
//! totals and the cgroup paths it names. Nothing in the file is trusted: the format and version
//! are checked, every line's frame must pass zstd's checksum (a flipped bit is an error naming
//! the window it follows, never different numbers), every row must carry one value per
//! counter, lines have a bounded length, a window holds no more thread rows than the run that
//! wrote it could (its `--max-threads` and exited rows), the rows held stay within a memory
//! budget, and a file cut short is read up to its last whole line and said to be so.

use std::{
    collections::VecDeque,
    fs::File,
    io::{BufRead as _, BufReader, Read as _, Seek as _, SeekFrom},
    path::Path,
    time::Duration,
};
use topdown_common::cgroup::CgroupId;

use anyhow::{Context as _, Result, bail};

use super::format::{FORMAT, Header, OLDEST_VERSION, RecordLine, RowBounds, VERSION};
use crate::{
    attrib::{Window, cgroups::CgroupNames},
    pmu::counter_set::CounterSet,
    progress::Progress,
    tma::view::TopdownView,
};

/// The longest line read (a window of hundreds of thousands of threads fits many times).
const MAX_LINE: u64 = 1 << 30;

/// The most zero bytes read past a file's last frame to tell a power cut's tail from damage.
const MAX_ZERO_TAIL: u64 = 16 << 20;

/// What a file that goes on with a zero byte where a frame should begin is: cut short when it
/// is zeros to its end (a filesystem that extended the file before a power cut wrote its data:
/// what follows the last frame on disk is lost, not damaged), else corrupt.
fn zero_tail(input: &mut BufReader<File>) -> Stop {
    let mut tail = Vec::new();
    match input.take(MAX_ZERO_TAIL + 1).read_to_end(&mut tail) {
        Ok(n) if n as u64 <= MAX_ZERO_TAIL && tail.iter().all(|&b| b == 0) => {
            Stop::CutShort(format!(
                "it ends in {n} zero bytes (a power cut before its last writes reached the disk)"
            ))
        }
        Ok(_) => Stop::Corrupt("a frame begins with a zero byte".into()),
        Err(error) => Stop::CutShort(format!("it cannot be read: {error}")),
    }
}

/// [`Recording::cut_short`] of a file that ends after a whole line but has no totals line (a
/// run killed between two windows, or a store's segment, which never has one).
pub const NO_TOTALS: &str = "no totals line";

/// zstd's frame magic number, little-endian on disk.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A recording, read.
pub struct Recording {
    /// Its first line.
    pub header: Header,
    /// The counters its values are in.
    pub set: CounterSet,
    /// TopDown over them, when the set measures it.
    pub topdown: Option<TopdownView>,
    /// Every interval, in order.
    pub windows: Vec<Window>,
    /// The run's totals as the live run printed them; `None` when the file was cut short.
    pub totals: Option<Window>,
    /// Every cgroup id the recording names, with its path (reads nothing on this host).
    pub names: CgroupNames,
    /// Why the file ended before its totals, when it did.
    pub cut_short: Option<String>,
}

/// Memory the rows of a recording may take while read, when not given: half of what the system
/// has available, at least 256 MiB.
pub fn default_memory_budget() -> u64 {
    let available_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(1 << 20);
    (available_kib * 1024 / 2).max(256 << 20)
}

/// Bytes one row (a thread's or a cgroup's) takes once read, for `counters` counters, counted
/// high: the parsed line and the window it becomes are both held for a moment.
pub(crate) fn row_bytes(counters: usize) -> u64 {
    2 * (160 + 40 * counters as u64)
}

impl Recording {
    /// Reads the recording at `path`, showing progress on a terminal for long ones, within
    /// [`default_memory_budget`].
    pub fn read(path: &Path) -> Result<Self> {
        Self::read_within(path, default_memory_budget())
    }

    /// Reads the recording at `path`, its rows taking at most `budget` bytes of memory.
    pub fn read_within(path: &Path, budget: u64) -> Result<Self> {
        let shown = path.display().to_string();
        let file =
            File::open(path).with_context(|| format!("cannot open the recording {shown}"))?;
        Self::read_file(file, &shown, budget)
    }

    /// Reads the recording open as `file` (`shown` names it in messages), its rows taking at
    /// most `budget` bytes of memory.
    pub fn read_file(file: File, shown: &str, budget: u64) -> Result<Self> {
        let (header, mut lines) = header_of(file, shown)?;
        let set = header.counter_set.set()?;
        let topdown = header.topdown.as_ref().map(|t| t.view()).transpose()?;
        let nr = set.counters.len();
        let mut names = CgroupNames::at(None);
        let mut windows = Vec::new();
        let mut totals = None;
        let mut cut_short = None;
        let progress = Progress::new();
        let (mut held, per_row) = (0u64, row_bytes(nr));
        loop {
            let where_ = || match windows.len() {
                0 => "the first window".to_owned(),
                n => format!("the line after window {n}"),
            };
            let bytes = match lines.next_line() {
                Ok(Some(bytes)) => bytes,
                Ok(None) => break,
                Err(Stop::CutShort(why)) => {
                    cut_short = Some(why);
                    break;
                }
                Err(Stop::Corrupt(why)) => {
                    bail!(
                        "{shown}: {} is corrupt ({why}): the file was damaged",
                        where_()
                    )
                }
            };
            held += rows_within(&bytes, header.row_bounds, per_row, held, budget)
                .map_err(|why| anyhow::anyhow!("{shown}: {} {why}", where_()))?;
            let line = parse(&bytes).with_context(|| {
                format!(
                    "{shown}: {} is not a recording line (a corrupt file)",
                    where_()
                )
            })?;
            if totals.is_some() {
                bail!(
                    "{shown}: line {} follows the run's totals (a corrupt file)",
                    lines.number
                );
            }
            match line {
                RecordLine::Header(_) => bail!("{shown}: a second header at line {}", lines.number),
                RecordLine::Cgroups { names: pairs } => {
                    for (id, path) in pairs {
                        names.learn(CgroupId(id), path);
                    }
                }
                RecordLine::Window(window) => {
                    let window = window
                        .window(nr)
                        .with_context(|| format!("{shown}: line {}", lines.number))?;
                    windows.push(window);
                    progress.show(|| format!("reading {shown}: {} windows", windows.len()));
                }
                RecordLine::Totals(window) => {
                    totals = Some(
                        window
                            .window(nr)
                            .with_context(|| format!("{shown}: line {}", lines.number))?,
                    );
                }
            }
        }
        progress.done(|| format!("reading {shown}: {} windows", windows.len()));
        if totals.is_none() && cut_short.is_none() {
            cut_short = Some(NO_TOTALS.into());
        }
        Ok(Self {
            header,
            set,
            topdown,
            windows,
            totals,
            names,
            cut_short,
        })
    }

    /// The run's totals: as the live run printed them, or, from a file cut short, its windows
    /// summed (exited threads then keep their own rows).
    pub fn totals(&self) -> Option<Window> {
        self.totals.clone().or_else(|| {
            let mut sum = Window::merge(&self.windows)?;
            sum.start = Duration::ZERO;
            Some(sum)
        })
    }
}

/// The header of the recording open as `file` (`shown` names it in messages), checked (a
/// zstd file whose first line is a header of a format and version this build reads), and the
/// lines after it.
fn header_of(mut file: File, shown: &str) -> Result<(Header, FrameLines)> {
    let mut magic = [0u8; 4];
    let is_zstd = file.read_exact(&mut magic).is_ok() && magic == ZSTD_MAGIC;
    if !is_zstd {
        bail!(
            "{shown} is not a topdown-bpf recording (not zstd-compressed): make one with \
             `topdown-bpf record -o FILE`"
        );
    }
    file.seek(SeekFrom::Start(0))
        .with_context(|| format!("cannot read the recording {shown}"))?;
    let mut lines = FrameLines::new(file);
    let header = match lines.next_line() {
        Ok(Some(line)) => match parse(&line) {
            Ok(RecordLine::Header(header)) => header,
            _ => bail!("{shown} is not a topdown-bpf recording (no header line)"),
        },
        _ => bail!("{shown} is not a topdown-bpf recording (no header line)"),
    };
    if header.format != FORMAT {
        bail!(
            "{shown} is not a topdown-bpf recording (format `{}`)",
            header.format
        );
    }
    if !(OLDEST_VERSION..=VERSION).contains(&header.version) {
        bail!(
            "{shown} is a version {} recording and this topdown-bpf ({}) reads versions \
             {OLDEST_VERSION} to {VERSION}: use the topdown-bpf that wrote it ({})",
            header.version,
            env!("CARGO_PKG_VERSION"),
            header.tool_version
        );
    }
    Ok((header, lines))
}

/// The memory the rows of line `bytes` will take (`per_row` bytes each), checked before the
/// line is parsed: no more thread rows than the recording's `bounds` allow, and no more than
/// `budget` bytes with the `held` ones; else what is wrong, to follow the line's place.
fn rows_within(
    bytes: &[u8],
    bounds: Option<RowBounds>,
    per_row: u64,
    held: u64,
    budget: u64,
) -> std::result::Result<u64, String> {
    let (thread_rows, cgroup_rows) = rows_in(bytes);
    if let Some(bounds) = bounds
        && thread_rows > bounds.thread_rows()
    {
        return Err(format!(
            "holds {thread_rows} thread rows, more than the {} a recording made with \
             --max-threads {} can hold (a corrupt or crafted recording)",
            bounds.thread_rows(),
            bounds.max_threads
        ));
    }
    let bytes = (thread_rows + cgroup_rows) * per_row;
    if held + bytes > budget {
        return Err(format!(
            "takes its rows past the {} MiB memory budget: give --max-memory MIB to allow \
             more (a crafted or enormous recording)",
            budget >> 20
        ));
    }
    Ok(bytes)
}

/// How reading lines stopped before the end.
enum Stop {
    /// The file ends inside a frame or a line: a run that was killed.
    CutShort(String),
    /// A frame fails zstd's checks (its checksum, or its coding): the file was damaged.
    Corrupt(String),
}

/// A line's JSON.
fn parse(bytes: &[u8]) -> Result<RecordLine> {
    serde_json::from_slice(bytes).context("not a line of the format")
}

/// The thread and cgroup rows a window line holds, counted from its text before it is parsed:
/// `"tid":` once per thread row, `"id":` once per cgroup row (never inside a string, where a
/// quote is escaped).
fn rows_in(bytes: &[u8]) -> (u64, u64) {
    let count = |needle: &[u8]| bytes.windows(needle.len()).filter(|w| w == &needle).count();
    (count(b"\"tid\":") as u64, count(b"\"id\":") as u64)
}

/// Reads the file's lines frame by frame: each frame is decoded whole (at most [`MAX_LINE`]
/// bytes) and its checksum checked by zstd at its end before any of its lines is handed out.
/// Version 2 writes one frame per line; version 1 wrote one frame for the whole file, whose
/// whole lines are kept when it is cut short.
struct FrameLines {
    input: Option<BufReader<File>>,
    lines: VecDeque<Vec<u8>>,
    frames: u64,
    /// Lines handed out.
    number: u64,
    /// Why the input ended early, once its lines are handed out.
    stop: Option<Stop>,
}

impl FrameLines {
    fn new(file: File) -> Self {
        Self {
            input: Some(BufReader::new(file)),
            lines: VecDeque::new(),
            frames: 0,
            number: 0,
            stop: None,
        }
    }

    /// The next whole line; `None` at the end of the file.
    fn next_line(&mut self) -> Result<Option<Vec<u8>>, Stop> {
        while self.lines.is_empty() {
            if let Some(stop) = self.stop.take() {
                return Err(stop);
            }
            let Some(input) = self.input.take() else {
                return Ok(None);
            };
            self.next_frame(input);
        }
        self.number += 1;
        Ok(self.lines.pop_front())
    }

    fn next_frame(&mut self, mut input: BufReader<File>) {
        match input.fill_buf() {
            Ok([]) => return,
            Ok(start) if start.first() == Some(&0) => {
                self.stop = Some(zero_tail(&mut input));
                return;
            }
            Ok(_) => {}
            Err(error) => {
                self.stop = Some(Stop::CutShort(format!("it cannot be read: {error}")));
                return;
            }
        }
        self.frames += 1;
        let decoder = match zstd::stream::read::Decoder::with_buffer(input) {
            Ok(decoder) => decoder,
            Err(error) => {
                self.stop = Some(Stop::Corrupt(error.to_string()));
                return;
            }
        };
        let mut decoder = decoder.single_frame();
        let mut content = Vec::new();
        let read = (&mut decoder).take(MAX_LINE + 1).read_to_end(&mut content);
        let rest = decoder.finish();
        let mut whole = content.split_inclusive(|&b| b == b'\n').peekable();
        let mut lines = Vec::new();
        let mut partial = false;
        while let Some(line) = whole.next() {
            if line.last() == Some(&b'\n') {
                lines.push(line.to_vec());
            } else {
                partial = whole.peek().is_none();
            }
        }
        match read {
            Ok(_) if content.len() as u64 > MAX_LINE => {
                self.stop = Some(Stop::Corrupt(format!(
                    "a frame holds more than {MAX_LINE} bytes"
                )));
            }
            Ok(_) => {
                self.lines.extend(lines);
                if partial {
                    self.stop = Some(Stop::CutShort("its last line is cut short".into()));
                } else {
                    self.input = Some(rest);
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                // Version 1 (one frame): keep its whole lines. Version 2: the frame's checksum
                // never came, so its line is not trusted.
                if self.frames == 1 {
                    self.lines.extend(lines);
                }
                self.stop = Some(Stop::CutShort(
                    "it ends inside its compressed data: the recording was cut short".into(),
                ));
            }
            Err(error) => self.stop = Some(Stop::Corrupt(error.to_string())),
        }
    }
}
