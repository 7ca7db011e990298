//! `topdown-bpf serve` stays up whoever connects: under a file limit of 128 it survives 200 idle
//! connections and scrapes work afterwards; a slow, incomplete request does not stop scrapes and
//! is closed after the header timeout; HEAD works, other methods are 405. Needs root.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    os::unix::process::CommandExt as _,
    thread,
    time::{Duration, Instant},
};

use topdown_tests::{
    http::{Running, free_port, get, request, serve_command, wait_for},
    privileged,
};

/// `serve` on a free port, with at most 128 open files.
fn serve_with_few_files() -> (Running, u16) {
    let port = free_port();
    let mut command = serve_command(port);
    // SAFETY: setrlimit is async-signal-safe and touches only this (child) process.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 128,
                rlim_max: 128,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let serve = Running(command.spawn().expect("starting topdown-bpf serve"));
    wait_for("serve to answer", Duration::from_secs(30), || {
        get(port, "/metrics").filter(|body| body.contains("topdown_info"))
    });
    (serve, port)
}

/// The value of an unlabelled sample in an exposition.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn idle_connections_beyond_the_file_limit_do_not_take_it_down() {
    if !privileged("idle_connections_beyond_the_file_limit") {
        return;
    }
    let (mut serve, port) = serve_with_few_files();
    let idle: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    assert_eq!(idle.len(), 200, "the kernel completes every handshake");
    thread::sleep(Duration::from_millis(500));
    assert!(
        serve.0.try_wait().unwrap().is_none(),
        "serve is still running with 200 idle connections"
    );
    drop(idle);
    let body = wait_for("a scrape after the flood", Duration::from_secs(20), || {
        get(port, "/metrics").filter(|b| {
            sample(b, "topdown_scrape_connections_refused_total").is_some_and(|n| n > 0.0)
        })
    });
    assert!(body.contains("topdown_info"), "a complete exposition");
    let refused = sample(&body, "topdown_scrape_connections_refused_total").unwrap();
    assert!(
        refused >= 100.0,
        "connections beyond the cap are counted: {refused}"
    );

    let (status, body) = request(port, "HEAD", "/metrics").expect("HEAD /metrics");
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.is_empty(), "HEAD has no body");
    let (status, _) = request(port, "POST", "/metrics").expect("POST /metrics");
    assert!(status.contains(" 405 "), "{status}");
    let (status, _) = request(port, "GET", "/nope").expect("GET /nope");
    assert!(status.contains(" 404 "), "{status}");
}

#[test]
fn a_slow_request_neither_blocks_scrapes_nor_stays_forever() {
    if !privileged("a_slow_request_neither_blocks_scrapes") {
        return;
    }
    let (_serve, port) = serve_with_few_files();
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // Headers that never end.
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    for _ in 0..3 {
        let body = get(port, "/metrics").expect("a scrape while a request hangs");
        assert!(body.contains("topdown_info"));
    }
    // The server closes it after its header timeout (10 s).
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the slow connection was closed by the server"
    );
}
