//! One word for what held a row back over a window: not running at all (its cgroup throttled
//! by `cpu.max`, or waiting in a run queue), or, while it ran, TopDown's bottleneck. The rule
//! (docs/live.md):
//!
//! 1. `throttled`: its cgroup (a thread's own, a group's root) was throttled for more than half
//!    of the window's wall time;
//! 2. `waiting for CPU`: it waited in a run queue longer than it ran;
//! 3. otherwise it ran: TopDown's bottleneck where TopDown is measured, nothing otherwise.
//!
//! Throttling comes first: a throttled cgroup's tasks stay runnable, so they wait too.

use std::time::Duration;

use crate::attrib::stalls::CpuStalls;

/// What held a row back over a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Its cgroup was throttled by its `cpu.max` quota for most of the window.
    Throttled,
    /// It waited in a run queue longer than it ran.
    WaitingForCpu,
    /// It ran: where TopDown is measured, its bottleneck says where the pipeline stalled.
    Ran,
}

impl Verdict {
    /// The verdict of a row that ran `on_cpu` and waited `waited` (`None`: not measured) in a
    /// window `length` long, its cgroup's `stalls` as read (`None`: not read).
    pub fn of(
        on_cpu: Duration,
        waited: Option<Duration>,
        stalls: Option<&CpuStalls>,
        length: Duration,
    ) -> Self {
        if stalls
            .and_then(|s| s.throttled)
            .is_some_and(|throttled| throttled * 2 > length)
        {
            Self::Throttled
        } else if waited.is_some_and(|waited| waited > on_cpu) {
            Self::WaitingForCpu
        } else {
            Self::Ran
        }
    }

    /// Its words in tables, the live view, JSON and CSV; `None` for [`Verdict::Ran`], whose
    /// words are TopDown's bottleneck.
    pub const fn words(self) -> Option<&'static str> {
        match self {
            Self::Throttled => Some("throttled"),
            Self::WaitingForCpu => Some("waiting for CPU"),
            Self::Ran => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn throttled_first_then_waiting_then_it_ran() {
        let window = 1000 * MS;
        let throttled = |ms: u32| CpuStalls {
            throttled: Some(ms * MS),
            ..CpuStalls::default()
        };
        // Throttled most of the window: throttled, though it waited longer than it ran too.
        let held = throttled(600);
        assert_eq!(
            Verdict::of(100 * MS, Some(700 * MS), Some(&held), window),
            Verdict::Throttled
        );
        // Throttled for half of it, not most: the wait decides.
        let half = throttled(500);
        assert_eq!(
            Verdict::of(100 * MS, Some(700 * MS), Some(&half), window),
            Verdict::WaitingForCpu
        );
        assert_eq!(
            Verdict::of(300 * MS, Some(300 * MS), Some(&half), window),
            Verdict::Ran,
            "waited as long as it ran: not longer"
        );
        // Not measured: no verdict but that it ran.
        assert_eq!(Verdict::of(1 * MS, None, None, window), Verdict::Ran);
        assert_eq!(
            Verdict::of(MS, Some(2 * MS), Some(&CpuStalls::default()), window),
            Verdict::WaitingForCpu,
            "no throttling fields (no cpu controller): the wait decides"
        );
        assert_eq!(Verdict::WaitingForCpu.words(), Some("waiting for CPU"));
        assert_eq!(Verdict::Ran.words(), None);
    }
}
