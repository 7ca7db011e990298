//! The scrape endpoint: `GET /metrics` answers the latest exposition, in OpenMetrics when the
//! scraper asks for it and in the classic Prometheus text format otherwise; anything else is 404.

use std::{convert::Infallible, sync::Arc};

use anyhow::{Context as _, Result};
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::Bytes,
    header::{ACCEPT, CONTENT_TYPE},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpListener, sync::watch};

use super::exporter::classic_text;

/// OpenMetrics text, for scrapers that ask for it (Prometheus does).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for everything else (curl, promtool).
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `latest` (the newest exposition) on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, latest: watch::Receiver<Arc<String>>) -> Result<()> {
    loop {
        let (stream, _) = listener.accept().await.context("accepting a scrape")?;
        let latest = latest.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(request, latest.clone()));
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                log::debug!("scrape connection: {error}");
            }
        });
    }
}

async fn answer(
    request: Request<hyper::body::Incoming>,
    latest: watch::Receiver<Arc<String>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let response = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => {
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
        (&Method::GET, "/") => Response::builder().body(Full::new(Bytes::from_static(
            b"topdown-bpf: metrics at /metrics\n",
        ))),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(b"not found: try /metrics\n"))),
    };
    Ok(response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}
