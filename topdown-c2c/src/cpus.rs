//! The kernel's CPU lists (`0-3,8,10-11`), read and written, and the host's names: what
//! perf.data's headers and sysfs both spell this way.

use anyhow::{Result, bail};

/// Ascending numbers as a kernel bitmap list (`0,2-3,5`): the inverse of [`parse_cpu_list`].
pub fn cpu_list(numbers: impl IntoIterator<Item = u64>) -> String {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for n in numbers {
        match spans.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => spans.push((n, n)),
        }
    }
    spans
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses a kernel CPU list such as `0-3,8,10-11` (what sysfs, perf.data headers and `--cpus`
/// spell); a reversed range (`3-1`) is an error, as is a CPU no kernel can have.
pub fn parse_cpu_list(list: &str) -> Result<Vec<u32>> {
    let cpu = |text: &str| -> Result<u32> {
        let cpu: u32 = text.trim().parse()?;
        if cpu >= MAX_CPUS {
            bail!("CPU {cpu} in `{list}`: the kernel has at most {MAX_CPUS} CPUs");
        }
        Ok(cpu)
    };
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (cpu(lo)?, cpu(hi)?);
                if lo > hi {
                    bail!("`{part}` in `{list}` is a reversed range");
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(cpu(part)?),
        }
        if cpus.len() > MAX_CPUS as usize {
            bail!("`{list}` names more than {MAX_CPUS} CPUs");
        }
    }
    Ok(cpus)
}

/// The most CPUs a Linux kernel supports (`NR_CPUS` at most 8192): what a CPU list may name.
pub const MAX_CPUS: u32 = 8192;

/// This host's name and kernel release (`uname -n`, `uname -r`); empty where unreadable.
pub fn host_names() -> (String, String) {
    let read = |path| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    (
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/osrelease"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("3-1").is_err(), "a reversed range");
        assert_eq!(cpu_list([0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
    }

    #[test]
    fn cpu_lists_name_no_cpu_a_kernel_cannot_have() {
        assert!(parse_cpu_list("0-4294967295").is_err());
        assert!(parse_cpu_list("8192").is_err());
        assert_eq!(parse_cpu_list("8191").unwrap(), [8191]);
        assert!(parse_cpu_list("x").is_err());
    }
}
