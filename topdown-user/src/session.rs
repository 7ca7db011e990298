//! The loop every live command runs around its own work: a periodic tick, an optional end
//! (`--duration`), Ctrl-C and SIGTERM, and the command it may have started. Each command
//! selects on [`Session::wake`] and on what only it waits for (a drain timer, a server).

use std::{
    process::ExitStatus,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use tokio::{
    process::Child,
    signal::unix::{Signal, SignalKind, signal},
    time::{Interval, MissedTickBehavior, interval, sleep_until},
};

/// Why a session woke.
#[derive(Debug)]
pub enum Wake {
    /// A tick: time for the command's periodic work.
    Tick,
    /// The duration asked for is over.
    Deadline,
    /// SIGINT (Ctrl-C), SIGTERM or SIGHUP (a closed terminal or SSH session) arrived: its
    /// number. Each ends a run the same way: totals written, the last window kept.
    Signal(i32),
    /// The command the session started exited.
    CommandExited(std::io::Result<ExitStatus>),
}

/// A live session's timers, signals and command.
pub struct Session {
    tick: Interval,
    deadline: Option<tokio::time::Instant>,
    /// Ctrl-C's stream, held for the session's life: a signal that arrives while the command
    /// works between two wakes is kept for the next (tokio's `ctrl_c()`, made afresh at each
    /// wake, saw only signals sent after it was first polled, and lost the others).
    sigint: Signal,
    sigterm: Signal,
    sighup: Signal,
    command: Option<Child>,
    command_status: Option<ExitStatus>,
}

impl Session {
    /// A session started at `started` that ticks every `period` (the first tick one period
    /// from now; a late tick delays the next) and ends after `duration` seconds when given.
    pub fn new(started: Instant, period: Duration, duration: Option<f64>) -> Result<Self> {
        let mut tick = interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick.reset();
        Ok(Self {
            tick,
            deadline: duration
                .map(|s| tokio::time::Instant::from_std(started + Duration::from_secs_f64(s))),
            sigint: signal(SignalKind::interrupt()).context("installing a SIGINT handler")?,
            sigterm: signal(SignalKind::terminate()).context("installing a SIGTERM handler")?,
            sighup: signal(SignalKind::hangup()).context("installing a SIGHUP handler")?,
            command: None,
            command_status: None,
        })
    }

    /// Watches `command`: its exit wakes the session once ([`Wake::CommandExited`]).
    pub fn watch(&mut self, command: Child) {
        self.command = Some(command);
    }

    /// The watched command's pid while it runs.
    fn command_pid(&self) -> Option<u32> {
        self.command.as_ref().and_then(Child::id)
    }

    /// Whether a command is watched and has not exited yet.
    fn command_running(&self) -> bool {
        self.command.is_some() && self.command_status.is_none()
    }

    /// Waits for the next tick, the end of the duration, a signal or the command's exit. An
    /// end that is due with a tick wins: `-I 1000 --duration 4` ends at its fourth tick with
    /// four windows, not with a fifth of a few milliseconds (the tick and the deadline fall in
    /// the same millisecond, and an unbiased select took either).
    pub async fn wake(&mut self) -> Wake {
        let deadline = self.deadline;
        let running = self.command_running();
        tokio::select! {
            biased;
            () = async { sleep_until(deadline.unwrap_or_else(far_future)).await }, if deadline.is_some() => Wake::Deadline,
            status = wait(self.command.as_mut()), if running => {
                if let Ok(status) = &status {
                    self.command_status = Some(*status);
                }
                Wake::CommandExited(status)
            }
            _ = self.sigint.recv() => Wake::Signal(libc::SIGINT),
            _ = self.sigterm.recv() => Wake::Signal(libc::SIGTERM),
            _ = self.sighup.recv() => Wake::Signal(libc::SIGHUP),
            _ = self.tick.tick() => Wake::Tick,
        }
    }

    /// Passes `signal` to the running command, as `perf stat` does; whether there was one.
    pub fn forward(&self, signal: i32) -> bool {
        match self.command_pid() {
            Some(pid) if self.command_running() => {
                // SAFETY: sending a signal to our own child.
                unsafe { libc::kill(pid as libc::pid_t, signal) };
                true
            }
            _ => false,
        }
    }
}

/// A year from now: the deadline of a session without one.
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86400 * 365)
}

/// Waits for `child` to exit; never completes without one.
async fn wait(child: Option<&mut Child>) -> std::io::Result<ExitStatus> {
    match child {
        Some(child) => child.wait().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A duration that is a whole number of periods ends at the last of those ticks: the
    /// deadline and the tick are due at the same instant, and the deadline is taken, every
    /// time (an unbiased select took the tick about every other time, then ended a moment
    /// later with a window of nothing).
    #[tokio::test(start_paused = true)]
    async fn a_whole_number_of_periods_ends_at_its_last_tick() {
        for _ in 0..20 {
            let started = tokio::time::Instant::now();
            let mut session =
                Session::new(started.into_std(), Duration::from_millis(500), Some(2.0)).unwrap();
            let mut ticks = 0;
            loop {
                match session.wake().await {
                    Wake::Tick => ticks += 1,
                    Wake::Deadline => break,
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(ticks, 3, "three ticks, then the end with the fourth window");
            assert_eq!(started.elapsed(), Duration::from_secs(2));
        }
    }

    /// Set in the process [`a_ctrl_c_a_dropped_wake_saw_ends_the_session`] runs itself in.
    const SIGNALLED_CHILD: &str = "TOPDOWN_SESSION_SIGNAL_TEST";

    /// A Ctrl-C that reaches a wake which then loses its select (a key, or the watched
    /// processes' end, ready at the same instant: `stat` drops the wake's future) ends the
    /// session at the next wake. Tokio's `ctrl_c()`, made afresh at each wake, took the signal
    /// with it when dropped, and the run went on to the end of `--duration`. Run in a process
    /// of its own: a signal reaches every session in the process.
    #[test]
    fn a_ctrl_c_a_dropped_wake_saw_ends_the_session() {
        if std::env::var_os(SIGNALLED_CHILD).is_none() {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "session::tests::a_ctrl_c_a_dropped_wake_saw_ends_the_session",
                    "--test-threads=1",
                ])
                .env(SIGNALLED_CHILD, "1")
                .status()
                .unwrap();
            assert!(status.success(), "the signalled test process: {status}");
            return;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut session = Session::new(Instant::now(), Duration::from_secs(60), None).unwrap();
            let mut losing = Box::pin(session.wake());
            // Polled once, as a select polls every branch: it waits for the signal now.
            tokio::select! {
                biased;
                _ = &mut losing => panic!("a wake with nothing due"),
                () = std::future::ready(()) => {}
            }
            // SAFETY: a signal to this process, whose SIGINT handler is tokio's.
            unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
            // The runtime turns (the signal reaches the waiting wake), then the wake loses.
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(losing);
            let woke = tokio::time::timeout(Duration::from_secs(20), session.wake()).await;
            assert!(
                matches!(woke, Ok(Wake::Signal(libc::SIGINT))),
                "the SIGINT a dropped wake saw: {woke:?}"
            );
        });
    }
}
