//! The files in `deploy/` stay in step with the binary: the DaemonSet runs `serve` with
//! arguments the command line accepts, with what the kernel side needs (privileged, the host's
//! PIDs, /sys and the cgroup2 mount), and exposes the port it serves on.

use clap::Parser as _;
use topdown_user::cli::{Cli, Command};

fn daemonset() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/daemonset.yaml"
    ))
    .expect("deploy/daemonset.yaml")
}

/// The container's `args:` list.
fn args(manifest: &str) -> Vec<String> {
    let mut lines = manifest.lines().skip_while(|l| l.trim() != "args:").skip(1);
    let mut args = Vec::new();
    for line in lines.by_ref() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let Some(arg) = line.strip_prefix("- ") else {
            break;
        };
        args.push(arg.trim_matches('"').to_owned());
    }
    args
}

#[test]
fn the_daemonset_runs_serve_with_arguments_the_binary_accepts() {
    let manifest = daemonset();
    let args = args(&manifest);
    assert_eq!(args.first().map(String::as_str), Some("serve"), "{args:?}");
    let cli = Cli::try_parse_from(std::iter::once("topdown-bpf".to_owned()).chain(args))
        .unwrap_or_else(|e| panic!("deploy/daemonset.yaml's args: {e}"));
    let Some(Command::Serve(serve)) = cli.command else {
        panic!("not serve")
    };
    let port = serve.listen.rsplit(':').next().unwrap();
    assert_eq!(
        serve.web_config.as_deref(),
        Some(std::path::Path::new("/etc/topdown-bpf/web-config.yml")),
        "the DaemonSet serves with TLS and basic authentication"
    );
    assert!(serve.user.is_some(), "and runs unprivileged after setup");
    assert!(
        manifest.contains(&format!("containerPort: {port}")),
        "the container port is the one served"
    );
    for needed in [
        "hostPID: true",
        "privileged: true",
        "mountPath: /sys/fs/cgroup",
        "path: /sys/fs/cgroup",
        "mountPath: /sys\n",
        "mountPath: /etc/topdown-bpf",
        "secretName: topdown-bpf-web",
    ] {
        assert!(
            manifest.contains(needed),
            "deploy/daemonset.yaml has {needed:?}"
        );
    }
}

/// The DaemonSet names the image `cargo xtask dist` builds: this version's tag, and the
/// OCI archive its comment tells how to push.
#[test]
fn the_daemonset_names_the_image_of_this_version() {
    let manifest = daemonset();
    let version = env!("CARGO_PKG_VERSION");
    let image = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("image: "))
        .expect("an image");
    assert!(
        image.ends_with(&format!("/topdown-bpf:{version}")),
        "image {image} is not topdown-bpf:{version}"
    );
    assert!(
        manifest.contains(&format!("target/dist/topdown-bpf-{version}-oci.tar")),
        "the comment names the archive dist writes"
    );
}

/// A deploy file, by name.
fn deploy_file(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../deploy/{name}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("deploy/{name}: {e}"))
}

/// The store's command line, as the binary parses it: a `record --store` that keeps a week
/// within a size, runs unprivileged after setup, and (for the journal's sake) prints no table
/// per window.
fn assert_store_command(what: &str, args: Vec<String>) {
    let cli = Cli::try_parse_from(std::iter::once("topdown-bpf".to_owned()).chain(args))
        .unwrap_or_else(|e| panic!("{what}'s command line: {e}"));
    let Some(Command::Record(record)) = cli.command else {
        panic!("{what} does not run record")
    };
    assert_eq!(
        record.store.as_deref(),
        Some(std::path::Path::new("/var/lib/topdown-bpf/store")),
        "{what} keeps a store"
    );
    assert_eq!(record.keep, std::time::Duration::from_secs(7 * 86_400));
    assert_eq!(record.max_size, 2 << 30);
    assert_eq!(
        record.user.as_deref(),
        Some("nobody"),
        "{what} runs as nobody after setup"
    );
    assert!(
        !record.stat.json && !record.stat.csv,
        "{what} prints no line per window"
    );
}

#[test]
fn the_store_daemonset_and_unit_run_a_store_the_binary_accepts() {
    let manifest = deploy_file("daemonset-store.yaml");
    assert_store_command("deploy/daemonset-store.yaml", args(&manifest));
    for needed in [
        "hostPID: true",
        "privileged: true",
        "mountPath: /var/lib/topdown-bpf",
        "path: /var/lib/topdown-bpf",
        "mountPath: /sys/fs/cgroup",
    ] {
        assert!(
            manifest.contains(needed),
            "deploy/daemonset-store.yaml has {needed:?}"
        );
    }
    let unit = deploy_file("topdown-bpf-store.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    let mut words = exec.split_whitespace().map(str::to_owned);
    assert_eq!(words.next().as_deref(), Some("/usr/local/bin/topdown-bpf"));
    assert_store_command("deploy/topdown-bpf-store.service", words.collect());
    assert!(
        unit.contains("StateDirectory=topdown-bpf") && unit.contains("StateDirectoryMode=0700"),
        "the unit makes the store's parent, its owner's alone"
    );
}
