//! The PMU's calibration: which events of a set this PMU really counts.
//!
//! A PMU can accept an event and never count it: a cloud VM's vPMU that counts only the
//! architectural events (or none), QEMU's emulated Arm PMU (CPU_CYCLES counts, INST_RETIRED
//! only under `-icount`, every other event reads 0). The kernel then charges a 0 at every switch, and a TopDown node
//! made of those zeros (`backend_bound 0.0`) is a number nobody measured. So before a set with
//! hardware events is used, one thread of ours opens the set's hardware events on itself and
//! runs a short loop that moves every part of the pipeline (dependent arithmetic, a divide,
//! loads and stores at random over 8 MiB, a branch on random bits that no predictor learns).
//! An event that ran on a counter for at least [`MIN_RUNNING`] of it and read exactly 0 does
//! not count on this PMU: it is *silent*, and so is every TopDown node built on it.
//!
//! Some events are rare enough to read 0 over any loop (machine clears, microcode assists), so
//! silence is not final: the attributor ([`crate::attrib::Attributor::set_silent`]) clears it
//! the first time the event counts anything in any row, and from then on its zeros are counts.
//! Until then its values are `<not counted>`, never 0.

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _, OwnedFd},
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result};
use perf_event_open_sys::ioctls;

use super::{canary::thread_cputime, perf_open};
use crate::pmu::counter_set::{Counter, CounterSet};

/// How long the calibration loop runs (its thread's CPU time).
const SPIN: Duration = Duration::from_millis(20);

/// Least time an event must have run on a counter during the loop to be judged: a millisecond
/// of the loop moves every pipeline event by thousands at any clock rate.
pub const MIN_RUNNING: Duration = Duration::from_millis(1);

/// `perf_event_attr.type` values of events that are not the PMU's: software, tracepoint and
/// breakpoint events count what the kernel does, and may legitimately stay at 0.
const NOT_PMU_TYPES: [u32; 3] = [1, 2, 5];

/// What the calibration loop read from one hardware event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopReading {
    /// Slot of the event in the set.
    pub slot: usize,
    /// Its count over the loop.
    pub count: u64,
    /// Nanoseconds it was running on a counter.
    pub running_ns: u64,
}

/// The verdict on a set: its hardware events as the loop read them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Calibration {
    /// Each hardware event that could be opened on the loop's thread.
    pub readings: Vec<LoopReading>,
    /// Hardware events that could not be opened on a thread (not judged), with why.
    pub unopened: Vec<(usize, String)>,
}

impl Calibration {
    /// Slots of the events this PMU does not count: they ran at least [`MIN_RUNNING`] and read
    /// 0.
    pub fn silent(&self) -> Vec<usize> {
        self.readings
            .iter()
            .filter(|r| r.count == 0 && r.running_ns >= MIN_RUNNING.as_nanos() as u64)
            .map(|r| r.slot)
            .collect()
    }

    /// The event that counted the most during the loop, as `(slot, count)`: what the one line
    /// about silent events cites.
    pub fn busiest(&self) -> Option<(usize, u64)> {
        self.readings
            .iter()
            .filter(|r| r.count > 0)
            .max_by_key(|r| r.count)
            .map(|r| (r.slot, r.count))
    }

    /// One line for standard error when some events are silent (`None` when every judged
    /// event counted).
    pub fn explain(&self, set: &CounterSet) -> Option<String> {
        let silent = self.silent();
        if silent.is_empty() {
            return None;
        }
        let names = set.names_of(&silent).join(", ");
        let loop_ms = SPIN.as_millis();
        let what = match self.busiest() {
            Some((slot, count)) => format!(
                "each read 0 over a {loop_ms} ms start-up loop while {} counted {count}",
                name_of(set, slot)
            ),
            None => format!("no event of the set counted over a {loop_ms} ms start-up loop"),
        };
        Some(format!(
            "topdown-bpf: this PMU does not count {names} ({what}: a virtual machine's or an \
             emulator's PMU accepts events it never counts): no number for them or for the \
             TopDown nodes built on them (<not counted>, JSON null, no series), never a 0, until \
             they count"
        ))
    }
}

/// Runs the calibration loop for `set`'s hardware events on a thread of ours; an empty verdict
/// (and no loop) for a set without any.
pub fn calibrate(set: &CounterSet) -> Result<Calibration> {
    if !set.counters.iter().any(is_pmu_event) {
        return Ok(Calibration::default());
    }
    let counters = set.counters.clone();
    thread::Builder::new()
        .name("td-calibrate".into())
        .spawn(move || on_this_thread(&counters))
        .context("starting the PMU calibration's thread")?
        .join()
        .map_err(|_| anyhow::anyhow!("the PMU calibration's thread panicked"))?
}

/// Whether `counter` is an event of a PMU (not software, tracepoint or breakpoint).
fn is_pmu_event(counter: &Counter) -> bool {
    !NOT_PMU_TYPES.contains(&counter.attr.pmu_type)
}

/// Opens the hardware events of `counters` on the calling thread (in their groups), runs the
/// loop, and reads them.
fn on_this_thread(counters: &[Counter]) -> Result<Calibration> {
    let mut calibration = Calibration::default();
    // (slot, fd), leaders before their members, as in the set.
    let mut open: Vec<(usize, OwnedFd)> = Vec::new();
    for (slot, counter) in counters.iter().enumerate() {
        if !is_pmu_event(counter) {
            continue;
        }
        let leader = match counter.attr.leader {
            None => None,
            Some(leader) => match open.iter().find(|(s, _)| *s == leader) {
                Some((_, fd)) => Some(fd.as_fd()),
                None => {
                    calibration
                        .unopened
                        .push((slot, "its group's leader did not open".into()));
                    continue;
                }
            },
        };
        match perf_open::open_event(&counter.attr, 0, -1, leader) {
            Ok(fd) => open.push((slot, fd)),
            Err(error) => calibration.unopened.push((slot, format!("{error:#}"))),
        }
    }
    for (slot, fd) in &open {
        if counters[*slot].attr.leader.is_none() {
            ioctl(fd, ioctls::ENABLE, "enabling")?;
        }
    }
    exercise(SPIN);
    for (slot, fd) in &open {
        if counters[*slot].attr.leader.is_none() {
            ioctl(fd, ioctls::DISABLE, "disabling")?;
        }
    }
    for (slot, fd) in &open {
        let reading = perf_open::read_values(fd.as_fd())
            .with_context(|| format!("reading {} after calibration", counters[*slot].name))?;
        calibration.readings.push(LoopReading {
            slot: *slot,
            count: reading.count,
            running_ns: reading.running_ns,
        });
    }
    Ok(calibration)
}

fn ioctl(
    fd: &OwnedFd,
    request: unsafe fn(libc::c_int, libc::c_uint) -> libc::c_int,
    what: &str,
) -> Result<()> {
    // SAFETY: a valid perf event fd; ENABLE and DISABLE take no pointer.
    if unsafe { request(fd.as_raw_fd(), 0) } < 0 {
        return Err(io::Error::last_os_error()).with_context(|| format!("{what} a counter"));
    }
    Ok(())
}

/// Words of memory the loop loads and stores at random (8 MiB: beyond every core's L2).
const WORDS: usize = 1 << 20;

/// Runs for `spin` of this thread's CPU time: xorshift arithmetic, a branch on a random bit,
/// a load or a store at a random word of 8 MiB, a divide every 256 steps. Returns how many
/// steps it ran.
fn exercise(spin: Duration) -> u64 {
    let start = thread_cputime();
    let mut memory = vec![0u64; WORDS];
    let (mut x, mut sum, mut steps) = (0x9e37_79b9_7f4a_7c15u64, 0u64, 0u64);
    while thread_cputime().saturating_sub(start) < spin {
        for _ in 0..4096 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x as usize) & (WORDS - 1);
            if x & (1 << 40) == 0 {
                sum = sum.wrapping_add(memory[at]);
            } else {
                memory[at] = sum ^ x;
            }
            if x & 0xff == 0 {
                sum = sum.wrapping_add(x / ((sum & 0xffff) | 1));
            }
        }
        sum = std::hint::black_box(sum);
        steps += 4096;
    }
    std::hint::black_box(&memory);
    steps
}

fn name_of(set: &CounterSet, slot: usize) -> &str {
    set.counters.get(slot).map_or("?", |c| c.name.as_str())
}

/// Whether the NMI watchdog holds a PMU counter on every CPU: it is on (`kernel.nmi_watchdog`
/// = 1) and is the perf hard-lockup detector, which it is on x86 (whenever there is a PMU) and
/// on arm64 only with pseudo-NMIs (`irqchip.gicv3_pseudo_nmi=1`; otherwise arm64 uses the
/// buddy detector, which holds no counter).
pub fn watchdog_holds_counter() -> bool {
    let on =
        std::fs::read_to_string("/proc/sys/kernel/nmi_watchdog").is_ok_and(|s| s.trim() == "1");
    on && match std::env::consts::ARCH {
        "x86_64" => true,
        "aarch64" => std::fs::read_to_string("/proc/cmdline").is_ok_and(|line| {
            line.split_whitespace()
                .any(|w| w == "irqchip.gicv3_pseudo_nmi=1")
        }),
        _ => false,
    }
}

/// What to say on standard error about `set` on this PMU before showing anything: the events
/// it does not count, and the NMI watchdog's counter.
pub fn lines(calibration: &Calibration, set: &CounterSet) -> Vec<String> {
    calibration
        .explain(set)
        .into_iter()
        .chain(watchdog_line(set))
        .collect()
}

/// One line for standard error when the watchdog holds a counter and `set` needs the PMU.
fn watchdog_line(set: &CounterSet) -> Option<String> {
    (set.counters.iter().any(is_pmu_event) && watchdog_holds_counter()).then(|| {
        "topdown-bpf: the NMI watchdog (kernel.nmi_watchdog=1, the perf hard-lockup detector) \
         holds one PMU counter on every CPU, so the set's groups multiplex sooner; `sysctl \
         kernel.nmi_watchdog=0` frees it"
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmu::counter_set::{EventAttr, Unit};

    fn set() -> CounterSet {
        let mut set = CounterSet::empty("test", String::new());
        for (name, pmu_type) in [
            ("CPU_CYCLES", 8),
            ("STALL_SLOT", 8),
            ("context-switches", 1),
        ] {
            set.counters.push(Counter {
                name: name.into(),
                unit: Unit::Events,
                attr: EventAttr {
                    pmu_type,
                    ..EventAttr::default()
                },
                cpus: None,
            });
        }
        set
    }

    fn reading(slot: usize, count: u64, running_ms: u64) -> LoopReading {
        LoopReading {
            slot,
            count,
            running_ns: running_ms * 1_000_000,
        }
    }

    /// Silent: ran at least a millisecond and read 0. An event that barely ran is not judged;
    /// one that counted anything counts.
    #[test]
    fn an_event_that_ran_and_read_zero_is_silent_and_said_in_one_line() {
        let calibration = Calibration {
            readings: vec![reading(0, 21_000_000, 20), reading(1, 0, 20)],
            unopened: Vec::new(),
        };
        assert_eq!(calibration.silent(), [1]);
        let line = calibration.explain(&set()).unwrap();
        assert_eq!(line.lines().count(), 1);
        assert!(
            line.contains("does not count STALL_SLOT (")
                && line.contains("CPU_CYCLES counted 21000000"),
            "{line}"
        );
        let barely = Calibration {
            readings: vec![reading(0, 5, 20), reading(1, 0, 0)],
            unopened: Vec::new(),
        };
        assert!(barely.silent().is_empty() && barely.explain(&set()).is_none());
        let dead = Calibration {
            readings: vec![reading(0, 0, 20), reading(1, 0, 20)],
            unopened: Vec::new(),
        };
        assert_eq!(dead.silent(), [0, 1]);
        assert!(
            dead.explain(&set())
                .unwrap()
                .contains("no event of the set counted")
        );
    }

    /// A software set needs no loop; software events are never judged.
    #[test]
    fn software_events_are_not_the_pmus() {
        let software = CounterSet::software(String::new());
        assert_eq!(calibrate(&software).unwrap(), Calibration::default());
        let set = set();
        let judged: Vec<&str> = set
            .counters
            .iter()
            .filter(|c| is_pmu_event(c))
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(judged, ["CPU_CYCLES", "STALL_SLOT"]);
    }

    /// The loop runs for its CPU time, and runs steps in it.
    #[test]
    fn the_loop_runs_for_its_cpu_time() {
        let start = thread_cputime();
        let steps = exercise(Duration::from_millis(5));
        assert!(thread_cputime() - start >= Duration::from_millis(5));
        assert!(steps >= 4096, "{steps}");
    }
}
