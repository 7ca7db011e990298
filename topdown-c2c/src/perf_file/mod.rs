//! perf.data, the file `perf c2c record` and `perf mem record` write: its contents typed at the
//! edge ([`contents`]: memory samples, mappings, topology, the sample type c2c records), read
//! ([`reader`], walking [`records`]) and written ([`writer`], for `c2c record -o`), and the same
//! contents taken from the running host for live views ([`host`]).

pub mod contents;
pub mod host;
pub mod maps;
pub mod reader;
pub mod records;
pub mod writer;

/// Deterministic pseudo-random numbers below a bound, for tests (xorshift64 from `seed`).
#[cfg(test)]
pub(crate) fn test_random(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |below| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    }
}
