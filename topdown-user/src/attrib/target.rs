//! Which threads a report is about: all, some processes or threads, or a command and every
//! process it starts (followed in the kernel, see `Collector::follow`).

use std::path::Path;

use anyhow::{Result, bail};
use topdown_common::thread::ThreadHeader;

/// The threads to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every thread on the machine.
    All,
    /// Every thread of these processes.
    Pids(Vec<u32>),
    /// These threads.
    Tids(Vec<u32>),
    /// A command we started (its pid), and every process it started after that.
    Command(u32),
    /// No thread: only cgroups are reported (the exporter, which runs for weeks and must not
    /// keep every thread that ever exited).
    NoThreads,
}

impl Target {
    /// Checks that every named process or thread exists now.
    pub fn validate(&self) -> Result<()> {
        let exists = |id: &u32| Path::new(&format!("/proc/{id}/status")).exists();
        match self {
            Self::Pids(pids) => {
                if let Some(pid) = pids.iter().find(|pid| !exists(pid)) {
                    bail!("no process with pid {pid}: check the -p argument");
                }
            }
            Self::Tids(tids) => {
                // /proc/<tid> resolves for any thread id, though only leaders are listed.
                if let Some(tid) = tids.iter().find(|tid| !exists(tid)) {
                    bail!("no thread with tid {tid}: check the -t argument");
                }
            }
            Self::All | Self::Command(_) | Self::NoThreads => {}
        }
        Ok(())
    }

    /// Whether this thread is reported.
    pub fn keeps(&self, totals: &ThreadHeader) -> bool {
        match self {
            Self::All => totals.tid != 0,
            Self::Pids(pids) => pids.contains(&totals.tgid),
            Self::Tids(tids) => tids.contains(&totals.tid),
            Self::Command(root) => {
                totals.tgid == *root || totals.flags & ThreadHeader::FLAG_FOLLOWED != 0
            }
            Self::NoThreads => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: u32, pid: u32, flags: u32) -> ThreadHeader {
        let mut t = topdown_common::thread::ThreadTotals::new(tid, pid).header;
        t.flags = flags;
        t
    }

    #[test]
    fn command_keeps_its_process_and_followed_ones() {
        let target = Target::Command(100);
        let followed = ThreadHeader::FLAG_FOLLOWED;
        assert!(target.keeps(&thread(100, 100, 0)));
        assert!(target.keeps(&thread(101, 100, 0)));
        assert!(target.keeps(&thread(300, 300, followed)));
        assert!(target.keeps(&thread(301, 300, followed | ThreadHeader::FLAG_EXITED)));
        assert!(!target.keeps(&thread(400, 400, ThreadHeader::FLAG_EXITED)));
    }

    #[test]
    fn pids_and_tids_select_what_they_name() {
        assert!(Target::Pids(vec![5]).keeps(&thread(6, 5, 0)));
        assert!(!Target::Pids(vec![5]).keeps(&thread(5, 6, 0)));
        assert!(Target::Tids(vec![6]).keeps(&thread(6, 5, 0)));
        assert!(!Target::Tids(vec![6]).keeps(&thread(5, 5, 0)));
        assert!(Target::All.keeps(&thread(1, 1, 0)));
        assert!(
            !Target::All.keeps(&thread(0, 0, 0)),
            "idle is kept per CPU, not as a thread"
        );
    }

    #[test]
    fn unknown_pid_is_an_error() {
        assert!(Target::Pids(vec![u32::MAX - 1]).validate().is_err());
        assert!(Target::Tids(vec![u32::MAX - 1]).validate().is_err());
        assert!(Target::Pids(vec![std::process::id()]).validate().is_ok());
    }
}
