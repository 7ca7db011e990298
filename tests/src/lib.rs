//! Helpers for the integration tests: privilege checks that skip loudly, the workload process,
//! and the kernel's own books (`/proc/<pid>/task/<tid>/schedstat`).

use std::{
    env, fs,
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Child, ChildStdin, Command, Stdio},
    sync::mpsc::{self, Receiver},
    thread,
    time::Duration,
};

use serde_json::Value;

/// The value after flag `name` on this process's command line (`--run-ms 3000`), or `default`
/// when it is missing or does not parse: the test programs' whole argument parsing.
pub fn flag_value<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether this process may load BPF and open system-wide counters. When it may not, says so
/// loudly and returns false, except under CI (which runs as root), where it panics: a skipped
/// kernel test there would hide a broken set-up.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        env::var_os("CI").is_none(),
        "{test}: CI must run the kernel tests as root"
    );
    eprintln!(
        "\n*** SKIPPED {test}: needs root (CAP_BPF + CAP_PERFMON) to load BPF programs ***\n"
    );
    false
}

/// The `topdown-bpf` binary under test: `TOPDOWN_BPF_BIN` (set by `cargo xtask test`), or the
/// debug build in the workspace's target directory.
pub fn topdown_bpf_binary() -> PathBuf {
    env::var_os("TOPDOWN_BPF_BIN").map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../target/debug/topdown-bpf"
            ))
        },
        PathBuf::from,
    )
}

/// The workload process (`src/bin/workload.rs`), with its JSON event lines on a channel.
pub struct Workload {
    /// The running process.
    pub child: Child,
    stdin: Option<ChildStdin>,
    /// One parsed JSON line per event the workload printed.
    pub events: Receiver<Value>,
}

impl Workload {
    /// Starts the workload binary at `path` (integration tests pass
    /// `env!("CARGO_BIN_EXE_workload")`) with `args`.
    pub fn spawn(path: &str, args: &[&str]) -> Self {
        let mut child = Command::new(path)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the workload (built by cargo test)");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, events) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str(&line)
                    && tx.send(value).is_err()
                {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            events,
        }
    }

    /// The workload's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets a parked workload exit, and waits for it.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("waiting for the workload");
        assert!(status.success(), "workload failed: {status}");
    }
}

/// First field of `/proc/<pid>/task/<tid>/schedstat`: the thread's on-CPU nanoseconds as the
/// scheduler counts them (`sum_exec_runtime`).
pub fn schedstat_ns(pid: u32, tid: u32) -> u64 {
    let text =
        fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).expect("reading schedstat");
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("schedstat's first field")
}

/// Nanoseconds the hypervisor stole from all CPUs so far: the sum over CPUs of
/// `.clock - .clock_task` in the scheduler's debug file (this kernel has
/// `CONFIG_PARAVIRT_TIME_ACCOUNTING=y` and no IRQ time accounting, so the gap is steal).
///
/// The scheduler's books (schedstat, `CLOCK_THREAD_CPUTIME_ID`) leave stolen time out, while a
/// per-CPU `cpu-clock` keeps counting through it: a thread that is current while its vCPU is
/// stolen is charged more than the kernel says it ran. Returns 0 when the file is unreadable.
pub fn stolen_ns() -> u64 {
    let path = "/sys/kernel/debug/sched/debug";
    if fs::metadata(path).is_err() {
        // debugfs may not be mounted yet; we are root when this matters.
        let _ = Command::new("mount")
            .args(["-t", "debugfs", "none", "/sys/kernel/debug"])
            .status();
    }
    let text = fs::read_to_string(path).unwrap_or_default();
    let field = |line: &str, name: &str| -> Option<u64> {
        let value = line
            .trim()
            .strip_prefix(name)?
            .trim()
            .strip_prefix(':')?
            .trim();
        let (ms, frac) = value.split_once('.')?;
        Some(ms.parse::<u64>().ok()? * 1_000_000 + frac.parse::<u64>().ok()?)
    };
    let (mut clock, mut clock_task) = (0, 0);
    for line in text.lines() {
        if let Some(value) = field(line, ".clock_task") {
            clock_task += value;
        } else if let Some(value) = field(line, ".clock") {
            clock += value;
        }
    }
    clock.saturating_sub(clock_task)
}

/// Most the scheduler's books and a clock slice may disagree by at one switch (see
/// [`assert_close_within`]); observed here: about 10 us per preemption under thread churn.
pub const SWITCH_LAG_NS: u64 = 20_000;

/// Asserts that `charged` is within 2 % of `expected` (or 2 ms), give or take the time stolen
/// and the lag of `switches` switches (see [`assert_close_within`]).
pub fn assert_close(what: &str, charged: u64, expected: u64, stolen: u64, switches: u64) {
    assert_close_within(what, charged, expected, 0.02, stolen, switches);
}

/// On-CPU time charged by the collector against the scheduler's books (`schedstat`,
/// `CLOCK_THREAD_CPUTIME_ID`, `cpu.stat`: the task's `sum_exec_runtime`), within `relative` of
/// `expected` (at least 2 ms), plus what these rules allow:
///
/// - Steal: a clock slice counts the time the hypervisor stole while the thread was current;
///   the scheduler leaves it out (`CONFIG_PARAVIRT_TIME_ACCOUNTING`). `stolen` (see
///   [`stolen_ns`]) may be charged on top.
/// - Preemption: when a wakeup preempts the running task, `wakeup_preempt()` asks the next
///   `__schedule` to skip its clock update (`rq_clock_skip_update`), so the scheduler ends the
///   preempted task's runtime at the clock of the wakeup and gives the time until the switch
///   (a reschedule IPI away, slow in a VM) to the next task; a clock slice gives it to the task
///   that was on the CPU. Each of the thread's `switches` may move up to [`SWITCH_LAG_NS`] either
///   way.
pub fn assert_close_within(
    what: &str,
    charged: u64,
    expected: u64,
    relative: f64,
    stolen: u64,
    switches: u64,
) {
    let tolerance = ((expected as f64 * relative) as u64).max(2_000_000) + switches * SWITCH_LAG_NS;
    eprintln!(
        "{what}: charged {charged} ns, expected {expected} ns, off by {} ns (stolen {stolen} ns, \
         {switches} switches)",
        charged.abs_diff(expected)
    );
    assert!(
        charged <= expected + tolerance + stolen && expected <= charged + tolerance,
        "{what}: charged {charged} ns, expected {expected} ns (tolerance {tolerance} ns for \
         {switches} switches, plus {stolen} ns the hypervisor stole during the run)"
    );
}

/// Asserts that a thread's `context-switches` count (`counted`) matches the switches out the
/// collector saw (`seen`).
///
/// The rule that bounds the difference: the kernel bumps the per-CPU `context-switches` counter
/// in `perf_event_task_sched_out`, after `trace_sched_switch` has read it, so each increment is
/// charged to the thread switched *in*: a thread is charged its switches in, not out. Over a
/// thread's life these differ by one at each end (it was on a CPU when collection started; it
/// is on one at the last charge). Any switch whose program run charged someone else (a missed
/// run, a failed read) moves one count between two threads; seen 4 apart of ~170 on a loaded
/// CI run, so the bound is 5 % or 5.
pub fn assert_switch_counts(what: &str, counted: u64, seen: u64) {
    let bound = (seen / 20).max(5);
    assert!(
        counted.abs_diff(seen) <= bound,
        "{what}: {counted} context switches counted vs {seen} switches out (bound {bound})"
    );
}

/// Waits up to `timeout` for the workload event whose `event` field is `name`, passing every
/// event seen on the way to `seen`, and calling `idle` between polls.
pub fn wait_for_event(
    events: &Receiver<Value>,
    name: &str,
    timeout: Duration,
    mut seen: impl FnMut(&Value),
    mut idle: impl FnMut(),
) -> Value {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match events.recv_timeout(Duration::from_millis(50)) {
            Ok(event) => {
                seen(&event);
                if event["event"] == name {
                    return event;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => idle(),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("the workload ended before `{name}`")
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no `{name}` event within {timeout:?}"
        );
    }
}
pub mod atom_csv;
pub mod cgroup_tree;
pub mod http;
pub mod metric_expr;
pub mod pmu_events;
