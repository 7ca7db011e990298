//! What machine this is: CPU identity (x86 vendor-family-model-stepping, Arm MIDR), SMT state,
//! and the core PMUs with the CPUs each covers (hybrid parts have `cpu_core` and `cpu_atom`).
//! Everything is read below one root, so tests describe whole machines as fixture trees.

use std::{fmt, fs, str::FromStr, sync::OnceLock};

use anyhow::{Context as _, Result, bail};

use super::sysfs::SysRoot;
pub use topdown_c2c::cpus::{MAX_CPUS, cpu_list, host_names, parse_cpu_list};

/// CPU identity, as perf's and Intel's mapfiles key it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuId {
    /// x86: `GenuineIntel-6-8F-8`, `AuthenticAMD-25-11-1`.
    X86 {
        /// `vendor_id`: `GenuineIntel`, `AuthenticAMD`.
        vendor: String,
        /// Family (decimal, as in the mapfiles).
        family: u32,
        /// Model.
        model: u32,
        /// Stepping, when known.
        stepping: Option<u32>,
    },
    /// Arm: implementer and part number from `MIDR_EL1`.
    Arm {
        /// Implementer (0x41 is Arm Ltd).
        implementer: u32,
        /// Part number (0xd40 is Neoverse V1, 0xd49 Neoverse N2).
        part: u32,
    },
    /// Neither could be read.
    Unknown,
}

impl fmt::Display for CpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::X86 {
                vendor,
                family,
                model,
                stepping,
            } => {
                write!(f, "{vendor}-{family}-{model:X}")?;
                stepping.map_or(Ok(()), |s| write!(f, "-{s:X}"))
            }
            Self::Arm { implementer, part } => write!(f, "arm-0x{implementer:02x}-0x{part:03x}"),
            Self::Unknown => f.write_str("unknown"),
        }
    }
}

impl FromStr for CpuId {
    type Err = anyhow::Error;

    /// Parses mapfile style `GenuineIntel-6-8F[-stepping]` (family decimal, model and stepping
    /// hex), `arm-0x41-0xd40`, or an Arm MIDR as perf's arm64 mapfile and `PERF_CPUID` write
    /// it (`0x00000000410fd400`).
    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim();
        if let Some(midr) = text.strip_prefix("0x")
            && !midr.contains('-')
        {
            let midr = u64::from_str_radix(midr, 16)
                .with_context(|| format!("`{text}` is not a MIDR (hex)"))?;
            return Ok(Self::from_midr(midr));
        }
        let parts: Vec<&str> = text.split('-').collect();
        let hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16);
        match parts.as_slice() {
            ["arm", implementer, part] => Ok(Self::Arm {
                implementer: hex(implementer)?,
                part: hex(part)?,
            }),
            [vendor, family, model, rest @ ..] if rest.len() <= 1 => Ok(Self::X86 {
                vendor: (*vendor).to_owned(),
                family: family
                    .parse()
                    .with_context(|| format!("family `{family}` in `{text}`"))?,
                model: hex(model).with_context(|| format!("model `{model}` in `{text}`"))?,
                stepping: rest.first().map(|s| hex(s)).transpose()?,
            }),
            _ => bail!(
                "`{text}` is not a CPU id: use VENDOR-FAMILY-MODEL as in perfmon's mapfile, \
                 e.g. GenuineIntel-6-8F or AuthenticAMD-25-11, arm-0x41-0xd40 or an Arm MIDR \
                 (0x00000000410fd400)"
            ),
        }
    }
}

/// A core PMU (one that counts CPU pipeline events).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorePmu {
    /// `cpu`, `cpu_core`, `cpu_atom`, `armv8_pmuv3_0`, ...
    pub name: String,
    /// The CPUs it covers (`cpus` in sysfs); all CPUs when the file is absent.
    pub cpus: Option<Vec<u32>>,
    /// `caps/slots` (Arm: pipeline width), when present.
    pub slots: Option<u32>,
}

/// The machine as far as TopDown cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// CPU identity: the CPU's own, or the one forced with `--cpuid` / `TOPDOWN_CPUID`.
    pub cpu: CpuId,
    /// Whether `cpu` was forced rather than read from the CPU.
    pub forced: bool,
    /// Whether SMT siblings are active (`/sys/devices/system/cpu/smt/active`).
    pub smt_active: bool,
    /// Core PMUs, by name.
    pub core_pmus: Vec<CorePmu>,
    /// Persistent memory: the ACPI has an NFIT table (`/sys/firmware/acpi/tables/NFIT`), as
    /// perf decides its `#has_pmem`.
    pub has_pmem: bool,
}

/// The CPU identity `--cpuid` / `TOPDOWN_CPUID` forces on this host, set once at start.
static FORCED_CPU: OnceLock<CpuId> = OnceLock::new();

/// Makes every later read of this host's machine take `cpu` as its CPU (perf's `PERF_CPUID`):
/// its model's counter sets then open on the core PMU the host has. Once per process.
pub fn force_cpu(cpu: CpuId) {
    let _ = FORCED_CPU.set(cpu);
}

/// The CPU `--cpuid ID` names: an Arm core's name (`neoverse-n2`) or any [`CpuId`] form.
pub fn parse_forced_cpu(id: &str) -> Result<CpuId> {
    if let Some(cpu) = super::topdown_model::arm_cpu_named(id) {
        return Ok(cpu);
    }
    id.parse().with_context(|| {
        format!(
            "--cpuid {id}: not a CPU id; use a core name ({}) or a perf CPU id",
            super::topdown_model::arm_cpu_names()
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

impl Machine {
    /// Reads the machine below `sys` (the host's with the CPU forced by [`force_cpu`], if it
    /// was).
    pub fn read(sys: &SysRoot) -> Result<Self> {
        Self::read_as(sys, FORCED_CPU.get().filter(|_| sys.is_host()).cloned())
    }

    /// Reads the machine below `sys`, taking `forced` as its CPU when given.
    pub fn read_as(sys: &SysRoot, forced: Option<CpuId>) -> Result<Self> {
        let cpuinfo = fs::read_to_string(sys.path("proc/cpuinfo")).unwrap_or_default();
        let midr = fs::read_to_string(
            sys.path("sys/devices/system/cpu/cpu0/regs/identification/midr_el1"),
        )
        .ok();
        let is_forced = forced.is_some();
        let cpu = forced.unwrap_or_else(|| cpu_id(&cpuinfo, midr.as_deref()));
        let smt_active = fs::read_to_string(sys.path("sys/devices/system/cpu/smt/active"))
            .is_ok_and(|s| s.trim() == "1");
        let mut core_pmus = Vec::new();
        for name in sys.pmu_names()? {
            let dir = sys.path(&format!("sys/bus/event_source/devices/{name}"));
            // A core PMU by what it is, as perf's `is_pmu_core` finds it: x86's `cpu`, or any
            // PMU with a `cpus` file (hybrid x86 `cpu_core`/`cpu_atom`; every Arm CPU PMU,
            // whatever the firmware named it: `armv8_pmuv3`, `armv8_pmuv3_0` under ACPI,
            // `armv8_neoverse_n1` ...). Uncore PMUs have a `cpumask` instead.
            let cpus = match fs::read_to_string(dir.join("cpus")) {
                Ok(list) => Some(parse_cpu_list(&list)?),
                Err(_) if name == "cpu" => None,
                Err(_) => continue,
            };
            // Arm prints it as 0x%08x.
            let slots = fs::read_to_string(dir.join("caps/slots"))
                .ok()
                .and_then(|s| {
                    let s = s.trim();
                    s.strip_prefix("0x")
                        .map_or_else(|| s.parse().ok(), |hex| u32::from_str_radix(hex, 16).ok())
                });
            core_pmus.push(CorePmu {
                name,
                cpus,
                slots: slots.filter(|&n| n > 0),
            });
        }
        Ok(Self {
            cpu,
            forced: is_forced,
            smt_active,
            core_pmus,
            has_pmem: sys.path("sys/firmware/acpi/tables/NFIT").exists(),
        })
    }

    /// The core PMU called `name`.
    pub fn core_pmu(&self, name: &str) -> Option<&CorePmu> {
        self.core_pmus.iter().find(|pmu| pmu.name == name)
    }

    /// Whether the machine has any core PMU.
    pub fn has_hardware_pmu(&self) -> bool {
        !self.core_pmus.is_empty()
    }
}

fn cpu_id(cpuinfo: &str, midr: Option<&str>) -> CpuId {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_owned())
        })
    };
    if let (Some(vendor), Some(family), Some(model)) =
        (field("vendor_id"), field("cpu family"), field("model"))
        && let (Ok(family), Ok(model)) = (family.parse(), model.parse())
    {
        return CpuId::X86 {
            vendor,
            family,
            model,
            stepping: field("stepping").and_then(|s| s.parse().ok()),
        };
    }
    midr.and_then(|m| u64::from_str_radix(m.trim().trim_start_matches("0x"), 16).ok())
        .map_or(CpuId::Unknown, CpuId::from_midr)
}

impl CpuId {
    /// The implementer and part number of an Arm `MIDR_EL1` value.
    pub fn from_midr(midr: u64) -> Self {
        Self::Arm {
            implementer: ((midr >> 24) & 0xff) as u32,
            part: ((midr >> 4) & 0xfff) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ids_round_trip_in_mapfile_style() {
        let spr: CpuId = "GenuineIntel-6-8F".parse().unwrap();
        assert_eq!(
            spr,
            CpuId::X86 {
                vendor: "GenuineIntel".into(),
                family: 6,
                model: 0x8f,
                stepping: None
            }
        );
        assert_eq!(spr.to_string(), "GenuineIntel-6-8F");
        let zen4: CpuId = "AuthenticAMD-25-11-1".parse().unwrap();
        assert_eq!(zen4.to_string(), "AuthenticAMD-25-11-1");
        let v1: CpuId = "arm-0x41-0xd40".parse().unwrap();
        assert_eq!(
            v1,
            CpuId::Arm {
                implementer: 0x41,
                part: 0xd40
            }
        );
        assert!("Intel".parse::<CpuId>().is_err());
        assert!("GenuineIntel-six-8F".parse::<CpuId>().is_err());
    }

    #[test]
    fn reads_x86_cpuinfo_and_arm_midr() {
        let info = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n\
                    stepping\t: 8\n";
        assert_eq!(cpu_id(info, None).to_string(), "GenuineIntel-6-8F-8");
        assert_eq!(
            cpu_id("", Some("0x00000000410fd401\n")),
            CpuId::Arm {
                implementer: 0x41,
                part: 0xd40
            }
        );
        assert_eq!(cpu_id("", None), CpuId::Unknown);
    }

    /// The CPU PMU by what it is: whatever the firmware named it, the PMU with a `cpus` file;
    /// uncore PMUs (`cpumask`) and software ones are not; a forced CPU id replaces the MIDR's.
    #[test]
    fn arm_cpu_pmus_are_found_by_their_cpus_file_under_any_name() {
        let root = tempfile::tempdir().unwrap();
        let pmu = |name: &str, ty: u32, file: Option<(&str, &str)>| {
            let dir = root.path().join("sys/bus/event_source/devices").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("type"), format!("{ty}\n")).unwrap();
            if let Some((file, text)) = file {
                std::fs::write(dir.join(file), text).unwrap();
            }
        };
        pmu("armv8_neoverse_n1", 10, Some(("cpus", "0-63\n")));
        pmu("arm_cmn_0", 11, Some(("cpumask", "0\n")));
        pmu("software", 1, None);
        let midr = root
            .path()
            .join("sys/devices/system/cpu/cpu0/regs/identification");
        std::fs::create_dir_all(&midr).unwrap();
        std::fs::write(midr.join("midr_el1"), "0x00000000413fd0c1\n").unwrap();
        let sys = SysRoot::at(root.path());
        let machine = Machine::read(&sys).unwrap();
        let names: Vec<&str> = machine.core_pmus.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["armv8_neoverse_n1"]);
        assert_eq!(machine.core_pmus[0].cpus.as_ref().unwrap().len(), 64);
        assert_eq!(
            machine.cpu,
            CpuId::Arm {
                implementer: 0x41,
                part: 0xd0c
            }
        );
        assert!(!machine.forced);
        assert!(!machine.has_pmem, "no NFIT table");
        let acpi = root.path().join("sys/firmware/acpi/tables");
        std::fs::create_dir_all(&acpi).unwrap();
        std::fs::write(acpi.join("NFIT"), b"NFIT").unwrap();
        assert!(Machine::read(&sys).unwrap().has_pmem, "perf's #has_pmem");
        let n2 = parse_forced_cpu("neoverse-n2").unwrap();
        let forced = Machine::read_as(&sys, Some(n2.clone())).unwrap();
        assert_eq!((forced.cpu, forced.forced), (n2, true));
        assert_eq!(forced.core_pmus, machine.core_pmus, "on the PMU it finds");
        assert_eq!(
            parse_forced_cpu("0x00000000410fd490").unwrap(),
            parse_forced_cpu("arm-0x41-0xd49").unwrap()
        );
        let error = parse_forced_cpu("pentium").unwrap_err();
        assert!(format!("{error:#}").contains("neoverse-n2"), "{error:#}");
    }
}
