//! The scrape endpoint: `GET` (or `HEAD`) `/metrics` answers the latest exposition, in
//! OpenMetrics when the scraper asks for it and in the classic Prometheus text format otherwise;
//! other methods are 405, other paths 404.
//!
//! It stays up whoever connects: at most `max_connections` are served at once (more are closed
//! at once and counted), a TLS handshake and a request's headers must each arrive within
//! [`HEADER_TIMEOUT`], and a failed `accept` (out of file descriptors, say) is logged once per
//! burst and retried after a pause. With `--web-config` it speaks TLS and asks for basic
//! authentication: wrong or missing credentials get 401, the same answer whichever part was
//! wrong.

use std::{convert::Infallible, sync::Arc, time::Duration};

use anyhow::Result;
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::Bytes,
    header::{ACCEPT, CONTENT_TYPE},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use tokio::{
    net::TcpListener,
    sync::{Semaphore, watch},
};

use super::{
    exporter::classic_text,
    web_config::{BasicAuth, WebConfig},
};

/// OpenMetrics text, for scrapers that ask for it (Prometheus does).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for everything else (curl, promtool).
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How long a connection may take to send a request's headers (or sit idle between requests).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after a failed `accept` before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `latest` (the newest exposition) on `listener` until the task is dropped, at most
/// `max_connections` connections at once; connections beyond are closed and counted in
/// `refused`. `web` adds TLS and basic authentication.
pub async fn serve(
    listener: TcpListener,
    latest: watch::Receiver<Arc<String>>,
    max_connections: usize,
    refused: Counter,
    web: WebConfig,
) -> Result<()> {
    let tls = web.tls.map(tokio_rustls::TlsAcceptor::from);
    let slots = Arc::new(Semaphore::new(max_connections));
    let mut failing = false;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                failing = false;
                stream
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
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            refused.inc();
            drop(stream);
            continue;
        };
        let latest = latest.clone();
        let (tls, auth) = (tls.clone(), web.auth.clone());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, latest, auth).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => serve_connection(stream, latest, auth).await,
                        Ok(Err(error)) => log::debug!("TLS handshake: {error}"),
                        Err(_) => log::debug!("TLS handshake: timed out"),
                    }
                }
            }
            drop(slot);
        });
    }
}

/// Answers the requests of one connection (any byte stream) until it closes, or its headers
/// take longer than [`HEADER_TIMEOUT`]; with `auth`, only those with its credentials.
pub async fn serve_connection<S>(
    stream: S,
    latest: watch::Receiver<Arc<String>>,
    auth: Option<Arc<BasicAuth>>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let (latest, auth) = (latest.clone(), auth.clone());
        async move {
            if let Some(auth) = auth {
                let header = request
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                // bcrypt takes tens of milliseconds: off the runtime's thread.
                let allowed = tokio::task::spawn_blocking(move || auth.allows(header.as_deref()))
                    .await
                    .unwrap_or(false);
                if !allowed {
                    return Ok(unauthorized());
                }
            }
            answer(request, latest).await
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

async fn answer(
    request: Request<hyper::body::Incoming>,
    latest: watch::Receiver<Arc<String>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method();
    let response = match (method, request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            let wants_openmetrics = request
                .headers()
                .get_all(ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("application/openmetrics-text"));
            let text = latest.borrow().clone();
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
    Ok(response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}
