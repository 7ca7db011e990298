//! c2c (cache-to-cache), the model: memory samples classified as perf c2c classifies them
//! (`topdown_common::c2c`), aggregated by cache line ([`aggregate`] into [`lines`]), ranked once
//! per report ([`rank`]), their Pareto rows named ([`pareto`]), their sharing analysed
//! ([`sharing`]), split by cgroup ([`groups`]) and laid out for the browser ([`browse`]). The
//! files come from `crate::perf_file`, names from `crate::symbols`; the tables are drawn in
//! `crate::report::c2c`, the commands run in `crate::commands`.

pub mod aggregate;
pub mod browse;
pub mod forwarded;
pub mod groups;
pub mod lines;
pub mod options;
pub mod pareto;
pub mod rank;
pub mod sharing;
