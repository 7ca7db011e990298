//! Metrics for Prometheus: per-cgroup counters and TopDown as the exposition format
//! ([`exporter`]), served over a small HTTP/1.1 endpoint ([`http`]). `commands::serve` runs it.

pub mod exporter;
pub mod http;
