//! Which TopDown model a core type runs: by CPU identity and, on hybrid parts, by core PMU.
//! The Intel and AMD model numbers follow perf's `pmu-events/arch/x86/mapfile.csv` (a test
//! checks them against its regexes).

use super::machine::CpuId;

/// Intel family-6 models by TopDown model: PERF_METRICS L1 with generic-counter L2 (Ice Lake
/// client and server, Tiger Lake, Rocket Lake).
const ICELAKE: &[u32] = &[0x7D, 0x7E, 0x6A, 0x6C, 0x8C, 0x8D, 0xA7];
/// PERF_METRICS L1 and L2: Sapphire Rapids, Emerald Rapids, Granite Rapids.
const SAPPHIRERAPIDS: &[u32] = &[0x8F, 0xCF, 0xAD, 0xAE];
/// Hybrid parts: `cpu_core` (Golden Cove class) and `cpu_atom` (Gracemont class): Alder Lake,
/// Raptor Lake, Meteor Lake.
const HYBRID: &[u32] = &[0x97, 0x9A, 0xB7, 0xBA, 0xBF, 0xAA, 0xAC];
/// Goldmont and Goldmont Plus (Atom, width 3, Level 1).
const GOLDMONT: &[u32] = &[0x5C, 0x5F, 0x7A];
/// Tremont (Atom, width 4): Snow Ridge, Elkhart Lake, Jasper Lake.
const TREMONT: &[u32] = &[0x86, 0x96, 0x9C];
/// Skylake-class: generic counters, width 4 (Skylake, Kaby/Coffee/Comet Lake, Skylake-SP and
/// Cascade Lake).
const SKYLAKE: &[u32] = &[0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6, 0x55];

/// Why a core type has no TopDown model, when it has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Run this model.
    Model(&'static str),
    /// Skylake-class with SMT on: the inputs count per core, so per-thread TopDown would be
    /// wrong; only per-core mode (model `skylake_smt`) is honest.
    PerCoreOnly,
    /// Known CPU without a TopDown model in this build.
    Unsupported(String),
}

/// The model for `cpu`, for events counted on core PMU `pmu` (`cpu`, `cpu_core`, `cpu_atom`,
/// `armv8_pmuv3_0`), with SMT active or not.
pub fn select(cpu: &CpuId, pmu: &str, smt_active: bool) -> Selection {
    match cpu {
        CpuId::X86 {
            vendor,
            family: 6,
            model,
            ..
        } if vendor == "GenuineIntel" => {
            let model = *model;
            if HYBRID.contains(&model) {
                return match pmu {
                    "cpu_core" => Selection::Model("alderlake_core"),
                    "cpu_atom" => Selection::Model("alderlake_atom"),
                    other => Selection::Unsupported(format!("hybrid CPU, unexpected PMU {other}")),
                };
            }
            if ICELAKE.contains(&model) {
                Selection::Model("icelake")
            } else if SAPPHIRERAPIDS.contains(&model) {
                Selection::Model("sapphirerapids")
            } else if GOLDMONT.contains(&model) {
                Selection::Model("goldmont")
            } else if TREMONT.contains(&model) {
                Selection::Model("tremont")
            } else if SKYLAKE.contains(&model) {
                if smt_active {
                    Selection::PerCoreOnly
                } else {
                    Selection::Model("skylake")
                }
            } else {
                Selection::Unsupported(format!(
                    "{cpu}: no TopDown model for this Intel CPU (pre-Skylake big cores and \
                     pre-Goldmont Atoms are not built)"
                ))
            }
        }
        CpuId::X86 {
            vendor,
            family,
            model,
            ..
        } if vendor == "AuthenticAMD" => match family {
            // perf: AuthenticAMD-25-([245][[:xdigit:]]|[[:xdigit:]]) is Zen 3, the rest Zen 4.
            25 if !matches!(model, 0x00..=0x0F | 0x20..=0x2F | 0x40..=0x5F) => {
                Selection::Model("zen4")
            }
            26 => Selection::Model("zen5"),
            _ => Selection::Unsupported(format!(
                "{cpu}: AMD TopDown (pipeline utilization) needs Zen 4 or later"
            )),
        },
        CpuId::Arm {
            implementer: 0x41,
            part: 0xd40,
        } => Selection::Model("neoverse_v1"),
        CpuId::Arm {
            implementer: 0x41,
            part: 0xd49 | 0xd4f,
        } => Selection::Model("neoverse_n2"),
        other => Selection::Unsupported(format!("{other}: no TopDown model for this CPU")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intel(model: u32) -> CpuId {
        CpuId::X86 {
            vendor: "GenuineIntel".into(),
            family: 6,
            model,
            stepping: None,
        }
    }

    #[test]
    fn intel_families() {
        assert_eq!(
            select(&intel(0x8F), "cpu", true),
            Selection::Model("sapphirerapids")
        );
        assert_eq!(
            select(&intel(0x7E), "cpu", true),
            Selection::Model("icelake")
        );
        assert_eq!(
            select(&intel(0x97), "cpu_core", true),
            Selection::Model("alderlake_core")
        );
        assert_eq!(
            select(&intel(0x97), "cpu_atom", true),
            Selection::Model("alderlake_atom")
        );
        assert_eq!(
            select(&intel(0x55), "cpu", false),
            Selection::Model("skylake")
        );
        assert_eq!(select(&intel(0x55), "cpu", true), Selection::PerCoreOnly);
        assert_eq!(
            select(&intel(0x5C), "cpu", false),
            Selection::Model("goldmont")
        );
        assert_eq!(
            select(&intel(0x86), "cpu", false),
            Selection::Model("tremont")
        );
        assert!(matches!(
            select(&intel(0x3C), "cpu", false),
            Selection::Unsupported(_)
        ));
    }

    #[test]
    fn amd_and_arm() {
        let amd = |family, model| CpuId::X86 {
            vendor: "AuthenticAMD".into(),
            family,
            model,
            stepping: None,
        };
        assert_eq!(
            select(&amd(25, 0x11), "cpu", true),
            Selection::Model("zen4")
        );
        assert_eq!(
            select(&amd(25, 0x61), "cpu", true),
            Selection::Model("zen4")
        );
        assert!(matches!(
            select(&amd(25, 0x21), "cpu", true),
            Selection::Unsupported(_)
        ));
        assert_eq!(
            select(&amd(26, 0x02), "cpu", true),
            Selection::Model("zen5")
        );
        let arm = |part| CpuId::Arm {
            implementer: 0x41,
            part,
        };
        assert_eq!(
            select(&arm(0xd40), "armv8_pmuv3_0", false),
            Selection::Model("neoverse_v1")
        );
        assert_eq!(
            select(&arm(0xd49), "armv8_pmuv3_0", false),
            Selection::Model("neoverse_n2")
        );
        assert!(matches!(
            select(&arm(0xd0c), "armv8_pmuv3_0", false),
            Selection::Unsupported(_)
        ));
    }

    /// The model tables agree with perf's mapfile: every model number we map reaches, through
    /// perf's regexes, a directory of the matching family.
    #[test]
    fn model_numbers_agree_with_perfs_mapfile() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/linux-pmu-events/x86/mapfile.csv"
        );
        let Ok(mapfile) = std::fs::read_to_string(path) else {
            panic!("{path} missing: ../shared must sit beside the repository");
        };
        let rows: Vec<(regex::Regex, String)> = mapfile
            .lines()
            .skip(1)
            .filter_map(|line| {
                let mut fields = line.split(',');
                let pattern = fields.next()?.replace("[[:xdigit:]]", "[0-9A-Fa-f]");
                let dir = fields.nth(1)?.to_owned();
                Some((regex::Regex::new(&format!("^(?:{pattern})$")).ok()?, dir))
            })
            .collect();
        // As perf does: the whole id must match, with the stepping only when the pattern has
        // one (`GenuineIntel-6-55-[01234]`).
        let perf_dir = |cpuid: &str| {
            let without_stepping = cpuid.rsplit_once('-').map_or(cpuid, |(head, _)| head);
            rows.iter()
                .find(|(re, _)| re.is_match(cpuid) || re.is_match(without_stepping))
                .map(|(_, dir)| dir.clone())
                .unwrap_or_default()
        };
        let expect = |models: &[u32], dirs: &[&str]| {
            for model in models {
                // Stepping 8 keeps Skylake-SP (55-[0-4]) apart from Cascade Lake (55-[5-F]).
                let dir = perf_dir(&format!("GenuineIntel-6-{model:02X}-8"));
                assert!(
                    dirs.contains(&dir.as_str()),
                    "model {model:#x}: perf says {dir}"
                );
            }
        };
        expect(ICELAKE, &["icelake", "icelakex", "tigerlake", "rocketlake"]);
        expect(
            SAPPHIRERAPIDS,
            &["sapphirerapids", "emeraldrapids", "graniterapids"],
        );
        expect(HYBRID, &["alderlake", "meteorlake"]);
        expect(SKYLAKE, &["skylake", "skylakex", "cascadelakex"]);
        expect(GOLDMONT, &["goldmont", "goldmontplus"]);
        expect(TREMONT, &["snowridgex", "elkhartlake"]);
        let amd = |family: u32, model: u32| {
            let cpu = CpuId::X86 {
                vendor: "AuthenticAMD".into(),
                family,
                model,
                stepping: Some(1),
            };
            (perf_dir(&cpu.to_string()), select(&cpu, "cpu", true))
        };
        for model in 0..=0xffu32 {
            match amd(25, model) {
                (dir, Selection::Model("zen4")) => assert_eq!(dir, "amdzen4", "{model:#x}"),
                (dir, _) => assert_eq!(dir, "amdzen3", "{model:#x}"),
            }
        }
    }
}
