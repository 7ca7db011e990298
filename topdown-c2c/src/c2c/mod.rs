//! c2c (cache-to-cache), the model: memory samples classified as perf c2c classifies them
//! (`topdown_common::c2c`), aggregated by cache line ([`aggregate`] into [`lines`]), ranked once
//! per report ([`rank`]), their Pareto rows named ([`pareto`]), their sharing analysed
//! ([`sharing`]) and laid out for the browser ([`browse`]). The files come from
//! [`crate::perf_file`], names from [`crate::symbols`]; `topdown-user` splits the lines by
//! cgroup or container, draws the tables and runs the commands.

pub mod aggregate;
pub mod browse;
pub mod forwarded;
pub mod lines;
pub mod options;
pub mod pareto;
pub mod rank;
pub mod sharing;
