//! `serve --web-config FILE`: TLS and basic authentication for the scrape endpoint, in the file
//! format of Prometheus' exporter-toolkit (`--web.config.file`), so one file serves every
//! exporter of a fleet. Supported: `tls_server_config` (`cert_file`, `key_file`,
//! `client_auth_type`, `client_ca_file`) and `basic_auth_users` (bcrypt hashes). Anything else
//! is refused at start, with what is supported: a setting silently ignored is a hole.
//!
//! It fails closed: a file that authenticates nobody (no users, no required client
//! certificate) is refused, and so is one without TLS unless the endpoint listens on loopback;
//! a bcrypt cost above [`MAX_BCRYPT_COST`] is refused (a check would take seconds); a file or
//! key that group or others can read is said. Credentials that passed bcrypt once are
//! remembered (as a salted SHA-256, as exporter-toolkit caches them), so a scrape pays bcrypt
//! once; the bcrypt work for the others is bounded ([`BcryptBudget`]).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::{IpAddr, SocketAddr},
    os::unix::fs::PermissionsExt as _,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

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
    #[serde(default, deserialize_with = "unique_users")]
    basic_auth_users: Option<BTreeMap<String, String>>,
}

/// `basic_auth_users`, refusing a user named twice (YAML takes the last one silently).
fn unique_users<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Users;
    impl<'de> serde::de::Visitor<'de> for Users {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("users and their bcrypt hashes")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut users = BTreeMap::new();
            while let Some((user, hash)) = map.next_entry::<String, String>()? {
                if users.contains_key(&user) {
                    return Err(serde::de::Error::custom(format!(
                        "basic_auth_users: user `{user}` is named twice (a duplicate)"
                    )));
                }
                users.insert(user, hash);
            }
            Ok(users)
        }
    }
    deserializer.deserialize_any(Users).map(Some)
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

/// Highest bcrypt cost a user's hash may have: each step doubles a check's work (cost 10 took
/// 51 ms of a core on these machines, so 14 takes about 0.8 s); above it a single wrong
/// password would hold a core for seconds, and 31 makes even the start spin for days.
pub const MAX_BCRYPT_COST: u32 = 14;

/// Credentials that passed bcrypt are remembered, at most this many (then forgotten at once);
/// so are those it refused.
const CACHED_CREDENTIALS: usize = 256;

/// Users and their bcrypt hashes.
#[derive(Debug)]
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    /// A hash checked for unknown users, at the users' cost, so that an unknown name and a
    /// wrong password take the same time.
    no_user: String,
    /// Salted SHA-256 of `user:password:hash` for credentials bcrypt accepted.
    passed: Mutex<HashSet<[u8; 32]>>,
    /// The same digests of credentials bcrypt refused: the users are read once, so a wrong
    /// password stays wrong and a flood that repeats one costs a single bcrypt check.
    refused: Mutex<HashSet<[u8; 32]>>,
    /// A random salt for those digests (never stored anywhere).
    salt: [u8; 32],
    /// The bcrypt work the endpoint may spend.
    budget: BcryptBudget,
    /// Failures, by address: when each credential (its digest) last failed from there, for
    /// [`FAILURE_PENALTY`]. A credential that failed is not checked again from that address
    /// until then; one that never failed is, unless the address failed with
    /// [`GUESSES_PER_PENALTY`] different ones within the penalty (guessing: the whole address
    /// waits). So a flood of one wrong password costs one bcrypt check a second and never
    /// holds back the right one sent from the same address (a NAT, a node-local proxy, a
    /// Kubernetes Service give an attacker and Prometheus one address).
    failed: Mutex<Failures>,
}

/// Credentials (their digests) that failed, by address, and when.
type Failures = HashMap<IpAddr, Vec<([u8; 32], Instant)>>;

/// After a failed check, that credential is not checked again from that address for this long.
pub const FAILURE_PENALTY: Duration = Duration::from_secs(1);

/// Different failing credentials from one address within [`FAILURE_PENALTY`] that make the
/// whole address wait the penalty: password guessing, which one credential's penalty would not
/// slow.
pub const GUESSES_PER_PENALTY: usize = 3;

/// Addresses whose failures are remembered, at most (then forgotten at once).
const REMEMBERED_FAILURES: usize = 4096;

/// What checking credentials decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The right user and password.
    Allowed,
    /// Missing or wrong credentials.
    Refused,
    /// Not checked: the bcrypt budget is spent (answer 429, try again later).
    Busy,
    /// Not checked: these credentials failed from this address within [`FAILURE_PENALTY`] (or
    /// it guessed [`GUESSES_PER_PENALTY`] different ones); the answer (429) waits for the rest
    /// of the penalty, so a flood gets at most one answer per penalty per connection it holds.
    Penalized(Duration),
}

impl BasicAuth {
    fn new(users: BTreeMap<String, String>) -> Result<Self> {
        let cost = users
            .values()
            .filter_map(|hash| hash.get(4..6)?.parse().ok())
            .max()
            .unwrap_or(bcrypt::DEFAULT_COST);
        let no_user = bcrypt::hash("no such user", cost).context("a bcrypt hash")?;
        let mut salt = [0u8; 32];
        ::ring::rand::SecureRandom::fill(&::ring::rand::SystemRandom::new(), &mut salt)
            .map_err(|_| anyhow::anyhow!("no random bytes for the credential cache"))?;
        Ok(Self {
            users,
            no_user,
            passed: Mutex::new(HashSet::new()),
            refused: Mutex::new(HashSet::new()),
            salt,
            budget: BcryptBudget::new(BCRYPT_SHARE),
            failed: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `header` (an `Authorization` value), sent from `peer`, names a user with the
    /// right password: at once for credentials that passed before, else with bcrypt (slow on
    /// purpose: call it off the runtime's thread) when the budget allows and `peer` has not
    /// failed within [`FAILURE_PENALTY`].
    pub fn check(&self, header: Option<&str>, peer: IpAddr) -> Verdict {
        let Some((user, password)) = header.and_then(credentials) else {
            return Verdict::Refused;
        };
        let hash = self.users.get(&user).unwrap_or(&self.no_user);
        let digest = self.digest(&user, &password, hash);
        if holds(&self.passed, &digest) {
            return Verdict::Allowed;
        }
        if let Some(left) = self.penalty(peer, &digest) {
            return Verdict::Penalized(left);
        }
        if holds(&self.refused, &digest) {
            self.failed_from(peer, digest);
            return Verdict::Refused;
        }
        let Some(_turn) = self.budget.start() else {
            return Verdict::Busy;
        };
        // Checked while this one waited for its turn (the same credentials sent at once).
        if holds(&self.passed, &digest) {
            return Verdict::Allowed;
        }
        if holds(&self.refused, &digest) {
            self.failed_from(peer, digest);
            return Verdict::Refused;
        }
        let right = bcrypt::verify(&password, hash).unwrap_or(false);
        if !right || !self.users.contains_key(&user) {
            remember(&self.refused, digest);
            self.failed_from(peer, digest);
            return Verdict::Refused;
        }
        remember(&self.passed, digest);
        Verdict::Allowed
    }

    /// Notes that credentials `digest` failed from `peer` now.
    fn failed_from(&self, peer: IpAddr, digest: [u8; 32]) {
        if let Ok(mut failed) = self.failed.lock() {
            if failed.len() >= REMEMBERED_FAILURES {
                failed.clear();
            }
            let recent = failed.entry(peer).or_default();
            recent.retain(|(seen, at)| *seen != digest && at.elapsed() < FAILURE_PENALTY);
            recent.push((digest, Instant::now()));
        }
    }

    /// What is left of the penalty on credentials `digest` from `peer`, if any: theirs when
    /// they failed from there within [`FAILURE_PENALTY`], or the address's when it failed with
    /// [`GUESSES_PER_PENALTY`] different credentials within it.
    fn penalty(&self, peer: IpAddr, digest: &[u8; 32]) -> Option<Duration> {
        let failed = self.failed.lock().ok()?;
        let left = |at: &Instant| {
            FAILURE_PENALTY
                .checked_sub(at.elapsed())
                .filter(|left| !left.is_zero())
        };
        let recent: Vec<(&[u8; 32], Duration)> = failed
            .get(&peer)?
            .iter()
            .filter_map(|(seen, at)| Some((seen, left(at)?)))
            .collect();
        if let Some(&(_, wait)) = recent.iter().find(|(seen, _)| *seen == digest) {
            return Some(wait);
        }
        if recent.len() >= GUESSES_PER_PENALTY {
            return recent.iter().map(|&(_, wait)| wait).min();
        }
        None
    }

    fn digest(&self, user: &str, password: &str, hash: &str) -> [u8; 32] {
        let mut context = ::ring::digest::Context::new(&::ring::digest::SHA256);
        for part in [
            &self.salt[..],
            user.as_bytes(),
            b":",
            password.as_bytes(),
            b":",
        ] {
            context.update(part);
        }
        context.update(hash.as_bytes());
        let mut digest = [0u8; 32];
        digest.copy_from_slice(context.finish().as_ref());
        digest
    }
}

/// Whether `set` holds `digest`.
fn holds(set: &Mutex<HashSet<[u8; 32]>>, digest: &[u8; 32]) -> bool {
    set.lock().is_ok_and(|set| set.contains(digest))
}

/// Adds `digest` to `set`, which holds at most [`CACHED_CREDENTIALS`] (then forgets them all).
fn remember(set: &Mutex<HashSet<[u8; 32]>>, digest: [u8; 32]) {
    if let Ok(mut set) = set.lock() {
        if set.len() >= CACHED_CREDENTIALS {
            set.clear();
        }
        set.insert(digest);
    }
}

/// Share of one core that bcrypt checks may take, averaged over [`BUDGET_WINDOW`].
const BCRYPT_SHARE: f64 = 0.25;
/// The window the share is kept over: a burst may spend that share of it at once.
const BUDGET_WINDOW: Duration = Duration::from_secs(2);

/// The bcrypt work allowed: one check at a time (one core at most), and over any
/// [`BUDGET_WINDOW`] at most `share` of one core (a token bucket of CPU time, refilled at
/// `share` seconds per second; a check starts only while the bucket is not empty and is
/// charged what it took).
#[derive(Debug)]
pub struct BcryptBudget {
    share: f64,
    state: Mutex<Bucket>,
    /// Signalled when a check ends.
    ended: std::sync::Condvar,
}

/// How long a check waits for the one running to end.
const TURN_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug)]
struct Bucket {
    /// CPU time that may still be spent, in seconds (negative after an expensive check).
    left: f64,
    at: Instant,
    busy: bool,
}

/// A check in progress: charges its time to the budget when dropped.
pub struct Turn<'a> {
    budget: &'a BcryptBudget,
    started: Instant,
}

impl BcryptBudget {
    fn new(share: f64) -> Self {
        Self {
            share,
            state: Mutex::new(Bucket {
                left: share * BUDGET_WINDOW.as_secs_f64(),
                at: Instant::now(),
                busy: false,
            }),
            ended: std::sync::Condvar::new(),
        }
    }

    /// A turn to run one check (after the one running, waiting at most [`TURN_WAIT`]), or
    /// `None` when the budget is spent or the wait ran out.
    fn start(&self) -> Option<Turn<'_>> {
        let bucket = self.state.lock().ok()?;
        let (mut bucket, _) = self
            .ended
            .wait_timeout_while(bucket, TURN_WAIT, |bucket| bucket.busy)
            .ok()?;
        let now = Instant::now();
        let full = self.share * BUDGET_WINDOW.as_secs_f64();
        bucket.left = (bucket.left + self.share * (now - bucket.at).as_secs_f64()).min(full);
        bucket.at = now;
        if bucket.busy || bucket.left <= 0.0 {
            return None;
        }
        bucket.busy = true;
        Some(Turn {
            budget: self,
            started: now,
        })
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Ok(mut bucket) = self.budget.state.lock() {
            bucket.left -= self.started.elapsed().as_secs_f64();
            bucket.busy = false;
        }
        self.budget.ended.notify_one();
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

/// Reads and checks `path` for an endpoint on `listen`; file names in it are relative to its
/// folder, as exporter-toolkit reads them. Every problem is one line naming the setting.
pub fn load(path: &Path, listen: SocketAddr) -> Result<WebConfig> {
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
    let shown = path.display();
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    let client_certificates = file
        .tls_server_config
        .as_ref()
        .is_some_and(|tls| tls.client_auth_type.as_deref() == Some("RequireAndVerifyClientCert"));
    let tls = file
        .tls_server_config
        .as_ref()
        .map(|tls| tls_config(tls, base, path))
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
                let cost: u32 = hash[4..6].parse().unwrap_or(u32::MAX);
                if !(4..=MAX_BCRYPT_COST).contains(&cost) {
                    bail!(
                        "--web-config {shown}: user `{user}`: bcrypt cost {cost} is out of 4 to \
                         {MAX_BCRYPT_COST} (each step doubles every check's work: cost 10 takes \
                         about 50 ms); hash it again, e.g. `htpasswd -nbBC 10 '' PASSWORD`"
                    );
                }
            }
            Some(Arc::new(BasicAuth::new(users)?))
        }
        _ => None,
    };
    if auth.is_none() && !client_certificates {
        bail!(
            "--web-config {shown} authenticates nobody (no basic_auth_users, and client \
             certificates are not required): the endpoint would be open to anyone who reaches \
             it; add basic_auth_users (bcrypt hashes) or client_auth_type: \
             RequireAndVerifyClientCert"
        );
    }
    if tls.is_none() {
        if !listen.ip().is_loopback() {
            bail!(
                "--web-config {shown} has no tls_server_config: passwords would cross the \
                 network in clear to {listen}; add tls_server_config (cert_file, key_file), or \
                 listen on loopback"
            );
        }
        log::warn!(
            "--web-config {shown}: basic authentication without TLS: passwords cross loopback \
             in clear"
        );
    }
    check_mode(path, "the file")?;
    if let Some(key) = file
        .tls_server_config
        .as_ref()
        .and_then(|t| t.key_file.as_ref())
    {
        check_mode(&base.join(key), "its key_file")?;
    }
    Ok(WebConfig { tls, auth })
}

/// Refuses `path` when its group or others can write it (they could add a password or swap
/// the key, as sshd's StrictModes refuses); says (a warning) when they can read it.
fn check_mode(path: &Path, what: &str) -> Result<()> {
    let Ok(metadata) = std::fs::metadata(path) else {
        return Ok(());
    };
    let mode = metadata.permissions().mode();
    if mode & 0o022 != 0 {
        bail!(
            "--web-config: {what} {} can be written by group or others (mode {:o}): anyone who \
             can write it can add a password or replace the key; `chmod 600` it",
            path.display(),
            mode & 0o777
        );
    }
    if mode & 0o044 != 0 {
        log::warn!(
            "--web-config: {what} {} can be read by group or others (mode {:o}): `chmod 600` it",
            path.display(),
            mode & 0o777
        );
    }
    Ok(())
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
    use crate::collect::canary::thread_cputime;

    /// `users` with a budget no test run exhausts: the budget counts wall time, which a
    /// loaded machine stretches (a debug build's cost-4 bcrypt takes tens of milliseconds), and
    /// these tests are about the verdicts (the budget has its own test).
    fn without_budget(users: BTreeMap<String, String>) -> BasicAuth {
        let mut auth = BasicAuth::new(users).unwrap();
        auth.budget = BcryptBudget::new(1e6);
        auth
    }

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
        let auth = without_budget(BTreeMap::from([("prom".to_owned(), hash)]));
        let header = |user: &str, password: &str| {
            let pair = format!("{user}:{password}");
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        };
        let peer = |n: u8| IpAddr::from([10, 0, 0, n]);
        assert_eq!(
            auth.check(Some(&header("prom", "right")), peer(1)),
            Verdict::Allowed
        );
        assert_eq!(
            auth.check(Some(&header("prom", "wrong")), peer(2)),
            Verdict::Refused
        );
        assert_eq!(
            auth.check(Some(&header("nobody", "right")), peer(3)),
            Verdict::Refused
        );
        assert_eq!(auth.check(None, peer(4)), Verdict::Refused);
        // A credential that failed waits its penalty from that address; from others it does
        // not, nor does another credential from the same address: the right one is checked.
        assert!(matches!(
            auth.check(Some(&header("prom", "wrong")), peer(2)),
            Verdict::Penalized(left) if left <= FAILURE_PENALTY
        ));
        assert_eq!(
            auth.check(Some(&header("prom", "wrong")), peer(5)),
            Verdict::Refused
        );
        assert_eq!(
            auth.check(Some(&header("prom", "right")), peer(2)),
            Verdict::Allowed
        );
        // Guessing: different wrong passwords from one address make the address wait.
        for guess in 1..GUESSES_PER_PENALTY {
            assert_eq!(
                auth.check(Some(&header("prom", &format!("guess{guess}"))), peer(2)),
                Verdict::Refused
            );
        }
        assert!(matches!(
            auth.check(Some(&header("prom", "another")), peer(2)),
            Verdict::Penalized(_)
        ));
        std::thread::sleep(FAILURE_PENALTY);
        assert_eq!(
            auth.check(Some(&header("prom", "wrong")), peer(2)),
            Verdict::Refused
        );
        assert!(is_bcrypt(&auth.no_user), "{}", auth.no_user);
        assert_eq!(&auth.no_user[..7], "$2b$04$", "at the users' cost");
    }

    /// Credentials that passed are remembered: checked again at once, without bcrypt; a wrong
    /// password never is.
    #[test]
    fn credentials_that_passed_are_checked_again_at_once() {
        let hash = bcrypt::hash("right", 8).unwrap();
        let auth = without_budget(BTreeMap::from([("prom".to_owned(), hash)]));
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("prom:right")
        );
        let peer = IpAddr::from([10, 0, 0, 1]);
        // This thread's CPU time, not the wall clock: a busy machine may preempt either check.
        let first = thread_cputime();
        assert_eq!(auth.check(Some(&header), peer), Verdict::Allowed);
        let bcrypt_took = thread_cputime() - first;
        let again = thread_cputime();
        assert_eq!(auth.check(Some(&header), peer), Verdict::Allowed);
        let cached_took = thread_cputime() - again;
        assert!(
            cached_took * 10 < bcrypt_took,
            "cached: {cached_took:?} against bcrypt's {bcrypt_took:?}"
        );
        assert_eq!(auth.passed.lock().unwrap().len(), 1);
        // A wrong password stays wrong (the users are read once): repeated, from another
        // address, it is refused without bcrypt.
        let wrong = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("prom:wrong")
        );
        assert_eq!(auth.check(Some(&wrong), peer), Verdict::Refused);
        let again = thread_cputime();
        assert_eq!(
            auth.check(Some(&wrong), IpAddr::from([10, 0, 0, 2])),
            Verdict::Refused
        );
        let refused_took = thread_cputime() - again;
        assert!(
            refused_took * 10 < bcrypt_took,
            "refused again: {refused_took:?} against bcrypt's {bcrypt_took:?}"
        );
    }

    /// One check at a time, and no more than the budget's share of a core over its window: a
    /// check that finds the bucket empty (or another check running) is not run.
    #[test]
    fn the_bcrypt_budget_bounds_the_work_of_checks() {
        let budget = BcryptBudget::new(0.25);
        // A check that takes the whole bucket (half a second: 25 % of a 2 s window), while
        // another waits for its turn and gives up.
        let held = Instant::now();
        let turn = budget.start().expect("a full bucket");
        let waited = Instant::now();
        assert!(budget.start().is_none(), "one check at a time");
        assert!(
            waited.elapsed() >= TURN_WAIT,
            "after waiting for the running one"
        );
        drop(turn);
        // The turn took at most this long: it overdrew the bucket by what it took past the
        // half second (a busy machine may have kept this thread waiting).
        let overdrawn = held.elapsed().saturating_sub(TURN_WAIT);
        assert!(budget.start().is_none(), "spent: no check until it refills");
        // Refilling at a quarter second per second: the overdraft, then 50 ms.
        std::thread::sleep(overdrawn * 4 + Duration::from_millis(200));
        assert!(
            budget.start().is_some(),
            "refilled at a quarter second per second"
        );
    }

    /// Fail closed: a file that authenticates nobody, or that sends passwords in clear beyond
    /// loopback, is refused; so are bcrypt costs out of bounds.
    #[test]
    fn configs_that_would_leave_the_endpoint_open_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let loopback: SocketAddr = "127.0.0.1:9464".parse().unwrap();
        let everywhere: SocketAddr = "0.0.0.0:9464".parse().unwrap();
        let hash = |cost| bcrypt::hash("pw", cost).unwrap();
        let mut costly = hash(4);
        costly.replace_range(4..6, "31");
        let cases = [
            ("", loopback, "authenticates nobody"),
            ("basic_auth_users: {}\n", loopback, "authenticates nobody"),
            (
                &format!("basic_auth_users:\n  prom: {}\n", hash(4)),
                everywhere,
                "no tls_server_config",
            ),
            (
                &format!("basic_auth_users:\n  prom: {costly}\n"),
                loopback,
                "bcrypt cost 31 is out of 4 to 14",
            ),
            (
                &format!(
                    "basic_auth_users:\n  prom: {}\n  prom: {}\n",
                    hash(4),
                    hash(4)
                ),
                loopback,
                "duplicate",
            ),
        ];
        for (text, listen, expected) in cases {
            let path = dir.path().join("web.yml");
            std::fs::write(&path, text).unwrap();
            let error = format!("{:#}", load(&path, listen).err().expect(text));
            assert!(error.contains(expected), "{text:?}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
        let path = dir.path().join("web.yml");
        std::fs::write(&path, format!("basic_auth_users:\n  prom: {}\n", hash(4))).unwrap();
        let config = load(&path, loopback).expect("users without TLS, on loopback");
        assert!(config.auth.is_some() && config.tls.is_none());
        // A file others can write is refused (they could add their own password).
        for mode in [0o666, 0o620, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = format!("{:#}", load(&path, loopback).err().expect("refused"));
            assert!(
                error.contains("can be written by group or others"),
                "{error}"
            );
            assert_eq!(error.lines().count(), 1, "{error}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load(&path, loopback).is_ok(), "readable: a warning only");
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
            let listen = "127.0.0.1:9464".parse().unwrap();
            let error = format!("{:#}", load(&path, listen).err().expect(text));
            assert!(error.contains(expected), "{text:?}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }
}
