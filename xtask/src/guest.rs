//! The guests: the tool tested on the kernels a fleet runs, and on a real kernel PMU driver.
//!
//! **The kernel matrix.** A BPF program that loads on this host's kernel can fail to load, or
//! load and read wrong, on another: only a boot tells. Debian's own 5.10, 6.1 and newest 6.12
//! kernels boot here under QEMU's software emulation, amd64 and arm64, and run the
//! kernel-facing tests (`kernel_matrix`, `per_thread_kernel`, `cgroup_kernel`).
//!
//! **The emulated arm64 PMU.** No x86 PMU can be had on these machines, but QEMU's emulation of
//! arm64 implements the Arm PMUv3, and Debian's arm64 kernel runs Linux's own `armv8_pmuv3`
//! driver against it (6 general counters and the cycle counter, real multiplexing; CPU_CYCLES
//! from the virtual clock, INST_RETIRED exact under `-icount`).
//!
//! This builds the tool, its test programs and test binaries for the guest's architecture (the
//! aarch64 ones static, cross-built; the amd64 ones are the host's, packed with the shared
//! libraries they load), fetches Debian's kernels with Debian's own tools (cached), packs an
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
    apt::{PrivateApt, cache_dir},
    build::{self, Arch, Profile},
    check, count_before, deps, parallel,
};

/// A Debian kernel image: the newest of a series in the archive, optionally only those of one
/// release (`+deb12` images are bookworm-backports'). Up to 6.x the image is in
/// `linux-image-VERSION-ARCH-unsigned` (`boot/vmlinuz-VERSION-ARCH`); from 7.x in
/// `linux-binary-VERSION-ARCH` (`usr/lib/modules/VERSION-ARCH/vmlinuz`).
#[derive(Clone, Copy)]
struct Kernel {
    series: Series,
    release: Option<&'static str>,
}

/// Which kernels a [`Kernel`] is the newest of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Series {
    /// One line's (`"6.1"`).
    Line(&'static str),
    /// Every line's: the newest kernel Debian ships in any suite [`PrivateApt`] reads (7.3
    /// from trixie-backports on 2026-12-06), found in the archive at each run, not named here.
    Newest,
}

impl Series {
    /// How a guest's name says it.
    const fn name(self) -> &'static str {
        match self {
            Self::Line(series) => series,
            Self::Newest => "newest",
        }
    }
}

/// The kernels of the matrix: the 5.10 LTS line (Debian 11), 6.1 (Debian 12, Amazon Linux
/// 2023's line), 6.12 (Debian 13) and the newest Debian ships (Ubuntu 26.04 and Fedora run 7.x).
/// The tool's floor is 5.10.
const MATRIX: [Kernel; 4] = [
    Kernel {
        series: Series::Line("5.10"),
        release: None,
    },
    Kernel {
        series: Series::Line("6.1"),
        release: None,
    },
    Kernel {
        series: Series::Line("6.12"),
        release: None,
    },
    Kernel {
        series: Series::Newest,
        release: None,
    },
];

/// The arm64 kernel verified with the PMU driver, BTF and BPF: bookworm-backports' 6.12.
const PMU_KERNEL: Kernel = Kernel {
    series: Series::Line("6.12"),
    release: Some("deb12"),
};

/// The kernel-facing tests the amd64 matrix guests of 5.10, 6.1 and the newest kernel run
/// (`command_mode`'s signals and `-p` run on the host; `kernel_matrix` follows a command on
/// every kernel). amd64 6.12 runs `kernel_matrix` alone: `per_thread_kernel` and
/// `cgroup_kernel` run on 6.12 in the `pmu-kernel` guest (arm64) and on the host's 6.18, and
/// its ~100 s made room in CI's 30 minutes for the newest kernel's guests. `diff` of a cgroup
/// `cpu.max` began to hold is user space's arithmetic over books every kernel keeps alike
/// (`throttling_and_pressure_are_the_cgroups_own_books` checks those per kernel): it runs in
/// `pmu-kernel` only (~25 s a guest).
const MATRIX_COMMANDS: &[&str] = &[
    "/tests/kernel_matrix --test-threads=1",
    "/tests/per_thread_kernel --test-threads=1",
    "/tests/cgroup_kernel --test-threads=1 --skip diff_flags_a_cgroup_that_cpu_max_began_to_throttle",
];

/// The other matrix guests' (amd64 6.12, and every arm64 one: emulating arm64 is ~3 times as
/// slow as amd64 here): `kernel_matrix` loads every program and checks threads, exits, a
/// recording, a cgroup and the split of waits against the kernel's books. The arm64 6.12 guests
/// run every kernel-facing suite. `per_thread_kernel` (architecture-neutral: schedstat, the
/// charged list, ticked exits) on arm64 5.10 and 6.1 took 250-350 s of a CI run each, and
/// passed there when last run by hand (2026-11-28; see docs/kernels.md), as `cgroup_kernel` did
/// (2026-11-26).
const KERNEL_MATRIX_ONLY: &[&str] = &["/tests/kernel_matrix --test-threads=1"];

/// One guest: its name (the suite its init runs), architecture, kernel, QEMU's CPU options, the
/// commands it runs, and how long it may take (emulation is slow; the limit only stops a hung
/// guest).
struct Suite {
    name: String,
    arch: Arch,
    kernel: Kernel,
    qemu: &'static [&'static str],
    commands: &'static [&'static str],
    limit: Duration,
    /// How long it took beside another guest in CI's latest run: the guests start longest
    /// first, so the last to finish is a short one.
    expected: Duration,
}

/// The guests, longest first (by [`Suite::expected`]; they run in this order,
/// [`parallel_guests`] at a time).
/// `pmu-kernel`: arm64, two CPUs, the virtual clock in real time, for `per_thread_kernel` and
/// `cgroup_kernel`; `pmu`: the same, for multiplexing, another PMU user, TopDown sets, c2c,
/// and `kernel_matrix`; `exact`: arm64, one CPU with `-icount shift=0`, where INST_RETIRED
/// counts user instructions exactly and cycles per thread follow the books (one emulation
/// thread, so one CPU; its clock follows the instructions, so a busy host slows it and changes
/// nothing it sees). `<arch>-<series>`: the
/// kernel matrix.
fn suites() -> Vec<Suite> {
    let mut suites = vec![
        Suite {
            name: "pmu-kernel".to_owned(),
            arch: Arch::Aarch64,
            kernel: PMU_KERNEL,
            qemu: &["-smp", "2"],
            commands: &[
                "/tests/per_thread_kernel --test-threads=1",
                "/tests/cgroup_kernel --test-threads=1",
            ],
            // 162 s beside another guest in the `guest` profile (CI, 2026-12-06; 424-687 s, once
            // past 900, in the unoptimised build); the limit only stops a hang (a guest that does
            // not finish is booted once more).
            limit: Duration::from_secs(600),
            expected: Duration::from_secs(162),
        },
        Suite {
            name: "pmu".to_owned(),
            arch: Arch::Aarch64,
            kernel: PMU_KERNEL,
            qemu: &["-smp", "2"],
            // `command_mode` (signals, `-p`) and `counter_slots_kernel` (slots of software
            // events) test no architecture's kernel side: they run on the host only;
            // `kernel_matrix` follows a command here. The kernel-facing suites run in a guest of
            // their own (`pmu-kernel`). 113 s beside another guest in the `guest` profile
            // (2026-11-28; up to ~9 minutes in the unoptimised build); the limit only stops a
            // hang.
            commands: &[
                "/tests/guest_pmu --test-threads=1 --skip cycles_per_thread_follow",
                "/tests/kernel_matrix --test-threads=1",
            ],
            limit: Duration::from_secs(600),
            expected: Duration::from_secs(142),
        },
        Suite {
            name: "exact".to_owned(),
            arch: Arch::Aarch64,
            kernel: PMU_KERNEL,
            qemu: &["-smp", "1", "-icount", "shift=0"],
            // Cycles against the books too: under `-icount` no host stall lands between the
            // scheduler's clock update and the counter read (in the `pmu` guest one moved 21
            // ms between two threads, CI 2026-12-06).
            commands: &[
                "/tests/guest_exact_counts --test-threads=1",
                "/tests/guest_pmu --test-threads=1 cycles_per_thread_follow",
            ],
            limit: Duration::from_secs(300),
            expected: Duration::from_secs(50),
        },
    ];
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for kernel in MATRIX {
            // arm64 6.12 is the `pmu` guest's kernel, which runs these tests too.
            if arch == Arch::Aarch64 && kernel.series == PMU_KERNEL.series {
                continue;
            }
            let commands = match arch {
                Arch::X86_64 if kernel.series != Series::Line("6.12") => MATRIX_COMMANDS,
                _ => KERNEL_MATRIX_ONLY,
            };
            // CI, 2026-12-06 (56f1d7c, before `diff` left them): amd64 170-174 s with three
            // suites (7.3: 285 s), 49 s with `kernel_matrix` alone; arm64 39-45 s (7.3: 91 s).
            let expected = match (commands.len(), kernel.series) {
                (1, Series::Newest) => 91,
                (1, _) => 45,
                (_, Series::Newest) => 270,
                (_, _) => 160,
            };
            suites.push(Suite {
                name: format!("{}-{}", arch.debian(), kernel.series.name()),
                arch,
                kernel,
                qemu: match arch {
                    // One emulation thread runs both CPUs: QEMU's multi-threaded emulation of
                    // x86 hung 6.1 in a soft lockup (2026-11-28, beside another guest; it has
                    // oopsed 6.12 patching kernel text before), and one thread was faster here
                    // (89-101 s a guest, against 113-168). Not for arm64: `per_thread_kernel`
                    // took 455 s on one thread against 300 on two.
                    Arch::X86_64 => &["-smp", "2", "-accel", "tcg,thread=single"],
                    Arch::Aarch64 => &["-smp", "2"],
                },
                commands,
                // The limit only stops a hang.
                limit: Duration::from_secs(600),
                expected: Duration::from_secs(expected),
            });
        }
    }
    suites.sort_by_key(|suite| std::cmp::Reverse(suite.expected));
    suites
}

/// The busybox commands the tests run (`sh -c ...`, `sleep`, `taskset`).
const BUSYBOX_APPLETS: [&str; 9] = [
    "sh", "sleep", "cat", "echo", "true", "false", "kill", "ls", "taskset",
];

/// The test programs the guests run (`tests/src/bin`), besides the tool.
const PROGRAMS: [&str; 7] = [
    "guest_init",
    "clocked",
    "neighbours",
    "known_instructions",
    "workload",
    "churn",
    "ticked_exit",
];

/// Builds everything for each guest's architecture, boots each suite's guest and returns the
/// tests passed and failed over all of them (a guest that did not finish counts one failure).
/// `only` boots the suites whose names start with it (`pmu`, `amd64-6.1`, `amd64`) and
/// `filter` is passed to their test binaries (for working on one test).
///
/// The guests run [`parallel_guests`] at a time, in [`suites`]' order (longest first): an
/// emulated guest keeps about
/// one of the host's CPUs busy on average (its tests wait on workloads of fixed length), so
/// one guest at a time left half of a 2-CPU host idle for most of CI's run.
pub fn run_suite(root: &Path, only: Option<&str>, filter: Option<&str>) -> Result<(u64, u64)> {
    deps::ensure_debian_packages(&["qemu-system-arm", "qemu-system-x86", "ipxe-qemu", "cpio"])?;
    let suites: Vec<Suite> = suites()
        .into_iter()
        .filter(|s| only.is_none_or(|name| s.name.starts_with(name)))
        .collect();
    if suites.is_empty() {
        bail!("no guest is named {}", only.unwrap_or_default());
    }
    // Everything a guest needs is built, fetched and packed first, one suite after another
    // (the builds use every CPU; the fetches share one apt cache).
    let mut files = BTreeMap::new();
    let mut ready = Vec::new();
    for suite in suites {
        let files = match files.entry(suite.arch.debian()) {
            std::collections::btree_map::Entry::Occupied(built) => built.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(build_files(root, suite.arch)?)
            }
        };
        let kernel = debian_kernel(suite.arch, suite.kernel)?;
        let busybox = debian_busybox(suite.arch)?;
        let initramfs = pack(root, files, &busybox, &suite, filter)?;
        ready.push((suite, kernel, initramfs));
    }
    let workers = parallel_guests().min(ready.len());
    println!(
        "\nxtask: {} guests, {workers} at a time (their lines are marked guest[NAME])",
        ready.len()
    );
    let results = parallel::each(ready, workers, |(suite, kernel, initramfs)| {
        run_guest(&kernel, &initramfs, &suite)
    })?;
    Ok(results
        .into_iter()
        .fold((0, 0), |(p, f), (passed, failed)| (p + passed, f + failed)))
}

/// How many guests run at once: `TOPDOWN_GUESTS` where set, else one per host CPU (a guest
/// averages about one busy CPU), at least one.
fn parallel_guests() -> usize {
    env::var("TOPDOWN_GUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, usize::from))
        .max(1)
}

/// Boots `suite`'s guest (twice where it did not finish and no test failed) and returns its
/// tests passed and failed.
fn run_guest(kernel: &Path, initramfs: &Path, suite: &Suite) -> Result<(u64, u64)> {
    let started = Instant::now();
    let (mut p, mut f, mut finished) = boot(kernel, initramfs, suite)?;
    if !finished && f == 1 {
        // No test failed: the guest itself did not finish (a hang or a panic). QEMU's
        // emulation of cross-modified kernel text on two CPUs has hung or oopsed guests here;
        // one more boot tells that from our bug, which fails again. Said loudly, counted in
        // the closing line.
        println!(
            "xtask: the {} guest did not finish: booting it once more",
            suite.name
        );
        (p, f, finished) = boot(kernel, initramfs, suite)?;
    }
    if !finished {
        println!("xtask: the {} guest did not finish", suite.name);
    }
    println!(
        "xtask: the {} guest took {:.0} s",
        suite.name,
        started.elapsed().as_secs_f64()
    );
    Ok((p, f))
}

/// The builds that go into a guest of one architecture.
struct Files {
    /// `topdown-bpf`, static.
    tool: PathBuf,
    /// The test programs of [`PROGRAMS`].
    programs: Vec<PathBuf>,
    /// Test binaries by target name.
    tests: BTreeMap<String, PathBuf>,
    /// The shared libraries (and the dynamic loader) they load: none for aarch64, whose builds
    /// are static.
    libraries: Vec<PathBuf>,
}

fn build_files(root: &Path, arch: Arch) -> Result<Files> {
    // amd64: the static release binary, as a fleet gets it (it must need no library), and the
    // host's own test build; arm64: everything in the `guest` profile (`build::Profile::Guest`).
    let (profile, release_tool) = match arch {
        Arch::X86_64 => (
            Profile::Dev,
            Some(build::user(root, Profile::Release, arch)?),
        ),
        Arch::Aarch64 => (Profile::Guest, None),
    };
    if let Some(tool) = &release_tool
        && !shared_libraries(tool)?.is_empty()
    {
        bail!(
            "{} is not static: it loads shared libraries (ldd)",
            tool.display()
        );
    }
    let mut names: Vec<&str> = suites()
        .iter()
        .filter(|s| s.arch == arch)
        .flat_map(|s| s.commands)
        .filter_map(|c| c.split_whitespace().next()?.strip_prefix("/tests/"))
        .collect();
    names.sort_unstable();
    names.dedup();
    // One cargo invocation builds the programs, the test binaries and (arm64) the tool: with
    // `-Z build-std`, a `cargo build` and a `cargo test` build std with different crates, and
    // everything above std twice (4 1/2 minutes more here).
    let mut build = build::cargo_for(root, arch, "build")?;
    build
        .args(["--package", "topdown-tests", "--bins"])
        .arg("--message-format=json-render-diagnostics")
        .args(profile.args());
    if release_tool.is_none() {
        build.args(["--package", "topdown-user"]);
    }
    for name in &names {
        build.args(["--test", name]);
    }
    let output = build
        .stderr(Stdio::inherit())
        .output()
        .context("building the guests' test binaries")?;
    check(
        output.status,
        "building the guests' programs and test binaries",
    )?;
    let mut tests = BTreeMap::new();
    let mut binaries = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let (Some(name), Some(executable)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) {
            let built = if message["profile"]["test"] == true {
                &mut tests
            } else {
                &mut binaries
            };
            built.insert(name.to_owned(), PathBuf::from(executable));
        }
    }
    for name in names {
        if !tests.contains_key(name) {
            bail!("cargo built no {} test binary `{name}`", arch.debian());
        }
    }
    let mut built = |name: &str| {
        binaries
            .remove(name)
            .with_context(|| format!("cargo built no {} program `{name}`", arch.debian()))
    };
    let tool = match release_tool {
        Some(tool) => tool,
        None => built("topdown-bpf")?,
    };
    let programs: Vec<PathBuf> = PROGRAMS.iter().map(|p| built(p)).collect::<Result<_>>()?;
    let mut libraries = Vec::new();
    if arch == Arch::X86_64 {
        for binary in programs.iter().chain(tests.values()) {
            for library in shared_libraries(binary)? {
                if !libraries.contains(&library) {
                    libraries.push(library);
                }
            }
        }
    }
    Ok(Files {
        tool,
        programs,
        tests,
        libraries,
    })
}

/// The shared libraries `binary` loads and its dynamic loader, as `ldd` resolves them here.
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let output = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd")?;
    // A static binary: ldd says so and fails.
    if !output.status.success() {
        return Ok(Vec::new());
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or
            // `/lib64/ld-linux-x86-64.so.2 (0x...)`.
            let path = line.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// Debian's kernel image for `arch` of `kernel`'s series, fetched once into
/// `~/.cache/topdown-bpf/kernels/<arch>` (the image alone: everything used is built in) as
/// `vmlinuz-VERSION-ARCH`. A line's newest kept image is used without asking the archive; the
/// newest of all is looked up in the archive each run (its lists are refreshed hourly).
fn debian_kernel(arch: Arch, kernel: Kernel) -> Result<PathBuf> {
    let cache = cache_dir().join("kernels").join(arch.debian());
    let of_release = |version: &str| {
        kernel
            .release
            .is_none_or(|release| version.contains(&format!("+{release}-")))
    };
    if let Series::Line(series) = kernel.series {
        let kept = fs::read_dir(&cache)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    let name = n.to_string_lossy();
                    name.strip_prefix("vmlinuz-")
                        .is_some_and(|v| v.starts_with(&format!("{series}.")) && of_release(v))
                })
            })
            .max_by_key(|p| version_key(&p.file_name().unwrap_or_default().to_string_lossy()));
        if let Some(image) = kept {
            return Ok(image);
        }
    }
    let apt = PrivateApt::new(arch)?;
    let a = arch.debian();
    let version = match kernel.series {
        Series::Line(series) => series.replace('.', r"\."),
        Series::Newest => "[0-9]+".to_owned(),
    };
    let mut search = apt.command("apt-cache");
    search.args([
        "search",
        "--names-only",
        &format!("^linux-(image-{version}[.-].*-{a}-unsigned|binary-{version}[.-].*-{a})$"),
    ]);
    let listed = search.output().context("running apt-cache search")?;
    // (package, VERSION-ARCH, whether it has the 7.x layout)
    let (package, version, binary) = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|name| {
            let (version, binary) = match name.strip_prefix("linux-binary-") {
                Some(version) => (version.to_owned(), true),
                None => (
                    name.strip_prefix("linux-image-")?
                        .strip_suffix("-unsigned")?
                        .to_owned(),
                    false,
                ),
            };
            let flavour = version.strip_suffix(&format!("-{a}"))?;
            // Not the 16k-page, realtime or cloud flavours.
            (flavour
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-+".contains(c))
                && !flavour.contains("rt")
                && !flavour.contains("cloud")
                && !flavour.contains("16k")
                && of_release(&format!("{version}-")))
            .then(|| (name.to_owned(), version, binary))
        })
        .max_by_key(|(_, version, _)| version_key(version))
        .with_context(|| {
            format!(
                "Debian's archive has no {a} {} kernel image",
                kernel.series.name()
            )
        })?;
    let kept = cache.join(format!("vmlinuz-{version}"));
    if kept.is_file() {
        return Ok(kept);
    }
    eprintln!("xtask: fetching Debian's {package}");
    let deb = apt.download(&package)?;
    let unpacked = apt.dir.join("unpacked");
    let inside = if binary {
        format!("usr/lib/modules/{version}/vmlinuz")
    } else {
        format!("boot/vmlinuz-{version}")
    };
    extract(&deb, &unpacked, &format!("./{inside}"))?;
    fs::create_dir_all(&cache)?;
    fs::copy(unpacked.join(&inside), &kept)
        .with_context(|| format!("the kernel package {package} has no {inside}"))?;
    let _ = fs::remove_dir_all(&unpacked);
    let _ = fs::remove_file(&deb);
    Ok(kept)
}

/// Debian's static busybox for `arch` (`/bin/sh` and friends for the tests that run shell
/// commands), fetched once.
fn debian_busybox(arch: Arch) -> Result<PathBuf> {
    let kept = cache_dir()
        .join("kernels")
        .join(arch.debian())
        .join("busybox");
    if kept.is_file() {
        return Ok(kept);
    }
    let apt = PrivateApt::new(arch)?;
    let deb = apt.download("busybox-static")?;
    let unpacked = apt.dir.join("unpacked");
    extract(&deb, &unpacked, "*bin/busybox")?;
    let found = ["bin/busybox", "usr/bin/busybox"]
        .iter()
        .map(|p| unpacked.join(p))
        .find(|p| p.is_file())
        .context("busybox-static has no bin/busybox")?;
    fs::create_dir_all(kept.parent().unwrap_or(Path::new("/")))?;
    fs::copy(found, &kept)?;
    let _ = fs::remove_dir_all(&unpacked);
    let _ = fs::remove_file(&deb);
    Ok(kept)
}

/// Extracts the members of `deb` matching `pattern` into `to`.
fn extract(deb: &Path, to: &Path, pattern: &str) -> Result<()> {
    let _ = fs::remove_dir_all(to);
    fs::create_dir_all(to)?;
    let status = Command::new("sh")
        .arg("-c")
        .arg("dpkg-deb --fsys-tarfile \"$1\" | tar -x -C \"$2\" --wildcards \"$3\"")
        .arg("extract")
        .arg(deb)
        .arg(to)
        .arg(pattern)
        .status()
        .context("running dpkg-deb")?;
    check(status, &format!("unpacking {}", deb.display()))
}

/// The numbers in a kernel package or image name (`6.1.0-50` is 6, 1, 0, 50), to compare
/// versions.
fn version_key(name: &str) -> Vec<u32> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect()
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
    let stage = root.join("target/guest").join(&suite.name);
    let _ = fs::remove_dir_all(&stage);
    for dir in ["bin", "tests", "suites", "dev", "proc", "sys", "tmp"] {
        fs::create_dir_all(stage.join(dir))?;
    }
    let put = |from: &Path, to: &Path| -> Result<()> {
        let to = stage.join(to.strip_prefix("/").unwrap_or(to));
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent)?;
        }
        let strip = match suite.arch {
            Arch::X86_64 => "strip",
            Arch::Aarch64 => "aarch64-linux-gnu-strip",
        };
        let status = Command::new(strip)
            .arg("--strip-debug")
            .arg("-o")
            .arg(&to)
            .arg(from)
            .status()
            .with_context(|| format!("running {strip}"))?;
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
    for library in &files.libraries {
        let to = stage.join(library.strip_prefix("/").unwrap_or(library));
        fs::create_dir_all(to.parent().unwrap_or(&stage))?;
        fs::copy(library, &to).with_context(|| format!("copying {}", library.display()))?;
    }
    fs::rename(stage.join("bin/guest_init"), stage.join("init"))?;
    fs::copy(busybox, stage.join("bin/busybox"))?;
    for applet in BUSYBOX_APPLETS {
        std::os::unix::fs::symlink("busybox", stage.join("bin").join(applet))?;
    }
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
        stage.join("suites").join(&suite.name),
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

/// QEMU started on `suite`'s guest: the kernel, the initramfs, its console on the serial port
/// (standard output), no display, monitor, network or reboot.
fn start_qemu(kernel: &Path, initramfs: &Path, suite: &Suite) -> Result<std::process::Child> {
    // x86: the clocksource watchdog finds the emulated TSC unstable and switches
    // `sched_clock` by patching kernel text, which QEMU's emulation of two CPUs does not
    // survive (6.12 died with "Oops: int3" in `sched_clock_cpu`): the TSC is declared reliable.
    let (qemu, machine, console): (_, &[&str], _) = match suite.arch {
        Arch::X86_64 => ("qemu-system-x86_64", &["-cpu", "max"], "ttyS0 tsc=reliable"),
        Arch::Aarch64 => (
            "qemu-system-aarch64",
            &["-M", "virt", "-cpu", "neoverse-n1"],
            "ttyAMA0",
        ),
    };
    Command::new(qemu)
        .args(machine)
        .args(["-m", "2G"])
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
            "console={console} panic=-1 quiet loglevel=3 topdown.suite={}",
            suite.name
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {qemu}"))
}

/// The lines `qemu` writes (its console and its own messages), as they come; the channel
/// ends when both streams end.
fn console_lines(qemu: &mut std::process::Child) -> mpsc::Receiver<String> {
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
    received
}

/// Boots `suite`'s guest and reads its console until it says it is done, its time is up or
/// QEMU ends; returns the tests passed and failed (a guest that did not finish counts one
/// failure) and whether it finished.
fn boot(kernel: &Path, initramfs: &Path, suite: &Suite) -> Result<(u64, u64, bool)> {
    println!(
        "\nxtask: booting the {} guest (emulated {}, {})",
        suite.name,
        suite.arch.debian(),
        kernel.file_name().unwrap_or_default().to_string_lossy()
    );
    let mut qemu = start_qemu(kernel, initramfs, suite)?;
    let received = console_lines(&mut qemu);
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
    Ok((passed, failed, done && !panicked))
}
