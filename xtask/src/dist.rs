//! `cargo xtask dist`: what an operator installs without a Rust toolchain, for each
//! architecture, in `target/dist/`:
//!
//! - `topdown-bpf-VERSION-ARCH.tar.gz`: a prefix tree (the static binary in `bin/`, man
//!   pages and bash/zsh/fish completions in `share/`, as `cargo xtask install` lays them out),
//!   the systemd unit and web config, the licences and a short README;
//! - `topdown-bpf_VERSION_DEBARCH.deb`: the same in Debian's places, the web config a conffile;
//! - `topdown-bpf-VERSION-oci.tar`: one OCI image layout holding an index of an amd64 and an
//!   arm64 image (one layer each: the static binary, and an `/etc/passwd` naming `nobody` for
//!   `--user nobody`), made without a registry or a container daemon.
//!
//! Every archive is reproducible: owners 0, times from `SOURCE_DATE_EPOCH` or the last commit,
//! entries sorted, gzip without names or times.

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::{
    build::{self, Arch},
    check,
    install::{self, copy, write},
};

/// The version every artefact carries (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The Debian package's maintainer field.
const MAINTAINER: &str = "topdown-bpf developers <topdown-bpf@users.noreply.github.com>";

/// The systemd unit: `serve` with TLS and authentication from the web config, as `nobody`.
const UNIT: &str = "[Unit]
Description=topdown-bpf Prometheus exporter (CPU time and TopDown per cgroup)
Documentation=man:topdown-bpf-serve(1)
After=network-online.target
Wants=network-online.target

[Service]
# Loads its BPF programs as root, then runs as nobody with every capability dropped.
ExecStart=/usr/bin/topdown-bpf serve --listen 0.0.0.0:9464 --web-config /etc/topdown-bpf/web-config.yml --user nobody
Restart=on-failure
RestartSec=5
ProtectHome=true
PrivateTmp=true

[Install]
WantedBy=multi-user.target
";

/// The README inside the tarball.
fn tarball_readme(arch: Arch) -> String {
    format!(
        "topdown-bpf {VERSION} for Linux {arch} (static: runs on any distribution, Linux 5.10 or newer)

TopDown (TMA) counters and CPU time per thread and per cgroup, read by BPF at every context
switch; c2c false-sharing reports; a Prometheus exporter.

  sudo bin/topdown-bpf --per-thread          live view (q quits)
  sudo bin/topdown-bpf check                 what this kernel and CPU give
  sudo bin/topdown-bpf serve                 the exporter, on 127.0.0.1:9464

Install: bin/ and share/ are a prefix tree (man pages, bash, zsh and fish completions):
  sudo tar -xzf topdown-bpf-*.tar.gz -C /usr/local --strip-components=1 --wildcards '*/bin' '*/share'
topdown-bpf.service runs `serve` with TLS and
basic authentication from /etc/topdown-bpf/web-config.yml (see web-config.yml and
`man topdown-bpf-serve`). Licence: MIT or Apache-2.0, at your option.
",
        arch = arch.debian()
    )
}

/// What lintian says of a static Rust binary that is not so (each tag raised on amd64 or
/// arm64; lintian reports an override its architecture does not raise as information only).
const LINTIAN_OVERRIDES: &str = "\
# unsafe-libyaml, the Rust translation of libyaml under serde_yaml_ng (the web config's
# parser), is compiled into the binary, which is static on purpose: one binary for every
# distribution.
topdown-bpf: embedded-library libyaml [usr/bin/topdown-bpf]
# A static-pie executable: ELF type DYN with no NEEDED entries, not a shared library.
topdown-bpf: shared-library-lacks-prerequisites [usr/bin/topdown-bpf]
# Static on purpose (the arm64 build is a classic static executable).
topdown-bpf: statically-linked-binary [usr/bin/topdown-bpf]
";

/// A `/etc/passwd` and `/etc/group` for the image: `--user nobody` is looked up there.
const PASSWD: &str =
    "root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnogroup:x:65534:\n";

/// Builds the artefacts for `arches` into `target/dist` (emptied first); returns their paths.
pub fn dist(root: &Path, arches: &[Arch]) -> Result<Vec<PathBuf>> {
    let out = root.join("target/dist");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).context("creating target/dist")?;
    // Man pages and completions are text: made once, by the binary this host runs, as
    // `cargo xtask install` lays them out under a prefix.
    let host = build::user(root, build::Profile::Release, Arch::X86_64)?;
    let dist = Dist {
        root,
        stage: out.join(".stage"),
        docs: out.join(".stage/docs"),
        epoch: source_date_epoch(root),
        out,
    };
    install::write_docs(&host, &dist.docs)?;
    let mut written = Vec::new();
    let mut images = Vec::new();
    for &arch in arches {
        let binary = stripped(
            &build::user(root, build::Profile::Release, arch)?,
            arch,
            &dist.stage,
        )?;
        let file = Command::new("file")
            .arg(&binary)
            .output()
            .context("running file")?;
        let said = String::from_utf8_lossy(&file.stdout);
        if !said.contains("statically linked") && !said.contains("static-pie linked") {
            bail!("{} is not statically linked: {said}", binary.display());
        }
        written.push(dist.tarball(arch, &binary)?);
        written.push(dist.deb(arch, &binary)?);
        images.push((arch, dist.image_layer(arch, &binary)?));
    }
    written.push(dist.oci_layout(&images)?);
    let _ = fs::remove_dir_all(&dist.stage);
    Ok(written)
}

/// Where one `dist` reads and writes.
struct Dist<'a> {
    /// The workspace.
    root: &'a Path,
    /// `target/dist`, the artefacts.
    out: PathBuf,
    /// Scratch trees, removed at the end.
    stage: PathBuf,
    /// The man pages and completions, as a prefix tree (`share/...`).
    docs: PathBuf,
    /// Every archive's timestamps.
    epoch: u64,
}

/// A copy of `binary` without its symbols and debug sections (what packages ship).
fn stripped(binary: &Path, arch: Arch, stage: &Path) -> Result<PathBuf> {
    let to = stage.join(format!("topdown-bpf-{}", arch.debian()));
    fs::create_dir_all(stage)?;
    let strip = match arch {
        Arch::X86_64 => "strip",
        Arch::Aarch64 => "aarch64-linux-gnu-strip",
    };
    let status = Command::new(strip)
        .arg("--strip-all")
        .arg("-o")
        .arg(&to)
        .arg(binary)
        .status()
        .with_context(|| format!("running {strip}"))?;
    check(status, &format!("stripping {}", binary.display()))?;
    Ok(to)
}

/// `SOURCE_DATE_EPOCH`, or the last commit's time, or 0.
fn source_date_epoch(root: &Path) -> u64 {
    if let Some(epoch) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|e| e.parse().ok())
    {
        return epoch;
    }
    Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root)
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
}

/// The man pages in the docs tree, by name.
fn man_pages(docs: &Path) -> Result<Vec<PathBuf>> {
    let mut pages: Vec<PathBuf> = fs::read_dir(docs.join("share/man/man1"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    pages.sort();
    Ok(pages)
}

/// `tar` of `dir`'s entries `names` (relative), reproducible, into `archive` (gzip-compressed
/// when `gzip`).
fn tar(dir: &Path, names: &[&str], archive: &Path, epoch: u64, gzip: bool) -> Result<()> {
    let mut command = Command::new("tar");
    command
        .current_dir(dir)
        .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner"])
        .arg(format!("--mtime=@{epoch}"))
        .args(["--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"]);
    if gzip {
        command.args(["-I", "gzip -9n"]);
    }
    let status = command
        .arg("-cf")
        .arg(archive)
        .args(names)
        .status()
        .context("running tar")?;
    check(status, &format!("writing {}", archive.display()))
}

impl Dist<'_> {
    /// The tarball: a prefix tree (`bin/`, `share/man`, the completions where `cargo xtask
    /// install` puts them) with the unit, the example web config, licences and a README.
    fn tarball(&self, arch: Arch, binary: &Path) -> Result<PathBuf> {
        let name = format!("topdown-bpf-{VERSION}-{}", arch.debian());
        let tree = self.stage.join(&name);
        copy(binary, &tree.join("bin/topdown-bpf"), 0o755)?;
        for file in files_under(&self.docs)? {
            copy(&file, &tree.join(file.strip_prefix(&self.docs)?), 0o644)?;
        }
        for file in ["LICENSE-MIT", "LICENSE-APACHE", "CHANGELOG.md"] {
            copy(&self.root.join(file), &tree.join(file), 0o644)?;
        }
        copy(
            &self.root.join("deploy/web-config.yml"),
            &tree.join("web-config.yml"),
            0o644,
        )?;
        write(&tree.join("topdown-bpf.service"), UNIT.as_bytes(), 0o644)?;
        write(&tree.join("README"), tarball_readme(arch).as_bytes(), 0o644)?;
        let archive = self.out.join(format!("{name}.tar.gz"));
        tar(&self.stage, &[&name], &archive, self.epoch, true)?;
        Ok(archive)
    }
    /// The .deb: Debian's places (man pages compressed; zsh's completion where Debian's zsh
    /// looks for packages' ones), the web config a conffile.
    fn deb(&self, arch: Arch, binary: &Path) -> Result<PathBuf> {
        let (root, epoch) = (self.root, self.epoch);
        let stage = self.stage.join(format!("deb-{}", arch.debian()));
        copy(binary, &stage.join("usr/bin/topdown-bpf"), 0o755)?;
        for page in man_pages(&self.docs)? {
            let name = format!("{}.gz", page.file_name().unwrap().to_string_lossy());
            gzip(&page, &stage.join("usr/share/man/man1").join(name))?;
        }
        for (_, place) in install::COMPLETIONS {
            let debian = place.replace("zsh/site-functions", "zsh/vendor-completions");
            copy(
                &self.docs.join(place),
                &stage.join("usr").join(debian),
                0o644,
            )?;
        }
        write(
            &stage.join("lib/systemd/system/topdown-bpf.service"),
            UNIT.as_bytes(),
            0o644,
        )?;
        copy(
            &root.join("deploy/web-config.yml"),
            &stage.join("etc/topdown-bpf/web-config.yml"),
            0o644,
        )?;
        write(
            &stage.join("usr/share/lintian/overrides/topdown-bpf"),
            LINTIAN_OVERRIDES.as_bytes(),
            0o644,
        )?;
        let doc = stage.join("usr/share/doc/topdown-bpf");
        write(&doc.join("copyright"), copyright(root)?.as_bytes(), 0o644)?;
        let changelog = self.stage.join("changelog");
        fs::write(&changelog, debian_changelog(epoch))?;
        gzip(&changelog, &doc.join("changelog.gz"))?;
        // Control: what the package is, its conffile and every file's md5.
        let installed_kib = du_kib(&stage)?;
        let control = format!(
            "Package: topdown-bpf\nVersion: {VERSION}\nArchitecture: {}\nMaintainer: {MAINTAINER}\n\
         Installed-Size: {installed_kib}\nSection: admin\nPriority: optional\n\
         Homepage: https://github.com/topdown-bpf/topdown-bpf\n\
         Description: TopDown and CPU time per thread and per cgroup, by BPF\n \
         topdown-bpf reads the TopDown (TMA) counters at every context switch in\n \
         a BPF program and charges them to each thread and its cgroup: a live\n \
         view, recordings, c2c false-sharing reports and a Prometheus exporter\n \
         (topdown-bpf.service). The binary is static; it needs Linux 5.10 or\n \
         newer with BTF.\n",
            arch.debian()
        );
        write(&stage.join("DEBIAN/control"), control.as_bytes(), 0o644)?;
        write(
            &stage.join("DEBIAN/conffiles"),
            b"/etc/topdown-bpf/web-config.yml\n",
            0o644,
        )?;
        let mut sums = String::new();
        for file in files_under(&stage)? {
            let relative = file.strip_prefix(&stage).unwrap();
            if relative.starts_with("DEBIAN") {
                continue;
            }
            let digest = md5(&file)?;
            sums.push_str(&format!("{digest}  {}\n", relative.display()));
        }
        write(&stage.join("DEBIAN/md5sums"), sums.as_bytes(), 0o644)?;
        let package = self
            .out
            .join(format!("topdown-bpf_{VERSION}_{}.deb", arch.debian()));
        let status = Command::new("dpkg-deb")
            .env("SOURCE_DATE_EPOCH", epoch.to_string())
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&package)
            .status()
            .context("running dpkg-deb")?;
        check(status, "building the .deb")?;
        Ok(package)
    }
}

/// The package's `copyright` in Debian's machine-readable format.
fn copyright(root: &Path) -> Result<String> {
    let mit = fs::read_to_string(root.join("LICENSE-MIT"))?;
    let indented: String = mit
        .lines()
        .map(|l| {
            if l.is_empty() {
                " .\n".to_owned()
            } else {
                format!(" {l}\n")
            }
        })
        .collect();
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: topdown-bpf\n\
         Source: https://github.com/topdown-bpf/topdown-bpf\n\n\
         Files: *\nCopyright: 2026 topdown-bpf developers\nLicense: MIT or Apache-2.0\n\n\
         License: MIT\n{indented}\n\
         License: Apache-2.0\n On Debian systems, the full text of the Apache License 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n"
    ))
}

/// `epoch` in UTC as `date FORMAT` writes it (`-R`: RFC 5322, as Debian's changelog wants).
fn date_of(epoch: u64, format: &str) -> String {
    Command::new("date")
        .args(["-u", format, "-d"])
        .arg(format!("@{epoch}"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// A native package's changelog, in Debian's format.
fn debian_changelog(epoch: u64) -> String {
    let date = date_of(epoch, "-R");
    format!(
        "topdown-bpf ({VERSION}) unstable; urgency=medium\n\n  * Release {VERSION}: see \
         CHANGELOG.md in the source.\n\n -- {MAINTAINER}  {date}\n"
    )
}

fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

fn du_kib(dir: &Path) -> Result<u64> {
    let mut bytes = 0;
    for file in files_under(dir)? {
        bytes += fs::metadata(&file)?.len().div_ceil(1024) * 1024;
    }
    Ok(bytes / 1024)
}

fn md5(file: &Path) -> Result<String> {
    let output = Command::new("md5sum")
        .arg(file)
        .output()
        .context("running md5sum")?;
    check(output.status, "md5sum")?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// A blob of the image layout: its digest and size.
struct Blob {
    digest: String,
    size: u64,
}

/// Writes `bytes` under `blobs/sha256/` of the layout at `layout`.
fn put_blob(layout: &Path, bytes: &[u8]) -> Result<Blob> {
    let hex = format!("{:x}", Sha256::digest(bytes));
    write(&layout.join("blobs/sha256").join(&hex), bytes, 0o644)?;
    Ok(Blob {
        digest: format!("sha256:{hex}"),
        size: bytes.len() as u64,
    })
}

impl Dist<'_> {
    /// One architecture's layer, as a tar (uncompressed: its digest is the config's diff id).
    fn image_layer(&self, arch: Arch, binary: &Path) -> Result<PathBuf> {
        let epoch = self.epoch;
        let stage = self.stage.join(format!("image-{}", arch.debian()));
        copy(binary, &stage.join("usr/bin/topdown-bpf"), 0o755)?;
        write(&stage.join("etc/passwd"), PASSWD.as_bytes(), 0o644)?;
        write(&stage.join("etc/group"), GROUP.as_bytes(), 0o644)?;
        let layer = self.stage.join(format!("layer-{}.tar", arch.debian()));
        tar(&stage, &["etc", "usr"], &layer, epoch, false)?;
        Ok(layer)
    }

    /// The OCI image layout: `index.json` names one image index (named `topdown-bpf:VERSION`)
    /// whose manifests are the architectures' images.
    fn oci_layout(&self, images: &[(Arch, PathBuf)]) -> Result<PathBuf> {
        let (out, epoch) = (&self.out, self.epoch);
        let layout = self.stage.join("oci");
        fs::create_dir_all(&layout)?;
        write(
            &layout.join("oci-layout"),
            br#"{"imageLayoutVersion":"1.0.0"}"#,
            0o644,
        )?;
        let created = date_of(epoch, "+%Y-%m-%dT%H:%M:%SZ");
        let mut manifests = Vec::new();
        for (arch, layer) in images {
            let tar = fs::read(layer)?;
            let diff_id = format!("sha256:{:x}", Sha256::digest(&tar));
            let gzipped = {
                let output = Command::new("gzip")
                    .args(["-9n", "-c"])
                    .arg(layer)
                    .output()
                    .context("running gzip")?;
                check(output.status, "gzip")?;
                output.stdout
            };
            let layer_blob = put_blob(&layout, &gzipped)?;
            let config = json!({
                "created": created,
                "architecture": arch.debian(),
                "os": "linux",
                "config": {
                    "Entrypoint": ["/usr/bin/topdown-bpf"],
                    "Cmd": ["serve", "--listen", "0.0.0.0:9464"],
                    "Labels": {
                        "org.opencontainers.image.title": "topdown-bpf",
                        "org.opencontainers.image.version": VERSION,
                    },
                },
                "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                "history": [{"created": created, "created_by": "cargo xtask dist"}],
            });
            let config_blob = put_blob(&layout, &serde_json::to_vec(&config)?)?;
            let manifest = json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_blob.digest,
                    "size": config_blob.size,
                },
                "layers": [{
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_blob.digest,
                    "size": layer_blob.size,
                }],
            });
            let manifest_blob = put_blob(&layout, &serde_json::to_vec(&manifest)?)?;
            manifests.push(json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_blob.digest,
                "size": manifest_blob.size,
                "platform": {"architecture": arch.debian(), "os": "linux"},
            }));
        }
        let index = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests,
        });
        let index_blob = put_blob(&layout, &serde_json::to_vec(&index)?)?;
        let top: Value = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "digest": index_blob.digest,
                "size": index_blob.size,
                "annotations": {"org.opencontainers.image.ref.name": format!("topdown-bpf:{VERSION}")},
            }],
        });
        let mut file = fs::File::create(layout.join("index.json"))?;
        file.write_all(&serde_json::to_vec(&top)?)?;
        drop(file);
        let archive = out.join(format!("topdown-bpf-{VERSION}-oci.tar"));
        tar(
            &layout,
            &["blobs", "index.json", "oci-layout"],
            &archive,
            epoch,
            false,
        )?;
        Ok(archive)
    }
}

/// gzip -9n of `from` into `to`.
fn gzip(from: &Path, to: &Path) -> Result<()> {
    let output = Command::new("gzip")
        .args(["-9n", "-c"])
        .arg(from)
        .output()
        .context("running gzip")?;
    check(output.status, "gzip")?;
    write(to, &output.stdout, 0o644)
}
