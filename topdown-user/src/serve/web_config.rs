//! `serve --web-config FILE`: TLS and basic authentication for the scrape endpoint, in the file
//! format of Prometheus' exporter-toolkit (`--web.config.file`), so one file serves every
//! exporter of a fleet. Supported: `tls_server_config` (`cert_file`, `key_file`,
//! `client_auth_type`, `client_ca_file`) and `basic_auth_users` (bcrypt hashes). Anything else
//! is refused at start, with what is supported: a setting silently ignored is a hole.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use rustls::{
    RootCertStore, ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::WebPkiClientVerifier,
};
use serde::Deserialize;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

/// `tls_server_config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
}

/// What the endpoint enforces.
#[derive(Clone, Default)]
pub struct WebConfig {
    /// TLS, when configured.
    pub tls: Option<Arc<ServerConfig>>,
    /// Basic authentication, when users are configured.
    pub auth: Option<Arc<BasicAuth>>,
}

/// Users and their bcrypt hashes.
#[derive(Debug)]
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    /// A hash checked for unknown users, at the users' cost, so that an unknown name and a
    /// wrong password take the same time.
    no_user: String,
}

impl BasicAuth {
    fn new(users: BTreeMap<String, String>) -> Result<Self> {
        let cost = users
            .values()
            .filter_map(|hash| hash.get(4..6)?.parse().ok())
            .max()
            .unwrap_or(bcrypt::DEFAULT_COST);
        let no_user = bcrypt::hash("no such user", cost).context("a bcrypt hash")?;
        Ok(Self { users, no_user })
    }
}

impl BasicAuth {
    /// Whether `header` (an `Authorization` value) names a user with the right password.
    /// Slow on purpose (bcrypt): call it off the runtime's thread.
    pub fn allows(&self, header: Option<&str>) -> bool {
        let Some((user, password)) = header.and_then(credentials) else {
            return false;
        };
        match self.users.get(&user) {
            Some(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            None => {
                let _ = bcrypt::verify(password, &self.no_user);
                false
            }
        }
    }
}

/// `Basic base64(user:password)` as user and password.
fn credentials(header: &str) -> Option<(String, String)> {
    let encoded = header
        .strip_prefix("Basic ")
        .or_else(|| header.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Reads and checks `path`; file names in it are relative to its folder, as exporter-toolkit
/// reads them. Every problem is one line naming the setting.
pub fn load(path: &Path) -> Result<WebConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --web-config {}", path.display()))?;
    let file: File = if text.trim().is_empty() {
        File::default()
    } else {
        serde_yaml_ng::from_str(&text).map_err(|error| {
            anyhow::anyhow!(
                "--web-config {}: {} (supported: tls_server_config with cert_file, key_file, \
                 client_auth_type, client_ca_file; basic_auth_users)",
                path.display(),
                one_line(&error.to_string())
            )
        })?
    };
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    let tls = file
        .tls_server_config
        .map(|tls| tls_config(&tls, base, path))
        .transpose()?;
    let auth = match file.basic_auth_users {
        Some(users) if !users.is_empty() => {
            for (user, hash) in &users {
                if user.contains(':') {
                    bail!(
                        "--web-config {}: user `{user}`: a name cannot hold `:`",
                        path.display()
                    );
                }
                if !is_bcrypt(hash) {
                    bail!(
                        "--web-config {}: user `{user}`: the password must be a bcrypt hash \
                         ($2y$..., e.g. from `htpasswd -nbBC 10 '' PASSWORD | tr -d ':\\n'`)",
                        path.display()
                    );
                }
            }
            Some(Arc::new(BasicAuth::new(users)?))
        }
        _ => None,
    };
    Ok(WebConfig { tls, auth })
}

/// `$2a$`, `$2b$` or `$2y$`, a two-digit cost, and 53 characters of salt and hash.
fn is_bcrypt(hash: &str) -> bool {
    let bytes = hash.as_bytes();
    hash.len() == 60
        && (hash.starts_with("$2a$") || hash.starts_with("$2b$") || hash.starts_with("$2y$"))
        && bytes[4].is_ascii_digit()
        && bytes[5].is_ascii_digit()
        && bytes[6] == b'$'
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn tls_config(tls: &TlsFile, base: &Path, path: &Path) -> Result<Arc<ServerConfig>> {
    let shown = path.display();
    let (Some(cert_file), Some(key_file)) = (&tls.cert_file, &tls.key_file) else {
        bail!("--web-config {shown}: tls_server_config needs both cert_file and key_file");
    };
    let cert_path = base.join(cert_file);
    let key_path = base.join(key_file);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(Iterator::collect)
        .map_err(|e| anyhow::anyhow!("--web-config {shown}: cert_file {cert_file}: {e}"))?;
    if certs.is_empty() {
        bail!("--web-config {shown}: cert_file {cert_file} holds no PEM certificate");
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| anyhow::anyhow!("--web-config {shown}: key_file {key_file}: {e}"))?;
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let kind = tls.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let builder = match (kind, &tls.client_ca_file) {
        ("NoClientCert", None) => builder.with_no_client_auth(),
        ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", Some(ca_file)) => {
            let mut roots = RootCertStore::empty();
            let cas = CertificateDer::pem_file_iter(base.join(ca_file))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(|e| {
                    anyhow::anyhow!("--web-config {shown}: client_ca_file {ca_file}: {e}")
                })?;
            for ca in cas {
                roots.add(ca).map_err(|e| {
                    anyhow::anyhow!("--web-config {shown}: client_ca_file {ca_file}: {e}")
                })?;
            }
            if roots.is_empty() {
                bail!("--web-config {shown}: client_ca_file {ca_file} holds no certificate");
            }
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if kind == "VerifyClientCertIfGiven" {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| anyhow::anyhow!("--web-config {shown}: client_ca_file: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        ("NoClientCert", Some(_)) => bail!(
            "--web-config {shown}: client_ca_file is set but client_auth_type is NoClientCert: \
             set client_auth_type RequireAndVerifyClientCert (or VerifyClientCertIfGiven)"
        ),
        ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", None) => {
            bail!("--web-config {shown}: client_auth_type {kind} needs client_ca_file")
        }
        (other, _) => bail!(
            "--web-config {shown}: client_auth_type {other} is not supported: use \
             NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        ),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| anyhow::anyhow!("--web-config {shown}: cert_file and key_file: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_read_from_the_basic_header() {
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("prom:s3:cret")
        );
        assert_eq!(
            credentials(&header),
            Some(("prom".to_owned(), "s3:cret".to_owned()))
        );
        assert_eq!(credentials("Bearer abc"), None);
        assert_eq!(credentials("Basic !!!"), None);
    }

    #[test]
    fn a_wrong_password_and_an_unknown_user_are_both_refused() {
        let hash = bcrypt::hash("right", 4).unwrap();
        let auth = BasicAuth::new(BTreeMap::from([("prom".to_owned(), hash)])).unwrap();
        let header = |user: &str, password: &str| {
            let pair = format!("{user}:{password}");
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        };
        assert!(auth.allows(Some(&header("prom", "right"))));
        assert!(!auth.allows(Some(&header("prom", "wrong"))));
        assert!(!auth.allows(Some(&header("nobody", "right"))));
        assert!(!auth.allows(None));
        assert!(is_bcrypt(&auth.no_user), "{}", auth.no_user);
        assert_eq!(&auth.no_user[..7], "$2b$04$", "at the users' cost");
    }

    #[test]
    fn bad_files_are_one_line_errors_naming_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                "tls_server_config:\n  cert_file: a.crt\n",
                "needs both cert_file and key_file",
            ),
            (
                "basic_auth_users:\n  prom: plaintext\n",
                "must be a bcrypt hash",
            ),
            (
                "http_server_config:\n  http2: false\n",
                "unknown field `http_server_config`",
            ),
            (
                "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n",
                "cert_file a.crt",
            ),
            ("tls_server_config: [\n", "supported:"),
        ];
        for (text, expected) in cases {
            let path = dir.path().join("web.yml");
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", load(&path).err().expect(text));
            assert!(error.contains(expected), "{text:?}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
        let empty = dir.path().join("empty.yml");
        std::fs::write(&empty, "").unwrap();
        let config = load(&empty).unwrap();
        assert!(config.tls.is_none() && config.auth.is_none());
    }
}
