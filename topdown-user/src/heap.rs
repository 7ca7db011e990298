//! The heap's settings, made once at start: freed memory stays with the process between
//! windows.
//!
//! Every window builds vectors of a host's size (usages, rows, a document's batch: megabytes at
//! 20,000 threads) and frees them before the next. glibc maps an allocation over its mmap
//! threshold afresh and unmaps it at free, and trims the heap's top once more than its trim
//! threshold is free there: either way the next window faults every page in again (a busy
//! host's JSON interval spent a quarter of its time in the kernel's page faults). Both
//! thresholds raised, a window reuses the last one's pages; the process's resident memory is its
//! peak window's, as it is at every window anyway.

/// Allocations up to this size come from the heap, not from a mapping of their own (glibc's
/// largest: its `DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit targets, 32 MiB).
const MMAP_THRESHOLD: i32 = 32 << 20;

/// Free memory at the heap's top is given back to the kernel only beyond this.
const TRIM_THRESHOLD: i32 = 512 << 20;

/// Keeps freed memory for the next window (see the module's documentation). Where the C library
/// is not glibc, or refuses a setting, nothing changes: a slower window, never a wrong one.
pub fn keep_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `mallopt` only changes the allocator's parameters; called before any thread
    // starts, with values glibc documents for these two.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

#[cfg(all(test, target_env = "gnu"))]
mod tests {
    /// Minor page faults this thread has taken so far.
    fn faults() -> i64 {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `usage` is a valid rusage to fill.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
        assert_eq!(rc, 0, "getrusage");
        // SAFETY: filled by a successful getrusage.
        unsafe { usage.assume_init() }.ru_minflt
    }

    /// A window's worth of memory, written and freed: the faults it took.
    fn window(bytes: usize) -> i64 {
        let before = faults();
        let mut buffer = vec![0u8; bytes];
        for page in buffer.chunks_mut(4096) {
            page[0] = 1;
        }
        std::hint::black_box(&buffer);
        drop(buffer);
        faults() - before
    }

    #[test]
    fn a_window_reuses_the_last_windows_pages() {
        super::keep_freed_memory();
        // On a thread of its own (its own arena, its own fault count), as the tool's windows
        // run on one thread.
        std::thread::spawn(|| {
            let bytes = 16 << 20;
            let first = window(bytes);
            let pages = (bytes / 4096) as i64;
            assert!(
                first >= pages / 2,
                "the first window faults its pages in: {first}"
            );
            let again = window(bytes);
            assert!(
                again < pages / 16,
                "{again} faults the second time, {first} the first: the pages were given back"
            );
        })
        .join()
        .expect("the window's thread");
    }
}
