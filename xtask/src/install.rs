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
const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "share/bash-completion/completions/topdown-bpf"),
    ("zsh", "share/zsh/site-functions/_topdown-bpf"),
    ("fish", "share/fish/vendor_completions.d/topdown-bpf.fish"),
];

/// Builds `topdown-bpf` (optimised unless `debug`) and installs it, its pages and its
/// completions under `prefix`; returns what it wrote.
pub fn install(root: &Path, prefix: &Path, debug: bool) -> Result<Vec<PathBuf>> {
    let binary = build::user(root, !debug, Arch::X86_64)?;
    let mut written = Vec::new();
    let bin = prefix.join("bin/topdown-bpf");
    copy(&binary, &bin)?;
    written.push(bin.clone());
    let man = prefix.join("share/man/man1");
    let status = Command::new(&bin)
        .args(["generate", "man"])
        .arg(&man)
        .status()
        .context("running topdown-bpf generate man")?;
    check(status, "writing the man pages")?;
    written.push(man);
    for (shell, place) in COMPLETIONS {
        let to = prefix.join(place);
        let output = Command::new(&bin)
            .args(["generate", "completions", shell])
            .output()
            .with_context(|| format!("running topdown-bpf generate completions {shell}"))?;
        check(output.status, &format!("writing the {shell} completions"))?;
        write(&to, &output.stdout)?;
        written.push(to);
    }
    Ok(written)
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    make_parent(to)?;
    // Replaced, not overwritten in place: a running copy keeps its file.
    let _ = fs::remove_file(to);
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn write(to: &Path, contents: &[u8]) -> Result<()> {
    make_parent(to)?;
    fs::write(to, contents).with_context(|| format!("writing {}", to.display()))
}

fn make_parent(path: &Path) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    Ok(())
}
