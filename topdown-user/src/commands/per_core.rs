//! `--per-core`: counters per physical core, read from userspace every interval and summed over
//! each core's CPUs (like `perf stat --per-core -a`). The honest TopDown view where the inputs
//! count per core (Skylake-class with SMT on); it needs no per-thread attribution.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::{
    attrib::cores::{CoreAggregator, CoreUsage},
    collect::{self, calibration, perf_open::OpenCounters},
    model::{
        columns::{self, Column},
        cores::{self as core_rows, CoreRow},
    },
    pmu::{counter_set::CounterSet, sysfs::SysRoot, topology},
    report::cores,
    session::{Session, Wake},
    tma::view::TopdownView,
    tui::{
        cores::{CoresScreenful, CoresView},
        state::Action,
    },
};

/// Runs the per-core view until the duration ends, or `q`, Ctrl-C or SIGTERM; `full_screen`:
/// on the terminal, redrawn every interval, then the totals on the normal screen.
pub async fn run(
    set: &CounterSet,
    view: Option<&TopdownView>,
    interval_ms: Option<u64>,
    duration: Option<f64>,
    json: bool,
    full_screen: bool,
    out: &mut dyn Write,
) -> Result<()> {
    // Read per CPU from userspace, `cpu-clock` is a counter like the others (each CPU's wall
    // time while counting): each core's row shows it first.
    let set = &set.with_cpu_clock();
    let (counters, mut aggregator, started) = open(set)?;
    let set_line = format!(
        "topdown-bpf: counter set `{}`: {} (per core)",
        set.name, set.reason
    );
    if !json && !full_screen {
        writeln!(out, "{set_line}")?;
    }

    let period = Duration::from_millis(interval_ms.unwrap_or(1000));
    let mut session = Session::new(started, period, duration)?;
    let mut last = started;
    let mut screen = full_screen.then(CoresView::open).transpose()?;
    let nodes = core_rows::node_columns(view);
    // IPC and MPKI where the set counts their events: what a core's counters make.
    let values = columns::counter_columns(set);
    let names: Vec<String> = set.names().map(str::to_owned).collect();
    let draw = |open: &mut CoresView, title: &str, rows: &[CoreRow]| {
        open.draw(&CoresScreenful {
            title,
            status: &set_line,
            nodes: &nodes,
            columns: &values,
            counters: &names,
            rows,
        })
    };
    let mut shown: Vec<CoreRow> = Vec::new();
    let mut title = String::new();
    let report = Report {
        set,
        columns: &values,
        view,
        json,
    };
    loop {
        let key = async {
            match screen.as_mut() {
                Some(screen) => screen.key().await,
                None => std::future::pending().await,
            }
        };
        let wake = tokio::select! {
            wake = session.wake() => wake,
            key = key => {
                let Some(open) = screen.as_mut() else { continue };
                match open.state.on_key(key) {
                    Action::Quit => break,
                    Action::None => continue,
                    Action::Redraw | Action::Seek => {}
                }
                draw(open, &title, &shown)?;
                continue;
            }
        };
        if !matches!(wake, Wake::Tick) {
            break;
        }
        // Without -I or the full-screen view only the totals are printed.
        if interval_ms.is_none() && screen.is_none() {
            continue;
        }
        let usage = aggregator.window(&counters.read()?);
        let rows = core_rows::rows(&usage, set, &values, view);
        if let Some(open) = screen.as_mut() {
            shown = rows;
            title = screen_title(set, started, shown.len());
            draw(open, &title, &shown)?;
            continue;
        }
        let now = Instant::now();
        let (start, length) = (last.duration_since(started), now.duration_since(last));
        last = now;
        let title = format!("# {:>10.3} s", (start + length).as_secs_f64());
        let span = (start.as_secs_f64(), length.as_secs_f64());
        report.write(out, (&usage, &rows), span, &title, false)?;
    }
    // The terminal is restored before the totals are printed on it.
    if screen.take().is_some() {
        writeln!(out, "{set_line}")?;
    }
    aggregator.window(&counters.read()?);
    let totals = aggregator.totals();
    let rows = core_rows::rows(&totals, set, &values, view);
    let length = started.elapsed().as_secs_f64();
    let title = format!("\n# totals over {length:.3} s, per core");
    report.write(out, (&totals, &rows), (0.0, length), &title, true)
}

/// `set`'s counters opened on every online CPU and enabled, the aggregator of their cores
/// with the calibration's silent events marked and its first reading taken, the calibration's
/// lines printed; and when the counters were enabled (the run's start).
fn open(set: &CounterSet) -> Result<(OpenCounters, CoreAggregator, Instant)> {
    let calibration = calibration::calibrate(set)?;
    let cpus = collect::online_cpus()?;
    let counters = OpenCounters::open(set, &cpus)?;
    counters.enable()?;
    let started = Instant::now();
    let mut aggregator = CoreAggregator::new(
        topology::cores(&SysRoot::host(), &cpus)?,
        set.counters.len(),
    );
    aggregator.set_silent(&calibration.silent());
    aggregator.window(&counters.read()?);
    for line in calibration::lines(&calibration, set) {
        eprintln!("{line}");
    }
    Ok((counters, aggregator, started))
}

/// The full-screen view's title: the set, the time since `started`, how many `cores`.
fn screen_title(set: &CounterSet, started: Instant, cores: usize) -> String {
    format!(
        "topdown-bpf  {}  {:.1} s  {cores} cores  (per core, counters summed over each core's CPUs)",
        set.name,
        started.elapsed().as_secs_f64(),
    )
}

/// How per-core blocks are written: JSON documents or tables, of `set` (and `view`).
struct Report<'a> {
    set: &'a CounterSet,
    /// The value columns of its rows ([`columns::counter_columns`]).
    columns: &'a [Column],
    view: Option<&'a TopdownView>,
    json: bool,
}

impl Report<'_> {
    /// Writes the block of `(usage, rows)` over `(start, length)` seconds, titled `title` as a
    /// table; the run's totals when `is_final`.
    fn write(
        &self,
        out: &mut dyn Write,
        (usage, rows): (&[CoreUsage], &[CoreRow]),
        (start, length): (f64, f64),
        title: &str,
        is_final: bool,
    ) -> Result<()> {
        let text = if self.json {
            cores::document(
                usage,
                rows,
                (self.set, self.columns),
                (start, length),
                is_final,
            )
        } else {
            cores::block(rows, (self.set, self.columns), self.view, title)
        };
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("writing the report")
    }
}
