//! The artefacts of `cargo xtask dist` tried as an operator installs them, by `cargo xtask
//! test` (amd64: the architecture this host runs): the .deb installed with dpkg into a root of
//! its own (this host's packages are not touched), the binary's version, its man pages found
//! by `man`, a one-second run, the systemd unit verified by `systemd-analyze`, the package
//! checked by `lintian`, and the OCI image read back by `skopeo` with its binary run from the
//! layer. Each check is a test in the closing line.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::{Context as _, Result, bail};

use crate::{
    build::Arch,
    deps,
    dist::{self, VERSION},
};

/// Runs every check; returns each one's name and outcome.
pub fn run(root: &Path) -> Vec<(String, Result<()>)> {
    let mut results = Vec::new();
    let tools = deps::ensure_debian_packages(&["lintian", "skopeo", "man-db"]);
    let built = dist::dist(root, &[Arch::X86_64]);
    let artefacts = match built {
        Ok(paths) => paths,
        Err(error) => {
            results.push(("cargo xtask dist --arch x86_64".to_owned(), Err(error)));
            return results;
        }
    };
    let find = |suffix: &str| -> Result<PathBuf> {
        artefacts
            .iter()
            .find(|p| p.to_string_lossy().ends_with(suffix))
            .cloned()
            .with_context(|| format!("dist wrote no *{suffix}"))
    };
    let installed = root.join("target/dist-check/root");
    let mut check = |name: &str, outcome: Result<()>| {
        results.push((name.to_owned(), outcome));
    };
    let deb = find("_amd64.deb");
    let install = deb.and_then(|deb| install_into(&deb, &installed));
    let ok = install.is_ok();
    check("dpkg -i the .deb (into its own root)", install);
    if ok {
        let binary = installed.join("usr/bin/topdown-bpf");
        check(
            "topdown-bpf --version",
            run_ok(Command::new(&binary).arg("--version"))
                .and_then(|out| expect(&out, &format!("topdown-bpf {VERSION}"))),
        );
        check(
            "man -w topdown-bpf topdown-bpf-serve",
            man_pages(&installed),
        );
        check("topdown-bpf --duration 1", one_second_run(&binary));
        check("systemd-analyze verify the unit", verify_unit(&installed));
    }
    let tools_ok = tools.is_ok();
    check(
        "lintian on the .deb",
        tools
            .and_then(|()| find("_amd64.deb"))
            .and_then(|deb| lintian(&deb, &root.join("target/dist-check/tmp"))),
    );
    if tools_ok {
        check(
            "skopeo reads the OCI image, its binary runs",
            find("-oci.tar").and_then(|oci| image(root, &oci)),
        );
    }
    results
}

/// Prints one line per check, as cargo prints tests; returns how many passed and failed.
pub fn print(results: &[(String, Result<()>)]) -> (u64, u64) {
    let (mut passed, mut failed) = (0, 0);
    for (check, outcome) in results {
        match outcome {
            Ok(()) => {
                println!("dist {check} ... ok");
                passed += 1;
            }
            Err(error) => {
                println!("dist {check} ... FAILED: {error:#}");
                failed += 1;
            }
        }
    }
    (passed, failed)
}

/// Runs `command`: its output, an error naming it when it fails.
fn run_ok(command: &mut Command) -> Result<Output> {
    let shown = format!("{command:?}");
    let output = command
        .output()
        .with_context(|| format!("running {shown}"))?;
    if !output.status.success() {
        bail!(
            "{shown} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(output)
}

fn expect(output: &Output, needle: &str) -> Result<()> {
    let text = String::from_utf8_lossy(&output.stdout);
    if !text.contains(needle) {
        bail!("expected `{needle}` in: {text}");
    }
    Ok(())
}

/// `dpkg --root` with an empty database of its own: the package's files land under `root`,
/// its conffile registered, as on a host.
fn install_into(deb: &Path, root: &Path) -> Result<()> {
    let _ = fs::remove_dir_all(root);
    let admin = root.join("var/lib/dpkg");
    fs::create_dir_all(admin.join("info"))?;
    fs::create_dir_all(admin.join("updates"))?;
    fs::write(admin.join("status"), "")?;
    fs::write(admin.join("available"), "")?;
    run_ok(
        Command::new("dpkg")
            .arg(format!("--root={}", root.display()))
            .args(["--force-script-chrootless", "--log=/dev/null", "-i"])
            .arg(deb),
    )?;
    let status = run_ok(
        Command::new("dpkg-query")
            .arg(format!("--root={}", root.display()))
            .args(["-W", "-f", "${Status} ${Conffiles}", "topdown-bpf"]),
    )?;
    expect(&status, "install ok installed")?;
    expect(&status, "/etc/topdown-bpf/web-config.yml")
}

fn man_pages(root: &Path) -> Result<()> {
    for page in ["topdown-bpf", "topdown-bpf-serve"] {
        let found = run_ok(
            Command::new("man")
                .env("MANPATH", root.join("usr/share/man"))
                .args(["-w", page]),
        )?;
        expect(&found, &format!("{page}.1.gz"))?;
    }
    Ok(())
}

/// A one-second run of the installed binary (root: it loads BPF programs).
fn one_second_run(binary: &Path) -> Result<()> {
    if !deps::is_root() {
        eprintln!("xtask: NOT RUN: the installed binary's one-second run needs root");
        return Ok(());
    }
    let output = run_ok(Command::new(binary).args(["--duration", "1", "--top", "5"]))?;
    expect(&output, "ON-CPU ms")
}

fn verify_unit(root: &Path) -> Result<()> {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("xtask: NOT RUN: systemd-analyze is not here to verify the unit");
        return Ok(());
    }
    run_ok(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no", "--recursive-errors=no"])
            .arg(format!("--root={}", root.display()))
            .arg("/lib/systemd/system/topdown-bpf.service"),
    )
    .map(|_| ())
}

/// lintian on `deb`, its temporary files (it leaves some) in `tmp`.
fn lintian(deb: &Path, tmp: &Path) -> Result<()> {
    fs::create_dir_all(tmp)?;
    run_ok(
        Command::new("lintian")
            .env("TMPDIR", tmp)
            .args(["--fail-on", "error,warning"])
            .arg(deb),
    )
    .map(|_| ())
}

/// skopeo reads the layout's index (tagged with the version) and copies the amd64 image out;
/// its layer holds the binary, which runs, and the `nobody` that `--user nobody` needs.
fn image(root: &Path, oci: &Path) -> Result<()> {
    let reference = format!("oci-archive:{}:topdown-bpf:{VERSION}", oci.display());
    let index = run_ok(Command::new("skopeo").args(["inspect", "--raw", &reference]))?;
    expect(&index, "\"architecture\":\"amd64\"")?;
    let copied = root.join("target/dist-check/image");
    let _ = fs::remove_dir_all(&copied);
    run_ok(
        Command::new("skopeo")
            .args(["copy", "--override-arch", "amd64", &reference])
            .arg(format!("dir:{}", copied.display())),
    )?;
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(copied.join("manifest.json"))?)?;
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .and_then(|d| d.strip_prefix("sha256:"))
        .context("the image's manifest names no layer")?;
    let unpacked = copied.join("rootfs");
    fs::create_dir_all(&unpacked)?;
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(copied.join(layer))
            .arg("-C")
            .arg(&unpacked),
    )?;
    let version = run_ok(Command::new(unpacked.join("usr/bin/topdown-bpf")).arg("--version"))?;
    expect(&version, VERSION)?;
    let passwd = fs::read_to_string(unpacked.join("etc/passwd"))?;
    if !passwd.contains("nobody:x:65534") {
        bail!("the image's /etc/passwd has no nobody: {passwd}");
    }
    Ok(())
}
