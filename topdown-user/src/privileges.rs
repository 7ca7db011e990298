//! Giving privileges up once they have done their work: after `serve` and `record` have loaded
//! the BPF programs, opened the counters and mapped the maps, nothing they do needs a
//! capability (on Linux 6.5 and later, a BPF map or ring buffer is read through its file
//! descriptor without CAP_BPF; counters are read through theirs). So every capability goes
//! (effective, permitted, inheritable, ambient and the bounding set), `no_new_privs` is set, and
//! with `--user NAME` the process runs as that user. A process still root with no capabilities
//! keeps root's files; `--user` gives those up too.
//!
//! One exception, found by a probe, never by the version string: before Linux 6.5 (and on
//! kernels that did not take its change back), with `kernel.unprivileged_bpf_disabled` set,
//! every `bpf()` command checks CAP_BPF, reading a map by its descriptor included (seen on
//! Debian's 5.10: `bpf_map_get_next_key` failed with EPERM after the drop). There CAP_BPF alone
//! is kept, in every thread, and the tool says so.

use std::ffi::CString;

use anyhow::{Context as _, Result, bail};

/// A user to run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// Looks `name` up in the user database, or takes `UID:GID` as given (a user without an
/// entry: its group is never guessed).
pub fn lookup(name: &str) -> Result<User> {
    if let Some((uid, gid)) = name.split_once(':') {
        if let (Ok(uid), Ok(gid)) = (uid.parse(), gid.parse()) {
            return Ok(User {
                name: name.to_owned(),
                uid,
                gid,
            });
        }
        bail!("--user {name}: give a user name or UID:GID (numbers)");
    }
    let c_name = CString::new(name).context("a user name without NUL bytes")?;
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buffer` outlives `entry`'s strings, which
    // are not kept.
    let status = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &raw mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &raw mut found,
        )
    };
    if status == 0 && !found.is_null() {
        return Ok(User {
            name: name.to_owned(),
            uid: entry.pw_uid,
            gid: entry.pw_gid,
        });
    }
    // The static build's C library may have no way to the user database of the host it runs
    // on (its NSS modules are the build host's): /etc/passwd itself, `name:x:uid:gid:...`.
    if let Some(user) = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| passwd_entry(&passwd, name))
    {
        return Ok(user);
    }
    bail!("--user {name}: no such user (give a name from /etc/passwd, or UID:GID)")
}

/// `name`'s entry in the text of an `/etc/passwd`.
fn passwd_entry(passwd: &str, name: &str) -> Option<User> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        Some(User {
            name: name.to_owned(),
            uid: fields.next()?.parse().ok()?,
            gid: fields.next()?.parse().ok()?,
        })
    })
}

/// CAP_BPF (Linux 5.8).
const CAP_BPF: u32 = 39;
/// Needed to drop from the bounding set.
const CAP_SETPCAP: u32 = 8;

/// Whether this process may drop capabilities from its bounding set (CAP_SETPCAP in its
/// effective set): root may; a binary given only CAP_BPF and CAP_PERFMON (`setcap`) may not.
/// Without it the bounding set stays, and says so: with every other set empty and
/// `no_new_privs` set, no `execve` can take a capability from it.
fn can_drop_bounding() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
        let can =
            capabilities(&status).is_some_and(|(effective, _)| effective & (1 << CAP_SETPCAP) != 0);
        if !can {
            eprintln!(
                "topdown-bpf: without CAP_SETPCAP the bounding set is kept; every other \
                 capability is dropped and no_new_privs set, so nothing can take one back"
            );
        }
        can
    })
}

/// Whether this kernel checks CAP_BPF on every `bpf()` command: a thread of ours gives up every
/// capability and asks for the next key of no map (descriptor -1). Such kernels refuse with
/// EPERM before looking at the descriptor; the others answer EBADF. Run while the process
/// still holds its capabilities; the probe's thread ends with it.
pub fn bpf_needs_capability() -> bool {
    let probe = std::thread::spawn(|| {
        // SAFETY: gettid takes nothing.
        let tid = unsafe { libc::gettid() };
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        // `union bpf_attr` for BPF_MAP_GET_NEXT_KEY: map_fd, then key and next_key pointers.
        let attr: [u64; 3] = [u64::from(u32::MAX), 0, 0];
        // SAFETY: capset on this thread alone; bpf() with a valid, zeroed attribute.
        unsafe {
            if libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) != 0 {
                return (false, tid);
            }
            const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
            let rc = libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_GET_NEXT_KEY,
                attr.as_ptr(),
                size_of_val(&attr),
            );
            let refused =
                rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
            (refused, tid)
        }
    });
    let (refused, tid) = probe.join().unwrap_or((false, 0));
    wait_gone(tid);
    refused
}

/// Waits (at most 10 s) until thread `tid` of this process is gone from `/proc/self/task`: a
/// joined thread is still there for a moment (the join returns when its memory is released,
/// before the kernel reaps it), holding the sets it gave up, and the check after the drop
/// counted the probe's thread as one that kept its bounding set (once, in an emulated guest).
/// One still there after that is reported by the check, not hidden.
fn wait_gone(tid: libc::pid_t) {
    if tid <= 0 {
        return;
    }
    let path = format!("/proc/self/task/{tid}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(&path).exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// What the drop keeps: nothing, or CAP_BPF where reading a map needs it
/// ([`bpf_needs_capability`]). Decided once per process, before anything is dropped.
fn kept() -> u64 {
    static KEPT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *KEPT.get_or_init(|| {
        if bpf_needs_capability() {
            eprintln!(
                "topdown-bpf: this kernel checks CAP_BPF at every bpf() call (before Linux 6.5, \
                 with kernel.unprivileged_bpf_disabled set): CAP_BPF is kept to read the maps, \
                 every other capability is dropped"
            );
            1 << CAP_BPF
        } else {
            0
        }
    })
}

/// The highest capability number this kernel knows.
fn last_capability() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(63)
}

/// What a thread started during setup is asked to give up, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its bounding set and ambient capabilities (while it still holds CAP_SETPCAP), keeping
    /// the rest, so that a process-wide uid change still works in it.
    Bounding,
    /// Everything left, and `no_new_privs`.
    All,
}

/// Gives every capability up for good and, with `user`, becomes that user. Capability sets
/// are per thread and glibc's uid change runs in every thread (and aborts the process if one
/// may not), so: every thread's bounding set goes first (`others(Phase::Bounding)` for the
/// threads started during setup, then this one's), then the uid and gid change, then every
/// thread's remaining sets (`others(Phase::All)`, then this one's). Threads started later
/// inherit empty sets. Checked afterwards in every thread's `/proc/self/task/*/status`.
pub fn drop_all(user: Option<&User>, others: impl Fn(Phase) -> Result<()>) -> Result<()> {
    let kept_caps = kept();
    others(Phase::Bounding)?;
    drop_this_thread(Phase::Bounding)?;
    if let Some(user) = user {
        // SAFETY: plain syscalls on this process's credentials; glibc applies them to every
        // thread.
        let failed = unsafe {
            let groups = [user.gid];
            libc::setgroups(1, groups.as_ptr()) != 0
                || libc::setgid(user.gid) != 0
                || libc::setuid(user.uid) != 0
        };
        if failed {
            bail!(
                "--user {}: cannot become uid {} gid {}: {}",
                user.name,
                user.uid,
                user.gid,
                std::io::Error::last_os_error()
            );
        }
    }
    others(Phase::All)?;
    drop_this_thread(Phase::All)?;
    let kept: Vec<String> = std::fs::read_dir("/proc/self/task")
        .context("reading /proc/self/task")?
        .flatten()
        .filter_map(|task| {
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            let (effective, bounding) = capabilities(&status)?;
            let bounding = if can_drop_bounding() { bounding } else { 0 };
            (effective & !kept_caps != 0 || bounding & !kept_caps != 0).then(|| {
                format!(
                    "{} (effective {effective:x}, bounding {bounding:x})",
                    task.file_name().to_string_lossy()
                )
            })
        })
        .collect();
    if !kept.is_empty() {
        bail!(
            "threads kept capabilities after they were dropped: {} (please report it)",
            kept.join(", ")
        );
    }
    Ok(())
}

/// Gives up the calling thread's capabilities of `phase`.
pub fn drop_this_thread(phase: Phase) -> Result<()> {
    // SAFETY: plain syscalls on this thread's credentials, with valid arguments.
    unsafe {
        match phase {
            Phase::Bounding => {
                let kept = kept();
                if kept != 0 && libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
                    bail!(
                        "cannot keep CAP_BPF across the uid change: {}",
                        std::io::Error::last_os_error()
                    );
                }
                // Without CAP_SETPCAP nothing can be dropped from the bounding set.
                let last = can_drop_bounding().then(last_capability);
                for cap in last
                    .into_iter()
                    .flat_map(|last| 0..=last)
                    .filter(|&cap| kept & (1 << cap) == 0)
                {
                    if libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) != 0 {
                        bail!(
                            "cannot drop capability {cap} from the bounding set: {}",
                            std::io::Error::last_os_error()
                        );
                    }
                }
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_CLEAR_ALL,
                    0,
                    0,
                    0,
                );
            }
            Phase::All => {
                let mut header = CapHeader {
                    version: LINUX_CAPABILITY_VERSION_3,
                    pid: 0,
                };
                let kept = kept();
                let data = [0, 1].map(|half| {
                    let bits = (kept >> (32 * half)) as u32;
                    CapData {
                        effective: bits,
                        permitted: bits,
                        inheritable: 0,
                    }
                });
                if libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) != 0 {
                    bail!(
                        "cannot drop capabilities: {}",
                        std::io::Error::last_os_error()
                    );
                }
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    bail!(
                        "cannot set no_new_privs: {}",
                        std::io::Error::last_os_error()
                    );
                }
            }
        }
    }
    Ok(())
}

/// `CapEff` and `CapBnd` of a `/proc/.../status` text.
fn capabilities(status: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    };
    Some((field("CapEff:")?, field("CapBnd:")?))
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` (two of them for the 64 capabilities of version 3).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_found_by_name_or_uid() {
        let root = lookup("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        let numeric = lookup("4242:4343").unwrap();
        assert_eq!((numeric.uid, numeric.gid), (4242, 4343));
        assert!(
            lookup("4242").is_err(),
            "a bare uid without an entry has no known group"
        );
        assert!(lookup("x:1").is_err());
        let passwd =
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\nbad:x:y:1\n";
        assert_eq!(
            passwd_entry(passwd, "nobody").map(|u| (u.uid, u.gid)),
            Some((65534, 65534))
        );
        assert_eq!(
            passwd_entry(passwd, "bad"),
            None,
            "a uid that is not a number"
        );
        assert_eq!(passwd_entry(passwd, "nob"), None, "whole names only");
        let error = lookup("no-such-user-here").unwrap_err().to_string();
        assert!(error.contains("no such user"), "{error}");
    }
}
