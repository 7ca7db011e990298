//! The kernel's live-thread totals read where they are: the `THREADS` array is created
//! mmap-able (`BPF_F_MMAPABLE`, Linux 5.5) and mapped here read-only, so reading a thread that
//! ran is a copy of its header and the set's slots out of memory, not a `bpf()` lookup that
//! walks a hash bucket and copies every slot a set may have (~1.5 us each at 30,000 threads,
//! a third of the tool's time; issue 33).
//!
//! A slot holds one live thread's [`ThreadTotals`] while its tid is there (0: free). The kernel
//! writes a slot's tid after the rest when a thread takes it, clears it before the thread's
//! index entry when the thread exits (after its final record is sent), and only the CPU running
//! a thread writes its slot. A reader reads the tid, copies the rest, and reads the tid again:
//! the copy is the thread's when both are the tid it expects. As with a `bpf()` lookup of a
//! value a program is writing, a thread charged during the copy may give fields of two charges
//! (each field whole); the next read has it whole. On arm64 a new thread's tid may become
//! visible before the rest of its first totals (BPF has no store barrier on 5.10): a whole read
//! in that nanosecond window could copy what the kernel left in a freed slot, a zeroed header
//! (refused: no process is 0) and zeroed slots, never an exited thread's numbers; listed reads
//! never see it (a thread is listed after its slot is written, through the ring's release).

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
    ptr::NonNull,
};

use topdown_common::{reading::Reading, thread::ThreadTotals};

use super::snapshot::ThreadRecord;

/// The `THREADS` array mapped read-only.
pub struct MappedThreads {
    /// The first slot.
    base: NonNull<ThreadTotals>,
    /// Slots mapped.
    slots: u32,
    /// Bytes mapped.
    len: usize,
}

// SAFETY: a read-only shared mapping of kernel memory, read with volatile copies only; it is
// valid until dropped, wherever it is used from.
unsafe impl Send for MappedThreads {}
// SAFETY: as above; nothing is written through it.
unsafe impl Sync for MappedThreads {}

impl MappedThreads {
    /// Maps the `slots` slots of the array behind `fd` read-only.
    pub fn map(fd: BorrowedFd<'_>, slots: u32) -> io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(4096);
        // An array's elements are its value size rounded up to 8 bytes, from offset 0.
        const _: () = assert!(size_of::<ThreadTotals>().is_multiple_of(8));
        let len = (slots as usize)
            .checked_mul(size_of::<ThreadTotals>())
            .ok_or_else(|| io::Error::other("the thread map is too big to map"))?
            .next_multiple_of(page);
        // SAFETY: a new shared read-only mapping of `len` bytes of the map's memory, which
        // the kernel sized to hold `slots` elements rounded up to pages.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(base.cast::<ThreadTotals>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { base, slots, len })
    }

    /// The header and first `nr` slots of live thread `tid` from slot `slot`; `None` when
    /// the slot does not hold `tid` (it exited: its final record is in the ring) or is beyond
    /// the array.
    pub fn get(&self, slot: u32, tid: u32, nr: usize) -> Option<ThreadRecord> {
        let record = self.copy(slot, nr)?;
        (record.header.tid == tid).then_some(record)
    }

    /// Hands the live thread of every slot below `high` (the highest slot the kernel took, plus
    /// one) to `each`, with its first `nr` slots.
    pub fn each(&self, high: u32, nr: usize, mut each: impl FnMut(ThreadRecord)) {
        for slot in 0..high.min(self.slots) {
            if let Some(record) = self.copy(slot, nr) {
                each(record);
            }
        }
    }

    /// The tid and process of the live thread in each slot below `high`.
    pub fn tids(&self, high: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..high.min(self.slots)).filter_map(|slot| {
            let totals = self.slot(slot)?;
            // SAFETY: fields of a slot inside the mapping, read whole.
            let (tid, tgid) = unsafe {
                (
                    (&raw const (*totals).header.tid).read_volatile(),
                    (&raw const (*totals).header.tgid).read_volatile(),
                )
            };
            (tid != 0).then_some((tid, tgid))
        })
    }

    /// Slot `slot`'s thread, copied as the module's note says; `None` when free, beyond the
    /// array, or taken by another thread during the copy.
    fn copy(&self, slot: u32, nr: usize) -> Option<ThreadRecord> {
        let totals = self.slot(slot)?;
        // SAFETY: a slot inside the mapping; its fields are plain old data, read whole
        // (volatile: the kernel writes them while we read).
        unsafe {
            let tid = (&raw const (*totals).header.tid).read_volatile();
            if tid == 0 {
                return None;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let header = (&raw const (*totals).header).read_volatile();
            let charged = &raw const (*totals).charged.slots;
            let slots: Vec<Reading> = (0..nr.min(topdown_common::MAX_COUNTERS))
                .map(|i| charged.cast::<Reading>().add(i).read_volatile())
                .collect();
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let again = (&raw const (*totals).header.tid).read_volatile();
            (header.tid == tid && header.tgid != 0 && again == tid)
                .then_some(ThreadRecord { header, slots })
        }
    }

    /// A pointer to slot `slot`; `None` beyond the array.
    fn slot(&self, slot: u32) -> Option<*const ThreadTotals> {
        // SAFETY: inside the mapping (checked against the slots mapped).
        (slot < self.slots).then(|| unsafe { self.base.as_ptr().add(slot as usize).cast_const() })
    }
}

impl Drop for MappedThreads {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
