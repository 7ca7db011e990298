//! `topdown-bpf c2c ...`: what each subcommand does with its arguments.

use anyhow::{Result, bail};

use super::{lines::C2cData, perf_data, stats_report};
use crate::cli::{C2cArgs, C2cCommand};

/// Runs a `c2c` subcommand.
pub fn run(args: &C2cArgs) -> Result<()> {
    match &args.command {
        C2cCommand::Report(report) => {
            if !report.stats {
                bail!(
                    "only `c2c report --stats` is built so far; the cache line tables come next \
                     (use `perf c2c report` for them meanwhile)"
                );
            }
            let recording = perf_data::read(&report.input)?;
            let data = C2cData::from_recording(&recording, 64);
            print!("{}", stats_report::render(&data, &recording.events));
            Ok(())
        }
    }
}
