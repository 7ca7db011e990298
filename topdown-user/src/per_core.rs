//! `--per-core`: counters per physical core, read from userspace every interval and summed over
//! each core's CPUs (like `perf stat --per-core -a`). The honest TopDown view where the inputs
//! count per core (Skylake-class with SMT on); it needs no per-thread attribution.

use std::{
    io::Write,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::{
    attrib::cores::CoreAggregator,
    collect::{self, perf_open::OpenCounters},
    pmu::{counter_set::CounterSet, sysfs::SysRoot, topology},
    report::cores,
    session::{Session, Wake},
    tma::view::TopdownView,
};

/// Runs the per-core view until the duration ends, or Ctrl-C / SIGTERM.
pub async fn run(
    set: &CounterSet,
    view: Option<&TopdownView>,
    interval_ms: Option<u64>,
    duration: Option<f64>,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let cpus = collect::online_cpus()?;
    let counters = OpenCounters::open(set, &cpus)?;
    counters.enable()?;
    let started = Instant::now();
    let mut aggregator = CoreAggregator::new(
        topology::cores(&SysRoot::host(), &cpus)?,
        set.counters.len(),
    );
    aggregator.window(&counters.read()?);
    if !json {
        writeln!(
            out,
            "topdown-bpf: counter set `{}`: {} (per core)",
            set.name, set.reason
        )?;
    }

    let period = Duration::from_millis(interval_ms.unwrap_or(1000));
    let mut session = Session::new(started, period, duration)?;
    let mut last = started;
    // Without -I only the totals are printed: ticks then do nothing.
    while let Wake::Tick = session.wake().await {
        if interval_ms.is_none() {
            continue;
        }
        let usage = aggregator.window(&counters.read()?);
        let now = Instant::now();
        let (start, length) = (last.duration_since(started), now.duration_since(last));
        last = now;
        let text = if json {
            cores::document(
                &usage,
                set,
                view,
                start.as_secs_f64(),
                length.as_secs_f64(),
                false,
            )
        } else {
            let title = format!("# {:>10.3} s", (start + length).as_secs_f64());
            cores::block(&usage, set, view, &title)
        };
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("writing the report")?;
    }
    aggregator.window(&counters.read()?);
    let totals = aggregator.totals();
    let length = started.elapsed().as_secs_f64();
    let text = if json {
        cores::document(&totals, set, view, 0.0, length, true)
    } else {
        cores::block(
            &totals,
            set,
            view,
            &format!("\n# totals over {length:.3} s, per core"),
        )
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the report")
}
