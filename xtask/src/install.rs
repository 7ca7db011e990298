//! `cargo xtask install`: the binary, its man pages and its shell completions under a prefix,
//! where `man`, bash-completion, zsh and fish look for them.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

use crate::{
    build::{self, Arch},
    check,
};

/// Where each completion script goes under the prefix, and the shell that makes it.
pub const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "share/bash-completion/completions/topdown-bpf"),
    ("zsh", "share/zsh/site-functions/_topdown-bpf"),
    ("fish", "share/fish/vendor_completions.d/topdown-bpf.fish"),
];

/// Builds `topdown-bpf` (optimised unless `debug`) and installs it, its pages and its
/// completions under `prefix`; returns what it wrote.
pub fn install(root: &Path, prefix: &Path, debug: bool) -> Result<Vec<PathBuf>> {
    let binary = build::user(root, build::Profile::chosen(!debug), Arch::X86_64)?;
    let bin = prefix.join("bin/topdown-bpf");
    copy(&binary, &bin, 0o755)?;
    let mut written = vec![bin.clone()];
    written.extend(write_docs(&bin, prefix)?);
    Ok(written)
}

/// The man pages (PREFIX/share/man/man1) and completions ([`COMPLETIONS`]) that `binary` (one
/// this host runs: they are text, the same for every architecture) makes, under `prefix`.
pub fn write_docs(binary: &Path, prefix: &Path) -> Result<Vec<PathBuf>> {
    let man = prefix.join("share/man/man1");
    fs::create_dir_all(&man).with_context(|| format!("creating {}", man.display()))?;
    let status = Command::new(binary)
        .args(["generate", "man"])
        .arg(&man)
        .status()
        .context("running topdown-bpf generate man")?;
    check(status, "writing the man pages")?;
    let mut written = vec![man];
    for (shell, place) in COMPLETIONS {
        let to = prefix.join(place);
        let output = Command::new(binary)
            .args(["generate", "completions", shell])
            .output()
            .with_context(|| format!("running topdown-bpf generate completions {shell}"))?;
        check(output.status, &format!("writing the {shell} completions"))?;
        write(&to, &output.stdout, 0o644)?;
        written.push(to);
    }
    Ok(written)
}

/// Copies `from` to `to` (its folder made) with `mode`. Replaced, not overwritten in place: a
/// running copy keeps its file.
pub fn copy(from: &Path, to: &Path, mode: u32) -> Result<()> {
    make_parent(to)?;
    let _ = fs::remove_file(to);
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    set_mode(to, mode)
}

/// Writes `contents` to `to` (its folder made) with `mode`.
pub fn write(to: &Path, contents: &[u8], mode: u32) -> Result<()> {
    make_parent(to)?;
    fs::write(to, contents).with_context(|| format!("writing {}", to.display()))?;
    set_mode(to, mode)
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))
}

fn make_parent(path: &Path) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    Ok(())
}
