//! The emulated arm64 PMU suite: the tool's hardware-counter paths tested against a real
//! kernel PMU driver.
//!
//! No x86 PMU can be had on these machines, but QEMU's software emulation of arm64 implements
//! the Arm PMUv3, and Debian's arm64 kernel runs Linux's own `armv8_pmuv3` driver against it (6
//! general counters and the cycle counter, real multiplexing; CPU_CYCLES from the virtual
//! clock, INST_RETIRED exact under `-icount`). This builds the aarch64 tool, its test programs
//! and test binaries, fetches Debian's arm64 kernel with Debian's own tools (cached), packs an
//! initramfs whose init (`tests/src/bin/guest_init.rs`) runs a suite of them, boots one guest
//! per suite, and reads each test binary's verdict from the serial console. A guest that does
//! not finish (kernel panic, hang past its time limit) is a failure; QEMU is always ended.
//! Timings inside the guest mean nothing: the tests check counts, never costs.

use std::{
    collections::BTreeMap,
    env, fs,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    build::{self, Arch},
    check, count_before, deps,
};

/// Debian's arm64 kernel that was verified to boot here with the PMU driver, BTF and BPF
/// (bookworm-backports); when the archive has moved on, the newest 6.12 image there.
const KERNEL_PACKAGE: &str = "linux-image-6.12.95+deb12-arm64-unsigned";

/// One guest: its name (the suite its init runs), QEMU's CPU options, the commands it runs,
/// and how long it may take (emulation is slow; the limit only stops a hung guest).
struct Suite {
    name: &'static str,
    qemu: &'static [&'static str],
    commands: &'static [&'static str],
    limit: Duration,
}

/// The guests. `exact`: one CPU with `-icount shift=0`, where INST_RETIRED counts user
/// instructions exactly (one emulation thread, so one CPU). `pmu`: two CPUs, the virtual
/// clock in real time, for cycles, multiplexing, another PMU user, TopDown sets, c2c, and the
/// software-set suite that also runs on the x86 host.
const SUITES: &[Suite] = &[
    Suite {
        name: "exact",
        qemu: &["-smp", "1", "-icount", "shift=0"],
        commands: &["/tests/guest_exact_counts --test-threads=1"],
        limit: Duration::from_secs(300),
    },
    Suite {
        name: "pmu",
        qemu: &["-smp", "2"],
        commands: &[
            "/tests/guest_pmu --test-threads=1",
            "/tests/per_thread_kernel --test-threads=1",
            "/tests/cgroup_kernel --test-threads=1",
            "/tests/command_mode --test-threads=1",
            "/tests/counter_slots_kernel --test-threads=1",
        ],
        limit: Duration::from_secs(600),
    },
];

/// The busybox commands the tests run (`sh -c ...`, `sleep`, `taskset`).
const BUSYBOX_APPLETS: [&str; 9] = [
    "sh", "sleep", "cat", "echo", "true", "false", "kill", "ls", "taskset",
];

/// The test programs the guests run (`tests/src/bin`), besides the tool.
const PROGRAMS: [&str; 5] = [
    "guest_init",
    "known_instructions",
    "workload",
    "churn",
    "ticked_exit",
];

/// Builds everything for aarch64, boots each suite's guest and returns the tests passed and
/// failed over all of them (a guest that did not finish counts one failure). `only` boots
/// that suite alone and `filter` is passed to its test binaries (for working on one test).
pub fn run_suite(root: &Path, only: Option<&str>, filter: Option<&str>) -> Result<(u64, u64)> {
    deps::ensure_debian_packages(&["qemu-system-arm", "ipxe-qemu", "cpio"])?;
    let files = build_files(root)?;
    let debian = arm64_packages()?;
    let (mut passed, mut failed) = (0, 0);
    for suite in SUITES
        .iter()
        .filter(|s| only.is_none_or(|name| name == s.name))
    {
        let initramfs = pack(root, &files, &debian.busybox, suite, filter)?;
        let (p, f) = boot(&debian.kernel, &initramfs, suite)?;
        passed += p;
        failed += f;
    }
    Ok((passed, failed))
}

/// The aarch64 builds that go into a guest.
struct Files {
    /// `topdown-bpf` (debug).
    tool: PathBuf,
    /// The test programs of [`PROGRAMS`].
    programs: Vec<PathBuf>,
    /// Test binaries by target name.
    tests: BTreeMap<String, PathBuf>,
}

fn build_files(root: &Path) -> Result<Files> {
    let tool = build::user(root, false, Arch::Aarch64)?;
    let mut programs = build::cargo_for(root, Arch::Aarch64, "build")?;
    programs.args(["--package", "topdown-tests", "--bins"]);
    check(
        programs.status().context("building the guest programs")?,
        "building the aarch64 test programs",
    )?;
    let debug = Arch::Aarch64.out_dir(root).join("debug");
    let programs = PROGRAMS.iter().map(|p| debug.join(p)).collect();

    let names: Vec<&str> = SUITES
        .iter()
        .flat_map(|s| s.commands)
        .filter_map(|c| c.split_whitespace().next()?.strip_prefix("/tests/"))
        .collect();
    let mut build = build::cargo_for(root, Arch::Aarch64, "test")?;
    build.args([
        "--package",
        "topdown-tests",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    for name in &names {
        build.args(["--test", name]);
    }
    let output = build
        .stderr(Stdio::inherit())
        .output()
        .context("building the aarch64 test binaries")?;
    check(output.status, "building the aarch64 test binaries")?;
    let mut tests = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let (Some(name), Some(executable)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) && message["profile"]["test"] == true
        {
            tests.insert(name.to_owned(), PathBuf::from(executable));
        }
    }
    for name in names {
        if !tests.contains_key(name) {
            bail!("cargo built no aarch64 test binary `{name}`");
        }
    }
    Ok(Files {
        tool,
        programs,
        tests,
    })
}

/// What the guests need from Debian's arm64 archive: the kernel image and a static busybox
/// (`/bin/sh` and friends for the tests that run shell commands).
struct Arm64Packages {
    kernel: PathBuf,
    busybox: PathBuf,
}

/// Fetches Debian's arm64 kernel image and busybox once, with `apt-get download` through a
/// private apt configuration (its own sources, state and cache: the host's apt is not
/// touched), into `~/.cache/topdown-bpf/arm64`.
fn arm64_packages() -> Result<Arm64Packages> {
    let cache = cache_dir().join("arm64");
    let kept = |cache: &Path| -> Option<Arm64Packages> {
        Some(Arm64Packages {
            kernel: find_file(cache, "vmlinuz-")?,
            busybox: Some(cache.join("busybox")).filter(|p| p.is_file())?,
        })
    };
    if let Some(found) = kept(&cache) {
        return Ok(found);
    }
    eprintln!("xtask: fetching Debian's arm64 kernel ({KERNEL_PACKAGE}) and busybox");
    let apt = cache.join("apt");
    for dir in ["lists/partial", "cache/archives/partial", "etc"] {
        fs::create_dir_all(apt.join(dir)).with_context(|| format!("creating {dir}"))?;
    }
    fs::write(apt.join("status"), "")?;
    let mirror = debian_mirror();
    let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
    fs::write(
        apt.join("etc/sources.list"),
        format!(
            "deb [arch=arm64 signed-by={keyring}] {mirror} bookworm main\n\
             deb [arch=arm64 signed-by={keyring}] {mirror} bookworm-backports main\n"
        ),
    )?;
    let a = apt.display();
    fs::write(
        apt.join("etc/apt.conf"),
        format!(
            "Dir::State \"{a}\";\nDir::State::Lists \"{a}/lists\";\nDir::State::status \
             \"{a}/status\";\nDir::Cache \"{a}/cache\";\nDir::Etc::SourceList \
             \"{a}/etc/sources.list\";\nDir::Etc::SourceParts \"/nonexistent\";\n\
             APT::Architecture \"arm64\";\nAPT::Architectures {{ \"arm64\"; }};\n"
        ),
    )?;
    let apt_get = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("APT_CONFIG", apt.join("etc/apt.conf"))
            .current_dir(&apt)
            .output()
    };
    let update = apt_get(&["update", "-qq"]).context("running apt-get update (arm64)")?;
    check(update.status, "apt-get update for the arm64 packages")?;
    if !apt_get(&["download", "-qq", KERNEL_PACKAGE])?
        .status
        .success()
    {
        // The archive keeps one version of a backport: take the newest 6.12 image it has.
        let search = Command::new("apt-cache")
            .args([
                "search",
                "--names-only",
                r"^linux-image-6\.12\.[0-9]+\+deb12-arm64-unsigned$",
            ])
            .env("APT_CONFIG", apt.join("etc/apt.conf"))
            .output()?;
        let newest = String::from_utf8_lossy(&search.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .max_by_key(|name| version_key(name))
            .context("Debian's archive has no arm64 6.12 kernel image")?
            .to_owned();
        let fetched = apt_get(&["download", "-qq", &newest])?;
        check(fetched.status, "apt-get download of the arm64 kernel")?;
    }
    let fetched = apt_get(&["download", "-qq", "busybox-static"])?;
    check(fetched.status, "apt-get download of busybox-static (arm64)")?;
    let unpacked = cache.join("unpacked");
    let _ = fs::remove_dir_all(&unpacked);
    for deb in fs::read_dir(&apt)?.filter_map(|e| e.ok().map(|e| e.path())) {
        if deb.extension().is_some_and(|x| x == "deb") {
            let status = Command::new("dpkg-deb")
                .arg("-x")
                .arg(&deb)
                .arg(&unpacked)
                .status()
                .context("running dpkg-deb -x")?;
            check(status, &format!("unpacking {}", deb.display()))?;
            let _ = fs::remove_file(&deb);
        }
    }
    let image = find_file(&unpacked.join("boot"), "vmlinuz-")
        .context("the kernel package has no boot/vmlinuz-*")?;
    fs::copy(&image, cache.join(image.file_name().unwrap_or_default()))?;
    fs::copy(unpacked.join("bin/busybox"), cache.join("busybox"))
        .context("busybox-static has no bin/busybox")?;
    // Keep only the two files: the kernel's modules are not needed (what is used is built in).
    let _ = fs::remove_dir_all(&unpacked);
    kept(&cache).context("the arm64 packages were not kept")
}

/// The file in `dir` whose name starts with `prefix`.
fn find_file(dir: &Path, prefix: &str) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
}

/// `6.12.95` of a package name, as numbers, to compare versions.
fn version_key(name: &str) -> Vec<u32> {
    name.trim_start_matches("linux-image-")
        .split(['.', '+'])
        .map_while(|part| part.parse().ok())
        .collect()
}

/// The Debian mirror this host's apt uses (its `URIs:` or `deb` line), so the arm64 packages
/// come from the same registry.
fn debian_mirror() -> String {
    let sources = fs::read_to_string("/etc/apt/sources.list.d/debian.sources")
        .or_else(|_| fs::read_to_string("/etc/apt/sources.list"))
        .unwrap_or_default();
    sources
        .lines()
        .find_map(|line| {
            let line = line.trim();
            line.strip_prefix("URIs:")
                .map(|uris| uris.split_whitespace().next().unwrap_or("").to_owned())
                .or_else(|| {
                    line.strip_prefix("deb ")
                        .and_then(|rest| rest.split_whitespace().find(|w| w.contains("://")))
                        .map(str::to_owned)
                })
                .filter(|uri| !uri.contains("security"))
        })
        .unwrap_or_else(|| "http://deb.debian.org/debian".to_owned())
}

fn cache_dir() -> PathBuf {
    env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"))
        .join("topdown-bpf")
}

/// Packs the initramfs of `suite`: `/init`, the tool and programs in `/bin`, the test binaries
/// in `/tests`, the suite's commands in `/suites/NAME`, and the programs again at their build
/// paths (the tests find them through `env!("CARGO_BIN_EXE_...")`). Binaries lose their debug
/// sections (the guest's memory holds the whole archive).
fn pack(
    root: &Path,
    files: &Files,
    busybox: &Path,
    suite: &Suite,
    filter: Option<&str>,
) -> Result<PathBuf> {
    let stage = root.join("target/guest").join(suite.name);
    let _ = fs::remove_dir_all(&stage);
    for dir in ["bin", "tests", "suites", "dev", "proc", "sys", "tmp"] {
        fs::create_dir_all(stage.join(dir))?;
    }
    let put = |from: &Path, to: &Path| -> Result<()> {
        let to = stage.join(to.strip_prefix("/").unwrap_or(to));
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        let status = Command::new("aarch64-linux-gnu-strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&to)
            .arg(from)
            .status()
            .context("running aarch64-linux-gnu-strip")?;
        check(
            status,
            &format!("copying {} into the guest", from.display()),
        )
    };
    put(&files.tool, Path::new("/bin/topdown-bpf"))?;
    for program in &files.programs {
        let name = program.file_name().unwrap_or_default();
        put(program, &Path::new("/bin").join(name))?;
        put(program, program)?;
    }
    fs::rename(stage.join("bin/guest_init"), stage.join("init"))?;
    fs::copy(busybox, stage.join("bin/busybox"))?;
    for applet in BUSYBOX_APPLETS {
        std::os::unix::fs::symlink("busybox", stage.join("bin").join(applet))?;
    }
    // The reference data the TopDown checks read (`../shared/data` from the tests' manifest
    // directory, which must exist for the `..` to resolve).
    let manifest = root.join("tests");
    fs::create_dir_all(stage.join(manifest.strip_prefix("/").unwrap_or(&manifest)))?;
    let data = root.join("../shared/data/linux-pmu-events/arm64");
    let data = data
        .canonicalize()
        .context("../shared/data beside the repository")?;
    // Where the tests look, lexically: `<root>/tests/../../shared` is `<root's parent>/shared`.
    let lexical = root
        .parent()
        .unwrap_or(root)
        .join("shared/data/linux-pmu-events/arm64");
    let inside = stage.join(lexical.strip_prefix("/").unwrap_or(&lexical));
    fs::create_dir_all(inside.parent().unwrap_or(&stage))?;
    let status = Command::new("cp")
        .arg("-r")
        .arg(&data)
        .arg(&inside)
        .status()?;
    check(status, "copying the Arm reference data into the guest")?;
    for command in suite.commands {
        let name = command
            .split_whitespace()
            .next()
            .and_then(|c| c.strip_prefix("/tests/"))
            .unwrap_or_default();
        put(&files.tests[name], &Path::new("/tests").join(name))?;
    }
    let commands: Vec<String> = suite
        .commands
        .iter()
        .map(|c| match filter {
            Some(filter) => format!("{c} {filter}"),
            None => (*c).to_owned(),
        })
        .collect();
    fs::write(
        stage.join("suites").join(suite.name),
        commands.join("\n") + "\n",
    )?;
    let archive = root.join(format!("target/guest/{}.cpio", suite.name));
    let list = Command::new("find")
        .arg(".")
        .current_dir(&stage)
        .output()
        .context("listing the initramfs")?;
    let mut cpio = Command::new("cpio")
        .args(["-o", "-H", "newc", "--quiet"])
        .current_dir(&stage)
        .stdin(Stdio::piped())
        .stdout(fs::File::create(&archive)?)
        .spawn()
        .context("running cpio")?;
    cpio.stdin
        .take()
        .context("cpio's input")?
        .write_all(&list.stdout)?;
    check(cpio.wait()?, "packing the initramfs")?;
    Ok(archive)
}

/// Boots `suite`'s guest and reads its console until it says it is done, its time is up or
/// QEMU ends; returns the tests passed and failed.
fn boot(kernel: &Path, initramfs: &Path, suite: &Suite) -> Result<(u64, u64)> {
    println!("\nxtask: booting the {} guest (emulated arm64)", suite.name);
    let mut qemu = Command::new("qemu-system-aarch64")
        .args(["-M", "virt", "-cpu", "neoverse-n1", "-m", "2G"])
        .args(suite.qemu)
        .args([
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
            "-nic",
            "none",
        ])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initramfs)
        .arg("-append")
        .arg(format!(
            "console=ttyAMA0 panic=-1 quiet loglevel=3 topdown.suite={}",
            suite.name
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-aarch64")?;
    let (lines, received) = mpsc::channel();
    for stream in [
        qemu.stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        qemu.stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let lines = lines.clone();
        thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
    }
    drop(lines);
    let deadline = Instant::now() + suite.limit;
    let (mut passed, mut failed) = (0u64, 0u64);
    let (mut done, mut panicked, mut verdict_in_command) = (false, false, false);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => {
                let line = line.trim_end_matches('\r');
                println!("guest[{}]: {line}", suite.name);
                if let Some(result) = line.strip_prefix("test result: ") {
                    passed += count_before(result, " passed");
                    failed += count_before(result, " failed");
                    verdict_in_command = true;
                } else if line.starts_with("@@guest begin") {
                    verdict_in_command = false;
                } else if let Some(end) = line.strip_prefix("@@guest end") {
                    // A test binary that died before its verdict is a failure.
                    if !verdict_in_command && !end.ends_with(" rc=0") {
                        failed += 1;
                    }
                } else if line.starts_with("@@guest done") {
                    done = true;
                } else if line.contains("Kernel panic") {
                    panicked = true;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                println!(
                    "guest[{}]: TIMEOUT after {} s: the guest is stopped",
                    suite.name,
                    suite.limit.as_secs()
                );
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = qemu.kill();
    let _ = qemu.wait();
    if !done || panicked {
        println!(
            "guest[{}]: FAILED: the guest did not finish its suite{}",
            suite.name,
            if panicked { " (kernel panic)" } else { "" }
        );
        failed += 1;
    }
    Ok((passed, failed))
}
