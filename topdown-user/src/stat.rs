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
use topdown_common::MAX_COUNTERS;

use crate::{
    attrib::{
        Attributor, EXITED_ROWS,
        cgroups::CgroupNames,
        groups::{GroupBy, GroupOptions, normalize},
        named,
        target::Target,
    },
    cli::{CgroupArgs, StatArgs},
    collect::{Collector, CollectorOptions},
    drilldown, per_core,
    pmu::{
        counter_set::CounterSet,
        event_spec::{EventResolver, split_event_list},
        event_table::EventTable,
        machine::Machine,
        sysfs::SysRoot,
        topdown_model::{Selection, default_slots, select},
    },
    preflight,
    process_exit::ProcessExits,
    recording::{self, writer::Recorder},
    report::{
        Format, Renderer, open_output,
        rows::{RowOptions, SortKey},
    },
    session::{Session, Wake},
    tma::{
        Model,
        plan::{HybridPart, drilldown_set, hybrid_topdown_set, topdown_set},
        view::{TopdownPart, TopdownView},
    },
    tui::{
        self, LiveView,
        state::{Action, ViewState},
    },
};

/// Refresh period of the live table when no `-I` is given.
const DEFAULT_REFRESH: Duration = Duration::from_secs(1);

/// Runs the per-thread session the command line describes, writing the report to `output`
/// (standard output without one) and, with `recording`, every window to that file; with
/// `-- COMMAND`, the tool exits with the command's status, as `perf stat` does.
pub async fn run(
    cli: StatArgs,
    output: Option<PathBuf>,
    recording: Option<PathBuf>,
    verbose: bool,
) -> Result<ExitCode> {
    if recording.is_some() && cli.per_core {
        bail!("record keeps threads and cgroups, not cores: run --per-core without record");
    }
    let format = format_of(&cli, output.as_deref());
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
    let mut out = open_output(output.as_deref())?;
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
                Command::new(&cli.command[0])
                    .args(&cli.command[1..])
                    .spawn()
            })?
            .with_context(|| format!("cannot run `{}`", cli.command[0]))?;
        let pid = child
            .id()
            .context("the command exited before it could be watched")?;
        (Target::Command(pid), Some(child))
    };

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
        Some(LiveView::open(state)?)
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
    let exited_rows = cli.top.map_or(EXITED_ROWS, |top| top.max(EXITED_ROWS));
    let attrib_target = target.clone();
    let mut attrib = Attributor::with_exited_rows(set.counters.len(), target, exited_rows);
    attrib.start(started);

    let mut recorder = match &recording {
        Some(path) => {
            let machine = Machine::read(&SysRoot::host())?;
            let cpus = crate::collect::online_cpus()?.len();
            let header = recording::header(
                &set,
                renderer.options().topdown.as_ref(),
                u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
                machine.cpu.to_string(),
                cpus,
            );
            Some(Recorder::create(path, header)?)
        }
        None => None,
    };
    if let Some(child) = child {
        session.watch(child);
    }

    // Cgroups removed by the previous snapshot: their last charges are in by now.
    let mut removed_before: Vec<u64> = Vec::new();
    let mut status = None;
    let mut all_ended = false;
    // The full-screen view's status line says it every frame (its losses); other outputs once.
    let mut told_not_counted = false;
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
                    // Keep their totals for the run and stop tracking them: memory then holds
                    // live cgroups only, however many come and go.
                    let removed = snapshot.removed_cgroups.iter().map(|(id, _)| *id).collect();
                    attrib.retire_cgroups(std::mem::replace(&mut removed_before, removed));
                    if let Some(live) = live.as_mut() {
                        live.model.update(window);
                        live.draw(&set, renderer.options(), grouping.as_ref(), &mut names)?;
                    } else if draw_windows {
                        let named = named::name(&window, &mut names, grouping.as_ref());
                        renderer.window(&window, named)?;
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
                        view.draw(&set, renderer.options(), grouping.as_ref(), &mut names)?;
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
    if draw_windows && cli.interval_ms.is_some() {
        let named = named::name(&window, &mut names, grouping.as_ref());
        renderer.window(&window, named)?;
    }
    let totals = attrib.run_totals(&snapshot);
    if let (Some(recorder), Some(path)) = (recorder, &recording) {
        let windows = recorder.finish(&totals, &mut names)?;
        eprintln!(
            "topdown-bpf: recorded {windows} windows to {} (`topdown-bpf report -i {0}`)",
            path.display()
        );
    }
    let named = named::name(&totals, &mut names, grouping.as_ref());
    renderer.summary(&totals, named)?;
    if totals.stats.lost_anything() {
        log::warn!("the kernel side lost data: see the losses line");
    }
    Ok(status.map_or(ExitCode::SUCCESS, exit_code))
}

/// Says once, on standard error, that some counters of `window` were not counted for some
/// threads; whether it did.
fn tell_not_counted(set: &CounterSet, window: &crate::attrib::Window) -> bool {
    let slots = window.not_counted();
    if slots.is_empty() {
        return false;
    }
    let names: Vec<&str> = slots
        .iter()
        .filter_map(|&i| set.counters.get(i).map(|c| c.name.as_str()))
        .collect();
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

/// The counter set to run on this machine, and the TopDown view over it: the software or
/// hardware default set, or TopDown at `td_level` for each core type, plus the `-e` events.
pub(crate) fn counter_set(
    td_level: Option<u8>,
    nodes: &[String],
    per_core: bool,
    events: &[String],
) -> Result<(CounterSet, Option<TopdownView>)> {
    let sys = SysRoot::host();
    let machine = Machine::read(&sys)?;
    if !nodes.is_empty() && td_level != Some(3) {
        bail!("--nodes picks where Level 3 drills down: it needs --td-level 3");
    }
    let (mut set, topdown) = match td_level {
        None => (CounterSet::for_machine(&sys)?, None),
        Some(level) => {
            let parts = topdown_models_here(&machine, level, per_core)?;
            // The PMU's `caps/slots`, else the core's known width (an emulated PMU gives none).
            let slots = machine.core_pmus[0]
                .slots
                .or_else(|| default_slots(&machine.cpu))
                .unwrap_or(8);
            if let [(model, pmu)] = parts.as_slice() {
                let set = if nodes.is_empty() {
                    topdown_set(&sys, pmu, model, level)?
                } else {
                    drilldown_set(&sys, pmu, model, nodes)?
                };
                let view = TopdownView::single(*model, level, slots, machine.smt_active);
                (set, Some(view))
            } else {
                let with_cpus: Vec<HybridPart<'_>> = parts
                    .iter()
                    .map(|(model, pmu)| {
                        let cpus = machine.core_pmu(pmu).and_then(|p| p.cpus.clone());
                        (pmu.as_str(), cpus, *model)
                    })
                    .collect();
                let set = hybrid_topdown_set(&sys, &with_cpus, level, nodes)?;
                let view = TopdownView {
                    parts: parts
                        .iter()
                        .map(|(model, pmu)| TopdownPart {
                            label: if pmu == "cpu_atom" { "E" } else { "P" },
                            prefix: format!("{pmu}/"),
                            model: *model,
                        })
                        .collect(),
                    level,
                    slots,
                    smt_on: machine.smt_active,
                };
                (set, Some(view))
            }
        }
    };
    add_events(&sys, &machine, &mut set, topdown.as_ref(), events)?;
    if machine.forced {
        set.reason = format!(
            "{}; CPU forced to {} (--cpuid / TOPDOWN_CPUID) on PMU {}",
            set.reason,
            machine.cpu,
            machine
                .core_pmus
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok((set, topdown))
}

/// Adds the `-e` events to the set, resolved for this machine's core PMU and CPU event table.
fn add_events(
    sys: &SysRoot,
    machine: &Machine,
    set: &mut CounterSet,
    topdown: Option<&TopdownView>,
    specs: &[String],
) -> Result<()> {
    if specs.is_empty() {
        return Ok(());
    }
    let core = machine.core_pmus.first().map(|p| p.name.clone());
    let table = match (topdown, &core) {
        (Some(view), _) => EventTable::for_model(view.parts[0].model.name),
        (None, Some(pmu)) => match select(&machine.cpu, pmu, machine.smt_active) {
            Selection::Model(model) => EventTable::for_model(model),
            Selection::PerCoreOnly(model) => EventTable::for_model(model),
            Selection::Unsupported(_) => None,
        },
        (None, None) => None,
    };
    let resolver = EventResolver::new(sys, core.as_deref(), table)?;
    for spec in specs.iter().flat_map(|s| split_event_list(s)) {
        set.counters.push(resolver.resolve(&spec)?);
    }
    if set.counters.len() > MAX_COUNTERS {
        bail!(
            "{} counters per CPU requested, more than the {MAX_COUNTERS} a per-thread set \
             holds: drop some -e events",
            set.counters.len()
        );
    }
    Ok(())
}

/// The model TopDown runs with for each core PMU of this machine (two on hybrid parts), or why
/// it cannot: no hardware PMU, no model for the CPU, SMT-shared inputs. Never a made-up number.
fn topdown_models_here(
    machine: &Machine,
    level: u8,
    per_core: bool,
) -> Result<Vec<(Model, String)>> {
    if !machine.has_hardware_pmu() {
        bail!(
            "--td-level {level} needs a hardware PMU and this machine has none (a VM without a \
             virtual PMU?): run without --td-level for the software counters, or record \
             `perf stat` on the target machine and read it with `topdown-bpf analyze`"
        );
    }
    machine
        .core_pmus
        .iter()
        .map(|pmu| match select(&machine.cpu, &pmu.name, machine.smt_active) {
            Selection::Unsupported(why) => bail!("--td-level: {why}"),
            Selection::PerCoreOnly(model) if per_core => Ok((Model::named(model)?, pmu.name.clone())),
            Selection::PerCoreOnly(_) => bail!(
                "--td-level: on this CPU with SMT on (Haswell to Cascade Lake), the TopDown inputs count per \
                 core, so per-thread TopDown would be wrong: use --per-core"
            ),
            Selection::Model(model) => Ok((Model::named(model)?, pmu.name.clone())),
        })
        .collect()
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
