//! Metrics for Prometheus: per-cgroup counters and TopDown as the exposition format
//! ([`exporter`]), served over a small HTTP/1.1 endpoint ([`http`]), with TLS and basic
//! authentication from an exporter-toolkit web config ([`web_config`]). `commands::serve` runs
//! it.

pub mod exporter;
pub mod http;
pub mod web_config;
