//! The kernel's own trace of the scheduler (tracefs: `sched_switch`, `sched_waking`,
//! `sched_wakeup`), in a private trace instance, as an independent witness of who held a CPU
//! while a thread waited for it.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// One scheduler event of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `sched_switch` on `cpu`: `prev` leaves (still runnable: preempted), `next` runs.
    Switch {
        /// The CPU.
        cpu: u32,
        /// Trace clock, ns (microsecond resolution).
        ns: u64,
        /// The thread switched out.
        prev: u32,
        /// Whether it was still runnable (`prev_state=R`): it waits from here.
        prev_runnable: bool,
        /// The thread switched in.
        next: u32,
    },
    /// `sched_waking`: thread `pid` is being woken (before its enqueue).
    Waking {
        /// Trace clock, ns.
        ns: u64,
        /// The thread.
        pid: u32,
    },
    /// `sched_migrate_task`: thread `pid` moves to `dest_cpu` (a queued one is enqueued there
    /// right after).
    Migrate {
        /// Trace clock, ns.
        ns: u64,
        /// The thread.
        pid: u32,
        /// Where it goes.
        dest_cpu: u32,
    },
    /// `sched_wakeup`: thread `pid` was woken onto `target_cpu` (after its enqueue).
    Wakeup {
        /// Trace clock, ns.
        ns: u64,
        /// The thread.
        pid: u32,
        /// Where it was queued.
        target_cpu: u32,
    },
}

/// The events traced.
const EVENTS: [&str; 4] = [
    "sched_switch",
    "sched_waking",
    "sched_wakeup",
    "sched_migrate_task",
];

/// A running trace of the scheduler's switches and wakeups, in its own tracefs instance
/// (removed on drop).
pub struct SchedTrace {
    dir: PathBuf,
}

impl SchedTrace {
    /// Starts tracing, mounting tracefs where it is not; `None` (said why) where tracefs is
    /// not there.
    pub fn start(name: &str) -> Option<Self> {
        let root = Path::new("/sys/kernel/tracing");
        if !root.join("instances").exists() {
            let c = |s: &str| std::ffi::CString::new(s).unwrap();
            let (source, fstype, target) = (c("nodev"), c("tracefs"), c("/sys/kernel/tracing"));
            // SAFETY: NUL-terminated strings that outlive the call; no data argument.
            let mounted = unsafe {
                libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    fstype.as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            if mounted != 0 {
                eprintln!(
                    "no tracefs: {} (the trace comparison is skipped)",
                    std::io::Error::last_os_error()
                );
                return None;
            }
        }
        let dir = root
            .join("instances")
            .join(format!("{name}-{}", std::process::id()));
        fs::create_dir(&dir).expect("creating a trace instance");
        let trace = Self { dir };
        trace.write("buffer_size_kb", "8192");
        for event in EVENTS {
            trace.write(&format!("events/sched/{event}/enable"), "1");
        }
        trace.write("tracing_on", "1");
        Some(trace)
    }

    fn write(&self, file: &str, value: &str) {
        fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("writing {value} to the trace's {file}: {e}"));
    }

    /// Stops tracing and returns every event, in time order; panics when the buffer overran
    /// (a trace with holes witnesses nothing).
    pub fn stop(&self) -> Vec<Event> {
        self.write("tracing_on", "0");
        for cpu in fs::read_dir(self.dir.join("per_cpu")).expect("the trace's CPUs") {
            let stats = fs::read_to_string(cpu.expect("a CPU").path().join("stats"))
                .expect("the trace's stats");
            let overrun = stats
                .lines()
                .find_map(|l| l.strip_prefix("overrun: "))
                .and_then(|v| v.trim().parse::<u64>().ok());
            assert_eq!(overrun, Some(0), "the trace overran its buffer: {stats}");
        }
        let text = fs::read_to_string(self.dir.join("trace")).expect("reading the trace");
        text.lines().filter_map(parse).collect()
    }
}

impl Drop for SchedTrace {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("tracing_on"), "0");
        for event in EVENTS {
            let _ = fs::write(self.dir.join(format!("events/sched/{event}/enable")), "0");
        }
        let _ = fs::remove_dir(&self.dir);
    }
}

/// One line of the `trace` file:
/// `  comm-pid  [000] d..2.  1234.567890: sched_switch: prev_comm=... prev_pid=1 ...`.
fn parse(line: &str) -> Option<Event> {
    let open = line.find("] ")?;
    let cpu = line[..open].rsplit('[').next()?.trim().parse().ok()?;
    let mut words = line[open + 2..].split_whitespace();
    // The flags (`d..2.`), then the time stamp (`1234.567890:`).
    let stamp = words.find(|w| w.ends_with(':') && w.contains('.'))?;
    let (secs, micros) = stamp.trim_end_matches(':').split_once('.')?;
    let ns = secs.parse::<u64>().ok()? * 1_000_000_000 + micros.parse::<u64>().ok()? * 1_000;
    let event = words.next()?.trim_end_matches(':');
    let rest: Vec<&str> = words.collect();
    let field = |name: &str| {
        rest.iter()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
    };
    let number = |name: &str| field(name)?.parse::<u32>().ok();
    match event {
        "sched_switch" => Some(Event::Switch {
            cpu,
            ns,
            prev: number("prev_pid")?,
            prev_runnable: field("prev_state")?.starts_with('R'),
            next: number("next_pid")?,
        }),
        "sched_waking" => Some(Event::Waking {
            ns,
            pid: number("pid")?,
        }),
        "sched_migrate_task" => Some(Event::Migrate {
            ns,
            pid: number("pid")?,
            dest_cpu: number("dest_cpu")?,
        }),
        "sched_wakeup" => Some(Event::Wakeup {
            ns,
            pid: number("pid")?,
            target_cpu: number("target_cpu")?,
        }),
        _ => None,
    }
}

/// What the trace says a thread's waits on one CPU were spent behind, per group of threads:
/// the waits that ended as it was switched in there, and apart, those that ended as it was
/// moved to another CPU (which the kernel books at the move).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TracedWaits {
    /// The waits that ended on the CPU, either way.
    pub waits: u64,
    /// Switches inside the waits (each moves a boundary between two culprits).
    pub boundaries: u64,
    /// Times the thread was switched out still runnable there.
    pub preempted: u64,
    /// Per group, the least it can have been waited behind: each wait taken from the latest its
    /// enqueue can have happened (its `sched_wakeup`).
    pub least: Vec<u64>,
    /// Per group, the most: each wait taken from the earliest (its `sched_waking`).
    pub most: Vec<u64>,
    /// The waits that ended as the thread was moved to another CPU.
    pub moved: u64,
    /// Per group, the least the moved waits can have been spent behind.
    pub moved_least: Vec<u64>,
    /// Per group, the most.
    pub moved_most: Vec<u64>,
}

impl TracedWaits {
    /// Adds another CPU's.
    pub fn add(&mut self, other: &Self) {
        let sum = |a: &mut Vec<u64>, b: &[u64]| {
            a.resize(a.len().max(b.len()), 0);
            a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        };
        self.waits += other.waits;
        self.boundaries += other.boundaries;
        self.preempted += other.preempted;
        self.moved += other.moved;
        sum(&mut self.least, &other.least);
        sum(&mut self.most, &other.most);
        sum(&mut self.moved_least, &other.moved_least);
        sum(&mut self.moved_most, &other.moved_most);
    }

    /// The same with the moved waits in each group's bracket (where the collector splits a
    /// moved wait over the CPU it left).
    pub fn with_moved(mut self) -> Self {
        for (g, (least, most)) in self.moved_least.iter().zip(&self.moved_most).enumerate() {
            self.least[g] += least;
            self.most[g] += most;
        }
        self.moved_least.fill(0);
        self.moved_most.fill(0);
        self
    }

    /// The moved waits' bracket, over every group.
    pub fn moved_total(&self) -> (u64, u64) {
        (self.moved_least.iter().sum(), self.moved_most.iter().sum())
    }
}

/// Splits the waits of thread `victim` that ended on `cpu` over the threads that held `cpu`
/// meanwhile, summed per group (`group` of a tid, below `groups`; the idle task is tid 0).
/// A wait starts at the thread's enqueue, which the trace brackets: between its `sched_waking`
/// and its `sched_wakeup`, at its switch out while still runnable, or at its migration to
/// `cpu` (a wait on the CPU it left is not this CPU's); it ends at its switch in, or at its
/// migration off `cpu` while queued there (counted apart, as `moved`).
pub fn waits_behind(
    events: &[Event],
    cpu: u32,
    victim: u32,
    groups: usize,
    group: impl Fn(u32) -> usize,
) -> TracedWaits {
    // The CPU's slices: (start, end, holder).
    let mut slices: Vec<(u64, u64, u32)> = Vec::new();
    let mut holder: Option<(u64, u32)> = None;
    let mut waits: Vec<(u64, u64, u64, bool)> = Vec::new();
    let mut waking: Option<u64> = None;
    let mut queued: Option<(u64, u64)> = None;
    let mut traced = TracedWaits {
        least: vec![0; groups],
        most: vec![0; groups],
        moved_least: vec![0; groups],
        moved_most: vec![0; groups],
        ..TracedWaits::default()
    };
    for event in events {
        match *event {
            Event::Waking { ns, pid } if pid == victim => waking = Some(ns),
            Event::Wakeup {
                ns,
                pid,
                target_cpu,
            } if pid == victim && target_cpu == cpu => {
                queued = Some((waking.take().unwrap_or(ns), ns));
            }
            Event::Migrate { ns, pid, dest_cpu } if pid == victim && dest_cpu == cpu => {
                queued = Some((ns, ns));
            }
            Event::Migrate { ns, pid, .. } if pid == victim => {
                if let Some((earliest, latest)) = queued.take() {
                    waits.push((earliest, latest, ns, true));
                }
            }
            Event::Switch {
                cpu: on,
                ns,
                prev,
                prev_runnable,
                next,
            } if on == cpu => {
                if let Some((start, holder)) = holder.replace((ns, next)) {
                    slices.push((start, ns, holder));
                }
                if prev == victim && prev_runnable {
                    traced.preempted += 1;
                    queued = Some((ns, ns));
                }
                if next == victim
                    && let Some((earliest, latest)) = queued.take()
                {
                    waits.push((earliest, latest, ns, false));
                }
            }
            _ => {}
        }
    }
    // The slice running at the end of the trace.
    if let (Some((start, holder)), Some(last)) = (holder, events.last()) {
        slices.push((start, event_ns(last), holder));
    }
    for (earliest, latest, end, moved) in waits {
        traced.waits += 1;
        traced.moved += u64::from(moved);
        traced.boundaries += slices
            .iter()
            .filter(|&&(start, ..)| start > earliest && start < end)
            .count() as u64;
        for &(start, stop, tid) in &slices {
            let overlap = |from: u64| stop.min(end).saturating_sub(start.max(from));
            let g = group(tid);
            let (least, most) = if moved {
                (&mut traced.moved_least, &mut traced.moved_most)
            } else {
                (&mut traced.least, &mut traced.most)
            };
            least[g] += overlap(latest);
            most[g] += overlap(earliest);
        }
    }
    traced
}

/// When an event happened (trace clock, ns).
fn event_ns(event: &Event) -> u64 {
    match *event {
        Event::Switch { ns, .. }
        | Event::Waking { ns, .. }
        | Event::Migrate { ns, .. }
        | Event::Wakeup { ns, .. } => ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_lines_of_every_kernel_are_read() {
        let switch = "          <idle>-0       [000] d..2.  1234.567890: sched_switch: \
                      prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> \
                      next_comm=hog-0 next_pid=123 next_prio=120";
        assert_eq!(
            parse(switch),
            Some(Event::Switch {
                cpu: 0,
                ns: 1_234_567_890_000,
                prev: 0,
                prev_runnable: true,
                next: 123
            })
        );
        // 5.10's flags have four characters; its wakeup's target is a bare number.
        let wakeup = " neighbours-456   [001] d..4  99.000001: sched_wakeup: comm=neighbours \
                      pid=457 prio=120 target_cpu=000";
        assert_eq!(
            parse(wakeup),
            Some(Event::Wakeup {
                ns: 99_000_001_000,
                pid: 457,
                target_cpu: 0
            })
        );
        assert_eq!(parse("# tracer: nop"), None);
    }

    #[test]
    fn a_wait_is_split_over_the_slices_between_its_enqueue_and_its_switch_in() {
        let us = 1_000;
        let switch = |ns: u64, prev, prev_runnable, next| Event::Switch {
            cpu: 0,
            ns: ns * us,
            prev,
            prev_runnable,
            next,
        };
        let events = [
            switch(0, 9, false, 1),
            Event::Waking {
                ns: 10 * us,
                pid: 9,
            },
            Event::Wakeup {
                ns: 12 * us,
                pid: 9,
                target_cpu: 0,
            },
            switch(20, 1, true, 2),
            switch(50, 2, true, 9),
            // Preempted, then back after one slice of tid 1.
            switch(60, 9, true, 1),
            switch(70, 1, true, 9),
        ];
        let traced = waits_behind(&events, 0, 9, 3, |tid| tid as usize % 3);
        assert_eq!((traced.waits, traced.preempted), (2, 1));
        assert_eq!(traced.least, [0, (8 + 10) * us, 30 * us]);
        assert_eq!(traced.most, [0, (10 + 10) * us, 30 * us]);
        assert_eq!(traced.boundaries, 1);
    }

    #[test]
    fn a_wait_ended_by_a_move_to_another_cpu_is_counted_apart_on_the_cpu_it_left() {
        let us = 1_000;
        let switch = |cpu, ns: u64, prev, next| Event::Switch {
            cpu,
            ns: ns * us,
            prev,
            prev_runnable: true,
            next,
        };
        let events = [
            switch(0, 0, 1, 9),
            // Preempted on CPU 0 by 1, moved to CPU 1 at 25 where 2 runs, switched in at 40.
            switch(0, 10, 9, 1),
            switch(1, 20, 7, 2),
            Event::Migrate {
                ns: 25 * us,
                pid: 9,
                dest_cpu: 1,
            },
            switch(1, 30, 2, 3),
            switch(1, 40, 3, 9),
            switch(0, 50, 1, 4),
        ];
        let group = |tid: u32| (tid as usize).min(4);
        let on_0 = waits_behind(&events, 0, 9, 5, group);
        assert_eq!((on_0.waits, on_0.moved), (1, 1));
        assert_eq!(on_0.moved_most, [0, 15 * us, 0, 0, 0]);
        assert_eq!(on_0.most, [0; 5]);
        let mut both = waits_behind(&events, 1, 9, 5, group);
        assert_eq!(both.most, [0, 0, 5 * us, 10 * us, 0]);
        both.add(&on_0);
        assert_eq!((both.waits, both.moved), (2, 1));
        assert_eq!(both.moved_total(), (15 * us, 15 * us));
        let both = both.with_moved();
        assert_eq!((both.least[1], both.most[1]), (15 * us, 15 * us));
        assert_eq!(both.most, [0, 15 * us, 5 * us, 10 * us, 0]);
    }
}
