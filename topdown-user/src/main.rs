//! The `topdown-bpf` binary: parse, dispatch, and turn every error into one line.

use std::process::ExitCode;

use clap::Parser as _;
use topdown_user::{
    cli::{Cli, Command},
    commands::{analyze, c2c, check, decode, diff, generate, plot, report, serve, stat},
    heap,
    pmu::machine,
    privileges,
    recording::store::writer::Retention,
};

fn main() -> ExitCode {
    heap::keep_freed_memory();
    let cli = Cli::parse();
    init_logging(cli.verbose);
    std::panic::set_hook(Box::new(|info| {
        eprintln!("topdown-bpf: internal error: {info} (please report it)");
    }));
    if let Some(id) = &cli.cpuid {
        match machine::parse_forced_cpu(id) {
            Ok(cpu) => machine::force_cpu(cpu),
            Err(error) => return finish(Err(error)),
        }
    }
    match &cli.command {
        Some(Command::Analyze(args)) => return finish(analyze::run(args, cli.verbose > 0)),
        Some(Command::C2c(args)) => return finish(c2c::run(args)),
        Some(Command::Plot(args)) => return finish(plot::run(args)),
        Some(Command::Diff(args)) => return finish(diff::run(args)),
        Some(Command::Decode(args)) => return finish(decode::run(args)),
        Some(Command::Generate(args)) => return finish(generate::run(args)),
        Some(Command::Check) => return finish(check::run()),
        Some(Command::Serve(_) | Command::Record(_) | Command::Report(_)) | None => {}
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("topdown-bpf: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Some(Command::Serve(args)) => finish(runtime.block_on(serve::run(&args))),
        Some(Command::Report(args)) => {
            finish(runtime.block_on(report::run(&args, cli.verbose > 0)))
        }
        Some(Command::Record(args)) => {
            let user = match args.user.as_deref().map(privileges::lookup).transpose() {
                Ok(user) => user,
                Err(error) => return finish(Err(error)),
            };
            let store = args.store.is_some().then_some(Retention {
                keep: args.keep,
                max_bytes: args.max_size,
                segment: args.segment,
                segment_bytes: args.segment_size,
            });
            let to = stat::RecordTo {
                path: args.store.unwrap_or(args.output),
                store,
                parquet: args.parquet,
                parquet_windows: args.parquet_windows,
                user,
                force: args.force,
            };
            let run = stat::run(args.stat, None, false, Some(to), cli.verbose > 0);
            match runtime.block_on(run) {
                Ok(code) => code,
                Err(error) => finish(Err(error)),
            }
        }
        _ => match runtime.block_on(stat::run(
            cli.stat,
            cli.output,
            cli.force,
            None,
            cli.verbose > 0,
        )) {
            Ok(code) => code,
            Err(error) => finish(Err(error)),
        },
    }
}

/// Every error is one line on stderr and exit status 1.
fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("topdown-bpf: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        .init();
}
