//! Talking to `topdown-bpf serve` from the tests: plain HTTP/1.0 over loopback, certificates
//! made with openssl for TLS, and a process
//! that is killed when the test ends.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

/// Kills the process when the test ends, however it ends.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `topdown-bpf serve` on loopback `port`, reading the kernel every 200 ms, output discarded.
pub fn serve_command(port: u16) -> Command {
    let mut command = Command::new(crate::topdown_bpf_binary());
    command
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "-I",
            "200",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `METHOD path` over HTTP/1.0: the status line and the body, or `None` when nothing answers.
pub fn request(port: u16, method: &str, path: &str) -> Option<(String, String)> {
    request_with(port, method, path, "")
}

/// [`request`] with more header lines (`headers`, each ending in `\r\n`).
pub fn request_with(
    port: u16,
    method: &str,
    path: &str,
    headers: &str,
) -> Option<(String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{headers}\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    status
        .starts_with("HTTP/1.")
        .then(|| (status.to_owned(), body.to_owned()))
}

/// `GET path`: the body, or `None` when nothing answers yet.
pub fn get(port: u16, path: &str) -> Option<String> {
    request(port, "GET", path).map(|(_, body)| body)
}

/// Polls `f` every 200 ms until it returns something, for at most `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(200));
    }
}

/// Makes a CA, a server certificate for 127.0.0.1 and a client certificate with openssl in
/// `dir`.
pub fn certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("running openssl");
        assert!(status.success(), "openssl {}", args.join(" "));
    };
    // A new P-256 key `NAME.key` and, from `req` with `first` arguments, `out` for `/CN=NAME`.
    let new_key = |first: &[&str], name: &str, out: &str| {
        let (key, subject) = (format!("{name}.key"), format!("/CN={name}"));
        let mut args = vec!["req"];
        args.extend(first);
        args.extend([
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ]);
        args.extend(["-keyout", &key, "-out", out, "-subj", &subject]);
        openssl(&args);
    };
    new_key(&["-x509", "-days", "2"], "ca", "ca.crt");
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for name in ["server", "client"] {
        let (csr, crt, ext) = (
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        new_key(&[], name, &csr);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }
}
