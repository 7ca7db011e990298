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
        Attributor, EXITED_ROWS, WindowExits,
        cgroups::CgroupNames,
        groups::{GroupBy, GroupOptions, normalize},
        target::Target,
    },
    cli::{CgroupArgs, StatArgs},
    collect::{Collector, CollectorOptions, calibration},
    model::{
        self,
        export::{self, RunMeta},
        rows::{RowOptions, SortKey},
    },
    pmu::{counter_set::CounterSet, machine::Machine, sysfs::SysRoot},
    preflight,
    privileges::{self, User},
    process_exit::ProcessExits,
    recording::{self, format::RowBounds, writer::Recorder},
    report::{
        Format, Renderer,
        new_file::{keep_whole_lines, may_write},
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
    /// The recording.
    pub path: PathBuf,
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
    let Some(path) = output else {
        return session(cli, None, Box::new(std::io::stdout()), recording, verbose).await;
    };
    may_write(&path, "the report", &[], force)?;
    let file = std::fs::File::create(&path)
        .with_context(|| format!("cannot write the report {}", path.display()))?;
    let result = session(cli, Some(&path), Box::new(file), recording, verbose).await;
    if result.is_err() {
        let _ = keep_whole_lines(&path);
    }
    result
}

/// The session of [`run`], its report written to `out` (`output` names the file, if any).
async fn session(
    cli: StatArgs,
    output: Option<&Path>,
    mut out: Box<dyn std::io::Write>,
    recording: Option<RecordTo>,
    verbose: bool,
) -> Result<ExitCode> {
    if recording.is_some() && cli.per_core {
        bail!("record keeps threads and cgroups, not cores: run --per-core without record");
    }
    if let Some(to) = recording
        .as_ref()
        .filter(|to| !to.force && to.path.exists())
    {
        bail!(
            "the recording {} exists: give another name (-o), or --force to replace it",
            to.path.display()
        );
    }
    let format = format_of(&cli, output);
    let sort: SortKey = cli.sort.parse().unwrap_or(SortKey::OnCpu);
    if cli.drilldown && (cli.td_level != Some(3) || !cli.command.is_empty() || cli.per_core) {
        bail!(
            "--drilldown probes the whole machine before the run: it needs --td-level 3, and \
             not -- COMMAND or --per-core (for a command: record Level 2, then `analyze --events \
             --td-level 3 --drilldown`, then --nodes)"
        );
    }
    let nodes = if cli.drilldown {
        drilldown_nodes()?
    } else {
        cli.nodes.clone()
    };
    let (set, topdown) = counter_set(cli.td_level, &nodes, cli.per_core, &cli.events)?;
    sort.validate(&set)?;
    let target = if !cli.pids.is_empty() {
        Target::Pids(cli.pids.clone())
    } else if !cli.tids.is_empty() {
        Target::Tids(cli.tids.clone())
    } else {
        Target::All
    };
    target.validate()?;
    let mut names = CgroupNames::host();
    let group = group_options(&cli.cgroups, names.mount())?;
    preflight::check()?;
    if cli.per_core {
        per_core::run(
            &set,
            topdown.as_ref(),
            cli.interval_ms,
            cli.duration,
            cli.json,
            format == Format::Refresh,
            &mut *out,
        )
        .await?;
        return Ok(ExitCode::SUCCESS);
    }

    // A narrowed target charges only the processes it names (and their children); the
    // cgroup views need every thread.
    let narrow = group.is_none() && (target != Target::All || !cli.command.is_empty());
    // Rows of cgroups only: no thread's own counts are shown (the full-screen view can switch
    // to threads, a recording keeps them), so counters are read only at cgroup switches.
    let cgroup_only = group.is_some() && format != Format::Refresh && recording.is_none();
    let mut collector = Collector::start(
        &set,
        &CollectorOptions {
            max_threads: cli.max_threads,
            narrow,
            cgroup_only,
            ..CollectorOptions::default()
        },
    )?;
    let started = Instant::now();
    for line in calibration::lines(collector.calibration(), &set) {
        eprintln!("{line}");
    }
    match &target {
        Target::Pids(pids) => pids.iter().try_for_each(|&pid| collector.follow(pid))?,
        Target::Tids(tids) => tids
            .iter()
            .try_for_each(|&tid| collector.follow(process_of(tid)?))?,
        Target::All | Target::Command(_) | Target::NoThreads => {}
    }
    let ends_with = match &target {
        Target::Pids(pids) => ProcessExits::watch(pids)?,
        _ => ProcessExits::watch(&[])?,
    };

    let period = cli
        .interval_ms
        .map_or(DEFAULT_REFRESH, Duration::from_millis);
    // Signals are ours before a command starts: a SIGTERM or Ctrl-C from then on reaches the
    // command and ends the run with its report, never kills the tool before its handlers.
    let mut session = Session::new(started, period, cli.duration)?;
    let (target, child) = if cli.command.is_empty() {
        (target, None)
    } else {
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
        (Target::Command(pid), Some(child))
    };

    // The hottest exited threads keep their own rows (each window's, and the run's); the rest
    // fold per process.
    let exited_rows = cli.top.map_or(EXITED_ROWS, |top| top.max(EXITED_ROWS));
    let exits = if cli.every_exit {
        WindowExits::Each
    } else {
        WindowExits::Fold
    };
    let mut parts = None;
    let mut recorder = match &recording {
        Some(to) => {
            let machine = Machine::read(&SysRoot::host())?;
            let cpus = crate::collect::online_cpus()?.len();
            let header = recording::header(
                &set,
                topdown.as_ref(),
                u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
                machine.cpu.to_string(),
                cpus,
                (exits == WindowExits::Fold).then_some(RowBounds {
                    max_threads: cli.max_threads,
                    exited_rows: exited_rows as u64,
                }),
            );
            if let Some(dir) = &to.parquet {
                parts = Some(ParquetParts::create(
                    dir,
                    RunMeta::of(&header),
                    &set,
                    topdown.as_ref(),
                    to.parquet_windows,
                )?);
            }
            Some(Recorder::create(&to.path, header)?)
        }
        None => None,
    };
    if let Some(to) = &recording {
        // Everything privileged is done: programs loaded, counters open, files created.
        if let (Some(user), Some(dir)) = (&to.user, &to.parquet) {
            std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid))
                .with_context(|| format!("giving {} to --user {}", dir.display(), user.name))?;
        }
        privileges::drop_all(to.user.as_ref(), |phase| collector.drop_privileges(phase))?;
    }

    let draw_windows = cli.interval_ms.is_some() || format == Format::Refresh;
    // On a terminal the live table is the full-screen view; the run's totals then go to the
    // normal screen when it closes.
    let mut live = if format == Format::Refresh {
        let nodes = topdown
            .as_ref()
            .map(TopdownView::node_names)
            .unwrap_or_default();
        let state = ViewState::new(
            tui::first_view(group.as_ref()),
            names.mount().is_some(),
            sort.clone(),
            &nodes,
        );
        Some(LiveView::open(state, &set)?)
    } else {
        None
    };
    let grouping = group.clone();
    let mut renderer = Renderer::new(
        out,
        format,
        RowOptions {
            sort,
            top: cli.top,
            topdown,
            verbose,
            group,
        },
        set.clone(),
    );
    if live.is_none() {
        renderer.header()?;
    }
    let attrib_target = target.clone();
    let mut attrib = Attributor::with_exited_rows(set.counters.len(), target, exited_rows, exits);
    attrib.set_silent(&collector.calibration().silent());
    attrib.start(started);

    if let Some(child) = child {
        session.watch(child);
    }

    // Cgroups removed by the previous snapshot: their last charges are in by now.
    let mut removed_before: Vec<u64> = Vec::new();
    let mut status = None;
    let mut all_ended = false;
    // The full-screen view's status line says it every frame (its losses); other outputs once.
    let mut told_not_counted = false;
    let mut output_closed = false;
    loop {
        let stop = tokio::select! {
            wake = session.wake() => match wake {
                Wake::Tick => {
                    let snapshot = collector.snapshot()?;
                    names.learn_removed(&snapshot.removed_cgroups);
                    let window = attrib.window(&snapshot);
                    if !told_not_counted && live.is_none() {
                        told_not_counted = tell_not_counted(&set, &window);
                    }
                    if let Some(recorder) = recorder.as_mut() {
                        recorder.window(&window, &mut names)?;
                    }
                    if let Some(parts) = parts.as_mut() {
                        let view = renderer.options().topdown.as_ref();
                        parts.window(&window, &export::rows(&window, &mut names, &set, view))?;
                    }
                    // Keep their totals for the run and stop tracking them: memory then holds
                    // live cgroups only, however many come and go.
                    let removed = snapshot.removed_cgroups.iter().map(|(id, _)| *id).collect();
                    attrib.retire_cgroups(std::mem::replace(&mut removed_before, removed));
                    if let Some(live) = live.as_mut() {
                        live.model.update(window, &mut names, grouping.as_ref());
                        live.draw(&set, renderer.options(), grouping.as_ref())?;
                    } else if draw_windows {
                        let rows = model::step(&window, &mut names, &set, renderer.options());
                        renderer.window(&window, &rows)?;
                    }
                    false
                }
                Wake::Deadline => true,
                Wake::CommandExited(exit) => {
                    let exit = exit.context("waiting for the command")?;
                    log::info!("command exited: {exit}");
                    status = Some(exit);
                    true
                }
                // The command gets the signal and ends the session when it exits, as under
                // perf stat; its last slices are then in the final report.
                Wake::Signal(signal) => !session.forward(signal),
            },
            () = ends_with.all_ended() => {
                log::info!("every watched process has exited");
                all_ended = true;
                true
            }
            key = next_key(&mut live) => {
                let Some(view) = live.as_mut() else { continue };
                match view.model.state.on_key(key) {
                    // A command gets SIGINT and ends the session when it exits, as at Ctrl-C.
                    Action::Quit => !session.forward(libc::SIGINT),
                    Action::Redraw => {
                        view.draw(&set, renderer.options(), grouping.as_ref())?;
                        false
                    }
                    // A live view has no timeline to move in.
                    Action::None | Action::Seek => false,
                }
            }
        };
        if stop {
            break;
        }
        // `| head -1`: the reader went away. A run that records goes on into its file; one
        // that only prints ends quietly, as at Ctrl-C.
        if renderer.closed() && recording.is_none() && !output_closed {
            output_closed = true;
            log::info!("standard output was closed: ending the run");
            if !session.forward(libc::SIGINT) {
                break;
            }
        }
    }

    // Processes that ended: their threads' last switches, so they are reported exited.
    let ended: Vec<u32> = match (&attrib_target, status.is_some(), all_ended) {
        (Target::Command(pid), true, _) => vec![*pid],
        (Target::Pids(pids), _, true) => pids.clone(),
        _ => Vec::new(),
    };
    if !ended.is_empty() {
        let left = collector
            .await_final_switches(&ended, Duration::from_millis(500))
            .await?;
        if left > 0 {
            log::warn!(
                "{left} threads of the ended processes had not switched out for the last time \
                 after 500 ms: reported live"
            );
        }
    }
    if live.take().is_some() {
        // The view is closed (the terminal restored): the totals follow on the normal screen.
        renderer.header()?;
    }
    // The last, partial interval too: a stream of intervals then holds every exited thread.
    let snapshot = collector.snapshot()?;
    names.learn_removed(&snapshot.removed_cgroups);
    let window = attrib.window(&snapshot);
    if let Some(recorder) = recorder.as_mut() {
        recorder.window(&window, &mut names)?;
    }
    if let Some(parts) = parts.as_mut() {
        let view = renderer.options().topdown.as_ref();
        parts.window(&window, &export::rows(&window, &mut names, &set, view))?;
    }
    if draw_windows && cli.interval_ms.is_some() {
        let rows = model::step(&window, &mut names, &set, renderer.options());
        renderer.window(&window, &rows)?;
    }
    let totals = attrib.run_totals(&snapshot);
    if let (Some(recorder), Some(to)) = (recorder, &recording) {
        let windows = recorder.finish(&totals, &mut names)?;
        eprintln!(
            "topdown-bpf: recorded {windows} windows to {} (`topdown-bpf report -i {0}`)",
            to.path.display()
        );
    }
    if let (
        Some(parts),
        Some(RecordTo {
            parquet: Some(dir), ..
        }),
    ) = (parts, &recording)
    {
        let files = parts.finish()?;
        eprintln!(
            "topdown-bpf: wrote {files} Parquet files to {} (`read_parquet('{0}/*.parquet')`)",
            dir.display()
        );
    }
    let rows = model::step(&totals, &mut names, &set, renderer.options());
    renderer.summary(&totals, &rows)?;
    if totals.stats.lost_anything() {
        log::warn!("the kernel side lost data: see the losses line");
    }
    Ok(status.map_or(ExitCode::SUCCESS, exit_code))
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
            "per-cgroup attribution needs the unified cgroup2 hierarchy and this host has only              cgroup v1: boot with systemd.unified_cgroup_hierarchy=1 (or mount cgroup2), or run              without --per-cgroup/--per-container/-G/--rollup"
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

fn format_of(cli: &StatArgs, output: Option<&Path>) -> Format {
    if cli.json {
        Format::Json
    } else if let Some(separator) = &cli.field_separator {
        Format::Csv {
            separator: *separator,
        }
    } else if cli.csv {
        Format::Csv { separator: b',' }
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
