//! A window's usage named for people: each thread with its cgroup's path, or the groups of
//! cgroups asked for (cgroups, containers, pods, services), their paths and owners resolved.
//! Reports take these names as they are; nothing past this point reads /sys/fs/cgroup.

use std::{sync::Arc, time::Duration};

use compact_str::CompactString;

use super::{
    Window,
    cgroups::CgroupNames,
    groups::{Group, GroupBy, GroupOptions, group},
    neighbours::{CulpritNames, Culprits},
    stalls::CpuStalls,
    usage::CounterValue,
};
use crate::prefetch;
use topdown_common::{
    cgroup::CgroupId,
    thread::{Pid, Tid},
};

/// One named line of usage.
#[derive(Clone, Debug)]
pub struct Named {
    /// Whose usage it is.
    pub who: Who,
    /// Switches out.
    pub switches: u64,
    /// Time on a CPU.
    pub on_cpu: Duration,
    /// Time waiting in a run queue; `None` where not measured.
    pub waited: Option<Duration>,
    /// Whom it waited behind, culprits named; `None` where not measured.
    pub behind: Option<Box<Culprits>>,
    /// CPU stalls as the kernel booked them (throttling, pressure) at a group's root cgroup,
    /// or at a thread's cgroup; `None` where they were not read.
    pub stalls: Option<CpuStalls>,
    /// Every counter of the set, in the set's order.
    pub counters: Vec<CounterValue>,
}

/// `window`'s threads, each with its cgroup's path, or its cgroups grouped as `grouping` asks.
pub(crate) fn name(
    window: &Window,
    names: &mut CgroupNames,
    grouping: Option<&GroupOptions>,
) -> Vec<Named> {
    names.allow_rescan();
    match grouping {
        Some(grouping) => {
            let mut culprits = CulpritNames::new(Some(grouping.by), &window.threads);
            group(&window.cgroups, names, grouping)
                .into_iter()
                .map(|g| Named {
                    switches: g.usage.switches,
                    on_cpu: g.usage.on_cpu,
                    waited: window.waits_measured.then_some(g.usage.waited),
                    behind: window
                        .neighbours_measured
                        .then(|| Box::new(culprits.culprits(&g.usage.behind, names))),
                    stalls: window.stalls.get(&g.path).copied(),
                    counters: g.usage.counters.clone(),
                    who: Who::Group {
                        by: grouping.by,
                        group: Box::new(g),
                    },
                })
                .collect()
        }
        None => name_threads(window, names).collect(),
    }
}

/// `window`'s threads in tid order, each with its cgroup's path, one at a time (the rows of a
/// window with many threads are built from them without a list of these in between). The
/// usages come in the order their threads ran: putting the rows made from them in tid order
/// moved each row of several hundred bytes, where the usages' tids sort side by side (and each
/// usage, now read out of order, is asked for a few ahead, then its split's parts).
pub(crate) fn name_threads<'w>(
    window: &'w Window,
    names: &'w mut CgroupNames,
) -> impl Iterator<Item = Named> + 'w {
    names.allow_rescan();
    let mut culprits = CulpritNames::new(None, &window.threads);
    let mut order: Vec<(u32, u32)> = (0u32..)
        .zip(&window.threads)
        .map(|(at, usage)| (usage.tid.0, at))
        .collect();
    order.sort_unstable();
    (0..order.len()).map(move |i| {
        if let Some(&(_, ahead)) = order.get(i + prefetch::AHEAD) {
            prefetch::read(&window.threads[ahead as usize]);
        }
        // Then, once a usage is in, its split's parts (out of line) where waits were split.
        if window.neighbours_measured
            && let Some(parts) = order
                .get(i + prefetch::AHEAD / 2)
                .and_then(|&(_, at)| window.threads[at as usize].behind.parts())
        {
            prefetch::read(parts);
        }
        let usage = &window.threads[order[i].1 as usize];
        let cgroup = names.name(usage.cgroup_id);
        Named {
            stalls: window.stalls.get(&*cgroup).copied(),
            who: Who::Thread(ThreadKey {
                tid: usage.tid,
                pid: usage.pid,
                comm: usage.comm.clone(),
                cgroup,
                cgroup_id: usage.cgroup_id,
                exited: usage.exited,
                folded: usage.folded,
            }),
            switches: usage.switches,
            on_cpu: usage.on_cpu,
            waited: window.waits_measured.then_some(usage.waited),
            behind: window
                .neighbours_measured
                .then(|| Box::new(culprits.culprits(&usage.behind, names))),
            counters: usage.counters.clone(),
        }
    })
}

/// One value that says whose a row is ([`Who::key_value`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyValue<'a> {
    /// A thread, process or cgroup id.
    Id(u64),
    /// A name or path.
    Text(&'a str),
}

/// Whose usage a report line holds.
#[derive(Clone, Debug)]
pub enum Who {
    /// One thread.
    Thread(ThreadKey),
    /// One cgroup (or subtree, rolled up), container, pod, service or user slice.
    Group {
        /// Rows per cgroup or per container.
        by: GroupBy,
        /// The group, usage aside.
        group: Box<Group>,
    },
}

/// What names a thread.
#[derive(Clone, Debug)]
pub struct ThreadKey {
    /// Thread id.
    pub tid: Tid,
    /// Process id.
    pub pid: Pid,
    /// Thread name.
    pub comm: CompactString,
    /// cgroup path (or `cgroup:<id>` if it could not be named), shared with
    /// [`CgroupNames`].
    pub cgroup: Arc<str>,
    /// cgroup2 id.
    pub cgroup_id: CgroupId,
    /// The thread died.
    pub exited: bool,
    /// How many exited threads the row folds (tid 0); 0 for one thread's row.
    pub folded: u64,
}

impl Who {
    /// Names of the columns that say whose line it is (lowercase: JSON and CSV field names;
    /// tables show them in capitals), for rows of threads (`None`) or of groups.
    pub const fn key_names(by: Option<GroupBy>) -> &'static [&'static str] {
        match by {
            None => &["tid", "pid", "comm", "cgroup"],
            Some(GroupBy::Cgroup) => &["cgroup", "cgroup_id"],
            Some(GroupBy::Container) => &["container", "kind", "pod", "qos", "cgroup"],
        }
    }

    /// The values of [`Who::key_names`]; a thread's name says `(exited)` when `decorate`.
    pub fn key_values(&self, decorate: bool) -> Vec<String> {
        let mut values = Vec::with_capacity(5);
        self.each_key_value(decorate, |value| values.push(value.to_string()));
        values
    }

    /// Hands each of [`Who::key_values`] to `each`, in order, as text to format (a table's
    /// line writes them into its own buffer).
    pub fn each_key_value(&self, decorate: bool, mut each: impl FnMut(std::fmt::Arguments<'_>)) {
        let mut i = 0;
        while let Some(value) = self.key_value(i) {
            match value {
                KeyValue::Id(n) => each(format_args!("{n}")),
                KeyValue::Text(s)
                    if i == Self::COMM_KEY
                        && decorate
                        && self.thread().is_some_and(|t| t.exited) =>
                {
                    each(format_args!("{s} (exited)"))
                }
                KeyValue::Text(s) => each(format_args!("{s}")),
            }
            i += 1;
        }
    }

    /// Where a thread row's name (`comm`) is among its [`Who::key_names`].
    const COMM_KEY: usize = 2;

    /// The `i`-th of [`Who::key_names`]' values; `None` past the last.
    pub fn key_value(&self, i: usize) -> Option<KeyValue<'_>> {
        let value = match self {
            Self::Thread(t) => match i {
                0 => KeyValue::Id(u64::from(t.tid.0)),
                1 => KeyValue::Id(u64::from(t.pid.0)),
                Self::COMM_KEY => KeyValue::Text(&t.comm),
                3 => KeyValue::Text(&t.cgroup),
                _ => return None,
            },
            Self::Group {
                by: GroupBy::Cgroup,
                group,
            } => match i {
                0 => KeyValue::Text(&group.path),
                1 => KeyValue::Id(group.id.0),
                _ => return None,
            },
            Self::Group {
                by: GroupBy::Container,
                group,
            } => {
                let pod = group.owner.pod();
                match i {
                    0 => KeyValue::Text(&group.label),
                    1 => KeyValue::Text(group.owner.kind()),
                    2 => KeyValue::Text(pod.map_or("-", |p| p.uid.as_str())),
                    3 => KeyValue::Text(pod.map_or("-", |p| p.qos.name())),
                    4 => KeyValue::Text(&group.path),
                    _ => return None,
                }
            }
        };
        Some(value)
    }

    /// The thread, for thread rows.
    pub const fn thread(&self) -> Option<&ThreadKey> {
        match self {
            Self::Thread(t) => Some(t),
            Self::Group { .. } => None,
        }
    }

    /// The group, for rows of cgroups or containers.
    pub fn group(&self) -> Option<&Group> {
        match self {
            Self::Thread(_) => None,
            Self::Group { group, .. } => Some(group),
        }
    }

    /// How one line names the row: `comm/tid` for a thread, the group's label.
    pub fn label(&self) -> String {
        match self {
            Self::Thread(t) => format!("{}/{}", t.comm, t.tid),
            Self::Group { group, .. } => group.label.clone(),
        }
    }

    /// What sorts a row by name: the thread's name, the group's label.
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Thread(t) => &t.comm,
            Self::Group { group, .. } => &group.label,
        }
    }

    /// What sorts a row by id: the tid, the cgroup id.
    pub(crate) fn id(&self, pid: bool) -> u64 {
        match self {
            Self::Thread(t) if pid => u64::from(t.pid.0),
            Self::Thread(t) => u64::from(t.tid.0),
            Self::Group { group, .. } => group.id.0,
        }
    }
}
