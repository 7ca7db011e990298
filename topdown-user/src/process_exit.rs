//! Waiting for processes we did not start to end (`-p PID`), through pidfds: a pidfd becomes
//! readable when its process exits.

use std::os::fd::{FromRawFd as _, OwnedFd};

use anyhow::{Context as _, Result};
use tokio::io::{Interest, unix::AsyncFd};

/// Resolves when every watched process has exited.
pub struct ProcessExits {
    fds: Vec<AsyncFd<OwnedFd>>,
}

impl ProcessExits {
    /// Watches processes `pids` (which must exist now).
    pub fn watch(pids: &[u32]) -> Result<Self> {
        let fds = pids
            .iter()
            .map(|&pid| {
                // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
                let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
                if fd < 0 {
                    return Err(std::io::Error::last_os_error())
                        .with_context(|| format!("watching process {pid} (pidfd_open)"));
                }
                // SAFETY: a new fd that nothing else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
                // SAFETY: the AsyncFd owns the fd, which stays open and the same while it lives.
                unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
                    .map_err(|error| anyhow::anyhow!("watching process {pid}: {error}"))
            })
            .collect::<Result<_>>()?;
        Ok(Self { fds })
    }

    /// Waits until every process has exited; never returns when none is watched.
    pub async fn all_ended(&self) {
        if self.fds.is_empty() {
            return std::future::pending().await;
        }
        for fd in &self.fds {
            // Readable once the process has exited; an error means it is gone too.
            let _ = fd.readable().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn resolves_when_the_process_exits_and_not_before() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .unwrap();
        let exits = ProcessExits::watch(&[child.id()]).unwrap();
        let early = tokio::time::timeout(Duration::from_millis(50), exits.all_ended()).await;
        assert!(early.is_err(), "still running");
        tokio::time::timeout(Duration::from_secs(10), exits.all_ended())
            .await
            .expect("ended");
        child.wait().unwrap();
        assert!(ProcessExits::watch(&[u32::MAX - 1]).is_err());
    }
}
