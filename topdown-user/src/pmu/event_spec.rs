//! Events by name, as users write them after `-e`:
//! - perf syntax: `cpu/event=0xc2,umask=0x2,cmask=1,inv/u`, `cpu/topdown-retiring/`,
//!   `cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/`, `msr/tsc/`;
//! - raw: `r01c2`;
//! - perf's generic and software names: `cycles`, `instructions`, `context-switches`, ...;
//! - the CPU's named events: `INT_MISC.UOP_DROPPING`, `INT_MISC.UOP_DROPPING:u`;
//! - libpfm4 style: `INST_RETIRED:ANY_P:c=1:e:i:u:k` (c cmask, e edge, i invert, t any thread,
//!   u user, k kernel).
//!
//! Unknown names get a "did you mean" from everything this machine knows.

use anyhow::{Context as _, Result, bail};

use super::{
    counter_set::{Counter, EventAttr, Unit},
    event_table::EventTable,
    sysfs::{Pmu, SysRoot},
};

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_TYPE_RAW: u32 = 4;

/// perf's generic hardware events (`PERF_COUNT_HW_*`).
const HARDWARE: &[(&str, u64)] = &[
    ("cycles", 0),
    ("cpu-cycles", 0),
    ("instructions", 1),
    ("cache-references", 2),
    ("cache-misses", 3),
    ("branches", 4),
    ("branch-instructions", 4),
    ("branch-misses", 5),
    ("bus-cycles", 6),
    ("stalled-cycles-frontend", 7),
    ("stalled-cycles-backend", 8),
    ("ref-cycles", 9),
];

/// perf's software events (`PERF_COUNT_SW_*`).
const SOFTWARE: &[(&str, u64)] = &[
    ("cpu-clock", 0),
    ("task-clock", 1),
    ("page-faults", 2),
    ("faults", 2),
    ("context-switches", 3),
    ("cs", 3),
    ("cpu-migrations", 4),
    ("migrations", 4),
    ("minor-faults", 5),
    ("major-faults", 6),
    ("alignment-faults", 7),
    ("emulation-faults", 8),
];

/// Resolves event names for this machine: its core PMU (if any) and its CPU's event table.
#[derive(Debug)]
pub struct EventResolver<'a> {
    sys: &'a SysRoot,
    core: Option<Pmu>,
    table: Option<EventTable>,
}

impl<'a> EventResolver<'a> {
    /// A resolver for the PMUs under `sys`, with core PMU `core` and the CPU's `table`.
    pub fn new(sys: &'a SysRoot, core: Option<&str>, table: Option<EventTable>) -> Result<Self> {
        let core = core.map(|name| sys.pmu(name)).transpose()?.flatten();
        Ok(Self { sys, core, table })
    }

    /// The counter `spec` names, called `spec`.
    pub fn resolve(&self, spec: &str) -> Result<Counter> {
        let spec = spec.trim();
        let attr = if let Some((pmu, rest)) = spec.split_once('/') {
            let (terms, modifiers) = rest.rsplit_once('/').with_context(|| {
                format!("event `{spec}`: a `pmu/terms/` event needs its closing `/`")
            })?;
            self.pmu_form(spec, pmu, terms, modifiers)?
        } else if let Some((head, _)) = spec.split_once(':')
            && !head.contains('.')
            && head
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            self.libpfm4_form(spec)?
        } else {
            let (name, modifiers) = spec.split_once(':').unwrap_or((spec, ""));
            let mut attr = self.name_form(spec, name)?;
            apply_privilege(spec, modifiers, &mut attr)?;
            attr
        };
        Ok(Counter {
            name: spec.to_owned(),
            unit: if attr.pmu_type == PERF_TYPE_SOFTWARE && attr.config <= 1 {
                Unit::Nanoseconds
            } else {
                Unit::Events
            },
            attr,
            cpus: None,
        })
    }

    fn core(&self, spec: &str) -> Result<&Pmu> {
        self.core.as_ref().with_context(|| {
            format!("event `{spec}` needs a hardware PMU, and this machine has none")
        })
    }

    fn pmu_form(
        &self,
        spec: &str,
        pmu_name: &str,
        terms: &str,
        modifiers: &str,
    ) -> Result<EventAttr> {
        let pmu = match &self.core {
            Some(core) if core.name == pmu_name => core.clone(),
            _ => self.sys.pmu(pmu_name)?.with_context(|| {
                format!(
                    "event `{spec}`: this machine has no PMU `{pmu_name}` (it has {})",
                    self.sys.pmu_names().unwrap_or_default().join(", ")
                )
            })?,
        };
        let mut merged: Vec<(String, String)> = Vec::new();
        for term in terms.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let expansion = match term.split_once('=') {
                Some((key, value)) => vec![(key.to_owned(), value.to_owned())],
                None => match pmu.event_terms(term)? {
                    Some(alias) => split_terms(&alias),
                    None => match self.table.and_then(|t| t.terms(term)) {
                        Some(named) if self.core.as_ref().is_some_and(|c| c.name == pmu.name) => {
                            split_terms(named)
                        }
                        _ => vec![(term.to_owned(), "1".to_owned())],
                    },
                },
            };
            for (key, value) in expansion {
                merged.retain(|(k, _)| *k != key);
                merged.push((key, value));
            }
        }
        // perf's built-in terms `config=` and `config1=` set the attr's words as given,
        // whatever the PMU's format files (Arm's have no `config`).
        let mut raw = [0u64; 2];
        let mut rest = Vec::with_capacity(merged.len());
        for (key, value) in merged {
            let word = match key.as_str() {
                "config" => 0,
                "config1" => 1,
                "config2" => bail!("event `{spec}`: config2 is not supported"),
                _ => {
                    rest.push((key, value));
                    continue;
                }
            };
            raw[word] |= super::sysfs::parse_number(&value)
                .with_context(|| format!("event `{spec}`: `{key}={value}`"))?;
        }
        let merged = rest;
        let joined: Vec<String> = merged.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let config = pmu
            .encode(&joined.join(","))
            .with_context(|| format!("event `{spec}`"))?;
        let mut attr = EventAttr {
            pmu_type: pmu.pmu_type,
            config: config.config | raw[0],
            config1: config.config1 | raw[1],
            ..EventAttr::default()
        };
        apply_privilege(spec, modifiers, &mut attr)?;
        Ok(attr)
    }

    fn name_form(&self, spec: &str, name: &str) -> Result<EventAttr> {
        let attr = |pmu_type, config| EventAttr {
            pmu_type,
            config,
            ..EventAttr::default()
        };
        if let Some(&(_, config)) = SOFTWARE.iter().find(|(n, _)| *n == name) {
            return Ok(attr(PERF_TYPE_SOFTWARE, config));
        }
        if let Some(&(_, config)) = HARDWARE.iter().find(|(n, _)| *n == name) {
            self.core(spec)?;
            return Ok(attr(PERF_TYPE_HARDWARE, config));
        }
        if let Some(hex) = name.strip_prefix('r')
            && !hex.is_empty()
            && hex.chars().all(|c| c.is_ascii_hexdigit())
        {
            self.core(spec)?;
            return Ok(attr(PERF_TYPE_RAW, u64::from_str_radix(hex, 16)?));
        }
        let known = self.table.and_then(|t| t.terms(name)).is_some()
            || self
                .core
                .as_ref()
                .is_some_and(|c| c.event_terms(name).ok().flatten().is_some());
        if known {
            let core = self.core(spec)?;
            return self.pmu_form(spec, &core.name.clone(), name, "");
        }
        if self.core.is_none() && EventTable::any_knows(name) {
            self.core(spec)?;
        }
        bail!("unknown event `{spec}`{}", self.suggestion(name))
    }

    fn libpfm4_form(&self, spec: &str) -> Result<EventAttr> {
        let mut parts = spec.split(':');
        let event = parts.next().unwrap_or_default();
        let mut name = event.to_owned();
        let (mut terms, mut privilege) = (Vec::new(), String::new());
        for part in parts {
            match part {
                "u" | "k" => privilege.push_str(part),
                "e" => terms.push("edge=1".to_owned()),
                "i" => terms.push("inv=1".to_owned()),
                "t" => terms.push("any=1".to_owned()),
                _ if part.starts_with("c=") => terms.push(format!("cmask={}", &part[2..])),
                umask if name == event => name = format!("{event}.{umask}"),
                other => {
                    bail!("event `{spec}`: unknown libpfm4 modifier `{other}` (u, k, e, i, t, c=N)")
                }
            }
        }
        let core = self.core(spec)?;
        let base = self
            .table
            .and_then(|t| t.terms(&name))
            .with_context(|| format!("unknown event `{spec}`{}", self.suggestion(&name)))?;
        let mut attr = self.pmu_form(
            spec,
            &core.name.clone(),
            &format!("{base},{}", terms.join(",")),
            "",
        )?;
        apply_privilege(spec, &privilege, &mut attr)?;
        Ok(attr)
    }

    /// ": did you mean `X`?" for the closest known name, if one is close.
    fn suggestion(&self, name: &str) -> String {
        let pmu_aliases: Vec<String> = self
            .core
            .as_ref()
            .map(|core| {
                self.sys.path(&format!(
                    "sys/bus/event_source/devices/{}/events",
                    core.name
                ))
            })
            .and_then(|dir| std::fs::read_dir(dir).ok())
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        let mut candidates: Vec<&str> = SOFTWARE.iter().chain(HARDWARE).map(|(n, _)| *n).collect();
        if let Some(table) = self.table {
            for name in table.names() {
                candidates.push(name);
            }
        }
        candidates.extend(pmu_aliases.iter().map(String::as_str));
        let best = candidates
            .into_iter()
            .map(|c| {
                let score = strsim::normalized_levenshtein(&name.to_lowercase(), &c.to_lowercase());
                (score, c.to_owned())
            })
            .max_by(|a, b| a.0.total_cmp(&b.0));
        match best {
            Some((score, candidate)) if score >= 0.7 => format!(": did you mean `{candidate}`?"),
            _ => ": see `perf list` for this machine's events".to_owned(),
        }
    }
}

fn split_terms(terms: &str) -> Vec<(String, String)> {
    terms
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| match t.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (t.to_owned(), "1".to_owned()),
        })
        .collect()
}

/// `u` counts user mode only, `k` kernel mode only, both or neither count both.
fn apply_privilege(spec: &str, modifiers: &str, attr: &mut EventAttr) -> Result<()> {
    if let Some(bad) = modifiers.chars().find(|c| !matches!(c, 'u' | 'k')) {
        bail!("event `{spec}`: unsupported modifier `{bad}` (use u, k)");
    }
    let (user, kernel) = (modifiers.contains('u'), modifiers.contains('k'));
    if user != kernel {
        attr.exclude_kernel = user;
        attr.exclude_user = kernel;
    }
    Ok(())
}

/// Splits a `-e` list on commas, keeping the commas inside `pmu/.../`; an empty event (`-e ''`,
/// `cpu-clock,,`) is an error, as it is to `perf stat`, never silently nothing.
pub fn split_event_list(list: &str) -> Result<Vec<String>> {
    let (mut events, mut current, mut in_pmu) = (Vec::new(), String::new(), false);
    for c in list.chars() {
        match c {
            '/' => {
                in_pmu = !in_pmu;
                current.push(c);
            }
            ',' if !in_pmu => events.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    events.push(current);
    if events.iter().any(|e| e.trim().is_empty()) {
        bail!("-e `{list}` names an empty event: give each event a name, commas only between them");
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skylake() -> (SysRoot, Option<EventTable>) {
        (
            SysRoot::fixture("skylake-smt-off"),
            EventTable::named("skylake"),
        )
    }

    #[test]
    fn perf_syntax_raw_and_generic_names() {
        let (sys, table) = skylake();
        let r = EventResolver::new(&sys, Some("cpu"), table).unwrap();
        let a = r
            .resolve("cpu/event=0xc2,umask=0x2,cmask=1,inv/u")
            .unwrap()
            .attr;
        assert_eq!(
            (a.pmu_type, a.config),
            (4, 0xc2 | 0x2 << 8 | 1 << 24 | 1 << 23)
        );
        assert!(a.exclude_kernel && !a.exclude_user);
        let a = r
            .resolve("cpu/INT_MISC.RECOVERY_CYCLES,cmask=1,edge/")
            .unwrap()
            .attr;
        assert_eq!(a.config, 0x0d | 0x01 << 8 | 1 << 24 | 1 << 18);
        assert_eq!(
            r.resolve("r01c2").unwrap().attr,
            EventAttr {
                pmu_type: 4,
                config: 0x1c2,
                ..EventAttr::default()
            }
        );
        assert_eq!(r.resolve("instructions").unwrap().attr.pmu_type, 0);
        assert_eq!(
            r.resolve("context-switches").unwrap().attr,
            EventAttr {
                pmu_type: 1,
                config: 3,
                ..EventAttr::default()
            }
        );
        let msr = r.resolve("msr/tsc/").unwrap().attr;
        assert_eq!((msr.pmu_type, msr.config), (11, 0));
        let named = r.resolve("UOPS_ISSUED.ANY:k").unwrap().attr;
        assert_eq!(named.config, 0x0e | 0x01 << 8);
        assert!(named.exclude_user && !named.exclude_kernel);
    }

    /// perf's built-in `config=` term sets the config as given, on a PMU whose format files
    /// do not name it (Arm's have only `event`).
    #[test]
    fn config_terms_need_no_format_file() {
        let sys = SysRoot::fixture("neoverse-v3");
        let r = EventResolver::new(&sys, Some("armv8_pmuv3_0"), None).unwrap();
        let by_config = r.resolve("armv8_pmuv3_0/config=0x11/").unwrap();
        let by_event = r.resolve("armv8_pmuv3_0/event=0x11/").unwrap();
        assert_eq!(by_config.attr, by_event.attr);
        assert_eq!((by_config.attr.pmu_type, by_config.attr.config), (8, 0x11));
        let bad = r.resolve("armv8_pmuv3_0/config=x/").unwrap_err();
        assert!(format!("{bad:#}").contains("not a number"), "{bad:#}");
    }

    #[test]
    fn libpfm4_style_with_every_modifier() {
        let (sys, table) = skylake();
        let r = EventResolver::new(&sys, Some("cpu"), table).unwrap();
        let a = r.resolve("INST_RETIRED:ANY_P:c=1:e:i:u").unwrap().attr;
        assert_eq!(a.config, 0xc0 | 1 << 24 | 1 << 18 | 1 << 23);
        assert!(a.exclude_kernel);
        let t = r.resolve("UOPS_ISSUED:ANY:t:u:k").unwrap().attr;
        assert_eq!(t.config, 0x0e | 0x01 << 8 | 1 << 21);
        assert!(
            !t.exclude_kernel && !t.exclude_user,
            "u and k together count both"
        );
        assert!(r.resolve("INST_RETIRED:ANY_P:z").is_err());
    }

    #[test]
    fn unknown_names_get_a_did_you_mean_and_no_pmu_is_said_plainly() {
        let (sys, table) = skylake();
        let r = EventResolver::new(&sys, Some("cpu"), table).unwrap();
        let error = r.resolve("UOPS_ISUED.ANY").unwrap_err().to_string();
        assert!(error.contains("did you mean `UOPS_ISSUED.ANY`"), "{error}");
        let error = r.resolve("context-switchs").unwrap_err().to_string();
        assert!(error.contains("did you mean `context-switches`"), "{error}");
        assert!(
            r.resolve("nope/event=1/")
                .unwrap_err()
                .to_string()
                .contains("no PMU `nope`")
        );

        let vm = SysRoot::fixture("vm-no-pmu");
        let r = EventResolver::new(&vm, None, None).unwrap();
        for spec in ["cycles", "r01c2", "INT_MISC.UOP_DROPPING"] {
            let error = r.resolve(spec).unwrap_err().to_string();
            assert!(
                error.contains("needs a hardware PMU, and this machine has none"),
                "{error}"
            );
        }
        assert!(r.resolve("page-faults").is_ok());
        assert!(r.resolve("msr/tsc/").is_ok());
    }

    #[test]
    fn event_lists_keep_commas_inside_pmu_terms() {
        assert_eq!(
            split_event_list("cycles,cpu/event=0x3c,cmask=1/u,r01c2").unwrap(),
            ["cycles", "cpu/event=0x3c,cmask=1/u", "r01c2"]
        );
        for empty in ["", " ", "cpu-clock,,", ",cycles", "cycles,"] {
            let error = split_event_list(empty).unwrap_err().to_string();
            assert!(error.contains("empty event"), "{empty:?}: {error}");
        }
    }
}
