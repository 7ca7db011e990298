//! Command-line definitions (clap). Dispatch lives in `main.rs`, the work in [`crate::run`].

use std::path::PathBuf;

use clap::{ArgAction, Parser};

/// Counters and TopDown per thread, charged in the kernel at every context switch.
///
/// With no target, every thread on the machine is reported. The first line says which counter
/// set is live and why (e.g. no hardware PMU: software counters only).
#[derive(Debug, Parser)]
#[command(name = "topdown-bpf", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Report per thread (the default view).
    #[arg(long)]
    pub per_thread: bool,

    /// Print one block per interval of MS milliseconds (like `perf stat -I`).
    #[arg(short = 'I', long = "interval", value_name = "MS", value_parser = clap::value_parser!(u64).range(10..))]
    pub interval_ms: Option<u64>,

    /// Stop after S seconds and print the summary.
    #[arg(long, value_name = "S")]
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

    /// Show only the first N threads of each block.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,

    /// Sort by oncpu (default), switches, tid, pid, comm, or a counter name.
    #[arg(long, value_name = "FIELD", default_value = "oncpu")]
    pub sort: String,

    /// One JSON document per interval (with -I) and a final one, one per line.
    #[arg(long, conflicts_with_all = ["csv", "field_separator"])]
    pub json: bool,

    /// Comma-separated values.
    #[arg(long)]
    pub csv: bool,

    /// Separated values with this separator (like `perf stat -x`).
    #[arg(short = 'x', long = "field-separator", value_name = "SEP")]
    pub field_separator: Option<String>,

    /// Write the report to FILE instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// More diagnostics, including the kernel programs' messages (-v, -vv); or set RUST_LOG.
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,

    /// Capacity of the kernel's live-thread map.
    #[arg(long, value_name = "N", default_value_t = 32768)]
    pub max_threads: u32,

    /// Run COMMAND and report its threads (and its child processes'), exited ones included.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

const AFTER_HELP: &str = "\
Examples:
  sudo topdown-bpf --per-thread                      every thread, refreshing
  sudo topdown-bpf -I 1000 -p 1234                   one block per second for pid 1234
  sudo topdown-bpf --duration 5 --json -- make -j2   a command's threads, as JSON";
