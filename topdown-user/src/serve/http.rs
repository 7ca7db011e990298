//! The scrape endpoint: `GET` (or `HEAD`) `/metrics` answers the latest exposition, in
//! OpenMetrics when the scraper asks for it and in the classic Prometheus text format otherwise;
//! other methods are 405, other paths 404.
//!
//! It stays up whoever connects, and slow or flooding clients cannot starve scrapes:
//! - at most `max` connections are open at once, and at most `per_peer` from one address; a
//!   new connection past either limit closes the idlest one (of that peer, or of all: the one
//!   whose last request ended, or that connected, longest ago, never one being answered), so a
//!   scraper always gets in and those holding connections without asking lose them first
//!   (each closed one is counted);
//! - a TLS handshake and a request's headers must each arrive within [`HEADER_TIMEOUT`] (an
//!   idle keep-alive connection is closed after it too), a connection lives at most
//!   [`CONNECTION_LIFETIME`] and serves at most [`REQUESTS_PER_CONNECTION`] requests;
//! - a failed `accept` (out of file descriptors, say) is logged once per burst and retried
//!   after a pause.
//!
//! With `--web-config` it speaks TLS and asks for basic authentication: wrong or missing
//! credentials get 401, the same answer whichever part was wrong; credentials not checked
//! because the bcrypt budget is spent get 429 (see [`super::web_config::BcryptBudget`]).

use std::{
    collections::HashMap,
    convert::Infallible,
    net::IpAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Result;
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::Bytes,
    header::{ACCEPT, CONNECTION, CONTENT_TYPE},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use tokio::{
    net::TcpListener,
    sync::{mpsc, oneshot},
    task::AbortHandle,
};

use super::{
    exporter::classic_text,
    web_config::{BasicAuth, Verdict, WebConfig},
};

/// OpenMetrics text, for scrapers that ask for it (Prometheus does).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for everything else (curl, promtool).
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How long a connection may take to send a request's headers (or sit idle between requests),
/// and a TLS handshake to finish.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one connection may live, whatever it does.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(300);

/// Requests one connection may make; the last is answered with `Connection: close`.
pub const REQUESTS_PER_CONNECTION: u64 = 100;

/// Pause after a failed `accept` before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How many connections are served at once.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// At most this many in all.
    pub max: usize,
    /// At most this many from one address.
    pub per_peer: usize,
}

impl Limits {
    /// `max` in all, and a quarter of it (at least 4, at most `max`) per address.
    pub fn of(max: usize) -> Self {
        Self {
            max,
            per_peer: (max / 4).max(4).min(max),
        }
    }
}

/// The open connections, to pick which one to close.
#[derive(Default)]
struct Open {
    next: u64,
    connections: HashMap<u64, Connection>,
}

struct Connection {
    peer: IpAddr,
    /// When it connected, or its last request ended.
    idle_since: Instant,
    /// A request is being answered.
    busy: bool,
    abort: AbortHandle,
}

impl Open {
    /// Closes the idlest connection (of `peer` only, when given) that is not being answered;
    /// whether there was one.
    fn close_idlest(&mut self, peer: Option<IpAddr>) -> bool {
        let idlest = self
            .connections
            .iter()
            .filter(|(_, c)| !c.busy && peer.is_none_or(|p| c.peer == p))
            .min_by_key(|(_, c)| c.idle_since)
            .map(|(&id, _)| id);
        match idlest.and_then(|id| self.connections.remove(&id)) {
            Some(connection) => {
                connection.abort.abort();
                true
            }
            None => false,
        }
    }

    /// Makes room for a connection from `peer` under `limits`; whether there is room.
    fn make_room(&mut self, peer: IpAddr, limits: Limits, closed: &Counter) -> bool {
        let from_peer = self.connections.values().filter(|c| c.peer == peer).count();
        if from_peer >= limits.per_peer {
            if !self.close_idlest(Some(peer)) {
                return false;
            }
            closed.inc();
        }
        while self.connections.len() >= limits.max {
            if !self.close_idlest(None) {
                return false;
            }
            closed.inc();
        }
        true
    }

    fn set_busy(&mut self, id: u64, busy: bool) {
        if let Some(connection) = self.connections.get_mut(&id) {
            connection.busy = busy;
            if !busy {
                connection.idle_since = Instant::now();
            }
        }
    }
}

/// A scrape's request for the newest exposition, answered on the channel it carries.
pub type Ask = oneshot::Sender<Arc<String>>;

/// Where scrapes get the newest exposition: they ask the session's loop, which encodes it
/// between windows, at most once a window and only when a scrape asks (encoding every window
/// took a fifth of `serve`'s CPU at 20,000 cgroups, scraped or not: BENCHMARKS.md).
#[derive(Clone)]
pub struct Latest(mpsc::Sender<Ask>);

impl Latest {
    /// A source of expositions and the requests its scrapes send.
    pub fn channel() -> (Self, mpsc::Receiver<Ask>) {
        let (asks, asked) = mpsc::channel(64);
        (Self(asks), asked)
    }

    /// A source that answers `text` to every scrape (a task on the current runtime).
    pub fn fixed(text: Arc<String>) -> Self {
        let (latest, mut asked) = Self::channel();
        tokio::spawn(async move {
            while let Some(ask) = asked.recv().await {
                let _ = ask.send(Arc::clone(&text));
            }
        });
        latest
    }

    /// The newest exposition; `None` once nothing answers (the session is ending).
    async fn get(&self) -> Option<Arc<String>> {
        let (ask, answer) = oneshot::channel();
        self.0.send(ask).await.ok()?;
        answer.await.ok()
    }
}

/// Serves `latest` (the newest exposition) on `listener` until the task is dropped, within
/// `limits`; connections closed to make room (or refused when every one is being answered)
/// are counted in `closed`. `web` adds TLS and basic authentication.
pub async fn serve(
    listener: TcpListener,
    latest: Latest,
    limits: Limits,
    closed: Counter,
    web: WebConfig,
) -> Result<()> {
    let tls = web.tls.map(tokio_rustls::TlsAcceptor::from);
    let open = Arc::new(Mutex::new(Open::default()));
    let mut failing = false;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok((stream, peer)) => {
                failing = false;
                (stream, peer.ip())
            }
            Err(error) => {
                if !failing {
                    log::warn!("accepting a scrape connection: {error}; retrying");
                }
                failing = true;
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(mut registry) = open.lock() else {
            break Ok(());
        };
        if !registry.make_room(peer, limits, &closed) {
            closed.inc();
            drop(stream);
            continue;
        }
        let id = registry.next;
        registry.next += 1;
        let (latest, tls, auth) = (latest.clone(), tls.clone(), web.auth.clone());
        let mine = Arc::clone(&open);
        let task = tokio::spawn(async move {
            let answering = Answering {
                open: Arc::clone(&mine),
                id,
            };
            let served = async {
                match tls {
                    None => serve_connection(stream, latest, auth, answering, peer).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => {
                                serve_connection(stream, latest, auth, answering, peer).await;
                            }
                            Ok(Err(error)) => log::debug!("TLS handshake: {error}"),
                            Err(_) => log::debug!("TLS handshake: timed out"),
                        }
                    }
                }
            };
            if tokio::time::timeout(CONNECTION_LIFETIME, served)
                .await
                .is_err()
            {
                log::debug!("scrape connection: closed after {CONNECTION_LIFETIME:?}");
            }
            if let Ok(mut registry) = mine.lock() {
                registry.connections.remove(&id);
            }
        });
        // Under the lock: the task removes its entry only after it is in.
        registry.connections.insert(
            id,
            Connection {
                peer,
                idle_since: Instant::now(),
                busy: false,
                abort: task.abort_handle(),
            },
        );
    }
}

/// Marks one connection busy while a request of it is answered (it is then never closed to
/// make room), idle from when the answer is ready.
#[derive(Clone)]
pub struct Answering {
    open: Arc<Mutex<Open>>,
    id: u64,
}

impl Answering {
    fn set(&self, busy: bool) {
        if let Ok(mut open) = self.open.lock() {
            open.set_busy(self.id, busy);
        }
    }
}

/// Answers one connection (any byte stream) from `peer` on its own, outside a listener: there
/// is no other connection to make room for (the fuzz target's way in).
pub async fn serve_alone<S>(stream: S, latest: Latest, auth: Option<Arc<BasicAuth>>, peer: IpAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let answering = Answering {
        open: Arc::new(Mutex::new(Open::default())),
        id: 0,
    };
    serve_connection(stream, latest, auth, answering, peer).await;
}

/// Answers the requests of one connection (any byte stream) until it closes, its headers take
/// longer than [`HEADER_TIMEOUT`], or it made [`REQUESTS_PER_CONNECTION`] requests; with
/// `auth`, only those with its credentials.
async fn serve_connection<S>(
    stream: S,
    latest: Latest,
    auth: Option<Arc<BasicAuth>>,
    answering: Answering,
    peer: IpAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let requests = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let service = service_fn(move |request| {
        let (latest, auth, answering) = (latest.clone(), auth.clone(), answering.clone());
        let made = requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        async move {
            answering.set(true);
            let mut response = respond(request, latest, auth, peer).await;
            if made >= REQUESTS_PER_CONNECTION {
                response
                    .headers_mut()
                    .insert(CONNECTION, hyper::header::HeaderValue::from_static("close"));
            }
            answering.set(false);
            Ok::<_, Infallible>(response)
        }
    });
    if let Err(error) = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        log::debug!("scrape connection: {error}");
    }
}

/// The answer to one request: its credentials checked first, with `auth`.
async fn respond(
    request: Request<hyper::body::Incoming>,
    latest: Latest,
    auth: Option<Arc<BasicAuth>>,
    peer: IpAddr,
) -> Response<Full<Bytes>> {
    if let Some(auth) = auth {
        let header = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // bcrypt takes tens of milliseconds: off the runtime's thread.
        let verdict = tokio::task::spawn_blocking(move || auth.check(header.as_deref(), peer))
            .await
            .unwrap_or(Verdict::Refused);
        match verdict {
            Verdict::Allowed => {}
            Verdict::Refused => return unauthorized(),
            Verdict::Busy => return busy(),
            Verdict::Penalized(left) => {
                tokio::time::sleep(left).await;
                return busy();
            }
        }
    }
    answer(request, latest).await
}

/// 429: credentials were not checked, the bcrypt budget being spent.
fn busy() -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header(hyper::header::RETRY_AFTER, "1")
        .body(Full::new(Bytes::from_static(
            b"429 Too Many Requests: credentials not checked, try again\n",
        )))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// 401, asking for basic credentials; the same whatever was wrong.
fn unauthorized() -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header(
            hyper::header::WWW_AUTHENTICATE,
            "Basic realm=\"topdown-bpf\"",
        )
        .body(Full::new(Bytes::from_static(b"401 Unauthorized\n")))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

async fn answer(request: Request<hyper::body::Incoming>, latest: Latest) -> Response<Full<Bytes>> {
    let method = request.method();
    let response = match (method, request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            let wants_openmetrics = request
                .headers()
                .get_all(ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("application/openmetrics-text"));
            let Some(text) = latest.get().await else {
                return Response::builder()
                    .status(StatusCode::SERVICE_UNAVAILABLE)
                    .body(Full::new(Bytes::from_static(b"stopping\n")))
                    .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
            };
            let (kind, body) = if wants_openmetrics {
                (OPENMETRICS, text.as_bytes().to_vec())
            } else {
                (CLASSIC, classic_text(&text).into_bytes())
            };
            Response::builder()
                .header(CONTENT_TYPE, kind)
                .body(Full::new(Bytes::from(body)))
        }
        (&Method::GET | &Method::HEAD, "/") => Response::builder().body(Full::new(
            Bytes::from_static(b"topdown-bpf: metrics at /metrics\n"),
        )),
        (_, "/" | "/metrics") => Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(hyper::header::ALLOW, "GET, HEAD")
            .body(Full::new(Bytes::from_static(b"only GET and HEAD\n"))),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(b"not found: try /metrics\n"))),
    };
    response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}
