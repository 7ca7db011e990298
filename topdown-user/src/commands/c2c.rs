//! `topdown-bpf c2c ...`: what each subcommand does with its arguments: read a recording or
//! record live, then report it the same way.

use std::io::{IsTerminal as _, Write as _};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

use super::c2c_live as live;
use crate::{
    attrib::groups::GroupBy,
    c2c::{
        aggregate, browse, groups,
        lines::C2cData,
        options::{Coalesce, ReportOptions},
        pareto, rank,
        sharing::{self, LineFix},
    },
    cli::{C2cArgs, C2cCommand, C2cViewArgs},
    perf_file::{contents::PerfData, writer},
    pmu::sysfs::SysRoot,
    progress::Progress,
    report::{
        c2c::{by_group, json, line_table, pareto as pareto_table, sharing as fixes_table, stats},
        new_file::NewFile,
    },
    symbols::data_names::DataNames,
    tui::{
        c2c::{C2cBrowser, C2cScreenful},
        state::Action,
    },
};

/// Runs a `c2c` subcommand, or live recording without one.
pub fn run(args: &C2cArgs) -> Result<()> {
    match &args.command {
        None => {
            let options = report_options(&args.view)?;
            let live = live::record(
                &SysRoot::host(),
                &args.live,
                !args.view.json,
                options,
                false,
            )?;
            summarize(&live, args.live.threshold);
            let mut data = live.data;
            data.total = live.counts.stats;
            // The live browser is closed: the report goes to the normal screen, as text.
            report(None, &live.recording, &data, &args.view, options)
        }
        Some(C2cCommand::Record(record)) => {
            // The file is whole or absent, and refused before the run, not after it.
            let new = NewFile::create(&record.output, "the recording", &[], record.force)?;
            let options = ReportOptions::default();
            let live = live::record(&SysRoot::host(), &record.live, true, options, true)?;
            summarize(&live, record.live.threshold);
            let bytes = writer::encode(&live.recording, Some(&live.counts.stats));
            new.file()
                .write_all(&bytes)
                .with_context(|| format!("writing {}", record.output.display()))?;
            new.commit()?;
            eprintln!(
                "topdown-bpf: wrote {} samples to {}: read it with `topdown-bpf c2c report -i {}`",
                live.recording.samples.len(),
                record.output.display(),
                record.output.display()
            );
            Ok(())
        }
        Some(C2cCommand::Report(report_args)) => {
            let options = report_options(&report_args.view)?;
            let progress = if report_args.progress {
                Progress::always()
            } else {
                Progress::new()
            };
            let name = report_args.input.display().to_string();
            let (recording, mut data) = aggregate::read_file(&report_args.input, options, &|at| {
                progress.show_in(at.pass, || {
                    format!(
                        "reading {name}: pass {} of {}, {}%",
                        at.pass,
                        at.passes,
                        at.percent()
                    )
                });
            })?;
            progress.done(|| format!("reading {name}"));
            if let Some(totals) = recording.totals {
                data.total = totals;
            }
            let source = report_args.input.display().to_string();
            report(Some(&source), &recording, &data, &report_args.view, options)
        }
    }
}

/// One line on stderr: how long, on what, how many samples classified and forwarded, losses.
fn summarize(live: &live::LiveRecording, threshold: u64) {
    let c = &live.counts;
    eprintln!(
        "topdown-bpf: c2c recorded {:.1} s on {}: {} samples classified in the kernel, {} \
         forwarded (loads of at least {threshold} cycles with HITM or peer, and stores), {} \
         stores skipped (--stores contended); losses: ring buffer full {}, unreadable samples \
         {}, contended lines not remembered {}",
        live.seconds,
        live.recording.events.join(", "),
        c.stats.nr_entries,
        c.forwarded,
        c.stores_skipped,
        c.ring_full,
        c.read_errors,
        c.line_map_full
    );
}

/// The report `view` asks for.
fn report_options(view: &C2cViewArgs) -> Result<ReportOptions> {
    Ok(ReportOptions {
        coalesce: Coalesce::parse(&view.coalesce)?,
        double_cl: view.double_cl,
        display: view.display,
        show_all: view.show_all,
        node_info: view.node_info.min(2),
        full_symbols: view.full_symbols,
        no_source: view.no_source,
        // JSON always carries the labels and estimates.
        sharing: view.sharing || view.json,
        by_gain: view.by_gain,
    })
}

/// Prints the report of `data`, classified from `recording`, as `view` asks; a report of the
/// file `source` opens the browser on a terminal.
fn report(
    source: Option<&str>,
    recording: &PerfData,
    data: &C2cData,
    view: &C2cViewArgs,
    options: ReportOptions,
) -> Result<()> {
    // Ranked and named once (code addresses symbolized here), then formatted.
    let ranking = rank::rank(data, options);
    let lines = pareto::lines(data, &ranking, recording, options);
    let by = if view.per_container {
        Some(GroupBy::Container)
    } else {
        view.per_cgroup.then_some(GroupBy::Cgroup)
    };
    // On a terminal, as `perf c2c report` opens its TUI: the lines to browse.
    if let Some(source) = source.filter(|_| browsable(view, by)) {
        let title = format!(
            "topdown-bpf c2c report: {}  {} shared lines  events {}",
            source,
            lines.len(),
            recording.events.join(",")
        );
        return browse(
            &title,
            &status_line(data),
            &browse::lines(&lines, ranking.total, options),
        );
    }
    // Labels, names of the data and fixes for the shown lines, when asked.
    let fixes: Vec<LineFix> = if options.sharing {
        let mut names = DataNames::new(recording);
        lines
            .iter()
            .map(|p| sharing::fix(data, p.line, &mut names, options.line_size()))
            .collect()
    } else {
        Vec::new()
    };
    if view.json {
        let text = json::render(
            data,
            &lines,
            ranking.total,
            &fixes,
            &recording.events,
            &recording.numa_cpus,
            options,
        );
        print!("{text}");
        return Ok(());
    }
    // Checked before anything is printed: one line when the recording cannot do it.
    let grouped = by
        .map(|by| groups::group(&ranking.lines, &recording.cgroups, by))
        .transpose()?;
    print!("{}", stats::render(data, &recording.events, options));
    if !view.stats {
        print!("\n{}", line_table::render(data, &ranking, options, &fixes));
        print!(
            "{}",
            pareto_table::render(&lines, &recording.numa_cpus, options)
        );
        if options.sharing {
            let addresses: Vec<u64> = lines.iter().map(|p| p.line.address).collect();
            print!("{}", fixes_table::render(&addresses, &fixes));
        }
        if let Some(grouped) = grouped {
            print!("\n{}", by_group::render(&grouped));
        }
    }
    Ok(())
}

/// Whether the report goes to the browser: a terminal, and none of the text-only options.
fn browsable(view: &C2cViewArgs, by: Option<GroupBy>) -> bool {
    !view.stdio && !view.json && !view.stats && by.is_none() && std::io::stdout().is_terminal()
}

/// The browser's status line: what the recording holds.
pub fn status_line(data: &C2cData) -> String {
    let t = &data.total;
    format!(
        "{} samples: {} loads, {} stores; HITM {} ({} local, {} remote); peer {}",
        t.nr_entries, t.load, t.store, t.tot_hitm, t.lcl_hitm, t.rmt_hitm, t.tot_peer
    )
}

/// Shows `lines` in the browser until `q`, Ctrl-C or SIGTERM.
fn browse(title: &str, status: &str, lines: &[browse::LineView]) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let mut sigterm =
            signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
        let mut browser = C2cBrowser::open()?;
        let screenful = C2cScreenful {
            title,
            status,
            lines,
        };
        browser.draw(&screenful)?;
        loop {
            let key = tokio::select! {
                key = browser.key() => key,
                _ = sigterm.recv() => break,
            };
            match browser.state.on_key(key) {
                Action::Quit => break,
                Action::Redraw | Action::Seek => browser.draw(&screenful)?,
                Action::None => {}
            }
        }
        Ok(())
    })
}
