//! c2c (cache-to-cache): memory samples, classified as perf c2c classifies them
//! (`topdown_common::c2c`), grouped by cache line, reported as perf's tables.

pub mod aggregate;
pub mod browse;
pub mod by_group;
pub mod code;
pub mod command;
pub mod data_names;
pub mod display;
pub mod host;
pub mod json_report;
pub mod line_table;
pub mod lines;
pub mod live;
pub mod maps;
pub mod operand_types;
pub mod pareto;
pub mod perf_data;
pub mod perf_writer;
pub mod records;
pub mod sharing;
pub mod stats_report;

/// Deterministic pseudo-random numbers below a bound, for tests (xorshift64 from `seed`).
#[cfg(test)]
fn test_random(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |below| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    }
}
