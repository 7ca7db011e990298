//! The fuzz targets in `fuzz/` (cargo-fuzz, libFuzzer): built in one cargo invocation, then run
//! as many at a time as the host has CPUs, each for some seconds with a 2 GB memory limit and
//! 10 s per input. Inputs they find go to target/fuzz-corpus, never into the seeds in
//! fuzz/corpus; findings go to fuzz/artifacts.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Stdio,
    thread,
};

use anyhow::{Context as _, Result, bail};

use crate::{cargo, deps, parallel};

/// The fuzz targets in `fuzz/fuzz_targets`, run by `cargo xtask fuzz` and briefly by
/// `cargo xtask test`.
pub const TARGETS: [&str; 5] = [
    "perf_data",
    "perf_stat_csv",
    "event_spec",
    "sysfs_format",
    "http_request",
];

/// How a fuzz target's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It ran its time and found nothing.
    NothingFound,
    /// libFuzzer stopped on an input (written to fuzz/artifacts).
    Found,
    /// The targets did not compile (cargo-fuzz's log says why): not a finding.
    DidNotBuild,
}

/// How the fuzz targets are built.
#[derive(Clone, Copy)]
pub enum Build {
    /// Optimised (`-O`): many inputs a second, for `cargo xtask fuzz`'s long runs.
    Optimised,
    /// Unoptimised, with overflow checks and debug assertions (`--dev`), for the test command:
    /// it replays the seeds and mutates for seconds, which an optimised build does not repay
    /// (on 2 cores: ~4 min 25 s to build the five targets, against ~8 with `-O`); `perf_data`
    /// runs about 100 inputs a second in it.
    Checked,
}

impl Build {
    fn flag(self) -> &'static str {
        match self {
            Self::Optimised => "-O",
            Self::Checked => "--dev",
        }
    }

    /// Where cargo-fuzz puts the targets' binaries.
    fn out_dir(self, fuzz_dir: &Path) -> PathBuf {
        fuzz_dir
            .join("target/x86_64-unknown-linux-gnu")
            .join(match self {
                Self::Optimised => "release",
                Self::Checked => "debug",
            })
    }
}

/// Builds `targets` (all of them in one cargo invocation where they are every target), then
/// runs each for `seconds`, as many at a time as the host has CPUs; the outcome of each, in
/// the order given.
pub fn run(
    root: &Path,
    targets: &[&str],
    seconds: u64,
    build: Build,
) -> Result<Vec<(String, Outcome)>> {
    deps::ensure_cargo_fuzz()?;
    let fuzz_dir = root.join("fuzz");
    let logs = root.join("target/fuzz-logs");
    fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let built = build_targets(&fuzz_dir, &logs, targets, build)?;
    if !built {
        return Ok(targets
            .iter()
            .map(|t| ((*t).to_owned(), Outcome::DidNotBuild))
            .collect());
    }
    let workers = thread::available_parallelism().map_or(1, usize::from);
    let outcomes = parallel::each(targets.to_vec(), workers, |target| {
        run_target(root, &fuzz_dir, &logs, target, seconds, build)
    })?;
    Ok(targets
        .iter()
        .zip(outcomes)
        .map(|(t, o)| ((*t).to_owned(), o))
        .collect())
}

/// `cargo fuzz build` of `targets` (no target named where they are all of them); whether it
/// built. Its output goes to target/fuzz-logs/build.log, whose end is printed when it fails.
fn build_targets(fuzz_dir: &Path, logs: &Path, targets: &[&str], build: Build) -> Result<bool> {
    let log_path = logs.join("build.log");
    let one = match targets {
        [one] => Some(*one),
        _ if targets.len() == TARGETS.len() => None,
        _ => bail!("fuzz builds one target or all of them"),
    };
    let log =
        fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let status = cargo()
        .current_dir(fuzz_dir)
        .env("PATH", deps::path_with_cargo_bin())
        .args(["fuzz", "build", build.flag()])
        .args(one)
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .context("running cargo fuzz build")?;
    if !status.success() {
        print_tail("build", &log_path);
    }
    Ok(status.success())
}

/// Runs one built target for `seconds` on its seeds and its scratch corpus.
fn run_target(
    root: &Path,
    fuzz_dir: &Path,
    logs: &Path,
    target: &str,
    seconds: u64,
    build: Build,
) -> Result<Outcome> {
    let scratch = root.join("target/fuzz-corpus").join(target);
    fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let artifacts = fuzz_dir.join("artifacts").join(target);
    fs::create_dir_all(&artifacts).with_context(|| format!("creating {}", artifacts.display()))?;
    let log_path = logs.join(format!("{target}.log"));
    let log =
        fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    // libFuzzer refuses a corpus folder that does not exist (git keeps no empty ones).
    let seeds = Some(fuzz_dir.join("corpus").join(target)).filter(|dir| dir.is_dir());
    let status = std::process::Command::new(build.out_dir(fuzz_dir).join(target))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .args([
            format!("-max_total_time={seconds}"),
            "-rss_limit_mb=2048".into(),
            "-timeout=10".into(),
            "-print_final_stats=1".into(),
        ])
        .arg(&scratch)
        .args(seeds)
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .with_context(|| format!("running fuzz target {target}"))?;
    if status.success() {
        return Ok(Outcome::NothingFound);
    }
    // What libFuzzer said last: the finding, or why it could not run.
    print_tail(target, &log_path);
    Ok(Outcome::Found)
}

/// The last lines of a log, each marked with `what`, and where the whole log is.
fn print_tail(what: &str, log_path: &Path) {
    let text = fs::read_to_string(log_path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(15).collect();
    let mut out = String::new();
    for line in tail.iter().rev() {
        out.push_str(&format!("  {what}: {line}\n"));
    }
    eprintln!("{out}  {what}: whole log in {}", log_path.display());
}

/// An error naming what went wrong when any target did not end with nothing found.
pub fn verdict(results: &[(String, Outcome)]) -> Result<()> {
    let names = |wanted| -> Vec<&str> {
        results
            .iter()
            .filter(|(_, o)| *o == wanted)
            .map(|(t, _)| t.as_str())
            .collect()
    };
    let (broken, found) = (names(Outcome::DidNotBuild), names(Outcome::Found));
    if !broken.is_empty() {
        bail!(
            "fuzz targets did not build: {} (see target/fuzz-logs/build.log)",
            broken.join(", ")
        );
    }
    if !found.is_empty() {
        bail!(
            "fuzz targets found something: {} (see fuzz/artifacts)",
            found.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(outcomes: &[Outcome]) -> Vec<(String, Outcome)> {
        TARGETS
            .iter()
            .zip(outcomes)
            .map(|(t, o)| ((*t).to_owned(), *o))
            .collect()
    }

    #[test]
    fn the_verdict_names_the_targets_that_found_something_or_did_not_build() {
        use Outcome::{DidNotBuild, Found, NothingFound};
        assert!(verdict(&results(&[NothingFound; 5])).is_ok());
        let found = verdict(&results(&[
            NothingFound,
            Found,
            NothingFound,
            Found,
            NothingFound,
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            found.contains("found something: perf_stat_csv, sysfs_format"),
            "{found}"
        );
        let broken = verdict(&results(&[DidNotBuild; 5]))
            .unwrap_err()
            .to_string();
        assert!(
            broken.contains("did not build: perf_data, perf_stat_csv"),
            "{broken}"
        );
    }

    #[test]
    fn builds_are_of_one_target_or_all() {
        let dir = std::env::temp_dir();
        let two = build_targets(&dir, &dir, &TARGETS[..2], Build::Checked).unwrap_err();
        assert!(two.to_string().contains("one target or all"), "{two}");
    }
}
