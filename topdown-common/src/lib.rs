//! Types shared by the topdown-bpf kernel programs (`topdown-ebpf`) and the loader
//! (`topdown-user`). Every type here is `#[repr(C)]` and plain old data, because both sides
//! read the same bytes: map values, ring-buffer records and global settings.
//!
//! One module per concept: what a counter reading is ([`reading`]), what a thread has been
//! charged and the records sent about it ([`thread`]), what each CPU keeps ([`cpu`]), a removed
//! cgroup's name ([`cgroup`]), what the kernel side could not do ([`stats`]), and the names of
//! the maps, globals and programs both sides use ([`names`]).
#![cfg_attr(not(test), no_std)]

pub mod c2c;
pub mod cgroup;
pub mod cpu;
pub mod data_src;
pub mod names;
pub mod neighbours;
pub mod reading;
pub mod stats;
pub mod thread;

/// How many counters one counter set may hold per CPU, slot 0 (the on-CPU clock) included. The
/// kernel program reads the counter of slot `cpu * MAX_COUNTERS + i` for every slot `i > 0` in
/// its CPU mask; TopDown sets need up to 9 (slots, 8 metrics) plus the on-CPU clock; Ice Lake
/// Level 2 needs 25. At most 32: each CPU selects its slots with a 32-bit mask.
pub const MAX_COUNTERS: usize = 32;
