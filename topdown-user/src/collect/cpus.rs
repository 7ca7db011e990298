//! Which CPUs the collector counts on. Hosts that run latency-critical work on CPUs the kernel
//! keeps apart (`isolcpus=`, `nohz_full=`: trading, telco, DPDK) want no counter, no
//! multiplexing timer and no tick of ours there, so by default those CPUs are left out: their
//! switch program returns at once, and nothing of ours is opened on them. `--cpus LIST` names
//! the CPUs to count on instead (isolated ones included, when named).
//!
//! A thread that runs on both kinds of CPU is charged its scheduler runtime whole at its
//! charges on counted CPUs (the runtime's growth since its previous charge), and its counters
//! only for the slices it ran on counted CPUs.

use std::{collections::BTreeSet, io::Read as _};

use anyhow::{Context as _, Result, bail};
use topdown_c2c::cpus::{cpu_list, parse_cpu_list};

use crate::pmu::sysfs::SysRoot;

/// The CPUs counted on, and the CPUs left out (online, not counted), with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuChoice {
    /// Online CPUs counted on, ascending.
    pub counted: Vec<u32>,
    /// Online CPUs not counted on, ascending.
    pub left_out: Vec<u32>,
    /// Whether `--cpus` chose (else the kernel's isolated CPUs were left out).
    pub named: bool,
}

impl CpuChoice {
    /// What [`super::CollectorOptions::cpus`] takes: the CPUs counted on when some are left
    /// out, `None` (every online CPU) when none is.
    pub fn collector_cpus(self) -> Option<Vec<u32>> {
        (!self.left_out.is_empty()).then_some(self.counted)
    }

    /// The one line that says which CPUs are left out and why; `None` when every online CPU
    /// is counted.
    pub fn line(&self) -> Option<String> {
        if self.left_out.is_empty() {
            return None;
        }
        let counted = format_list(&self.counted);
        let left_out = format_list(&self.left_out);
        Some(if self.named {
            format!("topdown-bpf: counting on CPUs {counted} only (--cpus): not on {left_out}")
        } else {
            format!(
                "topdown-bpf: counting on CPUs {counted}: not on {left_out}, which the kernel \
                 keeps apart (isolcpus, nohz_full), so nothing of ours runs there \
                 (--cpus {} counts there too)",
                format_list(&merged(&self.counted, &self.left_out))
            )
        })
    }
}

/// Chooses the CPUs to count on among the online ones of `sys`: those `requested` names
/// (each must be online), or else every online CPU but those the kernel keeps apart
/// (`/sys/devices/system/cpu/isolated` and `nohz_full`).
pub fn choose(requested: Option<&[u32]>, sys: &SysRoot) -> Result<CpuChoice> {
    let online = read_list(sys, "sys/devices/system/cpu/online")?
        .context("reading the online CPUs: /sys/devices/system/cpu/online is missing")?;
    let (counted, named): (BTreeSet<u32>, bool) = match requested {
        Some([]) => bail!("--cpus names no CPU (a CPU list is like 0-3,8)"),
        Some(requested) => {
            let offline: Vec<u32> = requested
                .iter()
                .copied()
                .filter(|cpu| !online.contains(cpu))
                .collect();
            if !offline.is_empty() {
                bail!(
                    "--cpus names CPUs that are not online here: {} (online: {})",
                    format_list(&offline),
                    format_list(&online.iter().copied().collect::<Vec<_>>())
                );
            }
            (requested.iter().copied().collect(), true)
        }
        None => {
            let mut apart = BTreeSet::new();
            for file in [
                "sys/devices/system/cpu/isolated",
                "sys/devices/system/cpu/nohz_full",
            ] {
                apart.extend(read_list(sys, file)?.unwrap_or_default());
            }
            let counted: BTreeSet<u32> = online.difference(&apart).copied().collect();
            if counted.is_empty() {
                bail!(
                    "every online CPU is kept apart by the kernel (isolcpus, nohz_full): name \
                     the CPUs to count on with --cpus"
                );
            }
            (counted, false)
        }
    };
    Ok(CpuChoice {
        left_out: online.difference(&counted).copied().collect(),
        counted: counted.into_iter().collect(),
        named,
    })
}

/// The CPUs of a kernel CPU-list file (`0-3,8`); `None` when the file is missing. An empty
/// file, or `(null)` (what `nohz_full` says without the option), is no CPU.
fn read_list(sys: &SysRoot, file: &str) -> Result<Option<BTreeSet<u32>>> {
    let path = sys.path(file);
    // At most 64 KiB: a list of 4096 CPUs one by one is under 20 KiB.
    let mut text = String::new();
    let read = std::fs::File::open(&path)
        .and_then(|file| std::io::Read::read_to_string(&mut file.take(64 * 1024), &mut text));
    match read {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    }
    let text = text.trim();
    if text.is_empty() || text == "(null)" {
        return Ok(Some(BTreeSet::new()));
    }
    parse_cpu_list(text)
        .map(|cpus| Some(cpus.into_iter().collect()))
        .with_context(|| format!("{} holds no CPU list: `{text}`", path.display()))
}

/// `cpus` (ascending) as a CPU list: `0-3,8`.
pub fn format_list(cpus: &[u32]) -> String {
    cpu_list(cpus.iter().copied().map(u64::from))
}

/// Two ascending lists as one.
fn merged(a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter()
        .chain(b)
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    /// A sysfs with `online` and, where given, `isolated` and `nohz_full`.
    fn sys(online: &str, isolated: Option<&str>, nohz_full: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("sys/devices/system/cpu");
        fs::create_dir_all(&cpu).unwrap();
        fs::write(cpu.join("online"), format!("{online}\n")).unwrap();
        for (name, value) in [("isolated", isolated), ("nohz_full", nohz_full)] {
            if let Some(value) = value {
                fs::write(cpu.join(name), format!("{value}\n")).unwrap();
            }
        }
        dir
    }

    #[test]
    fn isolated_and_nohz_full_cpus_are_left_out_unless_named() {
        let none = sys("0-3", Some(""), Some("(null)"));
        let root = SysRoot::at(none.path());
        let all = choose(None, &root).unwrap();
        assert_eq!(all.counted, [0, 1, 2, 3]);
        assert_eq!(all.line(), None, "nothing left out, nothing said");

        let apart = sys("0-7", Some("6-7"), Some("5-7"));
        let root = SysRoot::at(apart.path());
        let choice = choose(None, &root).unwrap();
        assert_eq!(
            (choice.counted.clone(), choice.left_out.clone()),
            (vec![0, 1, 2, 3, 4], vec![5, 6, 7])
        );
        let line = choice.line().unwrap();
        assert!(
            line.contains("counting on CPUs 0-4: not on 5-7")
                && line.contains("isolcpus, nohz_full")
                && line.contains("--cpus 0-7 counts there too"),
            "{line}"
        );
        let named = choose(Some(&[6, 7]), &root).unwrap();
        assert_eq!(
            (named.counted.clone(), named.left_out.clone()),
            (vec![6, 7], vec![0, 1, 2, 3, 4, 5])
        );
        assert!(named.line().unwrap().contains("(--cpus): not on 0-5"));

        assert!(choose(Some(&[]), &root).is_err(), "no CPU named");
        let error = choose(Some(&[3, 9]), &root).unwrap_err().to_string();
        assert_eq!(
            error,
            "--cpus names CPUs that are not online here: 9 (online: 0-7)"
        );
        // A kernel without the files (before nohz_full existed): every online CPU.
        let bare = sys("0-1", None, None);
        assert_eq!(
            choose(None, &SysRoot::at(bare.path())).unwrap().counted,
            [0, 1]
        );
        let all_apart = sys("0-1", Some("0-1"), None);
        assert!(choose(None, &SysRoot::at(all_apart.path())).is_err());
    }
}
