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
    http::{Running, free_port, get, serve_command, wait_for},
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
