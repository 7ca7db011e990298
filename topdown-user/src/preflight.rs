//! Checks that say, before anything is loaded, what is missing and what to do.

use std::{fs, path::Path};

use anyhow::{Result, bail};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Fails with one line of advice if this process cannot load the collector.
pub fn check() -> Result<()> {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !has_privileges(&status) {
        bail!(
            "needs root, or CAP_BPF and CAP_PERFMON: run with sudo (or through `cargo xtask run`)"
        );
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!(
            "no kernel BTF at /sys/kernel/btf/vmlinux: topdown-bpf needs a kernel built with \
             CONFIG_DEBUG_INFO_BTF=y"
        );
    }
    host_pids()
}

/// Fails with one line when this process is in a PID namespace of its own: the kernel side
/// names threads by the host's ids, which such a namespace neither shows nor translates.
pub fn host_pids() -> Result<()> {
    if let Ok(meta) = fs::metadata("/proc/self/ns/pid") {
        use std::os::unix::fs::MetadataExt as _;
        if !in_host_pid_namespace(meta.ino()) {
            bail!(
                "runs in a PID namespace of its own (a container without the host's PIDs): the \
                 kernel names threads by the host's ids, which this namespace cannot see; run \
                 it in the host's PID namespace (Kubernetes `hostPID: true`, `docker run \
                 --pid=host`)"
            );
        }
    }
    Ok(())
}

/// Whether the PID namespace whose `/proc/self/ns/pid` inode is `inode` is the host's: the
/// kernel's first one has a fixed inode (`PROC_PID_INIT_INO`), every other a new one.
pub fn in_host_pid_namespace(inode: u64) -> bool {
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    inode == PROC_PID_INIT_INO
}

/// Whether the effective capabilities in a `/proc/<pid>/status` text allow loading BPF tracing
/// programs and opening system-wide counters.
pub fn has_privileges(status: &str) -> bool {
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| effective & (1 << cap) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_sys_admin_or_bpf_with_perfmon() {
        assert!(has_privileges("CapEff:\t000001ffffffffff\n"));
        assert!(has_privileges(&format!(
            "CapEff:\t{:016x}\n",
            1u64 << CAP_SYS_ADMIN
        )));
        assert!(has_privileges(&format!(
            "CapEff:\t{:016x}\n",
            (1u64 << CAP_BPF) | (1u64 << CAP_PERFMON)
        )));
        assert!(!has_privileges(&format!(
            "CapEff:\t{:016x}\n",
            1u64 << CAP_BPF
        )));
        assert!(!has_privileges("CapEff:\t0000000000000000\n"));
        assert!(!has_privileges(""));
    }
}
