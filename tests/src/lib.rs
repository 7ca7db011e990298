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

/// The standard output of `command`, which must succeed (the failure shows `what` and the
/// command's standard error).
pub fn stdout_of(what: &str, command: &mut Command) -> String {
    let output = command.output().expect("running a command");
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
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

    /// Waits (up to 30 s) until the long-lived threads have parked; their tids by name.
    pub fn parked_threads(&self) -> std::collections::HashMap<String, u32> {
        let mut threads = std::collections::HashMap::new();
        wait_for_event(
            &self.events,
            "parked",
            Duration::from_secs(30),
            |event| {
                if event["event"] == "thread" {
                    threads.insert(
                        event["name"].as_str().unwrap().to_owned(),
                        event["tid"].as_u64().unwrap() as u32,
                    );
                }
            },
            || {},
        );
        threads
    }

    /// Lets a parked workload exit, and waits for it.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("waiting for the workload");
        assert!(status.success(), "workload failed: {status}");
    }
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: the scheduler's runtime of the thread).
pub fn thread_cputime_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// This process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`): its live threads' `sum_exec_runtime`
/// and its dead threads', as `__exit_signal` booked them.
pub fn process_cputime_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// `clock`'s time now, in nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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

/// Second field of `/proc/<pid>/task/<tid>/schedstat`: the nanoseconds the thread waited in a
/// run queue, runnable and not running (`sched_info.run_delay`).
pub fn schedstat_run_delay_ns(pid: u32, tid: u32) -> u64 {
    let text =
        fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).expect("reading schedstat");
    text.split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("schedstat's second field")
}

/// Pins the calling thread to CPU `cpu`; `Err` says why it cannot (no such CPU, no permission).
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    pin_thread_to_cpu(0, cpu)
}

/// Pins thread `tid` (0: the calling thread) to one CPU.
pub fn pin_thread_to_cpu(tid: u32, cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty; the call only reads the structure given.
    unsafe {
        let mut mask: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut mask);
        if libc::sched_setaffinity(tid as libc::pid_t, size_of::<libc::cpu_set_t>(), &mask) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Run-queue delay charged by the collector (`charged`) against the kernel's book of it
/// (`booked`: `schedstat`'s second field, `sched_info.run_delay`). The rules that bound the
/// difference:
///
/// - Same book: the kernel adds a wait to `run_delay` when it ends, as the task is switched in;
///   each charge of the thread (its switch out, or a collector tick while it runs) adds the
///   field's growth since its previous charge. A thread off-CPU (parked) when both sides are
///   read has had every booked wait charged: the two are equal, to the nanosecond.
/// - First charge: a thread that first ran after the collector started is charged its whole
///   `run_delay`; one that ran before is charged only the waits booked after its first charge
///   (the tests' threads start after the collector).
/// - What the floor ([`books_floor_ns`]) covers is the tests' own timing: a parked thread woken
///   spuriously between the two reads books and is charged one more wait.
pub fn assert_waits_booked(what: &str, charged: u64, booked: u64) {
    let tolerance = books_floor_ns();
    eprintln!(
        "{what}: charged {charged} ns of run-queue wait, booked {booked} ns, off by {} ns",
        charged.abs_diff(booked)
    );
    assert!(
        charged.abs_diff(booked) <= tolerance,
        "{what}: charged {charged} ns of run-queue wait, booked {booked} ns (tolerance \
         {tolerance} ns)"
    );
}

/// The part of a thread's run-queue waits the collector charged to one group of culprits
/// (`charged`: the kernel's split, [`topdown_common::neighbours`]) against what the kernel's
/// own trace says that group held the CPU during those waits (`traced`:
/// [`sched_trace::waits_behind`]), over a run with `stolen` ns of the CPU's clock outside
/// its task clock and `unreported` switches the tracepoint did not report. The rules that bound
/// the difference:
///
/// - Same waits: the collector splits each wait `sched_info` books (from the thread's enqueue
///   to its switch in, on the run queue's clock) over the slices the CPU ran, walking back from
///   the switch in; the trace sees the same switches. Its enqueue lies between its
///   `sched_waking` and its `sched_wakeup` (or at its switch out, when preempted), so the
///   group's share lies between the trace's `least` and `most`.
/// - Clocks: the collector's slices are on the scheduler's task clock, read once per switch,
///   the trace's on the trace clock at the tracepoint, after the scheduler's pick; and a
///   wakeup that preempts skips the next clock update (`rq_clock_skip_update`), so a switch's
///   clock may be the wakeup's. Each boundary inside a wait, and its end, may move up to
///   [`switch_lag_ns`] between two culprits; the trace's microseconds add 1 us at each end.
/// - The task clock leaves stolen (and, with `CONFIG_IRQ_TIME_ACCOUNTING`, interrupt) time out
///   while the run queue's clock keeps it: a wait spans that much more of the history.
/// - A switch the tracepoint did not report leaves its slice to the next reported holder: up
///   to [`UNREPORTED_SLICE_NS`] each.
/// - The CPU's history holds its latest 8 slices: a wait spanning more is charged as not
///   attributed, which the test counts with the groups that are no culprit of its.
///
/// A culprit *thread's* part is checked with [`Traced::AtMost`]: a thread slot holds what was
/// charged behind its culprit since the slot was given to it, and a slot given up to another
/// culprit and taken again (a thread has 4, the least recently charged gives way) starts from
/// 0, so that part is at most the trace's, never more.
pub fn assert_split_traced(
    what: &str,
    charged: u64,
    (least, most): (u64, u64),
    waits: &sched_trace::TracedWaits,
    (stolen, unreported): (u64, u64),
    bound: Traced,
) {
    let tolerance = split_tolerance_ns(waits, stolen, unreported);
    let at_least = bound == Traced::Within;
    eprintln!(
        "{what}: charged {charged} ns, the trace says {least} to {most} ns over {} waits \
         ({} boundaries; tolerance {tolerance} ns; {bound:?})",
        waits.waits, waits.boundaries
    );
    assert!(
        (!at_least || charged + tolerance >= least) && charged <= most + tolerance,
        "{what}: charged {charged} ns, the trace says {least} to {most} ns (tolerance \
         {tolerance} ns over {} waits, {} boundaries, {stolen} ns stolen, {unreported} \
         unreported switches)",
        waits.waits,
        waits.boundaries
    );
}

/// Which side of the trace's bracket [`assert_split_traced`] holds a part to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traced {
    /// Between the least and the most (a cgroup's part).
    Within,
    /// Not above the most (a culprit thread's part).
    AtMost,
}

/// [`assert_split_traced`]'s tolerance.
fn split_tolerance_ns(waits: &sched_trace::TracedWaits, stolen: u64, unreported: u64) -> u64 {
    (waits.boundaries + waits.waits) * switch_lag_ns()
        + waits.waits * 2_000
        + stolen
        + unreported * UNREPORTED_SLICE_NS
}

/// A cgroup's CPU stall (throttled time, periods, pressure) as the tool reported it over a run
/// (`reported`) against the growth of the kernel's own total over the test (`booked`: the same
/// `cpu.stat` or `cpu.pressure` field read before the run and after). The rules that bound the
/// difference:
///
/// - Same counter: the tool reads the field at its start (before the command starts) and at
///   every window, and reports each window's growth; the windows telescope to its last read
///   minus its first. The test's reads come before the tool's first and after its last, so the
///   tool never reports more than the kernel booked.
/// - Nothing else runs in the test's cgroup, and nothing of it runs before the command or after
///   its threads' last switches (which the tool waits for): a counter the kernel books as it
///   goes (pressure) does not move outside the tool's reads, so the two are equal, to the
///   kernel's microsecond.
/// - Throttling is booked late: the kernel counts a throttled period (`nr_throttled`) in the
///   cgroup's period timer (`do_sched_cfs_period_timer`), and adds a CPU's throttled time
///   (`throttled_usec`) when that timer unthrottles it (`unthrottle_cfs_rq`), up to one period
///   after the throttle began. A throttle that began before the tool's last read (the command's
///   last thread switched out with the quota spent) can be booked after it: the kernel's books
///   may run ahead of the tool's by `late`, never the other way. One period as a rule (its
///   length on each CPU the cgroup ran on); a timer that fires late (an emulated guest) books
///   the periods it missed too (`nr_throttled += overrun`), and the throttle lasts until it.
///   Before Linux 6.5 ("sched: don't account throttle time for empty groups") a group throttled
///   as its last thread switched out counts its empty time too: the amd64-6.1 guest booked one
///   period and 80 ms after the tool's last read.
/// - What `tolerance` covers is the test's own timing: [`books_floor_ns`] for times, as
///   elsewhere; none for counts of periods.
pub fn assert_stall_books(what: &str, reported: u64, booked: u64, late: u64, tolerance: u64) {
    eprintln!(
        "{what}: reported {reported}, the kernel booked {booked}, off by {} (booked late: up to \
         {late})",
        reported.abs_diff(booked)
    );
    assert!(
        reported <= booked + tolerance,
        "{what}: reported {reported}, more than the kernel booked, {booked} (tolerance \
         {tolerance})"
    );
    assert!(
        booked - reported.min(booked) <= late + tolerance,
        "{what}: reported {reported}, the kernel booked {booked} (booked late: up to {late}, \
         tolerance {tolerance})"
    );
}

/// Nanoseconds the hypervisor stole from all CPUs so far: the sum over CPUs of
/// `.clock - .clock_task` in the scheduler's debug file (this kernel has
/// `CONFIG_PARAVIRT_TIME_ACCOUNTING=y` and no IRQ time accounting, so the gap is steal).
///
/// The scheduler's books (schedstat, `CLOCK_THREAD_CPUTIME_ID`, and so the collector's on-CPU
/// time) leave stolen time out, while a per-CPU `cpu-clock` counter keeps counting through it.
/// Returns 0 when the file is unreadable.
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

/// Asserts the collector's on-CPU time against the scheduler's books within 2 % (at least
/// 2 ms); see [`assert_books_within`] for the rules.
pub fn assert_books(what: &str, charged: u64, expected: u64) {
    assert_books_within(what, charged, expected, 0.02);
}

/// On-CPU time charged by the collector (`charged`) against the scheduler's books (`expected`:
/// `schedstat`, `cpu.stat`, `getrusage`, all sums of the tasks' `sum_exec_runtime`), within
/// `relative` of `expected` and at least 2 ms. The rules that bound the difference:
///
/// - Same books: each charge adds the growth of the task's own `sum_exec_runtime` since its
///   previous charge, so a thread's time is the scheduler's to the nanosecond, stolen time and
///   skipped clock updates left out as the scheduler leaves them out, and switches the
///   tracepoint never reports (it reports some threads switched to and never out) change
///   nothing. No per-switch or steal allowance.
/// - First charge: a thread that ran before the collector started is charged its first slice
///   on the CPU's clock, not its whole runtime; the tests' threads start after the collector.
/// - Timing: the threads compared are off-CPU (parked or exited) when both sides are read; a
///   thread still running trails by up to one collector tick plus one scheduler tick. What
///   `relative` and the floor cover is the tests' own timing (a shell's first instants before
///   it joins its cgroup, a thread's exit after it read its own clock).
pub fn assert_books_within(what: &str, charged: u64, expected: u64, relative: f64) {
    let tolerance = ((expected as f64 * relative) as u64).max(books_floor_ns());
    eprintln!(
        "{what}: charged {charged} ns, expected {expected} ns, off by {} ns",
        charged.abs_diff(expected)
    );
    assert!(
        charged.abs_diff(expected) <= tolerance,
        "{what}: charged {charged} ns, expected {expected} ns (tolerance {tolerance} ns)"
    );
}

/// A thread that read its own `CLOCK_THREAD_CPUTIME_ID` (`own`) as its last act and then
/// exited, against what the collector charged it (`charged`). The rules: its charge is its
/// `se.sum_exec_runtime` at its last switch, and its clock is that same field plus the slice
/// running at the read, so `charged >= own`, exactly; the difference is the rest of its life
/// (printing the value, the C library's thread exit, `do_exit` to its last switch), bounded as
/// [`assert_books`] bounds it (2 %, at least [`books_floor_ns`]), plus, in the emulated guest,
/// [`EMULATED_EXIT_STALL_NS`]: the host preempting the guest's CPU thread during that exit is
/// exit time for the guest.
pub fn assert_charged_through_exit(what: &str, charged: u64, own: u64) {
    charged_through_exit(what, charged, own, 0);
}

/// The longest a scheduler tick can be (`CONFIG_HZ` is at least 100): how long a running
/// task's `se.sum_exec_runtime` can go without an update.
pub const SCHED_TICK_MAX_NS: u64 = 10_000_000;

/// As [`assert_charged_through_exit`], for a task that read its own `/proc/PID/schedstat`
/// (`read`) while running, then exited: that field is `se.sum_exec_runtime` as of the task's
/// latest update (a scheduler tick or a switch; `proc_pid_schedstat` does not bring the running
/// slice up to date, as the thread clock does), so the read can lag the task's runtime by up to
/// one scheduler tick ([`SCHED_TICK_MAX_NS`]) more. `charged >= read` still holds exactly.
pub fn assert_charged_through_exit_after_schedstat(what: &str, charged: u64, read: u64) {
    charged_through_exit(what, charged, read, SCHED_TICK_MAX_NS);
}

/// [`assert_charged_through_exit`] with `stale` ns more allowed for how old `own` was when read.
fn charged_through_exit(what: &str, charged: u64, own: u64, stale: u64) {
    let stall = if emulated() {
        EMULATED_EXIT_STALL_NS
    } else {
        0
    };
    let allowance = ((own as f64 * 0.02) as u64).max(books_floor_ns()) + stall + stale;
    eprintln!("{what}: charged {charged} ns, its own clock {own} ns before its exit");
    assert!(
        charged >= own,
        "{what}: charged {charged} ns, less than its own clock read before its exit ({own} ns)"
    );
    assert!(
        charged - own <= allowance,
        "{what}: charged {charged} ns, its own clock {own} ns before its exit (allowance {allowance} ns)"
    );
}

/// The least [`assert_books_within`] allows: 2 ms natively, [`EMULATED_FLOOR_NS`] in the guest.
pub fn books_floor_ns() -> u64 {
    if emulated() {
        EMULATED_FLOOR_NS
    } else {
        2_000_000
    }
}

/// Asserts that `what` ran at least ten times [`books_floor_ns`], so that comparing its books
/// says something. Only that: how much more a workload gets depends on the machine's load (two
/// CPU hogs beside the tests left a workload pinned with another 245 ms of its 1.5 s).
pub fn assert_ran(what: &str, on_cpu_ns: u64) {
    assert!(
        on_cpu_ns > 10 * books_floor_ns(),
        "{what} ran: {on_cpu_ns} ns on CPU, too little for its books to say anything"
    );
}

/// Whether these tests run in the emulated arm64 guest (its init sets `TOPDOWN_GUEST`):
/// there the kernel's own paths take far longer in the guest's time (QEMU emulates every
/// instruction while its clock follows the host's), so the few bounds that cover the time
/// between two of the kernel's steps are wider, each saying by how much and why.
pub fn emulated() -> bool {
    env::var_os("TOPDOWN_GUEST").is_some()
}

/// Whether the guest's clocks follow the instructions it runs (the `exact` guest, QEMU's
/// `-icount`): there the host preempting the emulation thread stops every clock the guest has
/// with it, so no host stall lands between two of the kernel's steps.
pub fn instruction_clock() -> bool {
    env::var("TOPDOWN_GUEST").is_ok_and(|suite| suite == "exact")
}

/// What the host's scheduler may put between two of the kernel's steps as the guest sees them:
/// [`EMULATED_HOST_STALL_NS`] in an emulated guest whose clock follows the host's, nothing
/// natively or under an [`instruction_clock`].
pub fn host_stall_ns() -> u64 {
    if emulated() && !instruction_clock() {
        EMULATED_HOST_STALL_NS
    } else {
        0
    }
}

/// [`assert_books_within`]'s floor in the emulated guest: a thread's exit after it read its
/// own clock (printing its line, the C library's thread exit, `do_exit` up to its last switch)
/// took 1.4-6.9 ms there (the first thread to exit the most: first-time page faults, slow to
/// emulate), 60-90 us natively.
pub const EMULATED_FLOOR_NS: u64 = 15_000_000;

/// Most a clock counter and the scheduler's books may disagree by at one charge (see
/// [`assert_clock_counter`]): the window between a wakeup's clock update and the switch it
/// asks for (a reschedule IPI away, which the hypervisor handles). Observed here: about 10 us
/// per preemption under thread churn; 31 us on average over a sleepy thread's 52 charges (its
/// books 1.6 ms past its counter) while another test's hogs spun on both CPUs and the
/// hypervisor stole 30 ms (CI run of 2026-12-06). Time in that window the hypervisor counts as
/// steal is not in the books; the time it spends delivering the IPI is.
pub const SWITCH_LAG_NS: u64 = 50_000;

/// [`SWITCH_LAG_NS`] in the emulated guest, where the path between the scheduler's clock
/// update and the program's counter read is emulated: observed 40-45 us per charge.
pub const EMULATED_SWITCH_LAG_NS: u64 = 150_000;

/// What the host's scheduler may add to one thread's clock comparison in the emulated guest
/// ([`assert_clock_counter`]): the guest's CPUs are host threads, and the host preempting one
/// between the scheduler's clock update and the counter read, or between a wakeup and its
/// switch, is time in that window for the guest, which sees no steal (QEMU's virtual clock
/// runs on). A host time slice is a few ms; seen: 3.2 ms more than the per-charge lag on one
/// thread of 19 charges, and 4.9 ms between two reads of one program run, once each in seven
/// runs.
pub const EMULATED_HOST_STALL_NS: u64 = 10_000_000;

/// What the host's scheduler may add to a thread's exit path in the emulated guest
/// ([`assert_charged_through_exit`]): the exit (printing, the C library's thread exit, page
/// faults slow to emulate, `do_exit`) spans many host time slices, and a host with more runnable
/// threads than CPUs preempts the guest's CPU thread for several of them. Seen: 19 ms over the
/// clock on Debian's 5.10 amd64 guest while the host ran a second guest; 27 ms on the arm64
/// 5.10 guest while the host also built and ran the host's test suite.
pub const EMULATED_EXIT_STALL_NS: u64 = 40_000_000;

/// The per-charge lag of this machine: [`SWITCH_LAG_NS`], or [`EMULATED_SWITCH_LAG_NS`].
pub fn switch_lag_ns() -> u64 {
    if emulated() {
        EMULATED_SWITCH_LAG_NS
    } else {
        SWITCH_LAG_NS
    }
}

/// Most one switch the kernel did not report can move to another thread's counters (see
/// [`assert_clock_counter`]): the unreported thread's run, which the scheduler ends at its
/// slice (0.75 ms x (1 + log2 CPUs)) plus up to one scheduler tick (4 ms at HZ=250) when
/// others are waiting; observed here: up to 2.2 ms.
pub const UNREPORTED_SLICE_NS: u64 = 6_000_000;

/// Most two counters read one after the other at each charge differ by per charge (the time
/// between the two reads); observed here: 2-20 ns.
pub const READ_GAP_NS: u64 = 1_000;

/// [`READ_GAP_NS`] in the emulated guest, where the program between two reads is emulated:
/// observed up to 3 us per charge.
pub const EMULATED_READ_GAP_NS: u64 = 10_000;

/// Asserts that two copies of a clock counter read at the same `charges` charges (`a` and
/// `b`) agree up to [`READ_GAP_NS`] per charge: whatever the attribution, both are charged the
/// same slices. In the emulated guest, [`EMULATED_READ_GAP_NS`] per charge, and the host
/// preempting the vCPU between two reads once ([`EMULATED_HOST_STALL_NS`]; seen: 4.9 ms once).
/// Plus `stolen`, the time the hypervisor stole from the CPUs over the run ([`stolen_ns`]): a
/// `cpu-clock` counter keeps counting through steal, and a vCPU taken away between the two
/// reads of one charge gives the second read that much more (seen: 48 us over 46 charges in a
/// run 39 ms of which were stolen, on a Firecracker VM beside a full test suite).
pub fn assert_read_together(what: &str, a: u64, b: u64, charges: u64, stolen: u64) {
    let tolerance = if emulated() {
        charges * EMULATED_READ_GAP_NS + host_stall_ns()
    } else {
        charges * READ_GAP_NS
    } + stolen;
    assert!(
        a.abs_diff(b) <= tolerance,
        "{what}: {a} vs {b}, more than {tolerance} ns apart over {charges} charges ({stolen} ns \
         stolen)"
    );
}

/// A `cpu-clock` counter read at every charge (`clock`) against the on-CPU time charged with it
/// (`books`: the scheduler's runtime, see [`assert_books_within`]) over `charges` charges
/// (switches and ticks), in a run in which the kernel left `unreported` switches unreported
/// (the collector's count, over all CPUs). The rules that bound the difference:
///
/// - Steal: `cpu-clock` counts on through time the hypervisor stole while the thread was
///   current; the scheduler's runtime leaves it out (`CONFIG_PARAVIRT_TIME_ACCOUNTING`).
///   `stolen` (see [`stolen_ns`]) may be on top.
/// - Preemption: when a wakeup preempts the running task, `wakeup_preempt()` asks the next
///   `__schedule` to skip its clock update (`rq_clock_skip_update`), so the scheduler ends the
///   preempted task's runtime at the clock of the wakeup and gives the time until the switch
///   (a reschedule IPI away, slow in a VM) to the next task, while the counter, read at the
///   switch, gives it to the task that was on the CPU. A tick charges the running task's time
///   up to the scheduler's latest update and the counter up to now, and its next charge evens
///   them out. Each charge may move up to [`switch_lag_ns`] either way.
/// - Unreported switches: the kernel reports some threads switched to and never switched out;
///   the counter's deltas until the CPU's next charge (the unreported thread's run included)
///   go to the thread charged then, whose runtime stays exact. Each may add up to
///   [`UNREPORTED_SLICE_NS`] to one thread's counter.
/// - In the emulated guest whose clock follows the host's, the host's scheduler: up to
///   [`host_stall_ns`] either way. That is once: a host stall that lands between the
///   scheduler's clock update and the program's read of the counter moves itself from one
///   thread to the next, and on a loaded host it has been longer (21 ms once, CI 2026-12-06),
///   so tests that compare a clock counter with the books run under an [`instruction_clock`].
pub fn assert_clock_counter(
    what: &str,
    clock: u64,
    books: u64,
    stolen: u64,
    charges: u64,
    unreported: u64,
) {
    let tolerance = charges * switch_lag_ns() + host_stall_ns();
    let stolen = stolen + unreported * UNREPORTED_SLICE_NS;
    eprintln!(
        "{what}: counter {clock} ns, books {books} ns, off by {} ns ({charges} charges; stolen \
         and unreported: {stolen} ns)",
        clock.abs_diff(books)
    );
    assert!(
        clock <= books + tolerance + stolen && books <= clock + tolerance,
        "{what}: counter {clock} ns, books {books} ns (tolerance {tolerance} ns for {charges} \
         charges, plus {stolen} ns stolen by the hypervisor or in unreported switches)"
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
/// How long a test waits for a line of a child's output: far above what the slowest guest
/// takes (TCG, where loading the collector takes seconds), far below its harness's limit.
pub const OUTPUT_PATIENCE: Duration = Duration::from_secs(180);

/// A child's output read on a thread of its own, so every read has a deadline: a child that
/// hangs fails its test, saying what the test waited for, instead of stopping the whole run (a
/// guest's suite then runs into its harness's limit and says nothing of where). Lines keep
/// their ends, so what is read is the output byte for byte.
pub struct OutputWithin {
    lines: Receiver<std::io::Result<String>>,
}

impl OutputWithin {
    /// Reads `output` (a child's piped stdout) line by line until its end.
    pub fn new(output: impl std::io::Read + Send + 'static) -> Self {
        let (send, lines) = mpsc::channel();
        thread::spawn(move || {
            let mut output = BufReader::new(output);
            loop {
                let mut line = String::new();
                match output.read_line(&mut line) {
                    Ok(0) => break,
                    read => {
                        let failed = read.is_err();
                        if send.send(read.map(|_| line)).is_err() || failed {
                            break;
                        }
                    }
                }
            }
        });
        Self { lines }
    }

    /// The next line with its end, waited for at most `timeout`; panics naming `what` when
    /// none comes.
    pub fn line(&self, what: &str, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => line.unwrap_or_else(|e| panic!("reading {what}: {e}")),
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("no {what} within {timeout:?}"),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the output ended before {what}"),
        }
    }

    /// Every line left until the output ends, waited for at most `timeout` in all; panics
    /// naming `what` when it does not end by then.
    pub fn rest(&self, what: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        let mut rest = String::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => rest.push_str(&line.unwrap_or_else(|e| panic!("reading {what}: {e}"))),
                Err(mpsc::RecvTimeoutError::Disconnected) => return rest,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{what} did not end within {timeout:?}")
                }
            }
        }
    }
}

/// Retires exactly `1 + 2n` user instructions: a compare-and-branch, then `n` times a
/// decrement and a branch ([`known_loop_instructions`]). The exact-count tests run it under a
/// PMU that counts instructions exactly.
#[inline(never)]
pub fn known_loop(n: u64) {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: touches only the register it is given.
    unsafe {
        std::arch::asm!(
            "cbz {n}, 3f",
            "2:",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            "3:",
            n = inout(reg) n => _,
            options(nomem, nostack),
        );
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: touches only the register it is given and the flags.
    unsafe {
        std::arch::asm!(
            "jrcxz 3f",
            "2:",
            "dec rcx",
            "jnz 2b",
            "3:",
            inout("rcx") n => _,
            options(nomem, nostack),
        );
    }
}

/// The user instructions [`known_loop`] retires for `n`.
pub const fn known_loop_instructions(n: u64) -> u64 {
    1 + 2 * n
}

/// Asserts a thread's user-mode instruction count (`counted`, by the collector) against the
/// instructions it is known to retire: its [`known_loop`] of `n` (`2n` beyond the loop's fixed
/// instruction) on top of `baseline`, what a thread of the same program with `n = 0` was
/// counted (thread start and exit).
///
/// The rule that bounds the difference: none. Under QEMU with `-icount shift=0`, the emulated
/// PMU's INST_RETIRED counts exactly the instructions the CPU retires at EL0 (a faulting or
/// interrupted instruction is not retired, and is counted when it retires on its second try),
/// and the counter is read at every switch in the kernel, at EL1, where it does not move: a
/// thread is charged exactly the user instructions between its switch in and its switch out.
/// Threads of one program that differ only in `n` retire the same instructions besides the
/// loop. A count moved between threads at a switch shows up here as a non-zero difference.
pub fn assert_known_instructions(what: &str, counted: u64, baseline: u64, n: u64) {
    let expected = baseline + (known_loop_instructions(n) - known_loop_instructions(0));
    assert_eq!(
        counted,
        expected,
        "{what}: {counted} user instructions counted, {expected} retired (baseline {baseline} \
         + 2 x {n}): off by {}",
        counted as i128 - expected as i128
    );
}

/// The collector's tick period (a per-CPU cpu-clock timer): a running thread is charged at
/// least this often.
pub const TICK_NS: u64 = 4_000_000;

/// How often the kernel rotates multiplexed events (the PMU's `perf_event_mux_interval_ms`: 4
/// on the emulated Arm PMU, as on most).
pub const MUX_INTERVAL_NS: u64 = 4_000_000;

/// The run a thread's clock-like counter is checked in: the time stolen from the CPUs over it
/// ([`stolen_ns`]) and the switches the kernel did not report (the collector's
/// `switches_the_kernel_did_not_report`), both for [`assert_clock_counter`].
pub struct ClockRun {
    /// Nanoseconds stolen by the hypervisor (or in IRQs the scheduler's clock leaves out).
    pub stolen: u64,
    /// Switches the kernel did not report, over all CPUs.
    pub unreported: u64,
}

/// Asserts a thread's CPU_CYCLES count (`cycles`, scaled when multiplexed) against its
/// on-CPU time (`on_cpu_ns`, the scheduler's runtime the collector charged) at the PMU's rate
/// (`rate`, cycles per ns, measured apart from the tool), for a thread switched out
/// `switches` times in `run`: the rules of [`assert_clock_counter`], since under QEMU's
/// emulated Arm PMUv3 CPU_CYCLES is a clock:
/// - One clock: QEMU counts CPU_CYCLES from its virtual clock, and the guest's scheduler
///   clock is the Arm generic timer, driven by the same clock: while a thread runs, both grow
///   together, at `rate`. So `cycles / rate` is a clock counter read at every charge: at the
///   thread's switches and at least every [`TICK_NS`] while it runs.
/// - Scaling: a counter multiplexed over the thread's slices counts `rate x running` and is
///   scaled by the thread's own `enabled / running` (`running_share` is `running / enabled`):
///   `rate x enabled`, its slices again. But each time the kernel rotates the event onto a
///   counter (every [`MUX_INTERVAL_NS`] while the thread runs, besides its switches) its
///   running time starts before the counter counts, by the kernel path between the two (up to
///   [`switch_lag_ns`]), and the scaling multiplies what was missed by `1 / running_share`.
pub fn assert_cycles_track_time(
    what: &str,
    cycles: f64,
    rate: f64,
    on_cpu_ns: u64,
    switches: u64,
    running_share: f64,
    run: &ClockRun,
) {
    let mut charges = switches + on_cpu_ns / TICK_NS + 1;
    if running_share < 1.0 {
        let rotations = on_cpu_ns / MUX_INTERVAL_NS + 1;
        charges = ((charges + rotations) as f64 / running_share.max(0.01)).ceil() as u64;
    }
    assert_clock_counter(
        what,
        (cycles / rate).round() as u64,
        on_cpu_ns,
        run.stolen,
        charges,
        run.unreported,
    );
}

/// Asserts one thread's reading of a multiplexed CPU_CYCLES event under QEMU's emulated Arm
/// PMU: `raw` counted while the event was on a counter for `running_ns` of its `enabled_ns`,
/// at `rate` cycles per ns, over `charges` reads (the thread's switches and ticks), and the
/// tool's `value` scaled from them. The rules that bound the difference:
/// - One clock: QEMU counts CPU_CYCLES from its virtual clock, which also drives the clock
///   perf's enabled and running times come from (the Arm generic timer): while the event is on
///   a counter, `raw` grows `rate` per ns of `running_ns`, whatever the host does to the
///   guest (a stalled vCPU thread stalls both). (The thread's on-CPU time, the scheduler's
///   runtime, is another matter: a wakeup's clock update and the host stalling the guest
///   between it and the switch move time between threads; [`assert_cycles_track_time`]
///   bounds that for an event that is never multiplexed.)
/// - Reads and rotations: `perf_event_read_local` reads the counter, then the times, so each
///   read may skew them by the path between (up to [`switch_lag_ns`]); each time the kernel
///   rotates the event onto or off a counter (every [`MUX_INTERVAL_NS`] of enabled time) its
///   running time starts before, or stops after, the counter, by as much. In the emulated
///   guest, the host may preempt the vCPU in one of those gaps ([`EMULATED_HOST_STALL_NS`]).
/// - Scaling: `value` is `raw x enabled / running`, to rounding.
pub fn assert_multiplexed_clock(
    what: &str,
    (raw, enabled_ns, running_ns): (u64, u64, u64),
    value: f64,
    rate: f64,
    charges: u64,
) {
    assert!(running_ns > 0, "{what}: counted without running");
    let scaled = raw as f64 * enabled_ns as f64 / running_ns as f64;
    assert!(
        (value - scaled).abs() <= 1e-9 * scaled.max(1.0),
        "{what}: value {value}, but raw x enabled / running is {scaled}"
    );
    let gaps = charges + enabled_ns / MUX_INTERVAL_NS + 1;
    let tolerance_ns = gaps * switch_lag_ns() + host_stall_ns();
    let counted_ns = (raw as f64 / rate).round() as u64;
    eprintln!(
        "{what}: {counted_ns} ns of cycles over {running_ns} ns running ({enabled_ns} ns enabled)"
    );
    assert!(
        counted_ns.abs_diff(running_ns) <= tolerance_ns,
        "{what}: {raw} cycles are {counted_ns} ns at {rate}/ns, but it ran {running_ns} ns \
         (tolerance {tolerance_ns} ns for {gaps} reads and rotations)"
    );
}

pub mod atom_csv;
pub mod c2c_spec;
pub mod cgroup_tree;
pub mod http;
pub mod metric_expr;
pub mod perfmon_metrics;
pub mod pmu_events;
pub mod sched_trace;
pub mod software_set;

pub use c2c_spec::perf_data_of;

/// The thread rows of a `topdown-bpf/threads/v1` document, by tid.
pub fn threads_by_tid(document: &Value) -> std::collections::HashMap<u64, &Value> {
    document["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| (t["tid"].as_u64().unwrap(), t))
        .collect()
}

/// The changes a `topdown-bpf diff --json` document flags, as (row, field), in its order.
pub fn flagged_changes(document: &Value) -> Vec<(String, String)> {
    document["changes"]
        .as_array()
        .expect("a diff document's changes")
        .iter()
        .filter(|c| c["significant"] == true)
        .map(|c| {
            let text = |key: &str| {
                c[key]
                    .as_str()
                    .expect("a change's row and field")
                    .to_owned()
            };
            (text("key"), text("field"))
        })
        .collect()
}

/// The collector's options for tests: the default, with room in the live-thread map for the
/// threads this host has now as the tool gives it (twice those alive, at least 16,384), so a
/// host with 20,000 threads alive fills no map the test did not mean to fill.
pub fn collector_options() -> topdown_user::collect::CollectorOptions {
    let capacity = topdown_user::collect::capacity::Capacity::of(
        None,
        &topdown_user::pmu::sysfs::SysRoot::host(),
    )
    .expect("the host's thread limits");
    topdown_user::collect::CollectorOptions {
        max_threads: capacity.threads,
        ..topdown_user::collect::CollectorOptions::default()
    }
}
