//! Memory a loop will read a few items from now, asked of the CPU ahead: a hint, never a read.
//!
//! A live read on a host with 100,000 threads walks tens of thousands of items spread over
//! megabytes (the kernel's slots of the threads that ran, the rows in the order a report sorts
//! them), each a cache miss the work on one item cannot hide: a profile had half of the JSON
//! writer's time on the first touch of each row (BENCHMARKS.md, session 27). Asking for item
//! `i + AHEAD` while item `i` is worked on overlaps those misses with the work.

/// How many items ahead of the one worked on a loop asks for: an item's work (a row written, a
/// slot copied) takes a few hundred nanoseconds, a miss about one hundred.
pub const AHEAD: usize = 4;

/// The cache-line size the hints step by (x86_64 and Neoverse; a larger line only makes some
/// hints redundant).
const LINE: usize = 64;

/// Asks the CPU to bring every cache line of `*item` (its `size_of::<T>()` bytes, not what
/// it points to) into cache. Any address is fine: a prefetch never faults, and does nothing
/// on targets without one here.
#[inline]
pub fn read<T>(item: *const T) {
    bytes(item.cast(), size_of::<T>());
}

/// Asks the CPU to bring the cache lines of the `len` bytes at `start` into cache (see
/// [`read`]).
#[inline]
pub fn bytes(start: *const u8, len: usize) {
    let mut offset = 0;
    while offset < len {
        line(start.wrapping_add(offset));
        offset += LINE;
    }
    // The last line, when the bytes do not start on a line boundary.
    if len > 1 {
        line(start.wrapping_add(len - 1));
    }
}

#[inline(always)]
fn line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads no memory architecturally and cannot fault, whatever the
    // address; SSE, which it needs, is part of x86_64.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is a hint: it reads no memory architecturally and cannot fault, whatever
    // the address; it touches no register but its operand, nor the stack or the flags.
    unsafe {
        core::arch::asm!(
            "prfm pldl1keep, [{at}]",
            at = in(reg) at,
            options(nostack, readonly, preserves_flags)
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hints change nothing, at any address: inside, at the edges of, and far outside memory
    /// the program owns (a null and a dangling pointer), for items of every size.
    #[test]
    fn hints_read_and_change_nothing_at_any_address() {
        let rows = vec![[7u8; 280]; 3];
        let before = rows.clone();
        for row in &rows {
            read(row);
        }
        read(rows.as_ptr().wrapping_add(1_000_000));
        read(std::ptr::null::<u64>());
        read(std::ptr::dangling::<[u8; 4096]>());
        read(&());
        bytes(std::ptr::null(), 1 << 20);
        bytes(rows[2].as_ptr(), 0);
        assert_eq!(rows, before);
    }
}
