//! topdown-bpf: per-thread counters charged in the kernel at every context switch.
//!
//! Data flows one way: the kernel programs (`topdown-ebpf`) charge per-CPU counter deltas to
//! threads; [`collect`] loads them, opens the counters and reads the maps into snapshots;
//! [`attrib`] turns snapshots into per-thread and per-cgroup usage for a window of time; [`tma`]
//! is TopDown; [`model`] names a window's usage and computes its rows once; the renderers
//! ([`report`], [`picture`], [`tui`], [`serve`]) only format them; [`commands`] runs each
//! subcommand. [`pmu`] says what the machine can count. c2c reads [`perf_file`]s, names
//! addresses through [`symbols`] and models cache lines in [`c2c`]. docs/architecture.md lists
//! every room and what it may use (`tests/layers.rs` keeps that order).
//!
//! The second entry point, [`region`], measures TopDown of a region of code from inside a program
//! (RDPMC of the `slots` and PERF_METRICS counters, as Linux's `topdown.txt` describes).

#[cfg(test)]
mod allocations;
pub mod attrib;
pub mod c2c;
pub mod cli;
pub mod collect;
pub mod commands;
pub mod heap;
pub mod import;
pub mod model;
pub mod picture;
pub mod pmu;
pub mod prefetch;
pub mod preflight;
pub mod privileges;
pub mod process_exit;
pub mod progress;
pub mod recording;
pub mod region;
pub mod report;
pub mod serve;
pub mod session;
pub mod tma;
pub mod tui;

pub use topdown_c2c::{perf_file, symbols};
