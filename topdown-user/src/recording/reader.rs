//! Reads a recording back: its header, counter set and TopDown view, every window, the run's
//! totals and the cgroup paths it names. Nothing in the file is trusted: the format and version
//! are checked, every row must carry one value per counter, lines have a bounded length, and a
//! file cut short is read up to its last whole line and said to be so.

use std::{
    fs::File,
    io::{BufRead as _, BufReader, IsTerminal as _, Read as _},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::format::{FORMAT, Header, Line, VERSION};
use crate::{
    attrib::{Window, cgroups::CgroupNames},
    pmu::counter_set::CounterSet,
    tma::view::TopdownView,
};

/// The longest line read (a window of hundreds of thousands of threads fits many times).
const MAX_LINE: u64 = 1 << 30;

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

impl Recording {
    /// Reads the recording at `path`, showing progress on a terminal for long ones.
    pub fn read(path: &Path) -> Result<Self> {
        let shown = path.display();
        let mut file =
            File::open(path).with_context(|| format!("cannot open the recording {shown}"))?;
        let mut magic = [0u8; 4];
        let is_zstd = file.read_exact(&mut magic).is_ok() && magic == ZSTD_MAGIC;
        if !is_zstd {
            bail!(
                "{shown} is not a topdown-bpf recording (not zstd-compressed): make one with \
                 `topdown-bpf record -o FILE`"
            );
        }
        let file =
            File::open(path).with_context(|| format!("cannot open the recording {shown}"))?;
        let decoder =
            zstd::Decoder::new(file).with_context(|| format!("reading the recording {shown}"))?;
        let mut lines = LineReader {
            input: BufReader::new(decoder),
            number: 0,
        };
        let header = match lines.next() {
            Ok(Some(Line::Header(header))) => header,
            Ok(_) | Err(_) => bail!("{shown} is not a topdown-bpf recording (no header line)"),
        };
        if header.format != FORMAT {
            bail!(
                "{shown} is not a topdown-bpf recording (format `{}`)",
                header.format
            );
        }
        if header.version != VERSION {
            bail!(
                "{shown} is a version {} recording and this topdown-bpf ({}) reads version \
                 {VERSION}: use the topdown-bpf that wrote it ({})",
                header.version,
                env!("CARGO_PKG_VERSION"),
                header.tool_version
            );
        }
        let set = header.counter_set.set()?;
        let topdown = header.topdown.as_ref().map(|t| t.view()).transpose()?;
        let nr = set.counters.len();
        let mut names = CgroupNames::at(None);
        let mut windows = Vec::new();
        let mut totals = None;
        let mut cut_short = None;
        let mut progress = Progress::new(path);
        loop {
            let line = match lines.next() {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(error) => {
                    cut_short = Some(format!("{error:#}"));
                    break;
                }
            };
            if totals.is_some() {
                bail!(
                    "{shown}: line {} follows the run's totals (a corrupt file)",
                    lines.number
                );
            }
            match line {
                Line::Header(_) => bail!("{shown}: a second header at line {}", lines.number),
                Line::Cgroups { names: pairs } => {
                    for (id, path) in pairs {
                        names.learn(id, path);
                    }
                }
                Line::Window(window) => {
                    let window = window
                        .window(nr)
                        .with_context(|| format!("{shown}: line {}", lines.number))?;
                    windows.push(window);
                    progress.show(windows.len());
                }
                Line::Totals(window) => {
                    totals = Some(
                        window
                            .window(nr)
                            .with_context(|| format!("{shown}: line {}", lines.number))?,
                    );
                }
            }
        }
        progress.done(windows.len());
        if totals.is_none() && cut_short.is_none() {
            cut_short = Some("no totals line".into());
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

/// Reads one JSON line at a time, bounded in length.
struct LineReader<R> {
    input: BufReader<R>,
    number: u64,
}

impl<R: std::io::Read> LineReader<R> {
    /// The next line; `None` at the end. An error for a line that is not whole (a file cut
    /// short) or not a line of the format.
    fn next(&mut self) -> Result<Option<Line>> {
        let mut buffer = Vec::new();
        let read = (&mut self.input)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut buffer)
            .context("it ends inside its compressed data: the recording was cut short")?;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        if buffer.last() != Some(&b'\n') {
            if read as u64 > MAX_LINE {
                bail!("line {} is longer than {MAX_LINE} bytes", self.number);
            }
            bail!("line {} is cut short", self.number);
        }
        serde_json::from_slice(&buffer)
            .with_context(|| format!("line {} is not a recording line", self.number))
            .map(Some)
    }
}

/// "reading FILE: N windows" on a terminal's stderr, once reading has taken half a second, at
/// most five times a second.
struct Progress {
    name: String,
    started: Instant,
    last: Option<Instant>,
    on: bool,
}

impl Progress {
    fn new(path: &Path) -> Self {
        Self {
            name: path.display().to_string(),
            started: Instant::now(),
            last: None,
            on: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, windows: usize) {
        let due = match self.last {
            None => self.started.elapsed() >= Duration::from_millis(500),
            Some(last) => last.elapsed() >= Duration::from_millis(200),
        };
        if self.on && due {
            self.last = Some(Instant::now());
            eprint!("\rreading {}: {windows} windows", self.name);
        }
    }

    fn done(&self, windows: usize) {
        if self.last.is_some() {
            eprintln!("\rreading {}: {windows} windows, done", self.name);
        }
    }
}
