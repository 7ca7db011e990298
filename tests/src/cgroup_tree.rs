//! Test cgroups under the unified cgroup2 mount, made and removed by the tests.

use std::{
    fs,
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command},
    thread,
    time::Duration,
};
use topdown_common::cgroup::CgroupId;

use topdown_user::attrib::cgroups::cgroup2_mount;

use crate::privileged;

/// A tree of test cgroups under the unified mount, removed (with anything left in it) on drop.
pub struct TestTree {
    mount: PathBuf,
    root: String,
}

impl TestTree {
    /// `/topdown-test-<pid>-<name>` with `leaves` (and their parents) under it.
    pub fn new(mount: &Path, name: &str, leaves: &[&str]) -> Self {
        let root = format!("/topdown-test-{}-{name}", std::process::id());
        let tree = Self {
            mount: mount.to_path_buf(),
            root,
        };
        for leaf in leaves {
            fs::create_dir_all(tree.dir(leaf)).expect("creating a test cgroup");
        }
        tree
    }

    /// The cgroup's path from the cgroup2 root.
    pub fn path(&self, leaf: &str) -> String {
        if leaf.is_empty() {
            self.root.clone()
        } else {
            format!("{}/{leaf}", self.root)
        }
    }

    /// The cgroup's directory under the mount.
    pub fn dir(&self, leaf: &str) -> PathBuf {
        self.mount.join(self.path(leaf).trim_start_matches('/'))
    }

    /// The cgroup's id: its directory's inode number, as the kernel's cgroup2 id.
    pub fn id(&self, leaf: &str) -> CgroupId {
        CgroupId(fs::metadata(self.dir(leaf)).expect("a test cgroup").ino())
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    pub fn enter(&self, leaf: &str, pid: u32) {
        fs::write(self.dir(leaf).join("cgroup.procs"), pid.to_string())
            .expect("moving a process into a test cgroup");
    }

    /// `usage_usec` of the cgroup's `cpu.stat` (itself and its descendants), in nanoseconds.
    pub fn usage_ns(&self, leaf: &str) -> u64 {
        let text = fs::read_to_string(self.dir(leaf).join("cpu.stat")).expect("reading cpu.stat");
        text.lines()
            .find_map(|line| line.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("usage_usec in cpu.stat")
            * 1000
    }

    /// `command` started inside `leaf`, on CPU `cpu` alone when given: the child joins the
    /// cgroup (and the CPU) before it execs, so the kernel's books see all of its time there.
    pub fn spawn(&self, leaf: &str, mut command: Command, cpu: Option<usize>) -> Child {
        let procs = std::ffi::CString::new(
            self.dir(leaf)
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .expect("no NUL in a cgroup's path");
        // SAFETY: between fork and exec the child only calls open, write, close and
        // sched_setaffinity, which are async-signal-safe, on memory prepared before the fork.
        unsafe {
            command.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if written != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(cpu) = cpu {
                    let mut mask: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut mask);
                    if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &mask) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        command.spawn().expect("starting a command in its cgroup")
    }

    /// Removes the (empty) cgroup.
    pub fn remove(&self, leaf: &str) {
        fs::remove_dir(self.dir(leaf)).expect("removing a test cgroup");
    }
}

impl Drop for TestTree {
    fn drop(&mut self) {
        let mut dirs = vec![self.dir("")];
        let mut all = Vec::new();
        while let Some(dir) = dirs.pop() {
            if let Ok(entries) = fs::read_dir(&dir) {
                dirs.extend(
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
            all.push(dir);
        }
        for dir in all.iter().rev() {
            if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                for pid in procs.split_whitespace().filter_map(|p| p.parse().ok()) {
                    // SAFETY: kill has no memory preconditions.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            for _ in 0..50 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The unified mount, or why the test cannot run here.
pub fn unified_mount(test: &str) -> Option<PathBuf> {
    if !privileged(test) {
        return None;
    }
    let mount = cgroup2_mount(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    if mount.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: CI machines have cgroup2 mounted"
        );
        eprintln!("\n*** SKIPPED {test}: cgroup2 is not mounted ***\n");
    }
    mount
}
