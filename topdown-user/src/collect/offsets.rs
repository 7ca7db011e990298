//! Where the running kernel keeps what the switch programs read: one table of (global, the
//! members leading to it), found in the kernel's BTF once at load and written into the BPF
//! object's globals. Each entry says what becomes of a kernel without it.

use anyhow::{Context, Result};
use aya::EbpfLoader;
use topdown_common::names::global;

use super::btf::KernelBtf;

/// One global's offset: the sum of the members on its path, each member the first of its
/// spellings the kernel has.
struct Field {
    /// The BPF object's global.
    global: &'static str,
    /// `(struct, spellings of the member)`, outermost first.
    path: &'static [(&'static str, &'static [&'static str])],
    /// What a kernel without it gets.
    without: Without,
}

/// What becomes of a kernel whose BTF lacks a field.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Without {
    /// The collector cannot run: the error says which member.
    Refused,
    /// Waits are not measured (0: not read). `sched_info` exists with CONFIG_SCHED_INFO (every
    /// distribution kernel: SCHEDSTATS or TASK_DELAY_ACCT select it).
    NoWaits,
    /// Waits of migrated threads are not split (every field of the run queue's is then 0):
    /// `cfs_rq.rq` needs CONFIG_FAIR_GROUP_SCHED.
    NoRunQueue,
}

const fn field(
    global: &'static str,
    path: &'static [(&'static str, &'static [&'static str])],
    without: Without,
) -> Field {
    Field {
        global,
        path,
        without,
    }
}

/// Every offset the switch programs read.
const FIELDS: &[Field] = &[
    field(
        global::TASK_PID_OFFSET,
        &[("task_struct", &["pid"])],
        Without::Refused,
    ),
    field(
        global::TASK_TGID_OFFSET,
        &[("task_struct", &["tgid"])],
        Without::Refused,
    ),
    // `__state` since Linux 5.14, `state` before.
    field(
        global::TASK_STATE_OFFSET,
        &[("task_struct", &["__state", "state"])],
        Without::Refused,
    ),
    field(
        global::TASK_EXEC_START_OFFSET,
        &[("task_struct", &["se"]), ("sched_entity", &["exec_start"])],
        Without::Refused,
    ),
    field(
        global::TASK_SUM_EXEC_RUNTIME_OFFSET,
        &[
            ("task_struct", &["se"]),
            ("sched_entity", &["sum_exec_runtime"]),
        ],
        Without::Refused,
    ),
    field(
        global::TASK_RUN_DELAY_OFFSET,
        &[
            ("task_struct", &["sched_info"]),
            ("sched_info", &["run_delay"]),
        ],
        Without::NoWaits,
    ),
    field(
        global::TASK_COMM_OFFSET,
        &[("task_struct", &["comm"])],
        Without::Refused,
    ),
    field(
        global::TASK_NVCSW_OFFSET,
        &[("task_struct", &["nvcsw"])],
        Without::Refused,
    ),
    field(
        global::TASK_NIVCSW_OFFSET,
        &[("task_struct", &["nivcsw"])],
        Without::Refused,
    ),
    field(
        global::TASK_CGROUPS_OFFSET,
        &[("task_struct", &["cgroups"])],
        Without::Refused,
    ),
    field(
        global::CSS_SET_DFL_CGRP_OFFSET,
        &[("css_set", &["dfl_cgrp"])],
        Without::Refused,
    ),
    field(
        global::CGROUP_KN_OFFSET,
        &[("cgroup", &["kn"])],
        Without::Refused,
    ),
    field(
        global::KERNFS_NODE_ID_OFFSET,
        &[("kernfs_node", &["id"])],
        Without::Refused,
    ),
    field(
        global::CGROUP_ROOT_OFFSET,
        &[("cgroup", &["root"])],
        Without::Refused,
    ),
    field(
        global::HIERARCHY_ID_OFFSET,
        &[("cgroup_root", &["hierarchy_id"])],
        Without::Refused,
    ),
    field(
        global::TASK_CFS_RQ_OFFSET,
        &[("task_struct", &["se"]), ("sched_entity", &["cfs_rq"])],
        Without::NoRunQueue,
    ),
    field(
        global::CFS_RQ_RQ_OFFSET,
        &[("cfs_rq", &["rq"])],
        Without::NoRunQueue,
    ),
    field(
        global::RQ_CURR_OFFSET,
        &[("rq", &["curr"])],
        Without::NoRunQueue,
    ),
    field(
        global::RQ_CLOCK_TASK_OFFSET,
        &[("rq", &["clock_task"])],
        Without::NoRunQueue,
    ),
    field(
        global::RQ_CPU_OFFSET,
        &[("rq", &["cpu"])],
        Without::NoRunQueue,
    ),
];

/// The offsets of [`FIELDS`] in the running kernel, by global.
pub struct KernelOffsets {
    values: Vec<(&'static str, u32)>,
    waits: bool,
    run_queue: bool,
}

impl KernelOffsets {
    /// Finds every field in `btf`; with `read_waits` unset, waits are not read (their offset 0).
    pub fn find(btf: &KernelBtf, read_waits: bool) -> Result<Self> {
        let mut values = Vec::with_capacity(FIELDS.len());
        let (mut waits, mut run_queue) = (read_waits, true);
        for field in FIELDS {
            match (offset(btf, field.path), field.without) {
                (Ok(at), _) => values.push((field.global, at)),
                (Err(error), Without::Refused) => return Err(error),
                (Err(_), Without::NoWaits) => waits = false,
                (Err(_), Without::NoRunQueue) => run_queue = false,
            }
        }
        // A field missing writes 0 into its global, and those of its kind with it.
        let kept = |field: &Field| match field.without {
            Without::Refused => true,
            Without::NoWaits => waits,
            Without::NoRunQueue => run_queue,
        };
        let values = FIELDS
            .iter()
            .map(|field| {
                let found = values.iter().find(|(g, _)| *g == field.global);
                let at = found.filter(|_| kept(field)).map_or(0, |&(_, at)| at);
                (field.global, at)
            })
            .collect();
        Ok(Self {
            values,
            waits,
            run_queue,
        })
    }

    /// Whether run-queue waits are read (the kernel books them, and they were asked for).
    pub fn waits(&self) -> bool {
        self.waits
    }

    /// Whether the run queue's fields were found (waits of migrated threads can be split).
    pub fn run_queue(&self) -> bool {
        self.run_queue
    }

    /// Writes every offset into its global of the object `loader` loads.
    pub fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        for (name, at) in &self.values {
            loader.override_global(name, at, true);
        }
    }
}

/// The sum of the members on `path`, each the first of its spellings `btf` has.
fn offset(btf: &KernelBtf, path: &[(&str, &[&str])]) -> Result<u32> {
    let mut at = 0;
    for &(ty, members) in path {
        let found = members.iter().find_map(|m| btf.member_offset(ty, m).ok());
        at += found.with_context(|| {
            format!(
                "finding {ty}.{} in the kernel's BTF (needs CONFIG_DEBUG_INFO_BTF=y)",
                members.join(" or ")
            )
        })?;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `_OFFSET` global the loader writes has its entry, once.
    #[test]
    fn every_offset_global_has_one_entry() {
        let offsets: Vec<&str> = global::ALL
            .into_iter()
            .filter(|g| g.ends_with("_OFFSET"))
            .collect();
        let mut entries: Vec<&str> = FIELDS.iter().map(|f| f.global).collect();
        entries.sort_unstable();
        entries.dedup();
        assert_eq!(entries.len(), FIELDS.len(), "an entry twice");
        let mut expected = offsets.clone();
        expected.sort_unstable();
        assert_eq!(entries, expected);
    }

    /// In the running kernel: every field found, the task's fields apart, the paths summed
    /// (`se` is at a place of its own in `task_struct`), waits off when not asked for.
    #[test]
    fn the_running_kernel_has_every_field() {
        let Ok(btf) = KernelBtf::from_sys_fs() else {
            eprintln!("SKIPPED: no /sys/kernel/btf/vmlinux on this machine");
            return;
        };
        let offsets = KernelOffsets::find(&btf, true).unwrap();
        assert!(offsets.waits() && offsets.run_queue());
        let get = |g: &str| offsets.values.iter().find(|(n, _)| *n == g).unwrap().1;
        let se = btf.member_offset("task_struct", "se").unwrap();
        assert_eq!(
            get(global::TASK_SUM_EXEC_RUNTIME_OFFSET),
            se + btf
                .member_offset("sched_entity", "sum_exec_runtime")
                .unwrap()
        );
        assert_eq!(
            get(global::TASK_TGID_OFFSET),
            get(global::TASK_PID_OFFSET) + 4
        );
        assert_ne!(get(global::TASK_RUN_DELAY_OFFSET), 0);
        let unasked = KernelOffsets::find(&btf, false).unwrap();
        assert!(!unasked.waits());
        assert_eq!(
            unasked
                .values
                .iter()
                .find(|(n, _)| *n == global::TASK_RUN_DELAY_OFFSET)
                .unwrap()
                .1,
            0
        );
        let missing: &[(&str, &[&str])] = &[("task_struct", &["no_such_member"])];
        let error = offset(&btf, missing).unwrap_err().to_string();
        assert!(error.contains("task_struct.no_such_member"), "{error}");
    }
}
