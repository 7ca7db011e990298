//! `topdown-bpf c2c`: records live. The kernel filter classifies every memory sample and
//! forwards only contended loads at or over the threshold and stores; this drains them, reads
//! the mappings of every process it sees while it still runs, shows the hottest lines so far on
//! a terminal, and stops at the end of `--duration`, when the command exits, or on Ctrl-C /
//! SIGTERM.

use std::{
    collections::HashSet,
    io::IsTerminal as _,
    path::Path,
    time::{Duration, Instant},
};
use topdown_common::cgroup::CgroupId;

use anyhow::{Context as _, Result};
use tokio::{process::Command, time::interval};
use topdown_common::c2c::C2cRecord;

use crate::{
    attrib::cgroups::CgroupNames,
    c2c::{
        aggregate::C2cBuilder,
        browse::{self, LineView},
        lines::C2cData,
        options::ReportOptions,
        pareto, rank,
    },
    cli::{C2cLiveArgs, StoreFilter},
    collect::c2c::{C2cCollector, C2cCounts},
    perf_file::{
        contents::{MemSample, PerfData, SampleSink as _},
        host,
    },
    pmu::{
        memory_events::{self, Rate},
        sysfs::SysRoot,
    },
    preflight,
    session::{Session, Wake},
    tui::{
        c2c::{C2cBrowser, C2cScreenful},
        state::{Action, Key},
    },
};

/// How often forwarded samples are moved out of the ring buffer.
const DRAIN: Duration = Duration::from_millis(100);
/// Ring buffer for forwarded samples.
const RING_BYTES: u32 = 16 << 20;
/// Kernel addresses start here on x86-64 and arm64.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// Redraw period of the live view.
const REDRAW: Duration = Duration::from_secs(1);
/// Lines in the live view (the hottest; only their code is symbolized).
const HOTTEST: usize = 100;

/// What the live browser shows: a title, a status line (what was classified and forwarded
/// so far, and the losses), and the hottest lines of the forwarded samples.
struct LiveScreen {
    title: String,
    status: String,
    lines: Vec<LineView>,
}

impl LiveScreen {
    fn of(
        data: &C2cData,
        recording: &PerfData,
        options: ReportOptions,
        counts: &C2cCounts,
        elapsed: Duration,
    ) -> Self {
        let ranking = rank::rank(data, options);
        let pareto = pareto::lines_top(data, &ranking, recording, options, HOTTEST);
        Self {
            title: format!(
                "topdown-bpf c2c: recording {:.0} s, the {HOTTEST} hottest lines so far (q stops \
                 and prints the report)",
                elapsed.as_secs_f64()
            ),
            status: format!(
                "{} samples classified, {} forwarded; losses: ring buffer full {}, unreadable {}",
                counts.stats.nr_entries, counts.forwarded, counts.ring_full, counts.read_errors
            ),
            lines: browse::lines(&pareto, ranking.total, options),
        }
    }

    fn draw(&self, browser: &mut C2cBrowser) -> Result<()> {
        browser.draw(&C2cScreenful {
            title: &self.title,
            status: &self.status,
            lines: &self.lines,
        })
    }
}

/// The browser's next key; never, without a browser.
async fn next_key(browser: &mut Option<C2cBrowser>) -> Key {
    match browser {
        Some(browser) => browser.key().await,
        None => std::future::pending().await,
    }
}

/// A finished live recording: the forwarded samples aggregated as they came, the recording
/// (mappings, names, topology; the samples themselves only when kept), and the kernel's counts
/// of every sample.
pub struct LiveRecording {
    /// The mappings and topology needed to name the samples, and the samples when kept.
    pub recording: PerfData,
    /// The forwarded samples, classified and grouped as the report options say.
    pub data: C2cData,
    /// Every sample, classified in the kernel, and the losses.
    pub counts: C2cCounts,
    /// How long it recorded.
    pub seconds: f64,
}

/// Records as `args` say, aggregating the samples as they come (as `c2c report` aggregates a
/// file: `options` group and classify them), showing them in the browser when `view` and
/// stdout is a terminal, and keeping them in the recording when `keep_samples` (to be written).
pub fn record(
    sys: &SysRoot,
    args: &C2cLiveArgs,
    view: bool,
    options: ReportOptions,
    keep_samples: bool,
) -> Result<LiveRecording> {
    let events = memory_events::choose(
        sys,
        args.event.as_deref(),
        args.threshold,
        Rate::Frequency(args.freq),
    )?;
    preflight::check()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let mut collector = C2cCollector::start(
            &events,
            args.threshold,
            RING_BYTES,
            args.stores == StoreFilter::Contended,
        )?;
        let started = Instant::now();
        let child = match args.command_line.split_first() {
            Some((program, rest)) => Some(
                Command::new(program)
                    .args(rest)
                    .spawn()
                    .with_context(|| format!("cannot run `{program}`"))?,
            ),
            None => None,
        };
        let devices = sys.path("sys/devices");
        let mut live = Gathered::new(&args.pids, &devices, options, keep_samples);
        let mut session = Session::new(started, DRAIN, args.duration)?;
        if let Some(child) = child {
            session.watch(child);
        }
        // A terminal gets the browser over the hottest lines so far, redrawn every second.
        let mut browser = if view && std::io::stdout().is_terminal() {
            Some(C2cBrowser::open()?)
        } else {
            None
        };
        let mut shown: Option<LiveScreen> = None;
        let mut redraw = interval(REDRAW);
        loop {
            tokio::select! {
                wake = session.wake() => match wake {
                    Wake::Tick => live.take(collector.drain()),
                    Wake::CommandExited(status) => {
                        log::info!("command exited: {status:?}");
                        break;
                    }
                    Wake::Deadline | Wake::Signal(_) => break,
                },
                _ = redraw.tick(), if browser.is_some() => {
                    let data = live.builder.snapshot();
                    let counts = collector.counts()?;
                    let screen =
                        LiveScreen::of(&data, &live.recording, options, &counts, started.elapsed());
                    if let Some(browser) = browser.as_mut() {
                        screen.draw(browser)?;
                    }
                    shown = Some(screen);
                }
                key = next_key(&mut browser) => {
                    let Some(open) = browser.as_mut() else { continue };
                    match open.state.on_key(key) {
                        Action::Quit => break,
                        Action::Redraw | Action::Seek => {
                            if let Some(screen) = &shown {
                                screen.draw(open)?;
                            }
                        }
                        Action::None => {}
                    }
                }
            }
        }
        // The terminal is restored before the report is printed.
        drop(browser);
        live.take(collector.drain());
        let counts = collector.counts()?;
        let (recording, data) = live.finish(events.iter().map(|e| e.name.clone()).collect());
        Ok(LiveRecording {
            recording,
            data,
            counts,
            seconds: started.elapsed().as_secs_f64(),
        })
    })
}

/// Forwarded samples aggregated so far, and the mappings of their processes.
struct Gathered {
    recording: PerfData,
    builder: C2cBuilder,
    keep_samples: bool,
    only: HashSet<u32>,
    seen: HashSet<u32>,
    cgroups: HashSet<u64>,
    forwarded: u64,
}

impl Gathered {
    /// For the processes `pids` (all when empty), on the machine whose devices are at `devices`.
    fn new(pids: &[u32], devices: &Path, options: ReportOptions, keep_samples: bool) -> Self {
        // The topology first: the aggregation counts samples per NUMA node from the start.
        let recording = PerfData {
            numa_cpus: host::numa_cpus(devices),
            memory: host::memory_topology(devices),
            ..PerfData::default()
        };
        Self {
            builder: C2cBuilder::new(&recording, options),
            recording,
            keep_samples,
            only: pids.iter().copied().collect(),
            seen: HashSet::new(),
            cgroups: HashSet::new(),
            forwarded: 0,
        }
    }

    /// Aggregates `records` (those of the asked processes), reading each new process's
    /// mappings while it still runs.
    fn take(&mut self, records: Vec<C2cRecord>) {
        for record in records {
            if !self.only.is_empty() && !self.only.contains(&record.pid) {
                continue;
            }
            if self.seen.insert(record.pid) {
                self.recording
                    .mappings
                    .insert(record.pid, host::mappings(record.pid).into_iter().collect());
            }
            self.recording
                .comms
                .entry(record.tid)
                .or_insert_with(|| host::comm(record.pid, record.tid));
            self.cgroups.insert(record.cgroup_id);
            let sample = MemSample {
                pid: record.pid,
                tid: record.tid,
                cpu: record.cpu,
                ip: record.ip,
                addr: record.addr,
                data_src: record.data_src,
                weight: record.weight,
                phys_addr: record.phys_addr,
                time: self.forwarded,
                cgroup: record.cgroup_id,
                kernel: record.ip >= KERNEL_START,
            };
            self.forwarded += 1;
            self.builder.add(&self.recording, &sample);
            if self.keep_samples {
                self.recording.samples.push(sample);
            }
        }
    }

    fn finish(mut self, events: Vec<String>) -> (PerfData, C2cData) {
        let mut names = CgroupNames::host();
        for id in self.cgroups {
            self.recording
                .cgroups
                .insert(id, names.name(CgroupId(id)).to_string());
        }
        self.recording.events = events;
        (self.recording, self.builder.finish())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn c2c_args(argv: &[&str]) -> C2cLiveArgs {
        match Cli::try_parse_from(argv).unwrap().command {
            Some(Command::C2c(args)) => args.live,
            _ => panic!("not c2c"),
        }
    }

    #[test]
    fn the_live_browser_shows_the_hottest_lines_and_the_losses() {
        let mut src = topdown_common::data_src::DataSrc::decode(0);
        src.op = topdown_common::data_src::op::LOAD;
        src.lvl = topdown_common::data_src::lvl::HIT | topdown_common::data_src::lvl::L3;
        src.snoop = topdown_common::data_src::snoop::HITM;
        let devices = tempfile::tempdir().unwrap();
        let mut gathered = Gathered::new(&[], devices.path(), ReportOptions::default(), false);
        let record = |addr| C2cRecord {
            pid: 1,
            tid: 1,
            addr,
            ip: 0x401000,
            data_src: src.encode(),
            weight: 200,
            ..C2cRecord::default()
        };
        // 13 hot lines, the one at 0x7000 hottest.
        let mut records: Vec<C2cRecord> = (0..12).map(|i| record(0x1000 + i * 64)).collect();
        records.extend([record(0x7000), record(0x7008)]);
        gathered.take(records);
        let counts = C2cCounts {
            forwarded: 14,
            ring_full: 3,
            ..C2cCounts::default()
        };
        let data = gathered.builder.snapshot();
        assert!(
            gathered.recording.samples.is_empty(),
            "samples kept only to be written"
        );
        let options = ReportOptions::default();
        let screen = LiveScreen::of(&data, &gathered.recording, options, &counts, Duration::ZERO);
        assert!(
            screen
                .status
                .contains("14 forwarded; losses: ring buffer full 3"),
            "{}",
            screen.status
        );
        assert_eq!(screen.lines.len(), 13, "every hot line (at most {HOTTEST})");
        assert_eq!(screen.lines[0].address, 0x7000, "the hottest first");
        assert_eq!(screen.lines[0].contended[0], 2);
        assert_eq!(screen.lines[0].entries.len(), 2, "offsets 0 and 8");
    }

    #[test]
    fn without_a_memory_sampling_pmu_it_says_so_and_where_to_go() {
        let error = record(
            &SysRoot::fixture("vm-no-pmu"),
            &c2c_args(&["t", "c2c"]),
            false,
            ReportOptions::default(),
            false,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            error.contains("no memory-sampling PMU") && error.contains("c2c report -i"),
            "{error}"
        );
        let error = record(
            &SysRoot::fixture("vm-no-pmu"),
            &c2c_args(&["t", "c2c", "-e", "cycles"]),
            false,
            ReportOptions::default(),
            false,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(error.contains("cpu-clock"), "{error}");
    }
}
