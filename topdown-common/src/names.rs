//! The names the kernel programs and the loader agree on: the maps the loader sizes, fills and
//! reads, the global settings it writes before the programs load, and the programs it attaches.
//! The kernel side declares each as a `static` or function of exactly this name (Rust has no
//! way to name an item by a constant); the loader uses only these constants, and a test reads
//! the built object's symbols to check that every name here is in it.

/// Maps, by the name of their `static`.
pub mod map {
    /// Every live thread's totals, a slot each (sized by `--max-threads`; memory-mapped).
    pub const THREADS: &str = "THREADS";
    /// Each tid's slot in `THREADS` plus one (sized from `kernel.pid_max`).
    pub const THREAD_SLOTS: &str = "THREAD_SLOTS";
    /// The free slots of `THREADS` (filled by the loader).
    pub const FREE_SLOTS: &str = "FREE_SLOTS";
    /// The perf event array of counters, `cpu * MAX_COUNTERS + slot`.
    pub const COUNTERS: &str = "COUNTERS";
    /// What each CPU keeps: the previous readings and its slot mask.
    pub const CPU_STATE: &str = "CPU_STATE";
    /// Records of threads that exited or moved cgroup.
    pub const THREAD_RECORDS: &str = "THREAD_RECORDS";
    /// Tids of the threads charged since the last read (sized from `--max-threads`).
    pub const CHARGED: &str = "CHARGED";
    /// The number of the current read of `CHARGED`, which userspace advances.
    pub const LIST_EPOCH: &str = "LIST_EPOCH";
    /// Names of removed cgroups.
    pub const CGROUPS_REMOVED: &str = "CGROUPS_REMOVED";
    /// Followed processes (a command and its children, `-p`).
    pub const FOLLOWED: &str = "FOLLOWED";
    /// The process that starts the followed command.
    pub const SPAWNER: &str = "SPAWNER";
    /// Whether anything is followed.
    pub const FOLLOWING: &str = "FOLLOWING";
    /// The c2c filter's counts per CPU.
    pub const C2C_STATS: &str = "C2C_STATS";
    /// The c2c filter's counters per CPU.
    pub const C2C_COUNTERS: &str = "C2C_COUNTERS";
    /// Samples the c2c filter forwards.
    pub const C2C_SAMPLES: &str = "C2C_SAMPLES";

    /// Every map the loader names.
    pub const ALL: [&str; 15] = [
        THREADS,
        THREAD_SLOTS,
        FREE_SLOTS,
        COUNTERS,
        CPU_STATE,
        THREAD_RECORDS,
        CHARGED,
        LIST_EPOCH,
        CGROUPS_REMOVED,
        FOLLOWED,
        SPAWNER,
        FOLLOWING,
        C2C_STATS,
        C2C_COUNTERS,
        C2C_SAMPLES,
    ];
}

/// Global settings the loader writes before the programs load (read-only to them).
pub mod global {
    /// How many slots the counter set has.
    pub const SET_SLOTS: &str = "SET_SLOTS";
    /// The most each slot's counter counts per nanosecond it ran.
    pub const SLOT_MOST_PER_NS: &str = "SLOT_MOST_PER_NS";
    /// Charge only followed processes.
    pub const NARROW: &str = "NARROW";
    /// Read counters only at cgroup switches.
    pub const CGROUP_ONLY: &str = "CGROUP_ONLY";
    /// `task_struct.pid`.
    pub const TASK_PID_OFFSET: &str = "TASK_PID_OFFSET";
    /// `task_struct.tgid`.
    pub const TASK_TGID_OFFSET: &str = "TASK_TGID_OFFSET";
    /// `task_struct.__state` (`state` before 5.14).
    pub const TASK_STATE_OFFSET: &str = "TASK_STATE_OFFSET";
    /// `task_struct.se.exec_start`.
    pub const TASK_EXEC_START_OFFSET: &str = "TASK_EXEC_START_OFFSET";
    /// `task_struct.se.sum_exec_runtime`.
    pub const TASK_SUM_EXEC_RUNTIME_OFFSET: &str = "TASK_SUM_EXEC_RUNTIME_OFFSET";
    /// `task_struct.sched_info.run_delay`; 0 where the kernel has no `sched_info`
    /// (`CONFIG_SCHED_INFO` off): run-queue delay is then not read.
    pub const TASK_RUN_DELAY_OFFSET: &str = "TASK_RUN_DELAY_OFFSET";
    /// `task_struct.comm`.
    pub const TASK_COMM_OFFSET: &str = "TASK_COMM_OFFSET";
    /// `task_struct.nvcsw`.
    pub const TASK_NVCSW_OFFSET: &str = "TASK_NVCSW_OFFSET";
    /// `task_struct.nivcsw`.
    pub const TASK_NIVCSW_OFFSET: &str = "TASK_NIVCSW_OFFSET";
    /// `task_struct.cgroups`.
    pub const TASK_CGROUPS_OFFSET: &str = "TASK_CGROUPS_OFFSET";
    /// `css_set.dfl_cgrp`.
    pub const CSS_SET_DFL_CGRP_OFFSET: &str = "CSS_SET_DFL_CGRP_OFFSET";
    /// `cgroup.kn`.
    pub const CGROUP_KN_OFFSET: &str = "CGROUP_KN_OFFSET";
    /// `kernfs_node.id`.
    pub const KERNFS_NODE_ID_OFFSET: &str = "KERNFS_NODE_ID_OFFSET";
    /// `cgroup.root`.
    pub const CGROUP_ROOT_OFFSET: &str = "CGROUP_ROOT_OFFSET";
    /// `cgroup_root.hierarchy_id`.
    pub const HIERARCHY_ID_OFFSET: &str = "HIERARCHY_ID_OFFSET";
    /// `task_struct.se.cfs_rq` (0 where the kernel has no `cfs_rq.rq`).
    pub const TASK_CFS_RQ_OFFSET: &str = "TASK_CFS_RQ_OFFSET";
    /// `cfs_rq.rq`.
    pub const CFS_RQ_RQ_OFFSET: &str = "CFS_RQ_RQ_OFFSET";
    /// `rq.curr`.
    pub const RQ_CURR_OFFSET: &str = "RQ_CURR_OFFSET";
    /// `rq.clock_task`.
    pub const RQ_CLOCK_TASK_OFFSET: &str = "RQ_CLOCK_TASK_OFFSET";
    /// `rq.cpu`.
    pub const RQ_CPU_OFFSET: &str = "RQ_CPU_OFFSET";
    /// Where the switch program stops early (the benchmark of its parts; `u32::MAX`: never).
    pub const SWITCH_STOP: &str = "SWITCH_STOP";
    /// The c2c filter's sample field offsets.
    pub const C2C_OFFSETS: &str = "C2C_OFFSETS";
    /// The c2c filter's load-latency threshold.
    pub const C2C_LDLAT: &str = "C2C_LDLAT";
    /// Forward only stores to lines loads contended.
    pub const C2C_STORES_CONTENDED: &str = "C2C_STORES_CONTENDED";

    /// Split waits over the threads that held the CPU, and count preemptions (`--no-neighbours`
    /// turns it off).
    pub const NEIGHBOURS: &str = "NEIGHBOURS";

    /// Every global the loader writes.
    pub const ALL: [&str; 29] = [
        SET_SLOTS,
        NEIGHBOURS,
        SLOT_MOST_PER_NS,
        SWITCH_STOP,
        NARROW,
        CGROUP_ONLY,
        TASK_PID_OFFSET,
        TASK_TGID_OFFSET,
        TASK_STATE_OFFSET,
        TASK_EXEC_START_OFFSET,
        TASK_SUM_EXEC_RUNTIME_OFFSET,
        TASK_RUN_DELAY_OFFSET,
        TASK_COMM_OFFSET,
        TASK_NVCSW_OFFSET,
        TASK_NIVCSW_OFFSET,
        TASK_CGROUPS_OFFSET,
        CSS_SET_DFL_CGRP_OFFSET,
        CGROUP_KN_OFFSET,
        KERNFS_NODE_ID_OFFSET,
        CGROUP_ROOT_OFFSET,
        HIERARCHY_ID_OFFSET,
        TASK_CFS_RQ_OFFSET,
        CFS_RQ_RQ_OFFSET,
        RQ_CURR_OFFSET,
        RQ_CLOCK_TASK_OFFSET,
        RQ_CPU_OFFSET,
        C2C_OFFSETS,
        C2C_LDLAT,
        C2C_STORES_CONTENDED,
    ];
}

/// Programs, by function name.
pub mod program {
    /// Counts cgroup moves (before the switch program relies on the count).
    pub const CGROUP_ATTACH_TASK: &str = "cgroup_attach_task";
    /// Charges the thread switched out.
    pub const SCHED_SWITCH: &str = "sched_switch";
    /// Follows a followed process's children.
    pub const SCHED_PROCESS_FORK: &str = "sched_process_fork";
    /// A process execs: its threads take the program's name.
    pub const SCHED_PROCESS_EXEC: &str = "sched_process_exec";
    /// Sends a removed cgroup's name.
    pub const CGROUP_RMDIR: &str = "cgroup_rmdir";
    /// Forgets a followed process once it is freed.
    pub const SCHED_PROCESS_FREE: &str = "sched_process_free";
    /// A per-CPU timer (a cpu-clock sampling event): charges the running thread's slice so far.
    pub const TICK: &str = "tick";
    /// Classifies memory samples for c2c.
    pub const C2C_FILTER: &str = "c2c_filter";
    /// A queued task moves to another CPU: the wait it just booked is not that CPU's (charged
    /// as unattributed; kernels before 5.19).
    pub const SCHED_MIGRATE_TASK: &str = "sched_migrate_task";
    /// The same, splitting the wait over the history of the CPU it leaves (5.19 and later).
    pub const SCHED_MIGRATE_TASK_SPLIT: &str = "sched_migrate_task_split";

    /// Every program the loader loads.
    pub const ALL: [&str; 10] = [
        SCHED_MIGRATE_TASK,
        SCHED_MIGRATE_TASK_SPLIT,
        CGROUP_ATTACH_TASK,
        SCHED_SWITCH,
        SCHED_PROCESS_FORK,
        SCHED_PROCESS_EXEC,
        CGROUP_RMDIR,
        SCHED_PROCESS_FREE,
        TICK,
        C2C_FILTER,
    ];
}
