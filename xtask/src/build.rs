//! Building the BPF object and the `topdown-bpf` binary for either architecture.
//!
//! The BPF object is the same bpfel bytecode on both, built with `--cfg bpf_target_arch=...`
//! for the architecture it will run on (aya-ebpf reads it for register layouts); kernel field
//! offsets come from the running kernel's BTF at load time. An aarch64 binary is built on this
//! x86_64 host with the pinned nightly's `-Z build-std` (the nightly has no prebuilt aarch64
//! std here) and Debian's cross gcc as linker, statically linked so it runs in an initramfs.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use crate::{cargo, check, deps};

/// An architecture the tool is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// x86_64 (this host's).
    #[value(name = "x86_64")]
    X86_64,
    /// 64-bit Arm (Neoverse: Graviton, Ampere, Axion).
    #[value(name = "aarch64")]
    Aarch64,
}

impl Arch {
    /// The value of `bpf_target_arch` in the BPF object's build.
    fn bpf_target_arch(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }

    /// Debian's name for it (`amd64`, `arm64`).
    pub fn debian(self) -> &'static str {
        match self {
            Self::X86_64 => "amd64",
            Self::Aarch64 => "arm64",
        }
    }

    /// Where its BPF object lands: the x86_64 one where it always has (docs/development.md names it),
    /// the aarch64 one under its own target directory, so neither build undoes the other.
    pub fn ebpf_object(self, root: &Path) -> PathBuf {
        self.ebpf_target_dir(root)
            .join("bpfel-unknown-none/release/topdown-ebpf")
    }

    fn ebpf_target_dir(self, root: &Path) -> PathBuf {
        match self {
            Self::X86_64 => root.join("target"),
            Self::Aarch64 => root.join("target/ebpf-aarch64"),
        }
    }

    /// The directory of its user-space build ([`Profile::dir`] below it).
    pub fn out_dir(self, root: &Path) -> PathBuf {
        match self {
            Self::X86_64 => root.join("target"),
            Self::Aarch64 => root.join("target/aarch64-unknown-linux-gnu"),
        }
    }
}

/// The cargo profile of a user-space build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Unoptimised, as the host's tests run it.
    Dev,
    /// The emulated arm64 guests' (Cargo.toml's `guest`): `dev` with the code optimised a
    /// little, because an emulated CPU runs an unoptimised build's startup and snapshots tens of
    /// times slower than this host.
    Guest,
    /// Optimised, as users get it.
    Release,
}

impl Profile {
    /// The build's directory name below the target directory.
    pub fn dir(self) -> &'static str {
        match self {
            Self::Dev => "debug",
            Self::Guest => "guest",
            Self::Release => "release",
        }
    }

    /// `Release` where `release`, else `Dev`.
    pub fn chosen(release: bool) -> Self {
        if release { Self::Release } else { Self::Dev }
    }

    /// The cargo arguments that choose it.
    pub fn args(self) -> &'static [&'static str] {
        match self {
            Self::Dev => &[],
            Self::Guest => &["--profile", "guest"],
            Self::Release => &["--release"],
        }
    }
}

/// Builds the BPF object for `arch` with bpf-linker and BTF, and returns its path.
pub fn ebpf(root: &Path, arch: Arch) -> Result<PathBuf> {
    deps::ensure_bpf_linker()?;
    let flags = [
        format!("--cfg=bpf_target_arch=\"{}\"", arch.bpf_target_arch()),
        "-Cdebuginfo=2".to_owned(),
        "-Clink-arg=--btf".to_owned(),
    ]
    .join("\x1f");
    let status = cargo()
        .current_dir(root)
        .args([
            "build",
            "--package",
            "topdown-ebpf",
            "--bins",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ])
        .arg("--target-dir")
        .arg(arch.ebpf_target_dir(root))
        .env("CARGO_ENCODED_RUSTFLAGS", flags)
        .env_remove("RUSTFLAGS")
        .env("PATH", deps::path_with_cargo_bin())
        .status()
        .context("running cargo build for the BPF object")?;
    check(status, "building the BPF object")?;
    Ok(arch.ebpf_object(root))
}

/// A cargo command that builds for `arch`, with the BPF object of that architecture to embed:
/// for aarch64, cross-compiled (`-Z build-std`, cross gcc, static), after installing what that
/// needs. Every aarch64 build goes through here with the same flags, so they share one std.
pub fn cargo_for(root: &Path, arch: Arch, subcommand: &str) -> Result<Command> {
    let object = ebpf(root, arch)?;
    let mut command = cargo();
    command
        .current_dir(root)
        .arg(subcommand)
        .env("TOPDOWN_EBPF_OBJ", &object);
    if arch == Arch::Aarch64 {
        deps::ensure_cross_tools()?;
        command
            .args(["--target", "aarch64-unknown-linux-gnu", "-Z", "build-std"])
            .env(
                "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
                "aarch64-linux-gnu-gcc",
            )
            // Static glibc warns at every link that name lookups (getaddrinfo, getpwuid_r)
            // would need its shared libraries: said once in docs/arm64.md, not at every link.
            .env(
                "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
                "-C target-feature=+crt-static -A linker-messages",
            )
            .env("CC_aarch64_unknown_linux_gnu", "aarch64-linux-gnu-gcc")
            .env("AR_aarch64_unknown_linux_gnu", "aarch64-linux-gnu-ar");
    }
    Ok(command)
}

/// Where the static x86_64 release build lands (an explicit `--target`, so that `crt-static`
/// links the tool and not the build scripts and proc macros).
pub fn static_x86_64_dir(root: &Path) -> PathBuf {
    root.join("target/x86_64-unknown-linux-gnu")
}

/// Builds the BPF object and the `topdown-bpf` binary for `arch` that embeds it; returns the
/// binary. Release builds are static on both architectures (one binary runs on every
/// distribution, whatever its C library: Debian 11 and Amazon Linux 2 have a glibc older than
/// this host's); the x86_64 debug build the tests run stays dynamic.
pub fn user(root: &Path, profile: Profile, arch: Arch) -> Result<PathBuf> {
    let mut build = cargo_for(root, arch, "build")?;
    build
        .args(["--package", "topdown-user", "--bins"])
        .args(profile.args());
    let static_x86_64 = profile == Profile::Release && arch == Arch::X86_64;
    if static_x86_64 {
        build.args(["--target", "x86_64-unknown-linux-gnu"]).env(
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
            "-C target-feature=+crt-static -A linker-messages",
        );
    }
    check(
        build.status().context("running cargo build")?,
        "building topdown-bpf",
    )?;
    if static_x86_64 {
        return Ok(static_x86_64_dir(root).join("release/topdown-bpf"));
    }
    Ok(arch.out_dir(root).join(profile.dir()).join("topdown-bpf"))
}
