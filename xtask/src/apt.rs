//! Debian's archive without touching the host's apt: a private apt configuration per
//! architecture (Debian 11, 12 and 13 with their backports, from the mirror the host uses),
//! cached in `~/.cache/topdown-bpf/apt`, for the guests' kernels and busybox and for perf 6.12.

use std::{env, fs, path::PathBuf, process::Command, time::Duration};

use anyhow::{Context as _, Result};

use crate::{build::Arch, check};

/// An apt configuration of our own for one architecture (its own sources, state and cache:
/// the host's apt is not touched), with Debian 11, 12 and 13 (and their backports, where the
/// newest kernels are), from the mirror the host's apt uses; its lists are brought up to date
/// once an hour, and at once when the suites change.
pub struct PrivateApt {
    /// Its configuration, state, cache and downloads.
    pub dir: PathBuf,
}

impl PrivateApt {
    pub fn new(arch: Arch) -> Result<Self> {
        let dir = cache_dir().join("apt").join(arch.debian());
        for sub in ["lists/partial", "cache/archives/partial", "etc"] {
            fs::create_dir_all(dir.join(sub)).with_context(|| format!("creating {sub}"))?;
        }
        fs::write(dir.join("status"), "")?;
        let mirror = debian_mirror();
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let a = arch.debian();
        let sources: String = [
            "bullseye",
            "bookworm",
            "bookworm-backports",
            "trixie",
            "trixie-backports",
        ]
        .iter()
        .map(|suite| format!("deb [arch={a} signed-by={keyring}] {mirror} {suite} main\n"))
        .collect();
        fs::write(dir.join("etc/sources.list"), &sources)?;
        let d = dir.display();
        fs::write(
            dir.join("etc/apt.conf"),
            format!(
                "Dir::State \"{d}\";\nDir::State::Lists \"{d}/lists\";\nDir::State::status \
                 \"{d}/status\";\nDir::Cache \"{d}/cache\";\nDir::Etc::SourceList \
                 \"{d}/etc/sources.list\";\nDir::Etc::SourceParts \"/nonexistent\";\n\
                 APT::Architecture \"{a}\";\nAPT::Architectures {{ \"{a}\"; }};\n"
            ),
        )?;
        let apt = Self { dir };
        let stamp = apt.dir.join("updated");
        // The stamp holds the sources its lists are of: a suite added since is fetched now.
        let fresh = fs::read_to_string(&stamp).is_ok_and(|listed| listed == sources)
            && fs::metadata(&stamp)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age < Duration::from_secs(3600)));
        if !fresh {
            let update = apt
                .command("apt-get")
                .args(["update", "-qq"])
                .output()
                .context("running apt-get update")?;
            check(
                update.status,
                &format!("apt-get update for the {a} packages"),
            )?;
            fs::write(stamp, &sources)?;
        }
        Ok(apt)
    }

    /// `program` (apt-get, apt-cache) under this configuration, run in its directory.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command
            .env("APT_CONFIG", self.dir.join("etc/apt.conf"))
            .current_dir(&self.dir);
        command
    }

    /// Downloads `package`'s .deb (`NAME`, `NAME:ARCH` or `NAME/SUITE`) into this configuration's directory; returns its path.
    pub fn download(&self, package: &str) -> Result<PathBuf> {
        let fetched = self
            .command("apt-get")
            .args(["download", "-qq", package])
            .output()
            .context("running apt-get download")?;
        check(fetched.status, &format!("apt-get download of {package}"))?;
        let name = package.split([':', '/']).next().unwrap_or(package);
        fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.extension().is_some_and(|x| x == "deb")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}_")))
            })
            .with_context(|| format!("apt-get download left no {name}_*.deb"))
    }
}

/// The Debian mirror this host's apt uses (its `URIs:` or `deb` line), so the guests' packages
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

pub fn cache_dir() -> PathBuf {
    env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"))
        .join("topdown-bpf")
}
