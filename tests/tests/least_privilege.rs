//! Least privilege that works (issue 52, finding 4): a copy of the binary given only CAP_BPF
//! and CAP_PERFMON (`setcap`), run by a plain user the test makes, records, serves and shows
//! the live view; it drops what it can without CAP_SETPCAP and says what it kept. The same
//! copy without the capabilities refuses in one line naming them, before it writes anything.
//! Needs root (to make the user and set the capabilities) and `setcap` (libcap2-bin, which
//! `cargo xtask test` installs).

use std::{
    net::TcpStream,
    os::unix::fs::PermissionsExt as _,
    path::Path,
    process::{Command, Output},
    time::{Duration, Instant},
};

use topdown_tests::{privileged, topdown_bpf_binary};

/// The plain user the test runs as.
const USER: &str = "topdown-lp";

/// `args` of the copy at `binary`, as [`USER`], in `dir`.
fn as_user(binary: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid", USER, "--regid", USER, "--init-groups"])
        .arg(binary)
        .args(args)
        .current_dir(dir);
    command
}

fn succeeded(what: &str, output: &Output) -> String {
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{what}: {said}");
    said
}

#[test]
fn cap_bpf_and_cap_perfmon_are_enough_for_every_command() {
    if !privileged("cap_bpf_and_cap_perfmon_are_enough_for_every_command") {
        return;
    }
    let made = Command::new("sh")
        .args(["-c", &format!("id {USER} || useradd -M -s /bin/sh {USER}")])
        .output()
        .expect("running useradd");
    assert!(made.status.success(), "{made:?}");
    // A folder the user can enter, with a copy of the binary and a folder the user owns.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = dir.path().join("topdown-bpf");
    std::fs::copy(topdown_bpf_binary(), &binary).unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let chown = Command::new("chown").arg(USER).arg(&out).status().unwrap();
    assert!(chown.success());

    // Without capabilities: one line naming them, and no file.
    let refused = as_user(
        &binary,
        &out,
        &["record", "-o", "bare.rec", "--duration", "0.2"],
    )
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(said.contains("CAP_BPF and CAP_PERFMON"), "{said}");
    assert!(
        !out.join("bare.rec").exists(),
        "nothing written before the refusal"
    );

    let setcap = Command::new("setcap")
        .args(["cap_bpf,cap_perfmon+ep"])
        .arg(&binary)
        .output()
        .expect("running setcap (libcap2-bin)");
    assert!(setcap.status.success(), "{setcap:?}");

    let said = succeeded(
        "record",
        &as_user(
            &binary,
            &out,
            &["record", "-o", "run.rec", "--duration", "1"],
        )
        .output()
        .unwrap(),
    );
    assert!(
        said.contains("bounding set is kept"),
        "says what it kept: {said}"
    );
    assert!(said.contains("recorded"), "{said}");
    succeeded(
        "report",
        &Command::new(topdown_bpf_binary())
            .args(["report", "--json", "-i"])
            .arg(out.join("run.rec"))
            .output()
            .unwrap(),
    );
    succeeded(
        "the live view",
        &as_user(&binary, &out, &["--duration", "0.5", "-o", "live.txt"])
            .output()
            .unwrap(),
    );
    succeeded(
        "check",
        &as_user(&binary, &out, &["check"]).output().unwrap(),
    );

    // serve: answers a scrape, then ends at its duration.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let listen = format!("127.0.0.1:{port}");
    let serve = as_user(
        &binary,
        &out,
        &["serve", "--listen", &listen, "--duration", "20"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut answered = false;
    while !answered && Instant::now() < deadline {
        if let Ok(mut stream) = TcpStream::connect(&listen) {
            use std::io::{Read as _, Write as _};
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = write!(stream, "GET /metrics HTTP/1.0\r\n\r\n");
            let mut body = String::new();
            let _ = stream.read_to_string(&mut body);
            answered = body.contains(" 200 ") && body.contains("topdown_info");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) };
    let output = serve.wait_with_output().unwrap();
    assert!(
        answered,
        "serve answered a scrape: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
