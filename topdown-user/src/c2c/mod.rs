//! c2c (cache-to-cache): memory samples, classified as perf c2c classifies them
//! (`topdown_common::c2c`), grouped by cache line, reported as perf's tables.

pub mod aggregate;
pub mod by_group;
pub mod code;
pub mod command;
pub mod display;
pub mod host;
pub mod json_report;
pub mod line_table;
pub mod lines;
pub mod live;
pub mod maps;
pub mod pareto;
pub mod perf_data;
pub mod perf_writer;
pub mod records;
pub mod stats_report;
