//! Recordings made by other tools, read into typed counts at the edge.

pub mod perf_stat_csv;
