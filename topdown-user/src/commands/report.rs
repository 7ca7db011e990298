//! `topdown-bpf report`: a recording's views, through the live run's renderers, so the numbers
//! are the live run's: its totals as printed, its windows as they were (or merged into longer
//! intervals), per thread, cgroup or container; on a terminal, the full-screen view with time
//! navigation.

use std::{borrow::Cow, io::IsTerminal as _};

use anyhow::{Context as _, Result, bail};
use ratatui::{Terminal, backend::TestBackend};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    attrib::{
        Window,
        groups::{GroupBy, GroupOptions, normalize},
    },
    cli::{ReportArgs, StoreRangeArgs},
    model::{
        export::RunMeta,
        rows::RowOptions,
        sink::{self, Sinks, WindowSink},
        sort::{self, SortKey},
    },
    pmu::counter_set::CounterSet,
    recording::{
        reader::Recording,
        store::{self, when},
    },
    report::{
        Format, Renderer,
        new_file::{IntoNewFile, NewFile},
        parquet::ParquetWriter,
        trace::TraceWriter,
    },
    tma::view::TopdownView,
    tui::{
        self, LiveView, ViewModel,
        state::{Action, Key, Timeline, ViewState},
    },
};

/// Reads the recording at `input`, or the time range of a store `range` names, its rows
/// within `budget` bytes; says on standard error what a store's range holds and what it
/// skipped, and that a recording was cut short.
pub(crate) fn read_input(
    input: &std::path::Path,
    range: &StoreRangeArgs,
    budget: u64,
) -> Result<Recording> {
    let Some(dir) = &range.store else {
        let recording = Recording::read_within(input, budget)?;
        if let Some(why) = &recording.cut_short {
            eprintln!(
                "topdown-bpf: {} ends before the run's totals ({why}): its {} windows are \
                 shown, and the totals are their sum",
                input.display(),
                recording.windows.len()
            );
        }
        return Ok(recording);
    };
    let now = jiff::Zoned::now();
    let when = |text: &Option<String>, what: &str| {
        text.as_deref()
            .map(|text| when::when(text, &now).map_err(|e| anyhow::anyhow!("{what}: {e}")))
            .transpose()
    };
    let (from, to) = (when(&range.from, "--from")?, when(&range.to, "--to")?);
    let read = store::range::read(dir, from.as_ref(), to.as_ref(), budget)?;
    for line in &read.said {
        eprintln!("topdown-bpf: {line}");
    }
    Ok(read.recording)
}

/// What `args` reads, as said in messages: the store's folder, or the recording.
fn source(args: &ReportArgs) -> String {
    args.range.store.as_ref().map_or_else(
        || args.input.display().to_string(),
        |dir| format!("the store {}", dir.display()),
    )
}

/// Reports the recording `args` names: its windows and totals through the sinks asked for
/// (a trace, a Parquet file, else the report), by the live session's road
/// ([`sink::replay`]); on a terminal, the full-screen view first.
pub async fn run(args: &ReportArgs, verbose: bool) -> Result<()> {
    let budget = args
        .max_memory
        .map_or_else(crate::recording::reader::default_memory_budget, |mib| {
            mib << 20
        });
    let mut recording = read_input(&args.input, &args.range, budget)?;
    let Some(totals) = recording.totals() else {
        bail!("{} holds no window: nothing was recorded", source(args));
    };
    let recorded = std::mem::take(&mut recording.windows);
    let windows = merged(&recorded, recording.header.interval_ms, args.interval_ms)?;
    let report = if args.trace.is_none() && args.parquet.is_none() {
        match report_sink(args, verbose, &mut recording, &windows).await? {
            Some(report) => Some(report),
            // A picture of the view was all that was asked.
            None => return Ok(()),
        }
    } else {
        None
    };
    let meta = RunMeta::of(&recording.header);
    let (set, view) = (&recording.set, recording.topdown.as_ref());
    let mut sinks: Sinks<'_> = report.into_iter().collect();
    sinks.extend(file_sinks(args, &meta, set, view)?);
    let names = &mut recording.names;
    for line in sink::replay(sinks, &windows, &totals, names, set, view)? {
        eprintln!("topdown-bpf: {line}");
    }
    Ok(())
}

/// The report `args` asks for (a table, CSV or JSON, to standard output or `-o`), as a sink;
/// on a terminal, the full-screen view over `windows` first. `None` when a picture of the view
/// (`--screenshot`) was asked and written.
async fn report_sink(
    args: &ReportArgs,
    verbose: bool,
    recording: &mut Recording,
    windows: &[Window],
) -> Result<Option<Box<dyn WindowSink>>> {
    let format = format_of(args);
    let sort: SortKey = args.sort.parse().unwrap_or(SortKey::ON_CPU);
    sort.validate(&recording.set)?;
    let group = grouping(args);
    let options = RowOptions {
        sort: sort.clone(),
        top: args.top,
        topdown: recording.topdown.clone(),
        verbose,
        neighbours: args.neighbours,
        group: group.clone(),
    };
    // A report to a file is whole or absent, like the other outputs.
    let new = args
        .output
        .as_deref()
        .map(|path| NewFile::create(path, "the report", &[&args.input], args.force))
        .transpose()?;
    let out: Box<dyn std::io::Write> = match &new {
        Some(new) => Box::new(new.handle()?),
        None => crate::report::stdout(),
    };
    let mut renderer = Renderer::new(out, format.clone(), options, recording.set.clone())
        .drawing_intervals(format != Format::Refresh && args.interval_ms.is_some());
    if let Some(picture) = &args.screenshot {
        let view = (&renderer, group.as_ref(), sort);
        screenshot(recording, windows, view, args, picture)?;
        return Ok(None);
    }
    if format == Format::Refresh && !windows.is_empty() {
        browse(recording, windows, &renderer, group.as_ref(), sort).await?;
    }
    renderer.header()?;
    Ok(Some(match new {
        Some(new) => Box::new(IntoNewFile::new(Box::new(renderer), new, "the report")),
        None => Box::new(renderer),
    }))
}

/// The files `args` asks for, as sinks of `set`'s windows: the trace and the Parquet file.
fn file_sinks<'a>(
    args: &ReportArgs,
    meta: &RunMeta,
    set: &'a CounterSet,
    view: Option<&'a TopdownView>,
) -> Result<Sinks<'a>> {
    let mut sinks: Sinks<'a> = Vec::new();
    if let Some(path) = &args.trace {
        let new = NewFile::create(path, "the trace", &[&args.input], args.force)?;
        let out = Box::new(std::io::BufWriter::new(new.handle()?));
        let trace = TraceWriter::new(out, meta, set, view)
            .with_context(|| format!("cannot write the trace {}", path.display()))?;
        sinks.push(Box::new(IntoNewFile::new(
            Box::new(trace),
            new,
            "the trace",
        )));
    }
    if let Some(path) = &args.parquet {
        let new = NewFile::create(path, "the Parquet file", &[&args.input], args.force)?;
        let parquet = ParquetWriter::to_file(new.handle()?, meta.clone(), set, view)
            .with_context(|| format!("cannot write the Parquet file {}", path.display()))?;
        let parquet = IntoNewFile::new(Box::new(parquet), new, "the Parquet file");
        sinks.push(Box::new(parquet));
    }
    Ok(sinks)
}

/// The full-screen view over `windows`, from the last; returns when `q`, Ctrl-C or SIGTERM.
async fn browse(
    recording: &mut Recording,
    windows: &[Window],
    renderer: &Renderer,
    grouping: Option<&GroupOptions>,
    sort: SortKey,
) -> Result<()> {
    let state = first_state(recording, windows, grouping, sort);
    let mut sigterm = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let (set, base, names) = (&recording.set, renderer.options(), &mut recording.names);
    let mut view = LiveView::open(state, set, base, grouping)?;
    let mut shown = view.model.state.view;
    view.model.replay(windows, set, base, grouping, names);
    view.draw()?;
    loop {
        let key = tokio::select! {
            key = view.key() => key,
            _ = sigterm.recv() => break,
        };
        let action = view.model.state.on_key(key);
        match action {
            Action::Quit => break,
            Action::None => continue,
            Action::Seek | Action::Redraw => {}
        }
        // History is remade when the time or the view changes; other keys only redraw.
        if action == Action::Seek || shown != view.model.state.view {
            shown = view.model.state.view;
            let at = view
                .model
                .state
                .timeline
                .map_or(windows.len() - 1, |t| t.at);
            view.model
                .replay(&windows[..=at], set, base, grouping, names);
        }
        view.draw()?;
    }
    Ok(())
}

/// The view's first state over `windows`: at the last, sorted by `sort`, in the view asked.
fn first_state(
    recording: &Recording,
    windows: &[Window],
    grouping: Option<&GroupOptions>,
    sort: SortKey,
) -> ViewState {
    let nodes = recording
        .topdown
        .as_ref()
        .map(|view| view.node_names())
        .unwrap_or_default();
    let can_group = windows.iter().any(|w| !w.cgroups.is_empty());
    let mut state = ViewState::new(
        tui::first_view(grouping),
        can_group,
        sort,
        sort::choices(&recording.set, &nodes),
    );
    state.timeline = Some(Timeline {
        at: windows.len().saturating_sub(1),
        len: windows.len(),
    });
    state
}

/// Writes the full-screen view, after `args.keys`, as a terminal of `args.size` shows it.
fn screenshot(
    recording: &mut Recording,
    windows: &[Window],
    (renderer, grouping, sort): (&Renderer, Option<&GroupOptions>, SortKey),
    args: &ReportArgs,
    picture: &std::path::Path,
) -> Result<()> {
    crate::picture::is_png(picture)?;
    if windows.is_empty() {
        bail!("{} holds no window: nothing to show", source(args));
    }
    let mut model = ViewModel::new(
        first_state(recording, windows, grouping, sort),
        &recording.set,
        renderer.options().topdown.as_ref(),
    );
    let (set, base, names) = (&recording.set, renderer.options(), &mut recording.names);
    let (columns, rows) = args.size;
    let mut terminal =
        Terminal::new(TestBackend::new(columns, rows)).context("a terminal of that size")?;
    let draw = |model: &mut ViewModel, terminal: &mut Terminal<TestBackend>| {
        terminal
            .draw(|frame| model.frame(frame, set, base, grouping))
            .map(drop)
            .context("drawing the view")
    };
    model.replay(windows, set, base, grouping, names);
    // A first frame sizes the page, as on a terminal, before keys scroll it.
    draw(&mut model, &mut terminal)?;
    for key in args.keys.chars() {
        let key = if key == '\n' {
            Key::Enter
        } else {
            Key::Char(key)
        };
        let before = model.state.view;
        if model.state.on_key(key) == Action::Seek || model.state.view != before {
            let at = model.state.timeline.map_or(windows.len() - 1, |t| t.at);
            model.replay(&windows[..=at], set, base, grouping, names);
        }
        draw(&mut model, &mut terminal)?;
    }
    crate::picture::write(
        &crate::picture::screen_svg(terminal.backend().buffer()),
        picture,
        &[&args.input],
        args.force,
    )
}

/// A recording's windows (`recorded` ms long), merged into intervals of `interval_ms` when
/// asked (a multiple of the recorded interval).
fn merged(
    windows: &[Window],
    recorded: u64,
    interval_ms: Option<u64>,
) -> Result<Cow<'_, [Window]>> {
    let Some(asked) = interval_ms else {
        return Ok(Cow::Borrowed(windows));
    };
    let recorded = recorded.max(1);
    if asked % recorded != 0 {
        bail!("the recording's windows are {recorded} ms long: give -I a multiple of {recorded}");
    }
    let per = usize::try_from(asked / recorded).unwrap_or(usize::MAX);
    Ok(Cow::Owned(
        windows.chunks(per).filter_map(Window::merge).collect(),
    ))
}

/// Rows of threads, or the cgroup grouping asked for (paths as the recording names them).
fn grouping(args: &ReportArgs) -> Option<GroupOptions> {
    let by = if args.per_container {
        GroupBy::Container
    } else if args.per_cgroup || args.rollup || !args.cgroup.is_empty() {
        GroupBy::Cgroup
    } else {
        return None;
    };
    Some(GroupOptions {
        by,
        rollup: args.rollup,
        keep: args.cgroup.iter().map(|p| normalize(p, None)).collect(),
    })
}

fn format_of(args: &ReportArgs) -> Format {
    if args.json {
        Format::Json
    } else if let Some(separator) = args.field_separator {
        Format::Csv { separator }
    } else if args.csv {
        Format::Csv { separator: b',' }
    } else if args.interval_ms.is_some() {
        Format::Interval
    } else if !args.stdio && args.output.is_none() && std::io::stdout().is_terminal() {
        Format::Refresh
    } else {
        Format::Summary
    }
}
