//! The init of the emulated arm64 guest that `cargo xtask test` boots (see xtask/src/guest.rs):
//! PID 1 in an initramfs holding the aarch64 tool, its test programs and test binaries.
//!
//! It mounts what the tests need (proc, sysfs, devtmpfs, cgroup2, bpffs, tracefs, debugfs; /tmp
//! is the initramfs's own), runs each command of the suite the kernel command line names
//! (`topdown.suite=NAME` runs the lines of `/suites/NAME`, one command each), prints each
//! command's output between `@@guest begin CMD` and `@@guest end CMD rc=N` lines, then
//! `@@guest done`, and powers the machine off. The host reads the serial console: a test
//! binary's `test result:` lines are its verdict; a missing `@@guest done` (a panic, a hang)
//! fails the suite.

use std::{
    ffi::CString,
    fs,
    os::unix::process::ExitStatusExt as _,
    process::{Command, ExitCode},
};

/// Guest lines the host looks for.
const BEGIN: &str = "@@guest begin";
const END: &str = "@@guest end";
const DONE: &str = "@@guest done";

fn mount(source: &str, target: &str, fstype: &str) {
    let _ = fs::create_dir_all(target);
    let c = |s: &str| CString::new(s).expect("no NUL in mount arguments");
    let (source, target_c, fstype_c) = (c(source), c(target), c(fstype));
    // SAFETY: valid NUL-terminated strings and no data.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target_c.as_ptr(),
            fstype_c.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        println!(
            "guest_init: mounting {fstype} on {target}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Makes `/dev/console` this process's standard input, output and error (the kernel found no
/// console node in the initramfs to give init).
fn open_console() {
    let path = CString::new("/dev/console").expect("no NUL");
    // SAFETY: a valid path; the fds are this process's own.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDWR);
        if fd >= 0 {
            for target in 0..3 {
                libc::dup2(fd, target);
            }
            if fd > 2 {
                libc::close(fd);
            }
        }
    }
}

fn power_off() -> ! {
    // SAFETY: sync and reboot take no pointers.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_POWER_OFF);
    }
    // Only reached when reboot failed: PID 1 exiting panics the kernel, which the host sees.
    std::process::exit(1)
}

/// A world-writable, sticky /tmp on the initramfs.
fn make_tmp() {
    use std::os::unix::fs::PermissionsExt as _;
    let made = std::fs::create_dir_all("/tmp")
        .and_then(|()| std::fs::set_permissions("/tmp", std::fs::Permissions::from_mode(0o1777)));
    if let Err(error) = made {
        eprintln!("guest init: making /tmp: {error}");
    }
}

/// Brings the loopback interface up (nothing else configures the guest's network): the tests
/// talk to `serve` over 127.0.0.1.
fn loopback_up() {
    // SAFETY: a socket only for the interface ioctls, closed below; `ifreq` is plain data.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            println!("guest_init: socket: {}", std::io::Error::last_os_error());
            return;
        }
        let mut request: libc::ifreq = std::mem::zeroed();
        for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *to = *from as libc::c_char;
        }
        request.ifr_ifru.ifru_flags =
            (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as i16;
        if libc::ioctl(fd, libc::SIOCSIFFLAGS, &request) != 0 {
            println!(
                "guest_init: bringing lo up: {}",
                std::io::Error::last_os_error()
            );
        }
        libc::close(fd);
    }
}

fn main() -> ExitCode {
    mount("devtmpfs", "/dev", "devtmpfs");
    open_console();
    mount("proc", "/proc", "proc");
    mount("sysfs", "/sys", "sysfs");
    // /tmp stays on the initramfs (already in memory, writable): a tmpfs mounted over it would
    // hide the programs packed at their build paths when the repository sits under /tmp.
    make_tmp();
    mount("cgroup2", "/sys/fs/cgroup", "cgroup2");
    mount("bpf", "/sys/fs/bpf", "bpf");
    mount("tracefs", "/sys/kernel/tracing", "tracefs");
    mount("debugfs", "/sys/kernel/debug", "debugfs");
    loopback_up();
    // SAFETY: setsid has no preconditions; a session makes /dev/console our terminal.
    unsafe { libc::setsid() };

    let cmdline = fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let suite = cmdline
        .split_whitespace()
        .find_map(|arg| arg.strip_prefix("topdown.suite="))
        .unwrap_or("none")
        .to_owned();
    let commands = fs::read_to_string(format!("/suites/{suite}")).unwrap_or_else(|error| {
        println!("guest_init: no suite `{suite}`: {error}");
        String::new()
    });
    for line in commands.lines().filter(|l| !l.trim().is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        println!("{BEGIN} {line}");
        let status = Command::new(words[0])
            .args(&words[1..])
            .env_clear()
            .env("PATH", "/bin")
            .env("HOME", "/tmp")
            .env("TMPDIR", "/tmp")
            .env("CI", "true")
            .env("TOPDOWN_BPF_BIN", "/bin/topdown-bpf")
            .env("TOPDOWN_GUEST", &suite)
            .status();
        let rc = match status {
            Ok(status) => status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            Err(error) => {
                println!("guest_init: cannot run {}: {error}", words[0]);
                127
            }
        };
        println!("{END} {line} rc={rc}");
    }
    println!("{DONE}");
    power_off()
}
