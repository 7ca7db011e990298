//! Types shared by the topdown-bpf kernel programs (`topdown-ebpf`) and the loader
//! (`topdown-user`). Every type here is `#[repr(C)]` and plain old data, because both sides
//! read the same bytes: map values, ring-buffer records and global settings.
//!
//! One module per concept: what a counter reading is ([`reading`]), what a thread has been
//! charged ([`thread`]), and what the kernel side could not do ([`stats`]).
#![no_std]

pub mod reading;
pub mod stats;
pub mod thread;

/// How many counters one counter set may hold per CPU. The kernel program reads the counter
/// of slot `cpu * MAX_COUNTERS + i` for `i < nr_counters`; TopDown sets need up to 9
/// (slots, 8 metrics) plus the on-CPU clock, and Sapphire Rapids Level 2 with its thresholds 13.
pub const MAX_COUNTERS: usize = 16;
