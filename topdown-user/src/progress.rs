//! Progress of long reads, on stderr when it is a terminal: nothing for work done within half
//! a second, then one line rewritten at most five times a second (and at once when a read moves
//! to its next stage, so that no stage goes unsaid), and its last state with `done` at the end (or from the start, wherever stderr goes: [`Progress::always`]). Safe to
//! update from any thread.

use std::{
    io::IsTerminal as _,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long work runs before its progress is shown.
const FIRST: Duration = Duration::from_millis(500);
/// How often the line is rewritten after that.
const EVERY: Duration = Duration::from_millis(200);

/// A progress line for one read.
pub struct Progress {
    started: Instant,
    /// How long after `started` the line is first due.
    after: Duration,
    /// When the line was last written, and the stage it told; `None` while nothing was.
    last: Mutex<Option<(Instant, u32)>>,
    on: bool,
    /// Whether stderr is a terminal: the line is rewritten in place; elsewhere each update is
    /// a line of its own (no escape sequences in a log).
    terminal: bool,
}

impl Progress {
    /// A progress line, shown only when stderr is a terminal.
    pub fn new() -> Self {
        let terminal = std::io::stderr().is_terminal();
        Self {
            terminal,
            ..Self::shown_when(terminal)
        }
    }

    /// A progress line shown from the first update, wherever stderr goes (`--progress`).
    pub fn always() -> Self {
        Self {
            after: Duration::ZERO,
            terminal: std::io::stderr().is_terminal(),
            ..Self::shown_when(true)
        }
    }

    /// A progress line shown when `on`.
    fn shown_when(on: bool) -> Self {
        Self {
            started: Instant::now(),
            after: FIRST,
            last: Mutex::new(None),
            on,
            terminal: false,
        }
    }

    /// Says `what` (made only when due) if the line is due.
    pub fn show(&self, what: impl FnOnce() -> String) {
        self.show_in(0, what);
    }

    /// Says `what`, an update in `stage` (a read's pass), if the line is due: it is due at once
    /// when the stage is not the one it last told, however soon after that it comes.
    pub fn show_in(&self, stage: u32, what: impl FnOnce() -> String) {
        if !self.on {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let due = match *last {
            None => self.started.elapsed() >= self.after,
            Some((at, told)) => told != stage || at.elapsed() >= EVERY,
        };
        if due {
            *last = Some((Instant::now(), stage));
            if self.terminal {
                eprint!("\r{}\x1b[K", what());
            } else {
                eprintln!("{}", what());
            }
        }
    }

    /// Ends the line with `what` if anything was shown, or always from [`Progress::always`].
    pub fn done(&self, what: impl FnOnce() -> String) {
        if self.shown() || (self.on && self.after.is_zero()) {
            if self.terminal {
                eprintln!("\r{}, done\x1b[K", what());
            } else {
                eprintln!("{}, done", what());
            }
        }
    }

    /// Whether a line was written.
    fn shown(&self) -> bool {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_said_before_half_a_second_nor_when_off() {
        let progress = Progress::shown_when(true);
        progress.show(|| unreachable!("not due yet"));
        assert!(!progress.shown());
        let off = Progress::shown_when(false);
        std::thread::sleep(FIRST);
        off.show(|| unreachable!("off"));
        assert!(!off.shown());
        progress.show(String::new);
        assert!(progress.shown());
        // Rewritten no sooner than EVERY.
        progress.show(|| unreachable!("just written"));
    }

    #[test]
    fn a_new_stage_is_said_at_once() {
        let progress = Progress::always();
        let said = std::cell::Cell::new(0);
        for stage in [1, 1, 2, 2] {
            progress.show_in(stage, || {
                said.set(said.get() + 1);
                String::new()
            });
        }
        assert_eq!(
            said.get(),
            2,
            "each stage's first update, no other within EVERY"
        );
    }

    #[test]
    fn always_says_the_first_update() {
        let progress = Progress::always();
        progress.show(String::new);
        assert!(progress.shown());
    }
}
