//! Which physical core each CPU belongs to (`/sys/devices/system/cpu/cpuN/topology`).

use std::{collections::BTreeMap, fs};

use anyhow::{Context as _, Result};

use super::sysfs::SysRoot;

/// A physical core: package (socket) and core id within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoreId {
    /// `physical_package_id`.
    pub package: u32,
    /// `core_id`.
    pub core: u32,
}

impl std::fmt::Display for CoreId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S{}-C{}", self.package, self.core)
    }
}

/// The CPUs of every core, for `cpus`.
pub fn cores(sys: &SysRoot, cpus: &[u32]) -> Result<BTreeMap<CoreId, Vec<u32>>> {
    let mut cores: BTreeMap<CoreId, Vec<u32>> = BTreeMap::new();
    for &cpu in cpus {
        let read = |name: &str| -> Result<u32> {
            let path = sys.path(&format!("sys/devices/system/cpu/cpu{cpu}/topology/{name}"));
            fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?
                .trim()
                .parse()
                .with_context(|| format!("parsing {}", path.display()))
        };
        let id = CoreId {
            package: read("physical_package_id")?,
            core: read("core_id")?,
        };
        cores.entry(id).or_default().push(cpu);
    }
    Ok(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smt_siblings_share_a_core() {
        let sys = SysRoot::fixture("skylake-smt-on");
        let cores = cores(&sys, &[0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
        assert_eq!(cores.len(), 4);
        let first = CoreId {
            package: 0,
            core: 0,
        };
        assert_eq!(cores[&first], [0, 4]);
        assert_eq!(first.to_string(), "S0-C0");
        assert!(super::cores(&sys, &[9]).is_err());
    }
}
