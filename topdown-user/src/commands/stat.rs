//! The live per-thread session: start the collector, read it every interval, render, and print
//! the run's totals at the end (duration over, command exited, Ctrl-C or SIGTERM).

use std::{
    io::IsTerminal as _,
    os::unix::process::ExitStatusExt as _,
    path::{Path, PathBuf},
    process::{ExitCode, ExitStatus},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use tokio::process::Command;

use super::{drilldown, per_core};
use crate::{
    attrib::{
        Attributor, EXITED_ROWS, Window, WindowExits,
        cgroups::CgroupNames,
        groups::{GroupBy, GroupOptions, normalize},
        stalls::StallReader,
        target::Target,
    },
    cli::{CgroupArgs, StatArgs},
    collect::{Collector, CollectorOptions, Snapshot, calibration, capacity::Capacity, cpus},
    model::{
        export::RunMeta,
        frame::Frame,
        rows::RowOptions,
        sink::{self, Sinks, WindowSink as _},
        sort::{self, SortKey},
    },
    pmu::{counter_set::CounterSet, machine::Machine, sysfs::SysRoot},
    preflight,
    privileges::{self, User},
    process_exit::ProcessExits,
    recording::{
        self,
        format::RowBounds,
        store::{
            StoreDir,
            writer::{Retention, StoreWriter},
        },
        writer::Recorder,
    },
    report::{
        Format, Renderer,
        new_file::{StreamFile, keep_whole_lines},
        parquet::ParquetParts,
    },
    session::{Session, Wake},
    tma::{
        choice::{counter_set, topdown_models_here},
        view::TopdownView,
    },
    tui::{
        self, LiveView,
        state::{Action, ViewState},
    },
};

/// Refresh period of the live table when no `-I` is given.
const DEFAULT_REFRESH: Duration = Duration::from_secs(1);

/// Where `record` keeps a run.
#[derive(Debug)]
pub struct RecordTo {
    /// The recording, or with `store`, the store's folder.
    pub path: PathBuf,
    /// A store's retention, when the run goes to a store (`--store`) rather than one file.
    pub store: Option<Retention>,
    /// A folder for the rows as Parquet, a file per `parquet_windows` windows.
    pub parquet: Option<PathBuf>,
    /// Windows per Parquet file.
    pub parquet_windows: usize,
    /// The user to run as once set up (and to run `-- COMMAND` as).
    pub user: Option<User>,
    /// Replace the recording when it exists.
    pub force: bool,
}

/// Runs the per-thread session the command line describes, writing the report to `output`
/// (standard output without one; a file that exists only with `force`) and, with `recording`,
/// every window to that file (and to Parquet); with `-- COMMAND`, the tool exits with the
/// command's status, as `perf stat` does.
///
/// The report file is written as the run goes, a whole line (or table) at a time, so it can be
/// followed (`tail -f`) and a killed run leaves what it measured; a run that ends in an error
/// (a full disk) keeps its whole lines and loses the half-written one.
pub async fn run(
    cli: StatArgs,
    output: Option<PathBuf>,
    force: bool,
    recording: Option<RecordTo>,
    verbose: bool,
) -> Result<ExitCode> {
    // Outputs are opened before anything is set up: a name refused costs nothing.
    let recorded = recording
        .as_ref()
        .filter(|to| to.store.is_none())
        .map(|to| StreamFile::create(&to.path, "the recording", &[], to.force))
        .transpose()?;
    let store = recording
        .as_ref()
        .filter(|to| to.store.is_some())
        .map(|to| StoreDir::open_for_writing(&to.path, to.user.as_ref().map(|u| (u.uid, u.gid))))
        .transpose()?;
    let report = output
        .as_deref()
        .map(|path| StreamFile::create(path, "the report", &[], force))
        .transpose()?;
    let out: Box<dyn std::io::Write> = match &report {
        Some(stream) => Box::new(stream.handle()?),
        None => crate::report::stdout(),
    };
    let result = session(
        cli,
        output.as_deref(),
        out,
        recording,
        Recorded {
            file: recorded.as_ref(),
            store,
        },
        verbose,
    )
    .await;
    match result {
        Err(error) => {
            if let Some(stream) = report {
                let _ = keep_whole_lines(stream.file());
                stream.remove_if_empty();
            }
            if let Some(stream) = recorded {
                stream.remove_if_empty();
            }
            Err(error)
        }
        Ok(code) => {
            for stream in report.iter().chain(&recorded) {
                stream.still_named()?;
            }
            Ok(code)
        }
    }
}

/// Where a recording goes once opened: its file, or its store.
struct Recorded<'a> {
    file: Option<&'a StreamFile>,
    store: Option<StoreDir>,
}

/// The session of [`run`], its report written to `out` (`output` names the file, if any).
async fn session(
    cli: StatArgs,
    output: Option<&Path>,
    mut out: Box<dyn std::io::Write>,
    recording: Option<RecordTo>,
    recorded: Recorded<'_>,
    verbose: bool,
) -> Result<ExitCode> {
    let plan = Plan::of(&cli, output, recording.as_ref())?;
    let names = CgroupNames::host();
    let group = group_options(&cli.cgroups, names.mount())?;
    preflight::check()?;
    if cli.per_core {
        per_core::run(
            &plan.set,
            plan.topdown.as_ref(),
            cli.interval_ms,
            cli.duration,
            cli.json,
            plan.format == Format::Refresh,
            &mut *out,
        )
        .await?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut collector = start_collector(&cli, &plan, group.is_some(), recording.is_some())?;
    let started = Instant::now();
    let ends_with = match &plan.target {
        Target::Pids(pids) => ProcessExits::watch(pids)?,
        _ => ProcessExits::watch(&[])?,
    };
    let period = cli
        .interval_ms
        .map_or(DEFAULT_REFRESH, Duration::from_millis);
    // Signals are ours before a command starts: a SIGTERM or Ctrl-C from then on reaches the
    // command and ends the run with its report, never kills the tool before its handlers.
    let mut session = Session::new(started, period, cli.duration)?;
    // Throttling and pressure, only where cgroup rows can be shown or kept; read before a
    // command starts, so its cgroup's stalls count from there.
    let stalls = (group.is_some() || recording.is_some() || plan.format == Format::Refresh)
        .then(|| StallReader::start(names.mount(), true));
    let (target, child) = start_command(&cli, &mut collector, plan.target.clone(), &recording)?;
    let (exited_rows, exits, bounds) = exited_rows(&cli, &plan);
    let mut sinks = record_sinks(&plan, recording.as_ref(), recorded, period, bounds)?;
    if let Some(to) = &recording {
        drop_privileges(to, &mut collector)?;
    }
    let options = RowOptions {
        sort: plan.sort.clone(),
        top: cli.top,
        topdown: plan.topdown.clone(),
        verbose,
        neighbours: cli.neighbours,
        group: group.clone(),
    };
    // The full-screen view on a terminal; the totals (and what was recorded) follow on the
    // normal screen when it closes.
    let live = if plan.format == Format::Refresh {
        Some(open_view(&plan, &options, names.mount().is_some())?)
    } else {
        None
    };
    let mut renderer = Renderer::new(out, plan.format.clone(), options.clone(), plan.set.clone())
        .drawing_intervals(cli.interval_ms.is_some() && live.is_none());
    if live.is_none() {
        renderer.header()?;
    }
    sinks.push(Box::new(renderer));
    let mut attrib =
        Attributor::with_exited_rows(plan.set.counters.len(), target.clone(), exited_rows, exits);
    attrib.set_silent(&collector.calibration().silent());
    attrib.start(started);
    if let Some(child) = child {
        session.watch(child);
    }
    let mut run = LiveRun {
        set: &plan.set,
        options: &options,
        collector,
        attrib,
        names,
        stalls,
        sinks,
        live,
        told_not_counted: false,
    };
    let end = run.windows(&mut session, &ends_with).await?;
    run.finish(&target, end).await
}

/// How exited threads are kept: how many keep their own rows (the hottest, each window's and
/// the run's; the rest fold per process), whether they fold, and the bounds a recording states.
fn exited_rows(cli: &StatArgs, plan: &Plan) -> (usize, WindowExits, Option<RowBounds>) {
    let exited_rows = cli.top.map_or(EXITED_ROWS, |top| top.max(EXITED_ROWS));
    let exits = if cli.every_exit {
        WindowExits::Each
    } else {
        WindowExits::Fold
    };
    let bounds = (exits == WindowExits::Fold).then_some(RowBounds {
        max_threads: plan.capacity.threads,
        exited_rows: exited_rows as u64,
    });
    (exited_rows, exits, bounds)
}

/// Everything privileged is done (programs loaded, counters open, files created): the
/// recording's Parquet folder goes to `--user` (a store's folder was given as it was opened)
/// and the process drops its privileges, the collector's first.
fn drop_privileges(to: &RecordTo, collector: &mut Collector) -> Result<()> {
    if let (Some(user), Some(dir)) = (&to.user, &to.parquet) {
        std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))
            .with_context(|| format!("giving {} to --user {}", dir.display(), user.name))?;
    }
    privileges::drop_all(to.user.as_ref(), |phase| collector.drop_privileges(phase))
}

/// The full-screen view of `plan`'s rows as `options` choose them, opened on the terminal
/// (`can_group`: cgroup views can be offered).
fn open_view(plan: &Plan, options: &RowOptions, can_group: bool) -> Result<LiveView> {
    let nodes = plan
        .topdown
        .as_ref()
        .map(TopdownView::node_names)
        .unwrap_or_default();
    let group = options.group.as_ref();
    let state = ViewState::new(
        tui::first_view(group),
        can_group,
        plan.sort.clone(),
        sort::choices(&plan.set, &nodes),
    );
    LiveView::open(state, &plan.set, options, group)
}

/// What the command line asks of a session, checked: output format, sort, counter set and
/// TopDown view, and the threads it is about.
struct Plan {
    format: Format,
    sort: SortKey,
    set: CounterSet,
    topdown: Option<TopdownView>,
    target: Target,
    /// The kernel's live-thread map.
    capacity: Capacity,
}

impl Plan {
    fn of(cli: &StatArgs, output: Option<&Path>, recording: Option<&RecordTo>) -> Result<Self> {
        if recording.is_some() && cli.per_core {
            bail!("record keeps threads and cgroups, not cores: run --per-core without record");
        }
        let stored = recording.is_some_and(|to| to.store.is_some());
        let format = format_of(cli, output, stored);
        let sort: SortKey = cli.sort.parse().unwrap_or(SortKey::ON_CPU);
        if cli.drilldown
            && (cli.counters.td_level != Some(3) || !cli.command.is_empty() || cli.per_core)
        {
            bail!(
                "--drilldown probes the whole machine before the run: it needs --td-level 3, \
                 and not -- COMMAND or --per-core (for a command: record Level 2, then `analyze \
                 --events --td-level 3 --drilldown`, then --nodes)"
            );
        }
        let nodes = if cli.drilldown {
            drilldown_nodes()?
        } else {
            cli.counters.nodes.clone()
        };
        let (set, topdown) = counter_set(
            cli.counters.td_level,
            &nodes,
            cli.per_core,
            &cli.counters.events,
        )?;
        sort.validate(&set)?;
        let target = if !cli.pids.is_empty() {
            Target::Pids(cli.pids.clone())
        } else if !cli.tids.is_empty() {
            Target::Tids(cli.tids.clone())
        } else {
            Target::All
        };
        target.validate()?;
        Ok(Self {
            format,
            sort,
            set,
            topdown,
            target,
            capacity: Capacity::of(cli.counters.max_threads, &SysRoot::host())?,
        })
    }
}

/// Loads the programs and opens the counters for `plan`, following the processes it names.
fn start_collector(
    cli: &StatArgs,
    plan: &Plan,
    grouped: bool,
    recording: bool,
) -> Result<Collector> {
    // A narrowed target charges only the processes it names (and their children); the
    // cgroup views need every thread.
    let narrow = !grouped && (plan.target != Target::All || !cli.command.is_empty());
    // Rows of cgroups only: no thread's own counts are shown (the full-screen view can switch
    // to threads, a recording keeps them), so counters are read only at cgroup switches.
    let cgroup_only = grouped && plan.format != Format::Refresh && !recording;
    let cpus = cpus::choose(
        cli.counters.cpus.as_ref().map(|l| l.0.as_slice()),
        &SysRoot::host(),
    )?;
    if let Some(line) = cpus.line() {
        eprintln!("{line}");
    }
    let mut collector = Collector::start(
        &plan.set,
        &CollectorOptions {
            max_threads: plan.capacity.threads,
            narrow,
            cgroup_only,
            neighbours: !cli.counters.no_neighbours && CollectorOptions::default().neighbours,
            cpus: cpus.collector_cpus(),
            ..CollectorOptions::default()
        },
    )?;
    if let Some(short) = &plan.capacity.short {
        eprintln!("topdown-bpf: {short}");
    }
    for line in calibration::lines(collector.calibration(), &plan.set) {
        eprintln!("{line}");
    }
    match &plan.target {
        Target::Pids(pids) => pids.iter().try_for_each(|&pid| collector.follow(pid))?,
        Target::Tids(tids) => tids
            .iter()
            .try_for_each(|&tid| collector.follow(process_of(tid)?))?,
        Target::All | Target::Command(_) | Target::NoThreads => {}
    }
    Ok(collector)
}

/// Starts `-- COMMAND`, followed in the kernel (as `--user` when recording asks): the target
/// becomes the command. Without one, `target` as it is.
fn start_command(
    cli: &StatArgs,
    collector: &mut Collector,
    target: Target,
    recording: &Option<RecordTo>,
) -> Result<(Target, Option<tokio::process::Child>)> {
    if cli.command.is_empty() {
        return Ok((target, None));
    }
    let child = collector
        .spawn_followed(|| {
            let mut command = Command::new(&cli.command[0]);
            command.args(&cli.command[1..]);
            if let Some(user) = recording.as_ref().and_then(|to| to.user.as_ref()) {
                command.uid(user.uid).gid(user.gid);
            }
            command.spawn()
        })?
        .with_context(|| format!("cannot run `{}`", cli.command[0]))?;
    let pid = child
        .id()
        .context("the command exited before it could be watched")?;
    Ok((Target::Command(pid), Some(child)))
}

/// The recording's sinks: the recording itself (a file, or a store) and, when asked, its
/// Parquet parts.
fn record_sinks(
    plan: &Plan,
    recording: Option<&RecordTo>,
    recorded: Recorded<'_>,
    period: Duration,
    bounds: Option<RowBounds>,
) -> Result<Sinks<'static>> {
    let Some(to) = recording else {
        return Ok(Vec::new());
    };
    let machine = Machine::read(&SysRoot::host())?;
    let cpus = crate::collect::online_cpus()?.len();
    let header = recording::header(
        &plan.set,
        plan.topdown.as_ref(),
        u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
        machine.cpu.to_string(),
        cpus,
        bounds,
    );
    if let (Some(store), Some(retention)) = (recorded.store, to.store) {
        return Ok(vec![Box::new(StoreWriter::create(
            store, header, retention,
        ))]);
    }
    let Some(file) = recorded.file else {
        return Ok(Vec::new());
    };
    let mut sinks: Sinks<'static> = Vec::new();
    if let Some(dir) = &to.parquet {
        sinks.push(Box::new(ParquetParts::create(
            dir,
            RunMeta::of(&header),
            &plan.set,
            plan.topdown.as_ref(),
            to.parquet_windows,
        )?));
    }
    // The recording first: it finishes first, and says so first.
    sinks.insert(
        0,
        Box::new(Recorder::create(&to.path, file.handle()?, header)?),
    );
    Ok(sinks)
}

/// How the windows of a session ended.
struct End {
    /// The command's exit status, when it exited.
    status: Option<ExitStatus>,
    /// Every watched process (`-p`) exited.
    all_ended: bool,
}

/// A session while it runs: the collector read every interval, each window attributed and
/// handed to every sink (and the full-screen view), the totals at the end.
struct LiveRun<'a> {
    set: &'a CounterSet,
    options: &'a RowOptions,
    collector: Collector,
    attrib: Attributor,
    names: CgroupNames,
    /// Reads cgroups' throttling and pressure each window, where cgroup rows are wanted.
    stalls: Option<StallReader>,
    sinks: Sinks<'static>,
    live: Option<LiveView>,
    /// Said on standard error that some counters were not counted (once).
    told_not_counted: bool,
}

impl LiveRun<'_> {
    /// Reads a window every interval until the duration, the command's exit, the watched
    /// processes' exits, Ctrl-C, SIGTERM or `q`.
    async fn windows(&mut self, session: &mut Session, ends_with: &ProcessExits) -> Result<End> {
        let mut end = End {
            status: None,
            all_ended: false,
        };
        let mut output_closed = false;
        loop {
            let stop = tokio::select! {
                wake = session.wake() => match wake {
                    Wake::Tick => {
                        self.tick()?;
                        false
                    }
                    Wake::Deadline => true,
                    Wake::CommandExited(exit) => {
                        let exit = exit.context("waiting for the command")?;
                        log::info!("command exited: {exit}");
                        end.status = Some(exit);
                        true
                    }
                    // The command gets the signal and ends the session when it exits, as under
                    // perf stat; its last slices are then in the final report.
                    Wake::Signal(signal) => !session.forward(signal),
                },
                () = ends_with.all_ended() => {
                    log::info!("every watched process has exited");
                    end.all_ended = true;
                    true
                }
                key = next_key(&mut self.live) => self.key(key, session)?,
            };
            if stop {
                return Ok(end);
            }
            // `| head -1`: the reader went away. A run that records goes on into its file; one
            // that only prints ends quietly, as at Ctrl-C.
            if !output_closed && self.sinks.iter().all(|sink| sink.closed()) {
                output_closed = true;
                log::info!("standard output was closed: ending the run");
                if !session.forward(libc::SIGINT) {
                    return Ok(end);
                }
            }
        }
    }

    /// The window since the previous snapshot: attributed, its cgroups' stalls read.
    fn window(&mut self, snapshot: &Snapshot) -> Window {
        self.names.learn_removed(&snapshot.removed_cgroups);
        let mut window = self.attrib.window(snapshot);
        if let Some(stalls) = self.stalls.as_mut() {
            stalls.window(&mut window, &mut self.names);
        }
        window
    }

    /// One interval: a snapshot attributed, handed to every sink and the view.
    fn tick(&mut self) -> Result<()> {
        let snapshot = self.collector.snapshot()?;
        let window = self.window(&snapshot);
        if !self.told_not_counted && self.live.is_none() {
            self.told_not_counted = tell_not_counted(self.set, &window);
        }
        let frame = Frame::new(
            &window,
            &mut self.names,
            self.set,
            self.options.topdown.as_ref(),
        );
        sink::to_every(&mut self.sinks, &frame)?;
        if let Some(live) = self.live.as_mut() {
            live.window(&frame)?;
        }
        Ok(())
    }

    /// A key of the full-screen view; whether it ends the session.
    fn key(&mut self, key: tui::state::Key, session: &mut Session) -> Result<bool> {
        let Some(view) = self.live.as_mut() else {
            return Ok(false);
        };
        Ok(match view.model.state.on_key(key) {
            // A command gets SIGINT and ends the session when it exits, as at Ctrl-C.
            Action::Quit => !session.forward(libc::SIGINT),
            Action::Redraw => {
                view.draw()?;
                false
            }
            // A live view has no timeline to move in.
            Action::None | Action::Seek => false,
        })
    }

    /// The last, partial window and the run's totals, to every sink; the exit code (the
    /// command's, with `-- COMMAND`).
    async fn finish(mut self, target: &Target, end: End) -> Result<ExitCode> {
        // Processes that ended: their threads' last switches, so they are reported exited.
        let ended: Vec<u32> = match (target, end.status.is_some(), end.all_ended) {
            (Target::Command(pid), true, _) => vec![*pid],
            (Target::Pids(pids), _, true) => pids.clone(),
            _ => Vec::new(),
        };
        if !ended.is_empty() {
            let left = self
                .collector
                .await_final_switches(&ended, Duration::from_millis(500))
                .await?;
            if left > 0 {
                log::warn!(
                    "{left} threads of the ended processes had not switched out for the last \
                     time after 500 ms: reported live"
                );
            }
        }
        // The view is closed (the terminal restored): the totals follow on the normal screen.
        drop(self.live.take());
        // The last, partial interval too: a stream of intervals then holds every exited thread.
        let snapshot = self.collector.snapshot()?;
        let window = self.window(&snapshot);
        let topdown = self.options.topdown.as_ref();
        let frame = Frame::new(&window, &mut self.names, self.set, topdown);
        sink::to_every(&mut self.sinks, &frame)?;
        drop(frame);
        let mut totals = self.attrib.run_totals(&snapshot);
        if let Some(stalls) = &self.stalls {
            stalls.run_totals(&mut totals);
        }
        let frame = Frame::new(&totals, &mut self.names, self.set, topdown);
        for line in sink::finish_every(self.sinks, &frame)? {
            eprintln!("topdown-bpf: {line}");
        }
        if totals.stats.lost_anything() {
            log::warn!("the kernel side lost data: see the losses line");
        }
        Ok(end.status.map_or(ExitCode::SUCCESS, exit_code))
    }
}

/// Says once, on standard error, that some counters of `window` were not counted for some
/// threads; whether it did.
fn tell_not_counted(set: &CounterSet, window: &crate::attrib::Window) -> bool {
    let slots = window.never_running();
    if slots.is_empty() {
        return false;
    }
    let names = set.names_of(&slots);
    eprintln!(
        "topdown-bpf: {} not counted for some threads (enabled, never running: another \
         program holds the PMU's counters, or the kernel multiplexed them out): shown as \
         <not counted> (JSON null), never as 0; said once",
        names.join(", ")
    );
    true
}

/// The next key of the live view; never, without one.
async fn next_key(live: &mut Option<LiveView>) -> tui::state::Key {
    match live {
        Some(view) => view.key().await,
        None => std::future::pending().await,
    }
}

/// The exit code a shell would report for `status`: the code, or 128 + the signal.
fn exit_code(status: ExitStatus) -> ExitCode {
    let code = status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The process thread `tid` belongs to (`Tgid:` in its status).
fn process_of(tid: u32) -> Result<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status"))
        .with_context(|| format!("no thread with tid {tid}: check the -t argument"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|tgid| tgid.trim().parse().ok())
        .with_context(|| format!("reading the process of thread {tid}"))
}

/// Rows per cgroup or per container, if asked; needs the unified cgroup2 hierarchy.
fn group_options(args: &CgroupArgs, mount: Option<&Path>) -> Result<Option<GroupOptions>> {
    let by = if args.per_container {
        GroupBy::Container
    } else if args.per_cgroup || args.rollup || !args.cgroup.is_empty() {
        GroupBy::Cgroup
    } else {
        return Ok(None);
    };
    let Some(mount) = mount else {
        bail!(
            "per-cgroup attribution needs the unified cgroup2 hierarchy and this host has only \
             cgroup v1: boot with systemd.unified_cgroup_hierarchy=1 (or mount cgroup2), or run \
             without --per-cgroup/--per-container/-G/--rollup"
        );
    };
    let keep = args
        .cgroup
        .iter()
        .map(|path| {
            let path = normalize(path, Some(mount));
            let dir = mount.join(path.trim_start_matches('/'));
            if !dir.is_dir() {
                bail!(
                    "no cgroup {path} under {}: give a path from the cgroup2 root (see `ls {}`)",
                    mount.display(),
                    mount.display()
                );
            }
            Ok(path)
        })
        .collect::<Result<_>>()?;
    Ok(Some(GroupOptions {
        by,
        rollup: args.rollup,
        keep,
    }))
}

/// The Level 2 nodes a live `--drilldown` measures Level 3 under (see [`drilldown`]).
fn drilldown_nodes() -> Result<Vec<String>> {
    let machine = Machine::read(&SysRoot::host())?;
    // Said for the level asked (3), before any counter is opened.
    topdown_models_here(&machine, 3, false)?;
    let (set, view) = counter_set(Some(2), &[], false, &[])?;
    let view = view.context("a Level 2 set has a TopDown view")?;
    drilldown::probe(&set, &view)
}

/// The report's format: JSON or separated values when asked; else a table per interval with
/// `-I`, redrawn in place on a terminal, or the totals alone. An always-on store (`stored`)
/// prints only its totals (at its end) unless JSON or separated values are asked: its `-I` is
/// the store's window, not a wish for a table every interval in the journal.
fn format_of(cli: &StatArgs, output: Option<&Path>, stored: bool) -> Format {
    if cli.json {
        Format::Json
    } else if let Some(separator) = &cli.field_separator {
        Format::Csv {
            separator: *separator,
        }
    } else if cli.csv {
        Format::Csv { separator: b',' }
    } else if stored {
        Format::Summary
    } else if cli.interval_ms.is_some() {
        Format::Interval
    } else if output.is_none() && std::io::stdout().is_terminal() {
        Format::Refresh
    } else {
        Format::Summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_views_need_the_unified_hierarchy_and_existing_paths() {
        let asks = CgroupArgs {
            per_container: true,
            ..CgroupArgs::default()
        };
        let error = group_options(&asks, None).unwrap_err().to_string();
        assert!(error.contains("cgroup v1"), "{error}");
        assert!(
            group_options(&CgroupArgs::default(), None)
                .unwrap()
                .is_none()
        );

        let mount = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(mount.path().join("a/b")).unwrap();
        let keep = CgroupArgs {
            cgroup: vec![format!("{}/a/b/", mount.path().display()), "a".into()],
            ..CgroupArgs::default()
        };
        let options = group_options(&keep, Some(mount.path())).unwrap().unwrap();
        assert_eq!(options.by, GroupBy::Cgroup, "-G alone means per cgroup");
        assert_eq!(options.keep, ["/a/b", "/a"]);
        let missing = CgroupArgs {
            cgroup: vec!["/nope".into()],
            ..CgroupArgs::default()
        };
        let error = group_options(&missing, Some(mount.path()))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no cgroup /nope"), "{error}");
    }
}
