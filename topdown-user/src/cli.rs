//! Command-line definitions (clap). Dispatch lives in `main.rs`, the work in `crate::commands`.

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::c2c::options::C2cDisplay;

/// Counters and TopDown per thread, charged in the kernel at every context switch.
///
/// With no target, every thread on the machine is reported. The first line says which counter
/// set is live and why (e.g. no hardware PMU: software counters only).
#[derive(Debug, Parser)]
#[command(name = "topdown-bpf", version, after_help = AFTER_HELP, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// A subcommand; without one, the live per-thread view.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// The live per-thread view's options.
    #[command(flatten)]
    pub stat: StatArgs,

    /// Write the report to FILE instead of standard output, as the run goes (a line or table
    /// at a time: it can be followed). An existing FILE is refused without --force.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Replace FILE (-o) when it exists.
    #[arg(long)]
    pub force: bool,

    /// More diagnostics, including the kernel programs' messages (-v, -vv); or set RUST_LOG.
    /// In reports, also the TopDown nodes under their thresholds.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Take the CPU to be ID, as perf's PERF_CPUID: its model's counter sets open on the core
    /// PMU this machine has (for a CPU not in the table yet, or for tests). ID is a core name
    /// (neoverse-n1, neoverse-v1, neoverse-n2, neoverse-v2, neoverse-v3, neoverse-v3ae,
    /// neoverse-n3), an Arm MIDR (0x00000000410fd490), arm-0x41-0xd49, or GenuineIntel-6-8F.
    #[arg(long, value_name = "ID", env = "TOPDOWN_CPUID", global = true)]
    pub cpuid: Option<String>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// TopDown from `perf stat -x,` output recorded anywhere (like toplev --import).
    Analyze(AnalyzeArgs),
    /// Cache-to-cache (false sharing) analysis.
    C2c(C2cArgs),
    /// Per-cgroup and per-container counters and TopDown for Prometheus (OpenMetrics text to
    /// scrapers that ask for it, the classic Prometheus text otherwise).
    Serve(ServeArgs),
    /// Run as the live view does (same targets, counters and outputs) and also keep every
    /// interval in a file for `report` and `plot`.
    Record(RecordArgs),
    /// Every view of a recording, with the live run's numbers: per thread, cgroup or container;
    /// a table, intervals, JSON, CSV, or the full-screen view with time navigation.
    Report(ReportArgs),
    /// Timelines of a recording as SVG or PNG: %CPU per thread or cgroup, and TopDown Level 1
    /// where it was measured.
    Plot(PlotArgs),
    /// Before and after: two recordings, two time ranges of a store, or one of each, row by
    /// row (threads by name, processes, cgroups, containers), each change tested against the
    /// windows' own variation (Welch's t, Holm-adjusted).
    Diff(DiffArgs),
    /// TopDown fractions from raw `slots` and PERF_METRICS readings a program logged (RDPMC,
    /// as Linux's topdown.txt shows): one reading gives the fractions since the last reset, two
    /// the region between them.
    Decode(DecodeArgs),
    /// Man pages and shell completions, as `cargo xtask install` installs them.
    Generate(GenerateArgs),
    /// What this kernel gives the tool, each verified: its BPF features, every program loaded,
    /// the start-up check (a thread charged its schedstat), the counters. Needs root.
    Check,
}

/// `topdown-bpf generate`.
#[derive(Debug, Args)]
#[command(after_help = GENERATE_HELP)]
pub struct GenerateArgs {
    /// What to write.
    #[command(subcommand)]
    pub what: Generate,
}

/// What `generate` writes.
#[derive(Debug, Subcommand)]
pub enum Generate {
    /// A man page for the tool and one per subcommand (`topdown-bpf-report.1`, ...) in DIR.
    Man {
        /// The folder to write the pages into (made when missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// The completion script for SHELL, on standard output.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

const GENERATE_HELP: &str = "\
Examples:
  topdown-bpf generate man /usr/local/share/man/man1
  topdown-bpf generate completions bash > /usr/share/bash-completion/completions/topdown-bpf
  cargo xtask install --prefix /usr/local     # the binary, its man pages and completions";

/// `topdown-bpf decode`.
#[derive(Debug, Args)]
#[command(after_help = DECODE_HELP)]
pub struct DecodeArgs {
    /// The slots counter of a reading (decimal or 0x hex); give it twice for a region.
    #[arg(long, value_name = "S", value_parser = parse_reading, required = true)]
    pub slots: Vec<u64>,

    /// The PERF_METRICS value of a reading (decimal or 0x hex); as many as --slots.
    #[arg(long, value_name = "M", value_parser = parse_reading, required = true)]
    pub metrics: Vec<u64>,

    /// 1 for Level 1; 2 adds Level 2 (Sapphire Rapids and later).
    #[arg(long, value_name = "LEVEL", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub level: u8,

    /// Bits of the slots counter (the mmap page's pmc_width), for a region whose counter wrapped.
    #[arg(long, value_name = "BITS", default_value_t = 48, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub pmc_width: u32,

    /// One JSON object: perf's metric names to fractions.
    #[arg(long)]
    pub json: bool,
}

const DECODE_HELP: &str = "\
Examples:
  topdown-bpf decode --slots 1000000 --metrics 0x4d336619          # since the last reset
  topdown-bpf decode --slots 1000000 --metrics 0x33194d66 \\
                     --slots 4000000 --metrics 0x32231e8c --json   # the region between them";

/// A counter value: decimal, or hex with 0x.
fn parse_reading(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("`{text}` is not a 64-bit counter value (decimal or 0x hex)"))
}

/// `topdown-bpf record`.
#[derive(Debug, Args)]
#[command(after_help = RECORD_HELP)]
pub struct RecordArgs {
    /// Where to write the recording.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "topdown.rec"
    )]
    pub output: PathBuf,

    /// Also write the rows as Parquet into folder DIR as the run goes: a whole file per
    /// --parquet-windows windows (`read_parquet('DIR/*.parquet')` reads them as one table).
    #[arg(long, value_name = "DIR")]
    pub parquet: Option<PathBuf>,

    /// Replace the recording when it exists.
    #[arg(long)]
    pub force: bool,

    /// Keep the run in an always-on store instead of one file: folder DIR (made 0700 when
    /// missing) of segments an hour long, the oldest removed beyond --keep and --max-size;
    /// `report --store DIR --from -30min` reads any range of it, while it is written too.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["output", "force", "parquet"])]
    pub store: Option<PathBuf>,

    /// With --store: remove segments last written longer ago than SPAN (s, min, h, d, w).
    #[arg(long, value_name = "SPAN", default_value = "7d", value_parser = crate::recording::store::when::span, requires = "store")]
    pub keep: std::time::Duration,

    /// With --store: keep the store at or under SIZE (K, M, G, T), the oldest segments removed
    /// first.
    #[arg(long, value_name = "SIZE", default_value = "2G", value_parser = crate::recording::store::when::size, requires = "store")]
    pub max_size: u64,

    /// With --store: begin a new segment every SPAN...
    #[arg(long, value_name = "SPAN", default_value = "1h", value_parser = crate::recording::store::when::span, requires = "store")]
    pub segment: std::time::Duration,

    /// ... or once the open one holds SIZE.
    #[arg(long, value_name = "SIZE", default_value = "128M", value_parser = crate::recording::store::when::size, requires = "store")]
    pub segment_size: u64,

    /// With --parquet: windows per Parquet file (a killed run loses at most these, and they
    /// are in the recording).
    #[arg(long, value_name = "N", default_value_t = 60, value_parser = at_least_one, requires = "parquet")]
    pub parquet_windows: usize,

    /// After setup, run as this user (a name, or UID:GID; no supplementary groups), and run
    /// `-- COMMAND` as that user too; every capability is dropped either way.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,

    /// What to measure and show while recording (the live view's options).
    #[command(flatten)]
    pub stat: StatArgs,
}

/// A store's time range to read (`report`, `plot`).
#[derive(Debug, Args)]
pub struct StoreRangeArgs {
    /// Read the store DIR (`record --store DIR`) instead of a recording: the windows that
    /// began from --from to --to.
    #[arg(long, value_name = "DIR", conflicts_with = "input")]
    pub store: Option<PathBuf>,

    /// With --store: from WHEN: `-30min` (back from now), `03:05` (the host's time zone;
    /// yesterday's when still to come), `03:05Z` (UTC), `2026-12-06 03:05`, or RFC 3339
    /// (`2026-12-06T03:05:00+01:00`). Default: the store's oldest window.
    #[arg(
        long,
        value_name = "WHEN",
        requires = "store",
        allow_hyphen_values = true
    )]
    pub from: Option<String>,

    /// With --store: to WHEN, as --from (default: now).
    #[arg(
        long,
        value_name = "WHEN",
        requires = "store",
        allow_hyphen_values = true
    )]
    pub to: Option<String>,
}

/// `topdown-bpf report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The recording to read.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "topdown.rec"
    )]
    pub input: PathBuf,

    /// A store's time range instead of a recording.
    #[command(flatten)]
    pub range: StoreRangeArgs,

    /// One row per thread (the default).
    #[arg(long, conflicts_with_all = ["per_cgroup", "per_container"])]
    pub per_thread: bool,

    /// One row per cgroup.
    #[arg(long, conflicts_with = "per_container")]
    pub per_cgroup: bool,

    /// One row per container, pod, service or user slice.
    #[arg(long)]
    pub per_container: bool,

    /// Only these cgroup subtrees (paths from the cgroup2 root); implies --per-cgroup unless
    /// --per-container is given.
    #[arg(short = 'G', long = "cgroup", value_name = "PATH")]
    pub cgroup: Vec<String>,

    /// A cgroup's row includes its descendants.
    #[arg(long)]
    pub rollup: bool,

    /// One block per MS milliseconds (a multiple of the recording's interval), then the
    /// totals.
    #[arg(short = 'I', long = "interval", value_name = "MS", value_parser = interval_ms)]
    pub interval_ms: Option<u64>,

    /// Show only the first N rows of each block (at least 1).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub top: Option<usize>,

    /// Sort by a value column's key (on_cpu_ns or oncpu, the default; run_delay_ns or wait;
    /// switches, preemptions, ipc, throttled_ns, ...: docs/live.md), bottleneck, tid, pid,
    /// comm, a counter name, or a TopDown node (`tma_backend_bound`, ...).
    #[arg(long, value_name = "FIELD", default_value = "oncpu")]
    pub sort: String,

    /// JSON documents, as the live run's --json writes them.
    #[arg(long, conflicts_with_all = ["csv", "field_separator"])]
    pub json: bool,

    /// Comma-separated values.
    #[arg(long)]
    pub csv: bool,

    /// Separated values with this one-character separator.
    #[arg(short = 'x', long = "field-separator", value_name = "SEP", value_parser = separator)]
    pub field_separator: Option<u8>,

    /// Plain text even on a terminal (no full-screen view).
    #[arg(long)]
    pub stdio: bool,

    /// After each table, whom each row waited behind (as the live view's --neighbours).
    #[arg(long)]
    pub neighbours: bool,

    /// Instead of a report, write the full-screen view as a terminal of --size shows it after
    /// --keys, at the last window, as a picture (.svg or .png).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "csv", "field_separator", "interval_ms", "stdio", "output"])]
    pub screenshot: Option<PathBuf>,

    /// With --screenshot: the terminal's size.
    #[arg(long, value_name = "COLSxROWS", default_value = "120x30", value_parser = terminal_size, requires = "screenshot")]
    pub size: (u16, u16),

    /// With --screenshot: keys pressed first, as typed (`t` tree, `[` a window back, `s` the
    /// next sort column, `v` the next view).
    #[arg(long, value_name = "KEYS", default_value = "", requires = "screenshot")]
    pub keys: String,

    /// Instead of a report, write a timeline in the Trace Event Format (JSON) that
    /// ui.perfetto.dev and chrome://tracing open: a track per thread, counter tracks for %CPU,
    /// switches and each TopDown node.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "csv", "field_separator", "interval_ms", "stdio", "output", "screenshot", "top"])]
    pub trace: Option<PathBuf>,

    /// Instead of a report, write every window's rows (per thread and per cgroup, `kind`
    /// tells them apart) as an Apache Parquet file for DuckDB, Spark or Trino (with --trace,
    /// both in one pass).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "csv", "field_separator", "interval_ms", "stdio", "output", "screenshot", "top"])]
    pub parquet: Option<PathBuf>,

    /// Write the report to FILE instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Replace the -o, --trace, --parquet or --screenshot file when it exists (never the
    /// input).
    #[arg(long)]
    pub force: bool,

    /// Memory the recording's rows may take while read, in MiB (default: half of what the
    /// system has available).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub max_memory: Option<u64>,
}

/// `topdown-bpf diff`.
#[derive(Debug, Args)]
#[command(after_help = DIFF_HELP)]
pub struct DiffArgs {
    /// Before: a recording, or a store's time range `DIR@FROM..TO` (either end may be left
    /// out; times as `report --from`).
    #[arg(value_name = "BEFORE")]
    pub before: String,

    /// After, as BEFORE.
    #[arg(value_name = "AFTER")]
    pub after: String,

    /// Rows per thread, lined up by process and thread name (the default).
    #[arg(long, conflicts_with_all = ["per_process", "per_cgroup", "per_container"])]
    pub per_thread: bool,

    /// Rows per process, by name.
    #[arg(long, conflicts_with_all = ["per_cgroup", "per_container"])]
    pub per_process: bool,

    /// Rows per cgroup, by path.
    #[arg(long, conflicts_with = "per_container")]
    pub per_cgroup: bool,

    /// Rows per container, pod, service or user slice.
    #[arg(long)]
    pub per_container: bool,

    /// One JSON document: every change with its test, the rows of one side only.
    #[arg(long)]
    pub json: bool,

    /// The family-wise error rate: a change is flagged when its Holm-adjusted p-value is
    /// under it.
    #[arg(long, value_name = "P", default_value_t = 0.01, value_parser = probability)]
    pub alpha: f64,

    /// Smallest change flagged, in % of the larger of the two means.
    #[arg(long, value_name = "PERCENT", default_value_t = 5.0, value_parser = percent)]
    pub min_change: f64,

    /// Changes shown that did not stand out, and rows listed per side seen on it only.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// Memory each side's rows may take while read, in MiB (default: half of what the system
    /// has available).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub max_memory: Option<u64>,
}

const DIFF_HELP: &str = "\
Examples:
  topdown-bpf diff before.rec after.rec                     per thread, by process/thread name
  topdown-bpf diff before.rec after.rec --per-container --json
  topdown-bpf diff /var/lib/topdown-bpf/store@-2h..-1h /var/lib/topdown-bpf/store@-1h..
  topdown-bpf diff /var/lib/topdown-bpf/store@03:00..03:10 fixed.rec --per-cgroup";

/// A probability strictly between 0 and 1.
fn probability(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p < 1.0 => Ok(p),
        _ => Err(format!(
            "`{text}`: give a probability between 0 and 1, like 0.01"
        )),
    }
}

/// A percentage from 0 to 100.
fn percent(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("`{text}`: give a percentage from 0 to 100, like 5")),
    }
}

/// `topdown-bpf plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The recording to read.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "topdown.rec"
    )]
    pub input: PathBuf,

    /// A store's time range instead of a recording.
    #[command(flatten)]
    pub range: StoreRangeArgs,

    /// The picture to write: `.svg` or `.png`.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,

    /// Lines per cgroup instead of per thread.
    #[arg(long, conflicts_with = "per_container")]
    pub per_cgroup: bool,

    /// Lines per container, pod, service or user slice.
    #[arg(long)]
    pub per_container: bool,

    /// Lines for the N rows with the most of the metric over the run.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = at_least_one)]
    pub top: usize,

    /// What the lines show: `cpu` (%CPU, the default), any value column of the rows
    /// (`ipc`, `run_delay_ns`, `switches`, and with --per-cgroup `throttled_ns`: the keys the
    /// JSON and CSV use), or a TopDown node the recording measured (`tma_backend_bound`). With
    /// TopDown recorded, a second panel stacks Level 1 over all rows.
    #[arg(long, value_name = "NAME", default_value = "cpu")]
    pub metric: String,

    /// Replace the picture when it exists (never the input).
    #[arg(long)]
    pub force: bool,

    /// Memory the recording's rows may take while read, in MiB (default: half of what the
    /// system has available).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub max_memory: Option<u64>,
}

/// `topdown-bpf serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to serve `/metrics` on (loopback by default).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9464")]
    pub listen: String,

    /// TLS and basic authentication, in the format of Prometheus exporters'
    /// --web.config.file (tls_server_config, basic_auth_users with bcrypt hashes).
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<PathBuf>,

    /// Serve plain HTTP without authentication on an address beyond loopback (a network that
    /// admits only the scraper); without it such a --listen needs --web-config.
    #[arg(long, conflicts_with = "web_config")]
    pub no_auth: bool,

    /// After setup, run as this user (a name, or UID:GID; no supplementary groups); every
    /// capability is dropped either way.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,

    /// How often the kernel's totals are read into the metrics, in milliseconds; TopDown
    /// gauges are over this window.
    /// 100 ms to a day.
    #[arg(short = 'I', long = "interval", value_name = "MS", default_value_t = 5000, value_parser = serve_interval_ms)]
    pub interval_ms: u64,

    /// Seconds a removed cgroup's series stay before they are dropped (0 to a year).
    #[arg(long, value_name = "S", default_value_t = 300.0, value_parser = grace_seconds)]
    pub grace: f64,

    /// At most this many cgroups are exported; more are counted in
    /// `topdown_cgroups_refused_total` (at least 1).
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = at_least_one)]
    pub max_series: usize,

    /// At most this many scrape connections are served at once; more are closed at once and
    /// counted in `topdown_scrape_connections_refused_total` (at least 1).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = at_least_one)]
    pub max_connections: usize,

    /// Stop after S seconds (a millisecond to a year) (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "S", value_parser = duration_seconds)]
    pub duration: Option<f64>,

    /// Also run the c2c filter and export forwarded HITM, peer and store samples per cgroup
    /// (`topdown_cgroup_c2c_samples_total`); needs a memory-sampling PMU, or --c2c-event.
    #[arg(long)]
    pub c2c: bool,

    /// With --c2c: sample this software event instead (`cpu-clock`), to try it without a PMU.
    #[arg(long, value_name = "EVENT", requires = "c2c")]
    pub c2c_event: Option<String>,

    /// With --c2c: load latency threshold in cycles.
    #[arg(long, value_name = "CYCLES", default_value_t = 30)]
    pub threshold: u64,

    /// What to count, where, and how much room the kernel's maps get.
    #[command(flatten)]
    pub counters: CounterArgs,
}

/// `topdown-bpf c2c`: without a subcommand, record live, then report.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct C2cArgs {
    /// What to do; without one, record live.
    #[command(subcommand)]
    pub command: Option<C2cCommand>,

    /// What to record.
    #[command(flatten)]
    pub live: C2cLiveArgs,

    /// How to report.
    #[command(flatten)]
    pub view: C2cViewArgs,
}

/// What a live c2c recording samples, and for how long.
#[derive(Clone, Debug, Args)]
pub struct C2cLiveArgs {
    /// Load latency threshold in cycles (`ldlat`), as `perf c2c record` (default 30).
    #[arg(long, value_name = "CYCLES", default_value_t = 30)]
    pub threshold: u64,

    /// Stop after S seconds (a millisecond to a year) (default: when COMMAND exits, or Ctrl-C).
    #[arg(long, value_name = "S", value_parser = duration_seconds)]
    pub duration: Option<f64>,

    /// Sample this event instead of the machine's memory events: `cpu-clock` or `task-clock`,
    /// to try the live path on a machine without a memory-sampling PMU.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub event: Option<String>,

    /// Samples per second per CPU and event (perf's default, 4000).
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = 4000)]
    pub freq: u64,

    /// Which stores the kernel forwards: all, or only those to lines already seen with a HITM
    /// or peer load (fewer samples; stores before a line's first HITM are not seen).
    #[arg(long, value_enum, default_value_t = StoreFilter::All)]
    pub stores: StoreFilter,

    /// Keep only these processes' samples (the statistics stay machine-wide).
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pids: Vec<u32>,

    /// Run COMMAND and record (machine-wide) until it exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command_line: Vec<String>,
}

/// Which stores the c2c filter forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreFilter {
    /// Every store.
    All,
    /// Stores to lines already seen with a contended load.
    Contended,
}

/// `topdown-bpf c2c` subcommands.
#[derive(Debug, Subcommand)]
pub enum C2cCommand {
    /// Report a recording made by `perf c2c record` or `topdown-bpf c2c record`: perf's
    /// statistics, Shared Data Cache Line Table and Shared Cache Line Distribution Pareto.
    Report(C2cReportArgs),
    /// Record live and save the filtered samples as a perf.data file that `c2c report -i` (ours
    /// or perf's) reads later.
    Record(C2cRecordArgs),
}

/// `topdown-bpf c2c record`.
#[derive(Debug, Args)]
pub struct C2cRecordArgs {
    /// Where to write the recording.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "perf.data"
    )]
    pub output: PathBuf,

    /// Replace FILE when it exists (never through a symbolic link): without it, an existing
    /// FILE is refused before anything is recorded.
    #[arg(long)]
    pub force: bool,

    /// What to record.
    #[command(flatten)]
    pub live: C2cLiveArgs,
}

/// `topdown-bpf c2c report`.
#[derive(Debug, Args)]
pub struct C2cReportArgs {
    /// The perf.data file to read.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "perf.data"
    )]
    pub input: PathBuf,

    /// Show how far the read is on stderr from the start, even when stderr is not a terminal
    /// (by default: on a terminal, once reading has taken half a second).
    #[arg(long)]
    pub progress: bool,

    /// How to report.
    #[command(flatten)]
    pub view: C2cViewArgs,
}

/// How a c2c report is drawn, live or from a file (perf c2c report's options).
#[derive(Clone, Debug, Args)]
pub struct C2cViewArgs {
    /// Print only the statistics (perf's Trace Event and Shared Cache Line Event tables).
    #[arg(long)]
    pub stats: bool,

    /// Plain text output (the default; accepted as perf accepts it).
    #[arg(long)]
    pub stdio: bool,

    /// Rank lines by total, local or remote HITMs, or by peer-cache loads (`perf c2c report -d`).
    #[arg(short = 'd', long, value_enum, default_value_t = C2cDisplay::Tot)]
    pub display: C2cDisplay,

    /// Show every cache line, not only those with at least 0.1 % of the ranked count.
    #[arg(long)]
    pub show_all: bool,

    /// More node information in the Pareto table: -N adds CPU counts and shares per node, -NN
    /// the CPU lists.
    #[arg(short = 'N', long = "node-info", action = ArgAction::Count)]
    pub node_info: u8,

    /// Do not cut symbols at 30 characters.
    #[arg(long)]
    pub full_symbols: bool,

    /// No Source:Line column.
    #[arg(long)]
    pub no_source: bool,

    /// Tell entries of a line apart by these fields besides the offset: pid, tid, iaddr, dso
    /// (comma-separated; default iaddr).
    #[arg(short = 'c', long, value_name = "FIELDS", default_value = "iaddr")]
    pub coalesce: String,

    /// Group by 128-byte lines (two adjacent cache lines), to find false sharing caused by
    /// adjacent-line prefetch (as perf 6.12's --double-cl).
    #[arg(long)]
    pub double_cl: bool,

    /// Two more columns in the Shared Data Cache Line Table: each line's sharing (`false`: the
    /// threads share only the line; `true`: the data moves between them; `mixed`) and the
    /// estimated gain of fixing it (docs/c2c.md: "True or false sharing"). perf's layout otherwise.
    #[arg(long)]
    pub sharing: bool,

    /// Show lines in the order of the estimated gain of fixing them (the 0.1 % display limit
    /// stays perf's).
    #[arg(long)]
    pub by_gain: bool,

    /// One JSON document (`topdown-bpf/c2c/v2`) with the numbers of the four tables, each
    /// line's sharing and gain.
    #[arg(long, conflicts_with_all = ["stats", "per_cgroup", "per_container"])]
    pub json: bool,

    /// Also split each shared cache line by the cgroup of the tasks that touched it (needs a
    /// recording made with `perf c2c record -- --all-cgroups`).
    #[arg(long, conflicts_with_all = ["stats", "per_container"])]
    pub per_cgroup: bool,

    /// Also split each shared cache line by container, pod, service or user slice.
    #[arg(long, conflicts_with = "stats")]
    pub per_container: bool,
}

/// `topdown-bpf analyze`.
#[derive(Debug, Args)]
#[command(after_help = ANALYZE_HELP)]
pub struct AnalyzeArgs {
    /// The `perf stat -x SEP` output to read (`-` for standard input).
    #[arg(value_name = "FILE", required_unless_present = "events")]
    pub file: Option<PathBuf>,

    /// The CPU it was recorded on, perfmon mapfile style (GenuineIntel-6-8F, AuthenticAMD-25-11,
    /// arm-0x41-0xd40); default: this machine's CPU.
    #[arg(long, value_name = "VENDOR-FAMILY-MODEL")]
    pub cpu: Option<String>,

    /// Core PMU on hybrid parts: cpu_core (P-cores, default) or cpu_atom (E-cores).
    #[arg(long, value_name = "PMU", default_value = "cpu_core")]
    pub pmu: String,

    /// The recording had SMT on (Skylake-class: per-core inputs).
    #[arg(long)]
    pub smt: bool,

    /// The recording counted every CPU (`perf stat -a`): perf's `#core_wide`, so Haswell to
    /// Cascade Lake formulas read core-wide clocks instead of estimating them per thread.
    #[arg(short = 'a', long)]
    pub system_wide: bool,

    /// Pipeline slots per cycle, for Arm (`caps/slots`); default: the model's width.
    #[arg(long, value_name = "N")]
    pub slots: Option<u32>,

    /// The recording machine had persistent memory (an ACPI NFIT table): perf's `#has_pmem`,
    /// which Level 3 memory nodes (`tma_dram_bound`, `tma_pmm_bound`) account apart.
    #[arg(long)]
    pub pmem: bool,

    /// TopDown level: 1, 2 (Level 1 and 2) or 3 (and Level 3, where the model has it).
    #[arg(long = "td-level", value_name = "LEVEL", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=3))]
    pub td_level: u8,

    /// With --td-level 3: Level 3 only under these Level 2 nodes, comma-separated (toplev's
    /// drilldown: `--nodes memory_bound,core_bound`), so the set fits the counters.
    #[arg(long, value_name = "NODES", value_delimiter = ',')]
    pub nodes: Vec<String>,

    /// With --events --td-level 3: drill down under the Level 2 nodes over their thresholds in
    /// this Level 2 recording (`perf stat -x` of `--events --td-level 2`), as toplev does.
    #[arg(
        long,
        value_name = "FILE",
        requires = "events",
        conflicts_with = "nodes"
    )]
    pub drilldown: Option<PathBuf>,

    /// Field separator of the file (perf stat -x).
    #[arg(
        short = 'x',
        long = "field-separator",
        value_name = "SEP",
        default_value = ","
    )]
    pub separator: String,

    /// JSON keyed by perf's metric names, values as fractions 0..1.
    #[arg(long)]
    pub json: bool,

    /// Print the `perf stat` command that records what this CPU's model needs at --td-level,
    /// and the `analyze` command for its output with every option given; with --json, the
    /// events as a JSON array of the names perf writes in `-x` output. Then exit.
    #[arg(long)]
    pub events: bool,

    /// Most the input may take, in MiB (default: 1 GiB, or half of what the system has
    /// available when that is less, at least 256 MiB): a longer input is refused, never read
    /// whole.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    pub max_memory: Option<u64>,
}

/// The live per-thread view.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// Report per thread (the default view).
    #[arg(long)]
    pub per_thread: bool,

    /// Print one block per interval of MS milliseconds (like `perf stat -I`).
    /// 10 ms to a day.
    #[arg(short = 'I', long = "interval", value_name = "MS", value_parser = interval_ms)]
    pub interval_ms: Option<u64>,

    /// Stop after S seconds (a millisecond to a year) and print the summary.
    #[arg(long, value_name = "S", value_parser = duration_seconds)]
    pub duration: Option<f64>,

    /// Only these processes (all their threads); comma-separated or repeated.
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',', conflicts_with_all = ["tids", "command"])]
    pub pids: Vec<u32>,

    /// Only these threads; comma-separated or repeated.
    #[arg(
        short = 't',
        long = "tid",
        value_name = "TID",
        value_delimiter = ',',
        conflicts_with = "command"
    )]
    pub tids: Vec<u32>,

    /// Show only the first N threads of each block (at least 1).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub top: Option<usize>,

    /// Every thread that exited in an interval on its own row. By default the hottest 500
    /// (or --top N) do and the rest fold into one row per process, as in the run's totals,
    /// so thread churn cannot flood interval output or a recording.
    #[arg(long)]
    pub every_exit: bool,

    /// Sort by a value column's key (on_cpu_ns or oncpu, the default; run_delay_ns or wait;
    /// switches, preemptions, ipc, throttled_ns, ...: docs/live.md), bottleneck, tid, pid,
    /// comm, a counter name, or a TopDown node (`tma_backend_bound`, ...).
    #[arg(long, value_name = "FIELD", default_value = "oncpu")]
    pub sort: String,

    /// One JSON document per interval (with -I) and a final one, one per line.
    #[arg(long, conflicts_with_all = ["csv", "field_separator"])]
    pub json: bool,

    /// Comma-separated values.
    #[arg(long)]
    pub csv: bool,

    /// Separated values with this one-character separator (like `perf stat -x`).
    #[arg(short = 'x', long = "field-separator", value_name = "SEP", value_parser = separator)]
    pub field_separator: Option<u8>,

    /// Report per physical core instead of per thread (counters summed over each core's CPUs,
    /// like `perf stat --per-core -a`): the honest TopDown where inputs count per core
    /// (Skylake-class with SMT on).
    #[arg(long, conflicts_with_all = ["pids", "tids", "command", "per_thread", "csv", "field_separator", "cpus"])]
    pub per_core: bool,

    /// What to count, where, and how much room the kernel's maps get.
    #[command(flatten)]
    pub counters: CounterArgs,

    /// With --td-level 3: count Level 2 on every CPU for a second first, and measure Level 3
    /// under the Level 2 nodes over their thresholds (toplev's drilldown, chosen once).
    #[arg(long, conflicts_with = "nodes")]
    pub drilldown: bool,

    /// The cgroup options.
    #[command(flatten)]
    pub cgroups: CgroupArgs,

    /// After each table, whom each row waited behind: for every row that waited, the threads'
    /// cgroups (or containers) that held its CPU meanwhile, the top 3 with their time and
    /// share of its wait, then the rest, idle and unattributed.
    #[arg(long, conflicts_with = "no_neighbours")]
    pub neighbours: bool,

    /// Run COMMAND and report its threads (and its child processes'), exited ones included.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What the live view, `record` and `serve` count, where, and the kernel maps' room.
#[derive(Debug, Args)]
pub struct CounterArgs {
    /// Also count these events (repeatable, or comma-separated): perf syntax
    /// (`cpu/event=0xc2,umask=0x2,cmask=1,inv/u`, `msr/tsc/`), raw (`r01c2`), perf's generic and
    /// software names, the CPU's named events (`INT_MISC.UOP_DROPPING:u`) or libpfm4 style
    /// (`INST_RETIRED:ANY_P:c=1:e:i:u:k`); per thread, per cgroup in `serve`.
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub events: Vec<String>,

    /// TopDown down to this level (1, 2 or 3), per thread (per cgroup in `serve`); needs a
    /// hardware PMU.
    #[arg(long = "td-level", value_name = "LEVEL", value_parser = clap::value_parser!(u8).range(1..=3))]
    pub td_level: Option<u8>,

    /// With --td-level 3: Level 3 only under these Level 2 nodes, comma-separated (toplev's
    /// drilldown: `--nodes memory_bound,core_bound`), so the set fits the counters.
    #[arg(long, value_name = "NODES", value_delimiter = ',')]
    pub nodes: Vec<String>,

    /// Capacity of the kernel's live-thread map (1 to 4,194,304, the kernel's most pids)
    /// (default: twice the threads alive at the start, at least 16,384, within threads-max,
    /// pid_max and 1/64 of memory; the first line says when that cuts it short).
    #[arg(long, value_name = "N", value_parser = max_threads)]
    pub max_threads: Option<u32>,

    /// Do not split run-queue waits over whoever held the CPU, nor count preemptions: the
    /// switch program's cost without them (WAIT BEHIND and PREEMPT show `-`; `serve` exports
    /// no `topdown_cgroup_wait_behind_seconds_total` or preemption series).
    #[arg(long)]
    pub no_neighbours: bool,

    /// Count only on these CPUs (`0-3,8`: the kernel's list format). By default every online
    /// CPU but those the kernel keeps apart for latency-critical work (isolcpus, nohz_full):
    /// nothing of ours is opened there and the switch program returns at once; name them here
    /// to count there too.
    #[arg(long, value_name = "LIST", value_parser = cpu_list)]
    pub cpus: Option<CpuList>,
}

/// Charging by cgroup: every slice goes to the cgroup its thread was in at that switch.
#[derive(Clone, Debug, Default, Args)]
pub struct CgroupArgs {
    /// One row per cgroup (every cgroup that ran, no need to list them first).
    #[arg(long, conflicts_with_all = ["per_container", "per_core", "pids", "tids"])]
    pub per_cgroup: bool,

    /// One row per container (docker, containerd, CRI-O, podman), Kubernetes pod, systemd
    /// service or user slice; other cgroups by path.
    #[arg(long, conflicts_with_all = ["per_core", "pids", "tids"])]
    pub per_container: bool,

    /// Only these cgroup subtrees (paths from the cgroup2 root, e.g. `/system.slice`, or under
    /// its mount); repeatable. Implies --per-cgroup unless --per-container is given.
    #[arg(short = 'G', long = "cgroup", value_name = "PATH")]
    pub cgroup: Vec<String>,

    /// A cgroup's row includes its descendants (the hierarchy as the kernel has it).
    #[arg(long)]
    pub rollup: bool,
}

const AFTER_HELP: &str = "\
Examples:
  sudo topdown-bpf --per-thread                      every thread, refreshing
  sudo topdown-bpf -I 1000 -p 1234                   one block per second for pid 1234
  sudo topdown-bpf --duration 5 --json -- make -j2   a command's threads, as JSON
  sudo topdown-bpf --per-container -I 1000           per container, pod and service
  sudo topdown-bpf -G /system.slice --rollup         one subtree, parents include children
  sudo topdown-bpf serve --listen 127.0.0.1:9464     per-cgroup metrics for Prometheus
  topdown-bpf analyze --events --cpu GenuineIntel-6-8F   what to record with perf stat
  topdown-bpf analyze stat.csv --cpu GenuineIntel-6-8F --td-level 2";

const RECORD_HELP: &str = "\
Examples:
  sudo topdown-bpf record -o run.rec --duration 60          every thread for a minute
  sudo topdown-bpf record -o make.rec -I 500 -- make -j2    a command, two windows a second
  sudo topdown-bpf record --store /var/lib/topdown-bpf --per-cgroup -I 10000   always on
then: topdown-bpf report -i run.rec [--per-cgroup] [--json]
      topdown-bpf report --store /var/lib/topdown-bpf --from 03:05 --to 03:20
      topdown-bpf plot -i run.rec -o run.svg";

const ANALYZE_HELP: &str = "\
Record with the command `--events` prints, e.g.
  perf stat -x, -o stat.csv -e '{slots,topdown-retiring,...},INT_MISC.UOP_DROPPING' -a sleep 10
then: topdown-bpf analyze stat.csv --cpu GenuineIntel-6-8F --td-level 2";

/// Longest duration or grace period: a year, in seconds.
const YEAR_S: f64 = 365.0 * 86_400.0;

/// A number of seconds in `min..=YEAR_S`, finite.
fn seconds_in(text: &str, min: f64, what: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{what} is a number of seconds, like 10 or 0.5"))?;
    if !value.is_finite() || value < min || value > YEAR_S {
        return Err(format!(
            "{what} must be from {min} to {YEAR_S} seconds (a year)"
        ));
    }
    Ok(value)
}

/// `--duration`: a millisecond to a year.
fn duration_seconds(text: &str) -> Result<f64, String> {
    seconds_in(text, 0.001, "the duration")
}

/// `--grace`: 0 to a year.
fn grace_seconds(text: &str) -> Result<f64, String> {
    seconds_in(text, 0.0, "the grace period")
}

/// Milliseconds in `min..=max`.
fn millis_in(text: &str, min: u64, max: u64) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(ms) if (min..=max).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "the interval is a whole number of milliseconds from {min} to {max} (a day)"
        )),
    }
}

/// `-I` of the live views: 10 ms to a day.
fn interval_ms(text: &str) -> Result<u64, String> {
    millis_in(text, 10, 86_400_000)
}

/// `-I` of `serve`: 100 ms to a day.
fn serve_interval_ms(text: &str) -> Result<u64, String> {
    millis_in(text, 100, 86_400_000)
}

/// `--size`: `COLUMNSxROWS`, 40x10 to 400x200.
fn terminal_size(text: &str) -> Result<(u16, u16), String> {
    let parsed = text
        .split_once('x')
        .and_then(|(c, r)| Some((c.trim().parse::<u16>().ok()?, r.trim().parse::<u16>().ok()?)));
    match parsed {
        Some((c, r)) if (40..=400).contains(&c) && (10..=200).contains(&r) => Ok((c, r)),
        _ => Err("the size is COLUMNSxROWS, from 40x10 to 400x200, e.g. 120x30".into()),
    }
}

/// `--top`, `--max-series`: a whole number, at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("a whole number, at least 1".into()),
    }
}

/// `--cpus`: CPUs in the kernel's list format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<u32>);

fn cpu_list(text: &str) -> Result<CpuList, String> {
    topdown_c2c::cpus::parse_cpu_list(text)
        .map(CpuList)
        .map_err(|error| format!("{error:#} (a CPU list is like 0-3,8)"))
}

/// `--max-threads`: 1 to the kernel's largest pid count (`PID_MAX_LIMIT`).
fn max_threads(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=4_194_304).contains(&n) => Ok(n),
        _ => Err("the thread map holds 1 to 4194304 threads".into()),
    }
}

/// `-x`: one ASCII character that is not a line break or a quote (fields holding it are
/// quoted, as CSV quotes them).
fn separator(text: &str) -> Result<u8, String> {
    match text.as_bytes() {
        [byte] if byte.is_ascii() && !matches!(byte, b'\n' | b'\r' | b'"') => Ok(*byte),
        _ => Err(
            "the separator is one ASCII character other than a line break or `\"`, \
                  e.g. -x ';'"
                .into(),
        ),
    }
}

#[cfg(test)]
mod value_tests {
    use super::*;

    #[test]
    fn numbers_outside_their_range_are_refused_in_words() {
        for bad in ["1.8e19", "2e19", "1e300", "nan", "inf", "-1", "0", "x", ""] {
            let error = duration_seconds(bad).unwrap_err();
            assert!(error.contains("duration"), "{bad}: {error}");
        }
        assert_eq!(duration_seconds("2.5"), Ok(2.5));
        assert_eq!(duration_seconds(&YEAR_S.to_string()), Ok(YEAR_S));
        for bad in ["-1", "nan", "1e300", "inf"] {
            assert!(grace_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(grace_seconds("0"), Ok(0.0));
        let error = interval_ms("0").unwrap_err();
        assert!(error.contains("from 10 to 86400000"), "{error}");
        assert_eq!(interval_ms("10"), Ok(10));
        assert!(interval_ms("86400001").is_err());
        assert!(serve_interval_ms("99").is_err());
        assert!(at_least_one("0").is_err());
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(max_threads("0").is_err() && max_threads("4194305").is_err());
        assert_eq!(max_threads("16384"), Ok(16384));
        for bad in ["", "\n", "\"", "::", "é"] {
            assert!(separator(bad).is_err(), "{bad:?}");
        }
        assert_eq!(separator(";"), Ok(b';'));
    }

    #[test]
    fn the_parsed_command_line_holds_the_checked_values() {
        use clap::Parser as _;
        let cli = Cli::try_parse_from(["topdown-bpf", "--duration", "1e300"]);
        assert!(cli.is_err());
        let cli = Cli::try_parse_from(["topdown-bpf", "--duration", "2", "--top", "5"]).unwrap();
        assert_eq!(cli.stat.duration, Some(2.0));
        assert_eq!(cli.stat.top, Some(5));
        assert!(Cli::try_parse_from(["topdown-bpf", "serve", "--grace=-1"]).is_err());
        assert!(Cli::try_parse_from(["topdown-bpf", "c2c", "--duration", "2e19"]).is_err());
    }
}
