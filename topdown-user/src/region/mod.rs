//! TopDown of a region of code, measured from inside the program: the crate's second entry
//! point, after the `topdown-bpf` tool. As Linux's `Documentation/topdown.txt` describes it, the
//! calling thread opens the `slots` + `metrics` group for itself (the slots leader is raw config
//! 0x400, the metrics member raw config 0x8000; user space only; pinned), maps both, and reads
//! them with RDPMC around the region through the mmap page protocol ([`mapped`]); the two
//! readings give the region's Level 1 fractions (and Level 2 on Sapphire Rapids and later) from
//! slot-scaled deltas ([`decode`]).
//!
//! ```no_run
//! use topdown_user::region::Region;
//!
//! let mut region = Region::open()?;
//! region.start()?;
//! // ... the code to measure ...
//! let fractions = region.stop()?;
//! for (metric, value) in &fractions.values {
//!     println!("{metric:<24} {:5.1} %", value * 100.0);
//! }
//! # anyhow::Ok(())
//! ```
//!
//! Where user RDPMC is not allowed (`/sys/bus/event_source/devices/cpu/rdpmc` is 0, or the page
//! says no), the group is read with read(2) instead, which returns each metric in slots and
//! resets the counters: `start` then reads to reset and `stop` reads the region. The two ways
//! are never mixed on one group (a read(2) would reset what RDPMC reads).
//!
//! Long runs: the fractions have 8 bits, of the slots since the last reset, so a region read
//! long after a reset is imprecise ([`decode`] bounds the error and refuses a region whose
//! bound passes 2 %). [`Region::start`] resets the group when more than [`RESET_AFTER`] has
//! passed since the last reset (as topdown.txt advises, every few seconds), and
//! [`Region::reset`] does it on demand.
//!
//! Hybrid CPUs: PERF_METRICS exists on P-cores only; a thread on an E-core gets an error saying
//! so (pin it to a P-core). Machines without PERF_METRICS (before Ice Lake, AMD, Arm, VMs
//! without a virtual PMU) get a one-line error naming why.

pub mod c_api;
pub mod decode;
pub mod mapped;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use perf_event_open_sys::bindings;

use self::{
    decode::{Fractions, MetricsReading},
    mapped::MappedCounter,
};
use crate::pmu::machine::parse_cpu_list;

/// `slots` (fixed counter 3) as a raw event of the core PMU.
pub const SLOTS_CONFIG: u64 = 0x400;
/// The `metrics` pseudo event (the PERF_METRICS value).
pub const METRICS_CONFIG: u64 = 0x8000;
/// RDPMC of fixed counter 3, the slots counter.
pub const RDPMC_SLOTS: u32 = 1 << 30 | 3;
/// RDPMC of the PERF_METRICS value.
pub const RDPMC_METRICS: u32 = 1 << 29;
/// How long a start may be from the last reset before it resets again.
pub const RESET_AFTER: Duration = Duration::from_secs(2);

/// How the group is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// RDPMC through the mmap pages.
    Rdpmc,
    /// read(2) of the group (each read resets it).
    Syscall,
}

/// The `slots` + `metrics` group of the calling thread.
pub struct Region {
    slots: MappedCounter,
    /// `topdown-retiring` (0x8000, whose page gives the RDPMC index of the PERF_METRICS value),
    /// then the other metrics in the kernel's order (read(2) returns each in slots).
    metrics: Vec<MappedCounter>,
    mode: ReadMode,
    level: u8,
    started: Option<Started>,
    last_reset: Instant,
}

/// What `start` left for `stop`.
#[derive(Clone, Copy, Debug)]
enum Started {
    /// The RDPMC reading at the start.
    At(MetricsReading),
    /// The group was read (and so reset) by read(2): the next read is the region.
    Reset,
}

impl Region {
    /// Opens the group for the calling thread on this machine's P-core PMU.
    pub fn open() -> Result<Self> {
        Self::open_in(Path::new("/"))
    }

    /// As [`Region::open`], with sysfs read under `root` (for tests).
    pub fn open_in(root: &Path) -> Result<Self> {
        let pmu = perf_metrics_pmu(root)?;
        let devices = root.join("sys/bus/event_source/devices");
        let dir = devices.join(&pmu);
        let pmu_type: u32 = std::fs::read_to_string(dir.join("type"))
            .with_context(|| format!("reading {}/type", dir.display()))?
            .trim()
            .parse()
            .context("the PMU's type")?;
        if pmu == "cpu_core"
            && let Ok(atoms) = std::fs::read_to_string(devices.join("cpu_atom/cpus"))
        {
            // SAFETY: sched_getcpu has no preconditions.
            let cpu = unsafe { libc::sched_getcpu() };
            if let Ok(cpu) = u32::try_from(cpu)
                && parse_cpu_list(atoms.trim()).is_ok_and(|list| list.contains(&cpu))
            {
                bail!(
                    "this thread runs on an E-core (CPU {cpu}): PERF_METRICS is on P-cores only; \
                     pin it to a P-core (taskset, sched_setaffinity) before Region::open"
                );
            }
        }
        let level = if dir.join("events/topdown-heavy-ops").exists() {
            2
        } else {
            1
        };
        let attr = |config: u64, leader: bool| {
            let mut attr = bindings::perf_event_attr {
                size: size_of::<bindings::perf_event_attr>() as u32,
                type_: pmu_type,
                config,
                read_format: u64::from(bindings::PERF_FORMAT_GROUP),
                ..Default::default()
            };
            attr.set_pinned(u64::from(leader));
            attr.set_exclude_kernel(1);
            attr.set_exclude_hv(1);
            attr
        };
        let slots = MappedCounter::open(&attr(SLOTS_CONFIG, true), None)
            .context("opening the slots counter")?;
        let metrics = (0..u64::from(level) * 4)
            .map(|i| {
                MappedCounter::open(&attr(METRICS_CONFIG + i * 0x100, false), Some(&slots))
                    .context("opening the metrics counter")
            })
            .collect::<Result<Vec<_>>>()?;
        let allowed =
            std::fs::read_to_string(dir.join("rdpmc")).is_ok_and(|value| value.trim() != "0");
        let page = slots.state(false);
        let mode = if allowed && page.user_rdpmc && page.index != 0 {
            ReadMode::Rdpmc
        } else {
            ReadMode::Syscall
        };
        let mut region = Self {
            slots,
            metrics,
            mode,
            level,
            started: None,
            last_reset: Instant::now(),
        };
        region.reset()?;
        Ok(region)
    }

    /// How the group is read.
    pub const fn mode(&self) -> ReadMode {
        self.mode
    }

    /// 2 where the PMU has the Level 2 metrics (Sapphire Rapids and later), else 1.
    pub const fn level(&self) -> u8 {
        self.level
    }

    /// Resets slots and metrics (PERF_EVENT_IOC_RESET on the group).
    pub fn reset(&mut self) -> Result<()> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: an ioctl on our own perf fd.
        let rc = unsafe {
            perf_event_open_sys::ioctls::RESET(
                self.slots.file().as_raw_fd(),
                bindings::PERF_IOC_FLAG_GROUP,
            )
        };
        if rc < 0 {
            bail!(
                "resetting the counters failed: {}",
                std::io::Error::last_os_error()
            );
        }
        self.last_reset = Instant::now();
        Ok(())
    }

    /// Marks the start of the region.
    pub fn start(&mut self) -> Result<()> {
        if self.last_reset.elapsed() > RESET_AFTER {
            self.reset()?;
        }
        self.started = Some(match self.mode {
            ReadMode::Rdpmc => Started::At(self.rdpmc()?),
            ReadMode::Syscall => {
                self.read_group()?;
                Started::Reset
            }
        });
        Ok(())
    }

    /// The fractions of the region since [`Region::start`]; an error for a region too short to
    /// give them (see [`decode`]).
    pub fn stop(&mut self) -> Result<Fractions> {
        let Some(start) = self.started.take() else {
            bail!("Region::stop without Region::start");
        };
        match start {
            Started::At(start) => {
                let end = self.rdpmc()?;
                let width = u32::from(self.slots.state(false).pmc_width);
                decode::region(start, end, width.max(1), self.level)
            }
            Started::Reset => {
                let (slots, metrics) = self.read_group()?;
                decode::from_slot_counts(slots, &metrics, self.level)
            }
        }
    }

    /// Slots and metrics by RDPMC.
    fn rdpmc(&self) -> Result<MetricsReading> {
        let slots = self.slots.state(true);
        let metrics = self.metrics[0].state(true);
        let (Some(raw_slots), Some(raw_metrics)) = (slots.raw, metrics.raw) else {
            bail!("the kernel stopped allowing RDPMC of the group (it was descheduled?)");
        };
        // The pages name the counters topdown.txt reads: fixed counter 3 and PERF_METRICS.
        if (slots.index - 1, metrics.index - 1) != (RDPMC_SLOTS, RDPMC_METRICS) {
            bail!(
                "the kernel maps the group to RDPMC {:#x} and {:#x}, not slots ({RDPMC_SLOTS:#x})                  and PERF_METRICS ({RDPMC_METRICS:#x})",
                slots.index - 1,
                metrics.index - 1
            );
        }
        Ok(MetricsReading {
            slots: slots
                .offset
                .wrapping_add(mapped::sign_extend(raw_slots, slots.pmc_width))
                .cast_unsigned(),
            metrics: raw_metrics,
        })
    }

    /// The group by read(2): slots, then each metric in slots (in the kernel's order, the
    /// order of the `topdown-*` events: retiring, bad speculation, frontend, backend, and on
    /// Sapphire Rapids heavy operations, mispredicts, fetch latency, memory bound).
    fn read_group(&self) -> Result<(u64, Vec<u64>)> {
        use std::io::Read as _;
        let mut buffer = [0u8; 8 * 10];
        let read = self
            .slots
            .file()
            .read(&mut buffer)
            .context("read(2) of the group")?;
        let values: Vec<u64> = buffer[..read]
            .as_chunks::<8>()
            .0
            .iter()
            .map(|c| u64::from_ne_bytes(*c))
            .collect();
        let Some((&count, rest)) = values.split_first() else {
            bail!("read(2) of the group returned nothing");
        };
        let members = usize::try_from(count).unwrap_or(usize::MAX);
        if members < 2 || rest.len() < members {
            bail!("read(2) of the group returned {count} members, expected slots and metrics");
        }
        Ok((rest[0], rest[1..members].to_vec()))
    }
}

/// The core PMU with PERF_METRICS (`cpu`, or `cpu_core` on hybrid parts), or why none.
fn perf_metrics_pmu(root: &Path) -> Result<String> {
    let devices = root.join("sys/bus/event_source/devices");
    for pmu in ["cpu_core", "cpu"] {
        if devices.join(pmu).join("events/topdown-retiring").exists() {
            return Ok(pmu.to_owned());
        }
    }
    if devices.join("cpu").exists() || devices.join("cpu_core").exists() {
        bail!(
            "this CPU's PMU has no PERF_METRICS (no topdown-* events): TopDown regions need an \
             Intel P-core from Ice Lake on (not AMD, Arm, Atom or older Intel)"
        );
    }
    bail!(
        "no PMU with PERF_METRICS is present: this machine has no hardware PMU (a VM without a \
         virtual PMU?), and TopDown regions need an Intel P-core from Ice Lake on"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_without_perf_metrics_say_why_in_one_line() {
        for (fixture, why) in [
            ("vm-no-pmu", "no hardware PMU"),
            ("zen4", "no PERF_METRICS"),
            ("skylake-smt-off", "no PERF_METRICS"),
        ] {
            let root = Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../tests/fixtures/sysfs"
            ))
            .join(fixture);
            let Err(error) = Region::open_in(&root) else {
                panic!("{fixture}: opened");
            };
            let error = format!("{error:#}");
            assert!(error.contains(why), "{fixture}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }
}
