//! `topdown-bpf serve` scraped by a real Prometheus server: a workload runs in a test cgroup,
//! and the series for that cgroup must arrive in Prometheus with the on-CPU time the cgroup's
//! own `cpu.stat` says; `promtool check metrics` must accept the exposition. Prometheus runs
//! with the scrape config in `deploy/`. Needs root, cgroup2
//! and Debian's `prometheus` package (`cargo xtask test` installs it when root).

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;
use topdown_tests::{
    assert_books,
    http::{Running, certificates, free_port, get, serve_command, wait_for},
    privileged,
};
use topdown_user::attrib::cgroups::cgroup2_mount;

/// Removes the (empty) test cgroup when the test ends.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// The example scrape config the project ships (`deploy/prometheus.yml`), pointed at `port`
/// and scraping every second.
fn scrape_config(port: u16) -> String {
    let shipped = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/prometheus.yml"
    ))
    .expect("deploy/prometheus.yml");
    for needle in [
        "127.0.0.1:9464",
        "scrape_interval: 15s",
        "job_name: topdown-bpf",
    ] {
        assert!(
            shipped.contains(needle),
            "deploy/prometheus.yml has {needle}"
        );
    }
    shipped
        .replace("127.0.0.1:9464", &format!("127.0.0.1:{port}"))
        .replace("scrape_interval: 15s", "scrape_interval: 1s")
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn tool(name: &str) -> Option<PathBuf> {
    let path = Path::new("/usr/bin").join(name);
    path.exists().then_some(path)
}

#[test]
fn prometheus_scrapes_per_cgroup_series_with_the_kernels_numbers() {
    let test = "prometheus_scrapes_per_cgroup_series";
    if !privileged(test) {
        return;
    }
    let (Some(prometheus), Some(promtool)) = (tool("prometheus"), tool("promtool")) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: CI installs Debian's prometheus package through `cargo xtask test`"
        );
        eprintln!("\n*** SKIPPED {test}: no prometheus (apt-get install prometheus) ***\n");
        return;
    };
    let mount = cgroup2_mount(&fs::read_to_string("/proc/self/mountinfo").unwrap())
        .expect("cgroup2 is mounted");
    let path = format!("/topdown-test-{}-serve", std::process::id());
    let dir = mount.join(path.trim_start_matches('/'));
    fs::create_dir(&dir).expect("creating the test cgroup");
    let _cgroup = Removed(dir.clone());

    let port = free_port();
    let _serve = Running(
        serve_command(port)
            // The c2c filter too, on the software stand-in (no memory-sampling PMU here).
            .args(["--c2c", "--c2c-event", "cpu-clock"])
            .spawn()
            .expect("starting topdown-bpf serve"),
    );
    wait_for("topdown-bpf serve", Duration::from_secs(30), || {
        get(port, "/metrics").filter(|body| body.contains("topdown_info"))
    });

    // A workload that moves itself into the cgroup, then runs and exits: cpu.stat is final.
    let status = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} --run-ms 800 --churn 2 --no-wait",
            dir.display(),
            env!("CARGO_BIN_EXE_workload")
        ))
        .stdout(Stdio::null())
        .status()
        .expect("running the workload");
    assert!(status.success());
    let usage_ns = fs::read_to_string(dir.join("cpu.stat"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("usage_usec")
        * 1000;

    // The exposition is valid for promtool, and holds the cgroup's series.
    let body = wait_for("the test cgroup's series", Duration::from_secs(10), || {
        get(port, "/metrics").filter(|b| b.contains(&format!("cgroup=\"{path}\"")))
    });
    let switches = body
        .lines()
        .filter(|l| l.starts_with("topdown_cgroup_context_switches_total"))
        .find(|l| l.contains(&format!("cgroup=\"{path}\"")))
        .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .expect("the test cgroup's switches") as u64;
    assert!(switches > 0, "the test cgroup's threads were switched out");
    let classified = body
        .lines()
        .find_map(|l| l.strip_prefix("topdown_c2c_classified_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(
        classified.is_some_and(|n| n > 0.0),
        "the c2c filter classified samples: {classified:?}"
    );
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // A real Prometheus scrapes it every second.
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("prometheus.yml");
    fs::write(&config, scrape_config(port)).unwrap();
    let web = free_port();
    let _prometheus = Running(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                work.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus"),
    );
    let query =
        format!("topdown_cgroup_cpu_seconds_total{{cgroup=\"{path}\",job=\"topdown-bpf\"}}");
    let url = format!("/api/v1/query?query={}", encode(&query));
    let seconds = wait_for("the series in Prometheus", Duration::from_secs(60), || {
        let answer: Value = serde_json::from_str(&get(web, &url)?).ok()?;
        let value = answer["data"]["result"].as_array()?.first()?["value"][1]
            .as_str()?
            .parse::<f64>()
            .ok()?;
        Some(value)
    });
    assert_books(
        "Prometheus' topdown_cgroup_cpu_seconds_total",
        (seconds * 1e9) as u64,
        usage_ns,
    );
    let up: Value = serde_json::from_str(&get(web, "/api/v1/query?query=up").unwrap()).unwrap();
    assert_eq!(
        up["data"]["result"][0]["value"][1], "1",
        "the target is up: {up}"
    );
}

/// `curl` of `https://127.0.0.1:port/metrics` with `extra` arguments: its exit status, the
/// HTTP status it got (000 for none) and the body.
fn curl(dir: &Path, port: u16, extra: &[&str]) -> (bool, String, String) {
    let output = Command::new("curl")
        .args(["-s", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}"])
        .args(extra)
        .arg(format!("https://127.0.0.1:{port}/metrics"))
        .current_dir(dir)
        .output()
        .expect("running curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (output.status.success(), code.to_owned(), body.to_owned())
}

/// Every thread of `pid`: (name, uid, CapEff, CapBnd) from /proc.
fn credentials(pid: u32) -> Vec<(String, String, String, String)> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|task| {
            let status = fs::read_to_string(task.path().join("status")).unwrap();
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.split_whitespace().next().unwrap_or("").to_owned())
                    .unwrap_or_default()
            };
            (
                field("Name:"),
                field("Uid:"),
                field("CapEff:"),
                field("CapBnd:"),
            )
        })
        .collect()
}

#[test]
fn prometheus_scrapes_over_tls_with_basic_auth_from_a_tool_without_privileges() {
    let test = "prometheus_scrapes_over_tls_with_basic_auth";
    if !privileged(test) {
        return;
    }
    let Some(prometheus) = tool("prometheus") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: CI installs Debian's prometheus package through `cargo xtask test`"
        );
        eprintln!("\n*** SKIPPED {test}: no prometheus (apt-get install prometheus) ***\n");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    certificates(dir);
    // The exporter-toolkit file as the DaemonSet example ships it, with this test's files.
    let shipped = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/web-config.yml"
    ))
    .expect("deploy/web-config.yml");
    let hash = bcrypt::hash("scrape-secret", 4).unwrap();
    let mut config = String::new();
    for line in shipped.lines() {
        let line = match line.trim_start() {
            l if l.starts_with("cert_file:") => "  cert_file: server.crt".to_owned(),
            l if l.starts_with("key_file:") => "  key_file: server.key".to_owned(),
            l if l.starts_with("client_ca_file:") => "  client_ca_file: ca.crt".to_owned(),
            l if l.starts_with("prometheus:") => format!("  prometheus: {hash}"),
            _ => line.to_owned(),
        };
        config.push_str(&line);
        config.push('\n');
    }
    assert!(
        config.contains("RequireAndVerifyClientCert") && config.contains(&hash),
        "deploy/web-config.yml requires client certificates and has a `prometheus` user:\n{config}"
    );
    fs::write(dir.join("web.yml"), &config).unwrap();

    let port = free_port();
    let serve = Running(
        serve_command(port)
            .arg("--web-config")
            .arg(dir.join("web.yml"))
            .args(["--user", "nobody"])
            .spawn()
            .expect("starting topdown-bpf serve"),
    );
    let client = [
        "--cacert",
        "ca.crt",
        "--cert",
        "client.crt",
        "--key",
        "client.key",
    ];
    let good = [&client[..], &["-u", "prometheus:scrape-secret"]].concat();
    let body = wait_for("serve over TLS", Duration::from_secs(30), || {
        let (ok, code, body) = curl(dir, port, &good);
        // After the first window: the cgroups' series are there.
        (ok && code == "200" && body.contains("topdown_cgroup_cpu_seconds_total{")).then_some(body)
    });
    assert!(body.contains("topdown_info"), "{body}");

    // Setup done, the tool holds nothing: every thread runs as nobody with no capability.
    let nobody = topdown_user::privileges::lookup("nobody")
        .unwrap()
        .uid
        .to_string();
    let threads = credentials(serve.0.id());
    assert!(!threads.is_empty());
    for (name, uid, effective, bounding) in &threads {
        assert_eq!(uid, &nobody, "{name} runs as nobody");
        assert_eq!(effective, "0000000000000000", "{name}: CapEff");
        assert_eq!(bounding, "0000000000000000", "{name}: CapBnd");
    }

    // Refusals: no TLS, no client certificate, no or wrong credentials (the same 401 for a
    // wrong password and an unknown user).
    assert!(get(port, "/metrics").is_none(), "plain HTTP gets no answer");
    let (ok, code, _) = curl(
        dir,
        port,
        &["--cacert", "ca.crt", "-u", "prometheus:scrape-secret"],
    );
    assert!(
        !ok && code == "000",
        "no client certificate: no TLS session ({code})"
    );
    let (_, none, none_body) = curl(dir, port, &client);
    let wrong = [&client[..], &["-u", "prometheus:wrong"]].concat();
    let (_, wrong_code, wrong_body) = curl(dir, port, &wrong);
    // An address whose credentials just failed is not checked again for a second: 429.
    let (_, again, _) = curl(dir, port, &wrong);
    assert_eq!(again, "429", "a failed address waits");
    std::thread::sleep(Duration::from_millis(1100));
    let stranger = [&client[..], &["-u", "stranger:scrape-secret"]].concat();
    let (_, stranger_code, stranger_body) = curl(dir, port, &stranger);
    assert_eq!(
        (none.as_str(), wrong_code.as_str(), stranger_code.as_str()),
        ("401", "401", "401")
    );
    assert_eq!(
        wrong_body, stranger_body,
        "a 401 says nothing of which part was wrong"
    );
    assert_eq!(none_body, wrong_body);
    assert!(!wrong_body.contains("topdown_"), "{wrong_body}");

    // A real Prometheus scrapes it over TLS with its client certificate and password.
    let scrape = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: tls\n    scheme: https\n    \
         tls_config:\n      ca_file: {d}/ca.crt\n      cert_file: {d}/client.crt\n      \
         key_file: {d}/client.key\n    basic_auth:\n      username: prometheus\n      \
         password: scrape-secret\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
        d = dir.display()
    );
    fs::write(dir.join("prometheus.yml"), scrape).unwrap();
    let web = free_port();
    let _prometheus = Running(
        Command::new(&prometheus)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus"),
    );
    let query = encode("topdown_cgroup_cpu_seconds_total{cgroup=\"/\",job=\"tls\"}");
    let seconds = wait_for(
        "the series in Prometheus over TLS",
        Duration::from_secs(60),
        || {
            let answer: Value =
                serde_json::from_str(&get(web, &format!("/api/v1/query?query={query}"))?).ok()?;
            answer["data"]["result"].as_array()?.first()?["value"][1]
                .as_str()?
                .parse::<f64>()
                .ok()
        },
    );
    assert!(seconds > 0.0, "the root cgroup ran: {seconds}");
    let up: Value =
        serde_json::from_str(&get(web, "/api/v1/query?query=up%7Bjob%3D%22tls%22%7D").unwrap())
            .unwrap();
    assert_eq!(
        up["data"]["result"][0]["value"][1], "1",
        "the target is up: {up}"
    );
}

#[test]
fn a_bad_web_config_is_one_line_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("web.yml");
    fs::write(&config, "basic_auth_users:\n  prometheus: not-a-hash\n").unwrap();
    let output = serve_command(free_port())
        .arg("--web-config")
        .arg(&config)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("bcrypt hash"), "{stderr}");

    // Fail closed: an empty file (an empty Secret mount) authenticates nobody, and beyond
    // loopback plain HTTP needs --no-auth said out loud.
    fs::write(&config, "").unwrap();
    let refusals = [
        (
            vec!["--web-config".to_owned(), config.display().to_string()],
            "authenticates nobody",
        ),
        (vec![], "--no-auth"),
    ];
    for (args, expected) in refusals {
        let output = Command::new(topdown_tests::topdown_bpf_binary())
            .args(["serve", "--listen", &format!("0.0.0.0:{}", free_port())])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
