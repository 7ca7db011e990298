//! Installs what the build needs when it is missing, and skips what is there: bpf-linker 0.13.0
//! built against Debian's LLVM 22 (which matches the pinned nightly's LLVM).

use std::{
    env,
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

const BPF_LINKER_VERSION: &str = "0.13.0";
const CARGO_FUZZ_VERSION: &str = "0.13.2";
const LLVM_PACKAGES: [&str; 3] = ["llvm-22-dev", "libpolly-22-dev", "libzstd-dev"];
const CROSS_PACKAGES: [&str; 2] = ["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"];
const BENCH_PACKAGES: [&str; 4] = ["linux-perf", "bpftrace", "bpftool", "tmux"];

/// Whether we run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// `$PATH` with `~/.cargo/bin` in front, where `cargo install` puts bpf-linker.
pub fn path_with_cargo_bin() -> OsString {
    let mut paths = vec![cargo_bin()];
    if let Some(path) = env::var_os("PATH") {
        paths.extend(env::split_paths(&path));
    }
    env::join_paths(paths).unwrap_or_default()
}

fn cargo_bin() -> PathBuf {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
        .join("bin")
}

/// Makes sure bpf-linker 0.13.0 (LLVM 22) is installed.
pub fn ensure_bpf_linker() -> Result<()> {
    let installed = Command::new(cargo_bin().join("bpf-linker"))
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned());
    if installed.is_some_and(|v| v.contains(BPF_LINKER_VERSION)) {
        return Ok(());
    }
    ensure_debian_packages(&LLVM_PACKAGES)?;
    eprintln!("xtask: installing bpf-linker {BPF_LINKER_VERSION} (LLVM 22), about a minute");
    let status = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--no-default-features",
            "--features",
            "llvm-22",
        ])
        .env("LLVM_PREFIX", "/usr/lib/llvm-22")
        .env("PATH", {
            let mut paths = vec![PathBuf::from("/usr/lib/llvm-22/bin")];
            paths.extend(env::split_paths(&path_with_cargo_bin()));
            env::join_paths(paths)?
        })
        .status()
        .context("running cargo install bpf-linker")?;
    if !status.success() {
        bail!(
            "installing bpf-linker failed: run `LLVM_PREFIX=/usr/lib/llvm-22 cargo install \
             bpf-linker --version {BPF_LINKER_VERSION} --no-default-features --features llvm-22`"
        );
    }
    Ok(())
}

/// Installs the tools the tests compare against when they are missing and we are root: Linux
/// perf for the c2c tests (best effort: without it they compare against recorded perf output)
/// and Prometheus for the exporter test (which, under CI, fails without it).
pub fn offer_test_tools() {
    if !is_root() {
        return;
    }
    if let Err(error) = ensure_debian_packages(&["linux-perf"]) {
        eprintln!("xtask: could not install linux-perf ({error:#}); c2c tests use recorded output");
    }
    if let Err(error) = ensure_debian_packages(&["tmux"]) {
        eprintln!("xtask: could not install tmux ({error:#}); the live view test will say so");
    }
    if let Err(error) = ensure_debian_packages(&["fonts-dejavu-core"]) {
        eprintln!("xtask: could not install fonts-dejavu-core ({error:#}); PNG plots need a font");
    }
    if let Err(error) = ensure_debian_packages(&["openssl", "curl"]) {
        eprintln!("xtask: could not install openssl and curl ({error:#}); the TLS test will fail");
    }
    if let Err(error) = ensure_debian_packages(&["libcap2-bin"]) {
        eprintln!(
            "xtask: could not install libcap2-bin ({error:#}); the least-privilege test (setcap) \
             will fail"
        );
    }
    if let Err(error) = ensure_debian_packages(&["man-db", "fish", "zsh"]) {
        eprintln!(
            "xtask: could not install man-db, fish and zsh ({error:#}); the man page and \
             completion tests will fail"
        );
    }
    if let Err(error) = ensure_python_package("duckdb", DUCKDB) {
        eprintln!("xtask: could not install duckdb ({error:#}); the Parquet test will fail");
    }
    if let Err(error) = ensure_debian_packages(&["prometheus"]) {
        eprintln!("xtask: could not install prometheus ({error:#}); the scrape test will say so");
    }
}

/// The DuckDB the Parquet test reads with (PyPI).
const DUCKDB: &str = "duckdb==2.0.1";

/// Installs `requirement` with pip when `python3` cannot import module `name` (PyPI; the
/// system's pip may call itself externally managed, then pip is asked to install anyway).
fn ensure_python_package(name: &str, requirement: &str) -> Result<()> {
    let importable = || {
        Command::new("python3")
            .args(["-c", &format!("import {name}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if importable() {
        return Ok(());
    }
    for extra in [None, Some("--break-system-packages")] {
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--root-user-action=ignore",
            ])
            .args(extra)
            .arg(requirement)
            .status()
            .context("running pip")?;
        if status.success() && importable() {
            return Ok(());
        }
    }
    bail!("pip install {requirement} failed")
}

/// Unpacks perf 6.12 (Debian bookworm-backports' `linux-perf`, with the `libtraceevent1` it
/// loads, fetched through our private apt configuration: nothing is installed) into `dir` when
/// it is not there yet, for the `--double-cl` comparisons; best effort: without it the tests
/// compare against recorded perf 6.12 output. Returns the folder when usable.
pub fn offer_perf_6_12(dir: &Path) -> Option<PathBuf> {
    let perf = dir.join("usr/bin/perf");
    if !perf.exists()
        && let Err(error) = unpack_perf_6_12(dir)
    {
        eprintln!(
            "xtask: could not unpack perf 6.12 ({error:#}); --double-cl tests use recorded output"
        );
        return None;
    }
    perf.exists().then(|| dir.to_path_buf())
}

fn unpack_perf_6_12(dir: &Path) -> Result<()> {
    let apt = crate::apt::PrivateApt::new(crate::build::Arch::X86_64)?;
    for package in ["linux-perf/bookworm-backports", "libtraceevent1/bookworm"] {
        let deb = apt.download(package)?;
        let status = Command::new("dpkg")
            .arg("-x")
            .arg(&deb)
            .arg(dir)
            .status()
            .context("running dpkg -x")?;
        if !status.success() {
            bail!("dpkg -x {} failed", deb.display());
        }
        let _ = std::fs::remove_file(&deb);
    }
    Ok(())
}

/// Makes sure an aarch64 build can run: Debian's cross gcc and arm64 C library, and the
/// pinned nightly's `rust-src` (for `-Z build-std`; `rust-toolchain.toml` lists it, this
/// repairs a toolchain installed without it).
pub fn ensure_cross_tools() -> Result<()> {
    ensure_debian_packages(&CROSS_PACKAGES)?;
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .context("running rustc --print sysroot")?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib/src/rust/library").is_dir() {
        return Ok(());
    }
    eprintln!("xtask: installing the toolchain's rust-src (for -Z build-std)");
    let status = Command::new("rustup")
        .args(["component", "add", "rust-src"])
        .status()
        .context("running rustup component add rust-src")?;
    if !status.success() {
        bail!("installing rust-src failed: run `rustup component add rust-src` in the project");
    }
    Ok(())
}

/// Makes sure cargo-fuzz (which builds and runs the fuzz targets) is installed.
pub fn ensure_cargo_fuzz() -> Result<()> {
    if Command::new(cargo_bin().join("cargo-fuzz"))
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
    {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz {CARGO_FUZZ_VERSION}");
    let status = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "install",
            "cargo-fuzz",
            "--locked",
            "--version",
            CARGO_FUZZ_VERSION,
        ])
        .status()
        .context("running cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("installing cargo-fuzz failed: run `cargo install cargo-fuzz --locked`");
    }
    Ok(())
}

/// Makes sure the benchmark's peers and load generator are installed.
pub fn ensure_bench_tools() -> Result<()> {
    ensure_debian_packages(&BENCH_PACKAGES)
}

/// Installs the Debian packages of `names` that are missing (root only; otherwise says what to
/// run).
pub fn ensure_debian_packages(names: &[&str]) -> Result<()> {
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| !debian_package_installed(name))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages: run `sudo apt-get install -y {}` and try again",
            missing.join(" ")
        );
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    let update = Command::new("apt-get")
        .args(["update", "-qq"])
        .status()
        .context("running apt-get update")?;
    if !update.success() {
        bail!("apt-get update failed");
    }
    let install = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("running apt-get install")?;
    if !install.success() {
        bail!("apt-get install {} failed", missing.join(" "));
    }
    Ok(())
}

fn debian_package_installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
}
