//! Which threads a report is about: all, some processes or threads, or a command's processes.

use std::{collections::HashMap, fs, path::PathBuf};

use anyhow::{Result, bail};

/// The threads to report.
#[derive(Clone, Debug)]
pub enum Target {
    /// Every thread on the machine.
    All,
    /// Every thread of these processes.
    Pids(Vec<u32>),
    /// These threads.
    Tids(Vec<u32>),
    /// A command started by us: its process and the processes it forks (found while alive).
    Command(u32),
}

/// Decides membership, remembering what it learnt of each process's ancestry.
#[derive(Debug)]
pub struct TargetFilter {
    target: Target,
    proc_root: PathBuf,
    descends: HashMap<u32, bool>,
}

impl Target {
    /// Checks that every named process or thread exists now.
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Pids(pids) => {
                for pid in pids {
                    if !PathBuf::from(format!("/proc/{pid}")).exists() {
                        bail!("no process with pid {pid}: check the -p argument");
                    }
                }
            }
            Self::Tids(tids) => {
                for tid in tids {
                    if !PathBuf::from(format!("/proc/{tid}/task/{tid}")).exists()
                        && !thread_exists(*tid)
                    {
                        bail!("no thread with tid {tid}: check the -t argument");
                    }
                }
            }
            Self::All | Self::Command(_) => {}
        }
        Ok(())
    }
}

fn thread_exists(tid: u32) -> bool {
    // /proc/<tid> resolves for any thread id, even if not listed in /proc.
    PathBuf::from(format!("/proc/{tid}/status")).exists()
}

impl TargetFilter {
    /// A filter for `target`, reading process ancestry under `/proc`.
    pub fn new(target: Target) -> Self {
        Self::with_proc_root(target, PathBuf::from("/proc"))
    }

    /// A filter reading ancestry under `proc_root` (a fixture in tests).
    pub fn with_proc_root(target: Target, proc_root: PathBuf) -> Self {
        Self {
            target,
            proc_root,
            descends: HashMap::new(),
        }
    }

    /// Whether thread `tid` of process `pid` is reported.
    pub fn keeps(&mut self, tid: u32, pid: u32) -> bool {
        match &self.target {
            Target::All => tid != 0,
            Target::Pids(pids) => pids.contains(&pid),
            Target::Tids(tids) => tids.contains(&tid),
            Target::Command(root) => {
                let root = *root;
                pid == root || self.descends_from(pid, root)
            }
        }
    }

    fn descends_from(&mut self, pid: u32, root: u32) -> bool {
        if let Some(&known) = self.descends.get(&pid) {
            return known;
        }
        let mut current = pid;
        let mut verdict = false;
        for _ in 0..64 {
            match self.parent_of(current) {
                Some(parent) if parent == root => {
                    verdict = true;
                    break;
                }
                Some(parent) if parent > 1 => current = parent,
                _ => break,
            }
        }
        // An unreadable process (already gone) is not remembered: it may be asked again.
        if self.proc_root.join(pid.to_string()).exists() {
            self.descends.insert(pid, verdict);
        }
        verdict
    }

    fn parent_of(&self, pid: u32) -> Option<u32> {
        let stat = fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
        // comm may hold spaces and parentheses: the fields after the last ')' are fixed.
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(1)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_tree(entries: &[(u32, u32)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (pid, ppid) in entries {
            let p = dir.path().join(pid.to_string());
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("stat"), format!("{pid} (a (b) c) S {ppid} 1 1 0")).unwrap();
        }
        dir
    }

    #[test]
    fn command_keeps_its_descendants_only() {
        let dir = proc_tree(&[(100, 1), (200, 100), (300, 200), (400, 1)]);
        let mut filter =
            TargetFilter::with_proc_root(Target::Command(100), dir.path().to_path_buf());
        assert!(filter.keeps(100, 100));
        assert!(filter.keeps(201, 200));
        assert!(filter.keeps(300, 300));
        assert!(!filter.keeps(400, 400));
        assert!(!filter.keeps(999, 999));
    }

    #[test]
    fn pids_and_tids_select_what_they_name() {
        let mut pids = TargetFilter::new(Target::Pids(vec![5]));
        assert!(pids.keeps(6, 5));
        assert!(!pids.keeps(5, 6));
        let mut tids = TargetFilter::new(Target::Tids(vec![6]));
        assert!(tids.keeps(6, 5));
        assert!(!tids.keeps(5, 5));
        let mut all = TargetFilter::new(Target::All);
        assert!(all.keeps(1, 1));
        assert!(!all.keeps(0, 0), "idle is kept per CPU, not as a thread");
    }

    #[test]
    fn unknown_pid_is_an_error() {
        assert!(Target::Pids(vec![u32::MAX - 1]).validate().is_err());
        assert!(Target::Tids(vec![u32::MAX - 1]).validate().is_err());
        assert!(Target::Pids(vec![std::process::id()]).validate().is_ok());
    }
}
