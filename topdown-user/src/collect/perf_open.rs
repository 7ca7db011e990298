//! Opens a counter set once per CPU (pid = -1): one set for the whole machine, whatever the
//! number of threads.

use std::{
    io,
    os::fd::{AsFd, BorrowedFd, FromRawFd as _, OwnedFd},
};
use topdown_common::reading::Reading;

use anyhow::{Context as _, Result};
use perf_event_open_sys::{bindings, ioctls};

use crate::pmu::counter_set::{CounterSet, EventAttr};

/// The counters of one set, open on every listed CPU, disabled until [`OpenCounters::enable`].
#[derive(Debug)]
pub struct OpenCounters {
    /// `(cpu, counter index, fd)`, leaders before their members.
    events: Vec<(u32, usize, OwnedFd)>,
}

impl OpenCounters {
    /// Opens every counter of `set` on every CPU of `cpus` it is for: for the kernel program
    /// (which takes on-CPU time from the scheduler's clock, not from a counter), or read from
    /// userspace (`--per-core`, drilldown).
    pub fn open(set: &CounterSet, cpus: &[u32]) -> Result<Self> {
        let mut events: Vec<(u32, usize, OwnedFd)> =
            Vec::with_capacity(set.counters.len() * cpus.len());
        for &cpu in cpus {
            let first = events.len();
            for (index, counter) in set.counters.iter().enumerate() {
                if counter
                    .cpus
                    .as_ref()
                    .is_some_and(|only| !only.contains(&cpu))
                {
                    continue;
                }
                let leader = match counter.attr.leader {
                    None => None,
                    Some(leader) => Some(
                        events[first..]
                            .iter()
                            .find(|(_, i, _)| *i == leader)
                            .map(|(_, _, fd)| fd.as_fd())
                            .with_context(|| {
                                format!(
                                    "counter `{}`: its leader is not on CPU {cpu}",
                                    counter.name
                                )
                            })?,
                    ),
                };
                let fd = open_one(&counter.attr, cpu, leader)
                    .with_context(|| format!("opening counter `{}` on CPU {cpu}", counter.name))?;
                events.push((cpu, index, fd));
            }
        }
        Ok(Self { events })
    }

    /// Every open counter as `(cpu, counter index, fd)`.
    pub fn iter(&self) -> impl Iterator<Item = (u32, usize, BorrowedFd<'_>)> {
        self.events
            .iter()
            .map(|(cpu, index, fd)| (*cpu, *index, fd.as_fd()))
    }

    /// Every counter's current `(cpu, counter index, count, enabled ns, running ns)`, read from
    /// userspace (`read(2)` with the enabled and running times).
    pub fn read(&self) -> Result<Vec<(u32, usize, Reading)>> {
        self.iter()
            .map(|(cpu, index, fd)| {
                let values = read_values(fd)
                    .with_context(|| format!("reading counter {index} on CPU {cpu}"))?;
                Ok((cpu, index, values))
            })
            .collect()
    }

    /// Starts counting.
    pub fn enable(&self) -> Result<()> {
        for (cpu, index, fd) in self.iter() {
            // SAFETY: a valid perf event fd; ENABLE takes no pointer.
            let rc = unsafe { ioctls::ENABLE(raw(fd), 0) };
            if rc < 0 {
                return Err(io::Error::last_os_error())
                    .with_context(|| format!("enabling counter {index} on CPU {cpu}"));
            }
        }
        Ok(())
    }
}

fn raw(fd: BorrowedFd<'_>) -> i32 {
    use std::os::fd::AsRawFd as _;
    fd.as_raw_fd()
}

/// The `perf_event_attr` a counter is opened with: counting (no sampling), with enabled and
/// running times so the kernel program can tell when a counter was multiplexed out.
pub fn attr_for(event: &EventAttr, is_leader: bool) -> bindings::perf_event_attr {
    let mut attr = bindings::perf_event_attr {
        size: size_of::<bindings::perf_event_attr>() as u32,
        type_: event.pmu_type,
        config: event.config,
        read_format: u64::from(bindings::PERF_FORMAT_TOTAL_TIME_ENABLED)
            | u64::from(bindings::PERF_FORMAT_TOTAL_TIME_RUNNING),
        ..Default::default()
    };
    attr.__bindgen_anon_3.config1 = event.config1;
    attr.set_disabled(u64::from(is_leader));
    attr.set_pinned(u64::from(event.pinned && is_leader));
    attr.set_exclude_user(u64::from(event.exclude_user));
    attr.set_exclude_kernel(u64::from(event.exclude_kernel));
    attr
}

/// A counter's reading, from userspace (`read(2)` with the enabled and running times).
pub fn read_values(fd: BorrowedFd<'_>) -> io::Result<Reading> {
    let mut values = [0u64; 3];
    // SAFETY: reading 24 bytes into a 24-byte buffer from a perf event fd.
    let n = unsafe { libc::read(raw(fd), values.as_mut_ptr().cast(), size_of_val(&values)) };
    if n != size_of_val(&values) as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(Reading::from_values(values))
}

fn open_one(event: &EventAttr, cpu: u32, leader: Option<BorrowedFd<'_>>) -> Result<OwnedFd> {
    open_event(event, -1, cpu as i32, leader)
}

/// Opens `event` for `pid` (0: the calling thread; -1: every thread) on `cpu` (-1: wherever
/// it runs), in `leader`'s group or as a leader (then disabled until enabled).
pub fn open_event(
    event: &EventAttr,
    pid: i32,
    cpu: i32,
    leader: Option<BorrowedFd<'_>>,
) -> Result<OwnedFd> {
    let mut attr = attr_for(event, leader.is_none());
    let group_fd = leader.map_or(-1, raw);
    // SAFETY: attr is a valid, fully initialised perf_event_attr.
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(
            &mut attr,
            pid,
            cpu,
            group_fd,
            libc::c_ulong::from(bindings::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // SAFETY: perf_event_open returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_counts_with_times_and_only_leaders_start_disabled() {
        let event = EventAttr {
            pmu_type: 4,
            config: 0x400,
            config1: 7,
            pinned: true,
            exclude_kernel: true,
            ..EventAttr::default()
        };
        let leader = attr_for(&event, true);
        assert_eq!(leader.type_, 4);
        assert_eq!(leader.config, 0x400);
        // SAFETY: reading a plain u64 union member.
        assert_eq!(unsafe { leader.__bindgen_anon_3.config1 }, 7);
        assert_eq!(leader.read_format, 0b11);
        assert_eq!(leader.disabled(), 1);
        assert_eq!(leader.pinned(), 1);
        assert_eq!((leader.exclude_kernel(), leader.exclude_user()), (1, 0));
        assert_eq!(leader.sample_type, 0);
        let member = attr_for(&event, false);
        assert_eq!(member.disabled(), 0);
        assert_eq!(member.pinned(), 0);
    }
}
