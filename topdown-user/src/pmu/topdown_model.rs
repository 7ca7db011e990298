//! Which TopDown model a core type runs: by CPU identity and, on hybrid parts, by core PMU.
//! The Intel and AMD model numbers follow perf's `pmu-events/arch/x86/mapfile.csv` (a test
//! checks them against its regexes).

use super::machine::CpuId;

/// What an Intel family-6 CPU runs.
#[derive(Clone, Copy, Debug)]
enum Intel {
    /// One model, per thread.
    Plain(&'static str),
    /// Inputs that count per core when SMT is on (`CPU_CLK_UNHALTED.THREAD_ANY`): the first
    /// model per thread with SMT off, the second only per core with SMT on.
    SmtPerCore(&'static str, &'static str),
    /// Hybrid: a model for `cpu_core`, one for `cpu_atom`, and one for `cpu_lowpower` (Arrow
    /// Lake's low-power E-cores) where there are such cores.
    Hybrid(&'static str, &'static str, Option<&'static str>),
    /// A CPU perf knows whose TMA metrics are not in the data.
    NoData(&'static str),
}

/// Intel family-6 models: their numbers, perf's pmu-events directory for them (a test checks
/// both against perf's `mapfile.csv`), and what they run. Skylake-SP and Cascade Lake share model
/// 0x55 and are told apart by stepping in [`select`].
const INTEL: &[(&[u32], &str, Intel)] = &[
    (&[0x7D, 0x7E], "icelake", Intel::Plain("icelake")),
    (&[0x6A, 0x6C], "icelakex", Intel::Plain("icelakex")),
    (&[0x8C, 0x8D], "tigerlake", Intel::Plain("tigerlake")),
    (&[0xA7], "rocketlake", Intel::Plain("rocketlake")),
    (&[0x8F], "sapphirerapids", Intel::Plain("sapphirerapids")),
    (&[0xCF], "emeraldrapids", Intel::Plain("emeraldrapids")),
    (
        &[0xAD, 0xAE],
        "graniterapids",
        Intel::Plain("graniterapids"),
    ),
    (
        &[0x97, 0x9A, 0xB7, 0xBA, 0xBF],
        "alderlake",
        Intel::Hybrid("alderlake_core", "alderlake_atom", None),
    ),
    (
        &[0xAA, 0xAC],
        "meteorlake",
        Intel::Hybrid("meteorlake_core", "crestmont", None),
    ),
    (
        &[0xBD],
        "lunarlake",
        Intel::Hybrid("lunarlake_core", "lunarlake_atom", None),
    ),
    (
        &[0xC5, 0xC6],
        "",
        Intel::Hybrid("arrowlake_core", "arrowlake_atom", Some("crestmont")),
    ),
    (
        &[0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6],
        "skylake",
        Intel::SmtPerCore("skylake", "skylake_smt"),
    ),
    (
        &[0x3C, 0x45, 0x46],
        "haswell",
        Intel::SmtPerCore("haswell", "haswell"),
    ),
    (
        &[0x3F],
        "haswellx",
        Intel::SmtPerCore("haswellx", "haswellx"),
    ),
    (
        &[0x3D, 0x47],
        "broadwell",
        Intel::SmtPerCore("broadwell", "broadwell"),
    ),
    (
        &[0x4F],
        "broadwellx",
        Intel::SmtPerCore("broadwellx", "broadwellx"),
    ),
    (&[0xAF], "sierraforest", Intel::Plain("sierraforest")),
    (&[0xB6], "grandridge", Intel::Plain("grandridge")),
    (
        &[0xDD],
        "",
        Intel::NoData(
            "Clearwater Forest: Intel's perfmon data has no TMA metrics for it yet (and \
             E-core_TMA_Metrics.csv no column)",
        ),
    ),
    (&[0x5C, 0x5F], "goldmont", Intel::Plain("goldmont")),
    (&[0x7A], "goldmontplus", Intel::Plain("goldmont")),
    (&[0x86], "snowridgex", Intel::Plain("tremont")),
    (&[0x96, 0x9C], "elkhartlake", Intel::Plain("tremont")),
];

/// What an Arm core runs.
#[derive(Clone, Copy, Debug)]
enum Arm {
    /// A model, and the core's pipeline width: `#slots` when the PMU does not give
    /// `caps/slots` (PMUv3.4's PMMIR_EL1; emulated PMUs have none).
    Model(&'static str, u32),
    /// A core perf knows with no slot-based TopDown.
    NoTopdown(&'static str),
}

/// Arm cores: implementer and part number of `MIDR_EL1`, the name `--cpuid` takes, perf's
/// pmu-events directory for them (`arch/arm64/mapfile.csv`, the newer copy in
/// data/: a test checks both), and what they run. Perf files MIDR part 0xd83 (which
/// Linux's `cputype.h` calls Neoverse V3AE) under `neoverse-v3`; the kernel calls 0xd84 Neoverse
/// V3, which perf's map does not list yet: both run the V3 model (V3AE is V3's core).
const ARM: &[(u32, u32, &str, &str, Arm)] = &[
    (
        0x41,
        0xd0c,
        "neoverse-n1",
        "arm/neoverse-n1",
        Arm::NoTopdown(
            "Neoverse N1 has no slot-based TopDown (no STALL_SLOT events; perf's neoverse-n1 \
             metrics are stall-cycle ratios): run without --td-level, or count \
             -e stall_frontend,stall_backend",
        ),
    ),
    (
        0x41,
        0xd40,
        "neoverse-v1",
        "arm/neoverse-v1",
        Arm::Model("neoverse_v1", 8),
    ),
    (
        0x41,
        0xd49,
        "neoverse-n2",
        "arm/neoverse-n2-v2",
        Arm::Model("neoverse_n2", 5),
    ),
    (
        0x41,
        0xd4f,
        "neoverse-v2",
        "arm/neoverse-n2-v2",
        Arm::Model("neoverse_n2", 8),
    ),
    (
        0x41,
        0xd83,
        "neoverse-v3ae",
        "arm/neoverse-v3",
        Arm::Model("neoverse_v3", 10),
    ),
    (
        0x41,
        0xd84,
        "neoverse-v3",
        "",
        Arm::Model("neoverse_v3", 10),
    ),
    (
        0x41,
        0xd8e,
        "neoverse-n3",
        "arm/neoverse-n3",
        Arm::Model("neoverse_n3", 5),
    ),
];

/// The Arm core called `name` (`neoverse-n2`) as a CPU id, for `--cpuid`.
pub fn arm_cpu_named(name: &str) -> Option<CpuId> {
    ARM.iter()
        .find(|(_, _, n, _, _)| n.eq_ignore_ascii_case(name.trim()))
        .map(|&(implementer, part, ..)| CpuId::Arm { implementer, part })
}

/// The names `--cpuid` takes for Arm cores.
pub fn arm_cpu_names() -> impl Iterator<Item = &'static str> {
    ARM.iter().map(|(_, _, name, _, _)| *name)
}

/// Every model name the Intel and Arm tables can select (`tma` checks that it builds each).
pub fn model_names() -> impl Iterator<Item = &'static str> {
    let intel = INTEL.iter().flat_map(|(_, _, run)| match *run {
        Intel::Plain(a) => [Some(a), None, None],
        Intel::SmtPerCore(a, b) => [Some(a), Some(b), None],
        Intel::Hybrid(a, b, c) => [Some(a), Some(b), c],
        Intel::NoData(_) => [None, None, None],
    });
    let arm = ARM.iter().map(|(.., run)| match *run {
        Arm::Model(name, _) => Some(name),
        Arm::NoTopdown(_) => None,
    });
    intel.chain(arm).flatten()
}

/// The pipeline width of `cpu` when its PMU does not say (`caps/slots`).
pub fn default_slots(cpu: &CpuId) -> Option<u32> {
    match arm_core(cpu)? {
        Arm::Model(_, slots) => Some(slots),
        Arm::NoTopdown(_) => None,
    }
}

fn arm_core(cpu: &CpuId) -> Option<Arm> {
    let CpuId::Arm { implementer, part } = cpu else {
        return None;
    };
    ARM.iter()
        .find(|(i, p, ..)| i == implementer && p == part)
        .map(|(.., run)| *run)
}

/// Why a core type has no TopDown model, when it has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Run this model.
    Model(&'static str),
    /// A CPU whose inputs count per core with SMT on (`*_ANY` events): per-thread TopDown
    /// would be wrong; only per-core mode, with this model, is honest.
    PerCoreOnly(&'static str),
    /// Known CPU without a TopDown model in this build.
    Unsupported(String),
}

/// The model for `cpu`, for events counted on core PMU `pmu` (`cpu`, `cpu_core`, `cpu_atom`,
/// `cpu_lowpower`, `armv8_pmuv3_0`), with SMT active or not.
pub fn select(cpu: &CpuId, pmu: &str, smt_active: bool) -> Selection {
    match cpu {
        CpuId::X86 {
            vendor,
            family: 6,
            model,
            stepping,
        } if vendor == "GenuineIntel" => {
            let run = if *model == 0x55 {
                // perf: 55-[01234] is Skylake-SP, 55-[56789ABCDEF] Cascade Lake.
                if stepping.unwrap_or(0) <= 4 {
                    Intel::SmtPerCore("skylakex", "skylakex")
                } else {
                    Intel::SmtPerCore("cascadelakex", "cascadelakex")
                }
            } else if let Some((_, _, run)) = INTEL.iter().find(|(m, _, _)| m.contains(model)) {
                *run
            } else {
                return Selection::Unsupported(format!(
                    "{cpu}: no TopDown model for this Intel CPU (Sandy Bridge, Ivy Bridge and \
                     older, pre-Goldmont Atoms and Panther Lake are not in the data)"
                ));
            };
            match run {
                Intel::Plain(name) => Selection::Model(name),
                Intel::SmtPerCore(_, per_core) if smt_active => Selection::PerCoreOnly(per_core),
                Intel::SmtPerCore(per_thread, _) => Selection::Model(per_thread),
                Intel::Hybrid(core, atom, lowpower) => match (pmu, lowpower) {
                    ("cpu_core", _) => Selection::Model(core),
                    ("cpu_atom", _) => Selection::Model(atom),
                    ("cpu_lowpower", Some(lowpower)) => Selection::Model(lowpower),
                    (other, _) => {
                        Selection::Unsupported(format!("hybrid CPU, unexpected PMU {other}"))
                    }
                },
                Intel::NoData(why) => Selection::Unsupported(format!("{cpu}: {why}")),
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
            // perf: AuthenticAMD-26-[[:xdigit:]]+ is amdzen5 (not in the stored mapfile).
            26 => Selection::Model("zen5"),
            _ => Selection::Unsupported(format!(
                "{cpu}: AMD TopDown (pipeline utilization) needs Zen 4 or later"
            )),
        },
        CpuId::Arm { .. } => match arm_core(cpu) {
            Some(Arm::Model(name, _)) => Selection::Model(name),
            Some(Arm::NoTopdown(why)) => Selection::Unsupported(why.to_owned()),
            None => Selection::Unsupported(format!(
                "{cpu}: no TopDown model for this Arm core (Neoverse V1, N2, V2, V3 and N3 have \
                 one: --cpuid NAME forces one of {})",
                arm_cpu_names().collect::<Vec<_>>().join(", ")
            )),
        },
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
        let cases = [
            (0x8F, "cpu", true, Selection::Model("sapphirerapids")),
            (0xCF, "cpu", true, Selection::Model("emeraldrapids")),
            (0xAD, "cpu", true, Selection::Model("graniterapids")),
            (0x7E, "cpu", true, Selection::Model("icelake")),
            (0x6A, "cpu", true, Selection::Model("icelakex")),
            (0x8C, "cpu", true, Selection::Model("tigerlake")),
            (0xA7, "cpu", true, Selection::Model("rocketlake")),
            (0x97, "cpu_core", true, Selection::Model("alderlake_core")),
            (0x97, "cpu_atom", true, Selection::Model("alderlake_atom")),
            (0xAA, "cpu_core", true, Selection::Model("meteorlake_core")),
            (0xAA, "cpu_atom", true, Selection::Model("crestmont")),
            (0xBD, "cpu_core", false, Selection::Model("lunarlake_core")),
            (0xBD, "cpu_atom", false, Selection::Model("lunarlake_atom")),
            (0xC6, "cpu_atom", true, Selection::Model("arrowlake_atom")),
            (0xC5, "cpu_lowpower", true, Selection::Model("crestmont")),
            (0x4E, "cpu", false, Selection::Model("skylake")),
            (0x4E, "cpu", true, Selection::PerCoreOnly("skylake_smt")),
            (0x3C, "cpu", false, Selection::Model("haswell")),
            (0x3F, "cpu", true, Selection::PerCoreOnly("haswellx")),
            (0x4F, "cpu", false, Selection::Model("broadwellx")),
            (0xAF, "cpu", false, Selection::Model("sierraforest")),
            (0xB6, "cpu", false, Selection::Model("grandridge")),
            (0x5C, "cpu", false, Selection::Model("goldmont")),
            (0x86, "cpu", false, Selection::Model("tremont")),
            (0x96, "cpu", false, Selection::Model("tremont")),
        ];
        for (model, pmu, smt, want) in cases {
            assert_eq!(select(&intel(model), pmu, smt), want, "{model:#x} {pmu}");
        }
        let stepping = |s| CpuId::X86 {
            vendor: "GenuineIntel".into(),
            family: 6,
            model: 0x55,
            stepping: Some(s),
        };
        assert_eq!(
            select(&stepping(4), "cpu", false),
            Selection::Model("skylakex")
        );
        assert_eq!(
            select(&stepping(7), "cpu", false),
            Selection::Model("cascadelakex")
        );
        assert_eq!(
            select(&stepping(7), "cpu", true),
            Selection::PerCoreOnly("cascadelakex")
        );
        for unsupported in [0x2A, 0xDD, 0xCC] {
            assert!(matches!(
                select(&intel(unsupported), "cpu", false),
                Selection::Unsupported(_)
            ));
        }
        let Selection::Unsupported(why) = select(&intel(0xDD), "cpu", false) else {
            unreachable!()
        };
        assert!(why.contains("Clearwater Forest"), "{why}");
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
        assert_eq!(
            select(&arm(0xd84), "armv8_pmuv3_0", false),
            Selection::Model("neoverse_v3")
        );
        assert_eq!(
            select(&arm(0xd8e), "armv8_pmuv3_0", false),
            Selection::Model("neoverse_n3")
        );
        assert_eq!(
            select(&arm(0xd4f), "armv8_pmuv3", false),
            Selection::Model("neoverse_n2")
        );
        assert_eq!(
            select(&arm(0xd83), "armv8_pmuv3_0", false),
            Selection::Model("neoverse_v3")
        );
        // Neoverse N1 (QEMU's `-cpu neoverse-n1` too) says why in one line.
        let Selection::Unsupported(n1) = select(&arm(0xd0c), "armv8_pmuv3", false) else {
            panic!("N1 has no TopDown model")
        };
        assert!(n1.contains("Neoverse N1") && !n1.contains('\n'), "{n1}");
        assert!(matches!(
            select(&arm(0xd0b), "armv8_pmuv3_0", false),
            Selection::Unsupported(_)
        ));
        // Widths when the PMU does not give caps/slots: N2 5, V2 8, V1 8, V3 10, N3 5.
        let widths: Vec<Option<u32>> = [0xd49, 0xd4f, 0xd40, 0xd84, 0xd8e, 0xd0c]
            .map(|p| default_slots(&arm(p)))
            .into();
        assert_eq!(widths, [Some(5), Some(8), Some(8), Some(10), Some(5), None]);
        assert_eq!(arm_cpu_named("Neoverse-N2"), Some(arm(0xd49)));
        assert_eq!(arm_cpu_named("neoverse-x9"), None);
    }

    /// The Arm table agrees with perf's arm64 mapfile (the newer copy, with V3 and N3): each
    /// core with a directory is listed there under that MIDR, and every Neoverse row there is
    /// in the table.
    #[test]
    fn arm_parts_agree_with_perfs_arm64_mapfile() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/linux-pmu-events/arm64/mapfile-newer.csv"
        );
        let Ok(mapfile) = std::fs::read_to_string(path) else {
            panic!("{path} missing: the repository's data/ folder");
        };
        let rows: Vec<(CpuId, &str)> = mapfile
            .lines()
            .filter(|l| l.starts_with("0x"))
            .filter_map(|l| {
                let mut fields = l.split(',');
                let midr: CpuId = fields.next()?.parse().ok()?;
                Some((midr, fields.nth(1)?))
            })
            .collect();
        for (implementer, part, name, dir, _) in ARM {
            let cpu = CpuId::Arm {
                implementer: *implementer,
                part: *part,
            };
            let listed = rows.iter().find(|(c, _)| *c == cpu).map(|(_, d)| *d);
            if dir.is_empty() {
                assert_eq!(listed, None, "{name} is not in perf's map yet");
            } else {
                assert_eq!(listed, Some(*dir), "{name}");
            }
        }
        for (cpu, dir) in &rows {
            if dir.contains("neoverse") {
                assert!(arm_core(cpu).is_some(), "{cpu} ({dir}) is in the table");
            }
        }
    }

    /// The model tables agree with perf's mapfile: every model number we map reaches, through
    /// perf's regexes, a directory of the matching family.
    #[test]
    fn model_numbers_agree_with_perfs_mapfile() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/linux-pmu-events/x86/mapfile.csv"
        );
        let Ok(mapfile) = std::fs::read_to_string(path) else {
            panic!("{path} missing: the repository's data/ folder");
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
        for (models, dir, _) in INTEL {
            for model in *models {
                // Stepping 8 keeps Skylake-SP (55-[0-4]) apart from Cascade Lake (55-[5-F]).
                let perf = perf_dir(&format!("GenuineIntel-6-{model:02X}-8"));
                assert_eq!(perf, *dir, "model {model:#x}");
            }
        }
        assert_eq!(perf_dir("GenuineIntel-6-55-4"), "skylakex");
        assert_eq!(perf_dir("GenuineIntel-6-55-7"), "cascadelakex");
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
