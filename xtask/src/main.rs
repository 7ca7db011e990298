//! `cargo xtask`: the build and privilege plumbing, so that one command runs the tool and one
//! runs the tests on a fresh machine.
//!
//! - `build-ebpf`: builds the BPF object (installing bpf-linker and its LLVM when missing).
//! - `run -- ARGS`: builds everything and runs `topdown-bpf ARGS` (through sudo when not root).
//! - `test`: builds everything and runs the whole test suite.
//! - `bench [collector|switch-instructions|c2c-report|churn|cgroup-reads|model-step|
//!   interval-cost|scale|store|busy]`: the benchmarks (see BENCHMARKS.md).
//! - `fuzz [TARGET] [--seconds N] [--dev]`: the fuzz targets in `fuzz/` (cargo-fuzz, libFuzzer).
//! - `install [--prefix DIR]`: the binary, its man pages and shell completions.

mod apt;
mod build;
mod deps;
mod dist;
mod dist_checks;
mod fuzz;
mod guest;
mod install;
mod parallel;

use std::{
    env,
    ffi::OsString,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, ExitCode, Stdio},
};

use anyhow::{Context as _, Result, bail};
use build::Arch;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build the BPF object (target/bpfel-unknown-none/release/topdown-ebpf; for aarch64
    /// target/ebpf-aarch64/bpfel-unknown-none/release/topdown-ebpf).
    BuildEbpf {
        /// The architecture the object will run on.
        #[arg(long, value_enum, default_value_t = Arch::X86_64)]
        arch: Arch,
    },
    /// Build topdown-bpf with its BPF object embedded (for aarch64: a static binary in
    /// target/aarch64-unknown-linux-gnu/{debug,release}/topdown-bpf).
    Build {
        /// The optimised build.
        #[arg(long)]
        release: bool,
        /// The architecture to build for.
        #[arg(long, value_enum, default_value_t = Arch::X86_64)]
        arch: Arch,
    },
    /// Build everything and run topdown-bpf with ARGS (through sudo when not root).
    Run {
        /// Build the optimised binary.
        #[arg(long, default_value_t = true)]
        release: bool,
        /// Arguments for topdown-bpf.
        #[arg(last = true)]
        args: Vec<OsString>,
    },
    /// Build everything and run the whole test suite (root-only tests skip loudly otherwise):
    /// the host's tests, the fuzz targets, and the emulated arm64 PMU suite.
    Test {
        /// Extra arguments for `cargo test`.
        #[arg(last = true)]
        args: Vec<OsString>,
    },
    /// Only the guests: the kernel matrix (Debian's 5.10, 6.1 and 6.12 kernels, amd64 and
    /// arm64) and the emulated arm64 PMU suite; boot them and run their tests.
    TestGuest {
        /// Boot only the guests whose names start with this (`exact`, `pmu`, `amd64`,
        /// `amd64-6.1`, `arm64-5.10`, ...).
        #[arg(long)]
        suite: Option<String>,
        /// Run only the tests whose names contain FILTER.
        filter: Option<String>,
    },
    /// Run a benchmark (writes a Markdown table to stdout; see BENCHMARKS.md).
    Bench {
        /// Which: the collector's cost at context switches (needs root), `c2c report` on a
        /// generated perf.data of a million samples against `perf c2c report`, thread churn
        /// alone, under topdown-bpf and under perf stat (needs root), or counter reads per
        /// switch for two containers (needs root and cgroup2).
        #[arg(value_enum, default_value_t = Bench::Collector)]
        which: Bench,
        /// Repetitions per configuration.
        #[arg(long, default_value_t = 7)]
        runs: usize,
    },
    /// Make the README's and docs' pictures with the tool itself (needs root): record the test workload,
    /// then `report --screenshot` (the full-screen view) and `plot` into docs/.
    Screenshots,
    /// Run the fuzz targets (all, or one) for N seconds each, with a 2 GB memory limit; new
    /// inputs go to target/fuzz-corpus, findings to fuzz/artifacts.
    Fuzz {
        /// perf_data, perf_stat_csv, event_spec, sysfs_format or http_request (default: all).
        target: Option<String>,
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// The test command's unoptimised build (overflow checks, debug assertions), which
        /// builds in about half the time.
        #[arg(long)]
        dev: bool,
    },
    /// Build what an operator installs into target/dist: for each architecture a tarball
    /// (static binary, man pages, completions, unit, licences) and a .deb, and one multi-arch
    /// OCI image layout (`skopeo copy oci-archive:...` pushes it).
    Dist {
        /// Only this architecture (default: x86_64 and aarch64).
        #[arg(long, value_enum)]
        arch: Option<Arch>,
        /// Build the amd64 artefacts and try them as an operator would (as `cargo xtask test`
        /// does): install the .deb into a root of its own, run it, verify the unit, lintian,
        /// skopeo.
        #[arg(long, conflicts_with = "arch")]
        check: bool,
    },
    /// Build topdown-bpf and install it with its man pages (share/man/man1) and bash, zsh and
    /// fish completions under PREFIX.
    Install {
        /// Where to install: PREFIX/bin, PREFIX/share/man/man1, PREFIX/share/...completions.
        #[arg(long, value_name = "PREFIX", default_value = "/usr/local")]
        prefix: PathBuf,
        /// The unoptimised build (quicker to make).
        #[arg(long)]
        debug: bool,
    },
}

/// Seconds `cargo xtask test` runs each fuzz target (`TOPDOWN_FUZZ_SECONDS` overrides).
const TEST_FUZZ_SECONDS: u64 = 10;

/// The benchmarks `cargo xtask bench` runs.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Bench {
    /// `xtask/bench/collector-cost.sh`.
    Collector,
    /// `xtask/bench/switch-instructions.sh`: the switch program's instructions per run, exact,
    /// in an amd64 guest under `-icount` (`BASELINE=BINARY`: against another build).
    SwitchInstructions,
    /// `xtask/bench/c2c-report.sh`.
    C2cReport,
    /// `xtask/bench/churn.sh`: thread churn alone, under topdown-bpf and under perf stat.
    Churn,
    /// `xtask/bench/cgroup-reads.sh`: counter reads per switch for two containers, every
    /// switch against cgroup switches only.
    CgroupReads,
    /// `topdown-user/benches/model_step.rs`: the model step over a window of 30,000 threads,
    /// with the software set and with a TopDown Level 2 set.
    ModelStep,
    /// `topdown-user/benches/interval_cost.rs`: user space's work per interval after the
    /// kernel's books are read (attributor, rows, JSON) at 30,000 live threads, a fifth running
    /// (`SHAPE=busy`: 20,000 all running, their waits split over culprit threads), and the
    /// run's totals once.
    IntervalCost,
    /// `xtask/bench/scale.sh`: the tool's CPU and memory per interval at 1,000 to 100,000
    /// live threads, the threads the kernel listed as charged read against the whole map
    /// (`BASELINE=BINARY`: and another build); then c2c report at a million and ten million
    /// samples (`C2C=0` leaves it out).
    Scale,
    /// `xtask/bench/store-bytes.sh`: bytes per hour of `record --store` at 100, 1,000 and
    /// 20,000 live threads, at -I 1000 and -I 10000.
    Store,
    /// `xtask/bench/busy.sh`: the tool's CPU on a busy host: 20,000 and 100,000 threads all
    /// running every second (`--json`, the full-screen view, `record`), and 5,000 and 20,000
    /// cgroups with a process each (`serve` scraped every second, `--per-container`)
    /// (`BASELINE=BINARY`: and another build).
    Busy,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let root = workspace_root();
    match cli.command {
        Task::BuildEbpf { arch } => build::ebpf(&root, arch).map(|_| ()),
        Task::Build { release, arch } => {
            let binary = build::user(&root, build::Profile::chosen(release), arch)?;
            println!("xtask: built {}", binary.display());
            Ok(())
        }
        Task::TestGuest { suite, filter } => {
            let (passed, failed) = guest::run_suite(&root, suite.as_deref(), filter.as_deref())?;
            println!("\ntests: {passed} passed, {failed} failed");
            if failed > 0 {
                bail!("the guests' suites failed (their output is above)");
            }
            Ok(())
        }
        Task::Run { release, args } => {
            let binary = build::user(&root, build::Profile::chosen(release), Arch::X86_64)?;
            exec_privileged(&binary, &args)
        }
        Task::Test { args } => test(&root, &args),
        Task::Fuzz {
            target,
            seconds,
            dev,
        } => fuzz_task(&root, target.as_deref(), seconds, dev),
        Task::Screenshots => screenshots(&root),
        Task::Dist { check: true, .. } => {
            let (_, failed) = dist_checks::print(&dist_checks::run(&root));
            if failed > 0 {
                bail!("the packages' checks failed");
            }
            Ok(())
        }
        Task::Dist { arch, .. } => {
            let arches = match arch {
                Some(arch) => vec![arch],
                None => vec![Arch::X86_64, Arch::Aarch64],
            };
            for path in dist::dist(&root, &arches)? {
                println!("xtask: wrote {}", path.display());
            }
            Ok(())
        }
        Task::Install { prefix, debug } => {
            for path in install::install(&root, &prefix, debug)? {
                println!("xtask: installed {}", path.display());
            }
            Ok(())
        }
        Task::Bench { which, runs } => bench(&root, which, runs),
    }
}

/// `cargo xtask test`: the host's tests, the fuzz targets, every guest's suites and the
/// packages' checks, with one closing line over all of them.
fn test(root: &Path, args: &[std::ffi::OsString]) -> Result<()> {
    let started = std::time::Instant::now();
    warn_if_disk_short(root);
    build::user(root, build::Profile::Dev, Arch::X86_64)?;
    deps::offer_test_tools();
    let perf612 = deps::offer_perf_6_12(&root.join("target/perf612"));
    let object = Arch::X86_64.ebpf_object(root);
    let mut test = cargo();
    if let Some(dir) = perf612 {
        test.env("TOPDOWN_PERF612_DIR", dir);
    }
    let mut child = test
        .current_dir(root)
        .arg("test")
        .args(args)
        .env("TOPDOWN_EBPF_OBJ", &object)
        .env("TOPDOWN_BPF_BIN", root.join("target/debug/topdown-bpf"))
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test")?;
    let (mut passed, mut failed) = (0u64, 0u64);
    let stdout = child.stdout.take().context("cargo test's output")?;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test's output")?;
        println!("{line}");
        if let Some(result) = line.strip_prefix("test result: ") {
            passed += count_before(result, " passed");
            failed += count_before(result, " failed");
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    let host_done = started.elapsed();
    let seconds = env::var("TOPDOWN_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(TEST_FUZZ_SECONDS);
    let results = fuzz::run(root, &fuzz::TARGETS, seconds, fuzz::Build::Checked)?;
    let fuzz_done = started.elapsed();
    // The emulated arm64 PMU: its tests' verdicts count with the host's; a guest that
    // could not be booted or did not finish is one failure.
    let guest = guest::run_suite(root, None, None).unwrap_or_else(|error| {
        eprintln!("xtask: the emulated arm64 suite failed: {error:#}");
        (0, 1)
    });
    passed += guest.0;
    failed += guest.1;
    let guests_done = started.elapsed();
    // The packages, installed and run as an operator would.
    let packaged = dist_checks::run(root);
    let (p, f) = dist_checks::print(&packaged);
    passed += p;
    failed += f;
    for (target, outcome) in &results {
        let ok = *outcome == fuzz::Outcome::NothingFound;
        println!(
            "fuzz {target} for {seconds} s ... {}",
            if ok { "ok" } else { "FAILED" }
        );
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    let all = started.elapsed();
    println!(
        "xtask: builds and host tests {:.0} s, fuzzing {:.0} s, guests {:.0} s, \
         packages {:.0} s",
        host_done.as_secs_f64(),
        (fuzz_done - host_done).as_secs_f64(),
        (guests_done - fuzz_done).as_secs_f64(),
        (all - guests_done).as_secs_f64()
    );
    // One closing line over every test binary (cargo's own last line is the doc tests')
    // and every fuzz target.
    println!("\ntests: {passed} passed, {failed} failed");
    check(status, "cargo test")?;
    fuzz::verdict(&results)?;
    if guest.1 > 0 {
        bail!("the guests' suites failed (their output is above)");
    }
    if f > 0 {
        bail!("the packages' checks failed (their lines are above)");
    }
    Ok(())
}

/// `cargo xtask fuzz`: one target (or all) for `seconds` each, optimised unless `dev`.
fn fuzz_task(root: &Path, target: Option<&str>, seconds: u64, dev: bool) -> Result<()> {
    let targets: Vec<&str> = match target {
        None => fuzz::TARGETS.to_vec(),
        Some(name) if fuzz::TARGETS.contains(&name) => vec![name],
        Some(name) => bail!(
            "no fuzz target `{name}`: one of {}",
            fuzz::TARGETS.join(", ")
        ),
    };
    let build = if dev {
        fuzz::Build::Checked
    } else {
        fuzz::Build::Optimised
    };
    let results = fuzz::run(root, &targets, seconds, build)?;
    for (target, outcome) in &results {
        println!(
            "fuzz {target}: {}",
            match outcome {
                fuzz::Outcome::NothingFound => "nothing found",
                fuzz::Outcome::Found => "FOUND (see fuzz/artifacts)",
                fuzz::Outcome::DidNotBuild => "DID NOT BUILD (see target/fuzz-logs/build.log)",
            }
        );
    }
    fuzz::verdict(&results)
}

/// `cargo xtask bench`: one benchmark, `runs` repetitions per configuration where it takes
/// them.
fn bench(root: &Path, which: Bench, runs: usize) -> Result<()> {
    let script = match which {
        Bench::Collector => "xtask/bench/collector-cost.sh",
        Bench::SwitchInstructions => "xtask/bench/switch-instructions.sh",
        Bench::C2cReport => "xtask/bench/c2c-report.sh",
        Bench::Churn => "xtask/bench/churn.sh",
        Bench::CgroupReads => "xtask/bench/cgroup-reads.sh",
        Bench::Scale => "xtask/bench/scale.sh",
        Bench::Store => "xtask/bench/store-bytes.sh",
        Bench::Busy => "xtask/bench/busy.sh",
        Bench::ModelStep | Bench::IntervalCost => {
            let bench = if which == Bench::ModelStep {
                "model_step"
            } else {
                "interval_cost"
            };
            let status = Command::new("cargo")
                .current_dir(root)
                .args(["bench", "-p", "topdown-user", "--bench", bench])
                .status()
                .context("running cargo bench")?;
            return check(status, "the benchmark");
        }
    };
    let binary = build::user(root, build::Profile::Release, Arch::X86_64)?;
    deps::ensure_bench_tools()?;
    let status = Command::new("bash")
        .arg(root.join(script))
        .arg(&binary)
        .arg(runs.to_string())
        .status()
        .context("running the benchmark script")?;
    check(status, "the benchmark")
}

/// Records the test workload for eight seconds and draws docs/view.png (the full-screen view,
/// as a tree) and docs/plot.png (%CPU per thread) from the recording.
fn screenshots(root: &Path) -> Result<()> {
    let binary = build::user(root, build::Profile::Release, Arch::X86_64)?;
    deps::ensure_debian_packages(&["fonts-dejavu-core"])?;
    let built = cargo()
        .current_dir(root)
        .args(["build", "-p", "topdown-tests", "--bin", "workload"])
        .status()
        .context("building the workload")?;
    check(built, "building the workload")?;
    let docs = root.join("docs");
    std::fs::create_dir_all(&docs).context("creating docs/")?;
    let recording = root.join("target/screenshots.rec");
    let run = |args: &[&std::ffi::OsStr], what: &str| -> Result<()> {
        let status = Command::new(&binary)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .with_context(|| format!("running topdown-bpf {what}"))?;
        check(status, what)
    };
    let workload = root.join("target/debug/workload");
    run(
        &[
            "record".as_ref(),
            "-o".as_ref(),
            recording.as_os_str(),
            "-I".as_ref(),
            "250".as_ref(),
            "--".as_ref(),
            workload.as_os_str(),
            "--run-ms".as_ref(),
            "8000".as_ref(),
            "--churn".as_ref(),
            "40".as_ref(),
            "--no-wait".as_ref(),
        ],
        "record",
    )?;
    let view = docs.join("view.png");
    run(
        &[
            "report".as_ref(),
            "-i".as_ref(),
            recording.as_os_str(),
            "--screenshot".as_ref(),
            view.as_os_str(),
            "--size".as_ref(),
            "110x22".as_ref(),
            "--keys".as_ref(),
            "t[[".as_ref(),
        ],
        "report --screenshot",
    )?;
    let plot = docs.join("plot.png");
    run(
        &[
            "plot".as_ref(),
            "-i".as_ref(),
            recording.as_os_str(),
            "-o".as_ref(),
            plot.as_os_str(),
            "--top".as_ref(),
            "6".as_ref(),
        ],
        "plot",
    )?;
    println!("xtask: wrote {} and {}", view.display(), plot.display());
    Ok(())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// A cargo command (the one running this xtask). In CI (`CI` set), without incremental
/// compilation: a fresh clone builds once, and the incremental caches are gigabytes.
fn cargo() -> Command {
    let mut command = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    if env::var_os("CI").is_some_and(|ci| !ci.is_empty() && ci != "false") {
        command.env("CARGO_INCREMENTAL", "0");
    }
    command
}

/// What a fresh clone's whole suite writes under target/ (host and arm64 builds, BPF objects,
/// fuzz builds, the guest's kernel), with room to spare: measured in docs/development.md.
const SUITE_DISK_GIB: u64 = 12;

/// Says so, before hours of building, when target/'s filesystem has less room than the suite
/// needs (a full disk fails the build deep inside a linker).
fn warn_if_disk_short(root: &Path) {
    let Ok(output) = Command::new("df").arg("-Pk").arg(root).output() else {
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let free_kib = text
        .lines()
        .nth(1)
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|field| field.parse::<u64>().ok());
    if let Some(free_gib) = free_kib.map(|kib| kib >> 20)
        && free_gib < SUITE_DISK_GIB
    {
        eprintln!(
            "xtask: warning: {free_gib} GiB free under {}; the whole suite needs about \
             {SUITE_DISK_GIB} GiB (free some, or `cargo clean`)",
            root.display()
        );
    }
}

fn exec_privileged(binary: &Path, args: &[OsString]) -> Result<()> {
    let mut command = if deps::is_root() {
        Command::new(binary)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg("--preserve-env=RUST_LOG").arg(binary);
        sudo
    };
    let status = command
        .args(args)
        .status()
        .with_context(|| format!("starting {}", binary.display()))?;
    match status.code() {
        Some(0) => Ok(()),
        // topdown-bpf already printed its one-line error.
        Some(code) => std::process::exit(code),
        None => bail!("topdown-bpf was killed by a signal"),
    }
}

/// The number just before `label` in a `test result:` line (`ok. 12 passed; 0 failed; ...`).
fn count_before(result: &str, label: &str) -> u64 {
    result
        .split(';')
        .find_map(|part| {
            part.trim()
                .trim_start_matches("ok. ")
                .trim_start_matches("FAILED. ")
                .strip_suffix(label.trim())
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// An error naming `what` when `status` is a failure.
fn check(status: std::process::ExitStatus, what: &str) -> Result<()> {
    if status.success() {
        Ok(())
    } else {
        bail!("{what} failed ({status})")
    }
}

#[cfg(test)]
mod tests {
    use super::count_before;

    #[test]
    fn reads_cargo_test_result_lines() {
        let line =
            "ok. 12 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s";
        assert_eq!(count_before(line, " passed"), 12);
        assert_eq!(count_before(line, " failed"), 3);
        assert_eq!(
            count_before("FAILED. 1 passed; 2 failed; 0 ignored", " failed"),
            2
        );
    }
}
