//! `topdown-bpf serve`: per-cgroup counters and TopDown for a fleet's monitoring, scraped by
//! Prometheus from an HTTP endpoint (loopback by default).

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};
use topdown_common::cgroup::CgroupId;

use anyhow::{Context as _, Result, bail};
use tokio::{net::TcpListener, time::interval};

use crate::{
    attrib::{Attributor, cgroups::CgroupNames, stalls::StallReader, target::Target},
    c2c::forwarded,
    cli::ServeArgs,
    collect::{
        Collector, CollectorOptions, c2c::C2cCollector, calibration, capacity::Capacity, cpus,
    },
    model::{frame::Frame, sink::WindowSink as _},
    pmu::{
        counter_set::CounterSet,
        memory_events::{self, Rate},
        sysfs::SysRoot,
    },
    preflight, privileges,
    serve::{
        exporter::{Exporter, Limits},
        http,
        web_config::{self, WebConfig},
    },
    session::{Session, Wake},
    tma::choice::counter_set,
};

/// How often dead threads' and removed cgroups' records (and c2c samples) are moved out of the
/// ring buffers.
const DRAIN: Duration = Duration::from_millis(100);
/// Ring buffer for forwarded c2c samples.
const C2C_RING_BYTES: u32 = 16 << 20;

/// Collects per cgroup and serves the metrics until Ctrl-C, SIGTERM or `--duration`.
pub async fn run(args: &ServeArgs) -> Result<()> {
    let address = listen_address(args)?;
    let (set, view) = counter_set(
        args.counters.td_level,
        &args.counters.nodes,
        false,
        &args.counters.events,
    )?;
    let mut names = CgroupNames::host();
    if names.mount().is_none() {
        bail!(
            "serve exports per-cgroup metrics, which need the unified cgroup2 hierarchy, and \
             this host has only cgroup v1: boot with systemd.unified_cgroup_hierarchy=1 (or \
             mount cgroup2)"
        );
    }
    let web = args
        .web_config
        .as_deref()
        .map(|path| web_config::load(path, address))
        .transpose()?
        .unwrap_or_default();
    let user = args.user.as_deref().map(privileges::lookup).transpose()?;
    preflight::check()?;
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} (in use? try another --listen)"))?;
    let mut collector = start_collector(args, &set)?;
    let mut c2c = args.c2c.then(|| start_c2c(args)).transpose()?;
    let started = Instant::now();
    let mut attrib = attributor(&set, &collector, started);
    // Throttling and pressure per cgroup, each window; serve reports no run totals.
    let mut stalls = StallReader::start(names.mount(), false);
    for line in calibration::lines(collector.calibration(), &set) {
        log::warn!("{}", line.trim_start_matches("topdown-bpf: "));
    }
    let mut exporter = Exporter::new(
        &set,
        view.clone(),
        Limits {
            grace: Duration::from_secs_f64(args.grace),
            max_cgroups: args.max_series,
        },
    );
    let (latest, mut asked) = http::Latest::channel();
    // The exposition as of the latest window, encoded when a scrape first asks for it.
    let mut text: Option<Arc<String>> = None;
    eprintln!("topdown-bpf: {}", banner(&set, &web, address));
    // Everything privileged is done: the BPF programs are loaded, the counters opened, the
    // maps mapped, the port bound.
    privileges::drop_all(user.as_ref(), |phase| collector.drop_privileges(phase))?;
    let mut server = tokio::spawn(http::serve(
        listener,
        latest,
        http::Limits::of(args.max_connections),
        exporter.connections_refused(),
        web,
    ));

    let mut session = Session::new(
        started,
        Duration::from_millis(args.interval_ms),
        args.duration,
    )?;
    let mut drain = interval(DRAIN);
    let result = loop {
        tokio::select! {
            wake = session.wake() => {
                let Wake::Tick = wake else {
                    break Ok(());
                };
                let snapshot = collector.snapshot()?;
                for (id, path) in &snapshot.removed_cgroups {
                    names.learn(*id, path.clone());
                }
                let mut window = attrib.window(&snapshot);
                stalls.window(&mut window, &mut names);
                exporter.window(&Frame::new(&window, &mut names, &set, view.as_ref()))?;
                text = None;
            }
            Some(ask) = asked.recv() => {
                let _ = ask.send(Arc::clone(text.get_or_insert_with(|| Arc::new(exporter.encode()))));
            }
            _ = drain.tick(), if c2c.is_some() => {
                if let Some(c2c) = c2c.as_mut() {
                    let records = c2c.drain();
                    // Unknown ids may walk the tree once per tick (the rows' naming), not per drain.
                    let samples = forwarded::classify(&records, |id| names.name(CgroupId(id)).to_string());
                    exporter.update_c2c(&samples, &c2c.counts()?);
                }
            }
            finished = &mut server => break finished.context("the metrics server stopped").and_then(|r| r),
        }
    };
    server.abort();
    result
}

/// The collector for `set`'s counters, sized and placed as `args` ask (what it cannot do is
/// said as a warning): cgroups only, so counters are read only at cgroup switches.
fn start_collector(args: &ServeArgs, set: &CounterSet) -> Result<Collector> {
    let capacity = Capacity::of(args.counters.max_threads, &SysRoot::host())?;
    if let Some(short) = &capacity.short {
        log::warn!("{short}");
    }
    let cpus = cpus::choose(
        args.counters.cpus.as_ref().map(|l| l.0.as_slice()),
        &SysRoot::host(),
    )?;
    if let Some(line) = cpus.line() {
        log::warn!("{}", line.trim_start_matches("topdown-bpf: "));
    }
    Collector::start(
        set,
        &CollectorOptions {
            max_threads: capacity.threads,
            cgroup_only: true,
            neighbours: !args.counters.no_neighbours && CollectorOptions::default().neighbours,
            cpus: cpus.collector_cpus(),
            ..CollectorOptions::default()
        },
    )
}

/// The attributor of cgroups' windows from `started`: no thread rows, and no run totals (a
/// removed cgroup's go with it).
fn attributor(set: &CounterSet, collector: &Collector, started: Instant) -> Attributor {
    let mut attrib = Attributor::new(set.counters.len(), Target::NoThreads);
    attrib.set_silent(&collector.calibration().silent());
    attrib.forget_removed_cgroups();
    attrib.start(started);
    attrib
}

/// `--listen`, checked: beyond loopback only with `--web-config`, or `--no-auth` said.
fn listen_address(args: &ServeArgs) -> Result<SocketAddr> {
    let address: SocketAddr = args.listen.parse().with_context(|| {
        format!(
            "--listen {}: give an address and port, e.g. 127.0.0.1:9464",
            args.listen
        )
    })?;
    if !address.ip().is_loopback() && args.web_config.is_none() {
        if !args.no_auth {
            bail!(
                "--listen {address} serves beyond this machine: give --web-config (TLS and \
                 authentication), or --no-auth to serve plain HTTP to anyone who reaches it"
            );
        }
        log::warn!("serving metrics on {address} without TLS or authentication (--no-auth)");
    }
    Ok(address)
}

/// The c2c filter for `--c2c`, on the memory-sampling event chosen for this machine.
fn start_c2c(args: &ServeArgs) -> Result<C2cCollector> {
    let events = memory_events::choose(
        &SysRoot::host(),
        args.c2c_event.as_deref(),
        args.threshold,
        Rate::Frequency(4000),
    )?;
    C2cCollector::start(&events, args.threshold, C2C_RING_BYTES, false)
}

/// The line saying what runs and where the metrics are.
fn banner(set: &CounterSet, web: &WebConfig, address: SocketAddr) -> String {
    let scheme = if web.tls.is_some() { "https" } else { "http" };
    let auth = if web.auth.is_some() {
        " (basic authentication)"
    } else {
        ""
    };
    format!(
        "counter set `{}`: {}; metrics on {scheme}://{address}/metrics{auth}",
        set.name, set.reason
    )
}
