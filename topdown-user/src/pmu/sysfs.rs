//! PMUs as the kernel describes them under `/sys/bus/event_source/devices`.
//!
//! Everything is read below one root, so tests point it at a fixture tree.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

/// The root under which `sys/bus/event_source/devices` is read (`/` on a live system).
#[derive(Clone, Debug)]
pub struct SysRoot(PathBuf);

impl SysRoot {
    /// The running system.
    pub fn host() -> Self {
        Self(PathBuf::from("/"))
    }

    /// Whether this is the running system's root.
    pub fn is_host(&self) -> bool {
        self.0 == Path::new("/")
    }

    /// A fixture tree laid out like `/`.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self(root.into())
    }

    /// One of the fixture machines in `tests/fixtures/sysfs` (for tests).
    #[cfg(test)]
    pub(crate) fn fixture(name: &str) -> Self {
        Self::at(format!(
            "{}/../tests/fixtures/sysfs/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
    }

    /// A path below the root, e.g. `proc/cpuinfo`.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.0.join(relative)
    }

    fn devices(&self) -> PathBuf {
        self.0.join("sys/bus/event_source/devices")
    }

    /// The PMU called `name`, if the kernel has it.
    pub fn pmu(&self, name: &str) -> Result<Option<Pmu>> {
        if !is_file_name(name) {
            return Ok(None);
        }
        let dir = self.devices().join(name);
        if !dir.is_dir() {
            return Ok(None);
        }
        let pmu_type = read_trimmed(&dir.join("type"))?
            .parse()
            .with_context(|| format!("parsing {}/type", dir.display()))?;
        Ok(Some(Pmu {
            name: name.to_owned(),
            pmu_type,
            dir,
        }))
    }

    /// Names of every PMU the kernel has.
    pub fn pmu_names(&self) -> Result<Vec<String>> {
        let dir = self.devices();
        let Ok(entries) = fs::read_dir(&dir) else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }
}

/// One PMU: its dynamic type number and its event and format definitions.
#[derive(Clone, Debug)]
pub struct Pmu {
    /// Directory name, e.g. `cpu`, `msr`, `cpu_atom`.
    pub name: String,
    /// `perf_event_attr.type` for events of this PMU.
    pub pmu_type: u32,
    dir: PathBuf,
}

/// The config words of one event, as `perf_event_attr` takes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventConfig {
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1`.
    pub config1: u64,
    /// `perf_event_attr.config2`.
    pub config2: u64,
}

impl Pmu {
    /// The definition of event alias `name` (`events/<name>`), e.g. `event=0x00,umask=0x4`.
    pub fn event_terms(&self, name: &str) -> Result<Option<String>> {
        if !is_file_name(name) {
            return Ok(None);
        }
        let path = self.dir.join("events").join(name);
        if !path.is_file() {
            return Ok(None);
        }
        read_trimmed(&path).map(Some)
    }

    /// Encodes `terms` (`event=0x3c,umask=0x1,cmask=1`; a bare `term` means 1) through this
    /// PMU's `format/` files; a term given twice takes its last value.
    pub fn encode(&self, terms: &str) -> Result<EventConfig> {
        let mut out = EventConfig::default();
        for term in terms.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (name, value) = term.split_once('=').unwrap_or((term, "1"));
            if !is_file_name(name) {
                bail!(
                    "`{name}` is not a format term of PMU {} (used in `{terms}`)",
                    self.name
                );
            }
            let value = parse_number(value)
                .with_context(|| format!("value of `{name}` in `{terms}` for PMU {}", self.name))?;
            let format_path = self.dir.join("format").join(name);
            let format = read_trimmed(&format_path).with_context(|| {
                format!(
                    "PMU {} has no format term `{name}` (used in `{terms}`)",
                    self.name
                )
            })?;
            place_bits(&format, value, &mut out)
                .with_context(|| format!("format {} = `{format}`", format_path.display()))?;
        }
        Ok(out)
    }
}

/// Scatters `value` into the bit ranges `format` names (`config:0-7,21`, `config1:0-63`): what
/// one `format/` file of a PMU means; an error for anything else.
pub fn place_bits(format: &str, mut value: u64, out: &mut EventConfig) -> Result<()> {
    let (word, ranges) = format.split_once(':').context("no `:` in format")?;
    let target = match word {
        "config" => &mut out.config,
        "config1" => &mut out.config1,
        "config2" => &mut out.config2,
        other => bail!("unknown config word `{other}`"),
    };
    for range in ranges.split(',') {
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (lo.parse::<u32>()?, hi.parse::<u32>()?),
            None => (range.parse::<u32>()?, range.parse::<u32>()?),
        };
        if hi < lo || hi > 63 {
            bail!("bad bit range `{range}`");
        }
        let width = hi - lo + 1;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        // A later term overrides an earlier one (`mem-loads` from sysfs, then `ldlat=30`).
        *target = (*target & !(mask << lo)) | ((value & mask) << lo);
        value = if width == 64 { 0 } else { value >> width };
    }
    if value != 0 {
        bail!("value does not fit the format's bits");
    }
    Ok(())
}

/// Whether `name` can only name a file in its directory: letters, digits, `_`, `-` and `.`
/// (not `.` or `..`), so that a name from the command line never reaches another file (the
/// tool runs as root).
fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

pub(crate) fn parse_number(text: &str) -> Result<u64> {
    let text = text.trim();
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.with_context(|| format!("`{text}` is not a number"))
}

fn read_trimmed(path: &Path) -> Result<String> {
    Ok(fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_the_command_line_never_leave_the_pmus_directories() {
        let (_dir, sys) = fixture();
        let pmu = sys.pmu("cpu").unwrap().unwrap();
        for name in ["../../../../../etc/passwd", "..", "a/b", "", "x\0"] {
            let error = pmu
                .encode(&format!("{name}=1"))
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(!error.contains("root:"), "{error}");
            assert!(
                error.contains("not a format term") || name.is_empty(),
                "{name}: {error}"
            );
            assert_eq!(pmu.event_terms(name).unwrap(), None, "{name}");
            assert!(sys.pmu(name).unwrap().is_none(), "{name}");
        }
        assert!(is_file_name("topdown-retiring") && is_file_name("mem-loads-aux"));
    }

    fn fixture() -> (tempfile::TempDir, SysRoot) {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("sys/bus/event_source/devices/cpu");
        fs::create_dir_all(cpu.join("format")).unwrap();
        fs::create_dir_all(cpu.join("events")).unwrap();
        fs::write(cpu.join("type"), "4\n").unwrap();
        fs::write(cpu.join("format/event"), "config:0-7\n").unwrap();
        fs::write(cpu.join("format/umask"), "config:8-15\n").unwrap();
        fs::write(cpu.join("format/edge"), "config:18\n").unwrap();
        fs::write(cpu.join("format/cmask"), "config:24-31\n").unwrap();
        fs::write(cpu.join("format/ldlat"), "config1:0-15\n").unwrap();
        fs::write(cpu.join("format/split"), "config2:0-3,8-11\n").unwrap();
        fs::write(cpu.join("events/slots"), "event=0x00,umask=0x4\n").unwrap();
        let root = SysRoot::at(dir.path());
        (dir, root)
    }

    #[test]
    fn encodes_terms_through_format_files() {
        let (_dir, root) = fixture();
        let cpu = root.pmu("cpu").unwrap().unwrap();
        assert_eq!(cpu.pmu_type, 4);
        let slots = cpu.event_terms("slots").unwrap().unwrap();
        assert_eq!(cpu.encode(&slots).unwrap().config, 0x0400);
        let c = cpu.encode("event=0x0d,umask=0x3,cmask=1,edge").unwrap();
        assert_eq!(c.config, 0x0d | 0x3 << 8 | 1 << 18 | 1 << 24);
        assert_eq!(cpu.encode("ldlat=30").unwrap().config1, 30);
        // A split format spreads the value's low bits, then the next ones.
        assert_eq!(cpu.encode("split=0xab").unwrap().config2, 0xb | 0xa << 8);
    }

    #[test]
    fn rejects_unknown_terms_and_overflow() {
        let (_dir, root) = fixture();
        let cpu = root.pmu("cpu").unwrap().unwrap();
        assert!(cpu.encode("bogus=1").is_err());
        assert!(cpu.encode("event=0x100").is_err());
        assert!(root.pmu("nope").unwrap().is_none());
        assert_eq!(root.pmu_names().unwrap(), vec!["cpu".to_owned()]);
    }
}
