//! The kernel's live-thread totals read where they are: the `THREADS` array is created
//! mmap-able (`BPF_F_MMAPABLE`, Linux 5.5) and mapped here read-only, so reading a thread that
//! ran is a copy of its header and the set's slots (and its split, where the kernel splits
//! waits) out of memory, not a `bpf()` lookup that walks a hash bucket and copies every slot a
//! set may have (~1.5 us each at 30,000 threads, a third of the tool's time; issue 33).
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
    os::fd::{AsRawFd as _, BorrowedFd, OwnedFd},
};

use memmap2::{MmapOptions, MmapRaw};

use topdown_common::{
    neighbours::WaitBehind,
    reading::Reading,
    thread::{RECORD_BEHIND_AT, RECORD_SLOTS_AT, ThreadTotals, record_len},
};

use super::snapshot::{Slots, ThreadRecord};
use crate::prefetch;

/// The `THREADS` array mapped read-only, as far as its slots are in use: the kernel installs
/// every page of a mapping of a BPF array at once, so the mapping grows with the highest slot
/// in use ([`MappedThreads::cover`]), and the tool's resident size with the threads that lived,
/// not with `--max-threads`.
pub struct MappedThreads {
    /// The map's descriptor, to map more of it.
    fd: OwnedFd,
    /// The mapping of the first `mapped` slots (`None`: none are), unmapped when dropped.
    map: Option<MmapRaw>,
    /// Slots mapped.
    mapped: u32,
    /// Slots of the array.
    slots: u32,
    /// Whether a thread's split ([`ThreadTotals::behind`]) is copied: with the split off the
    /// kernel never writes it.
    split: bool,
}

/// Slots mapped at first (864 KB).
const FIRST_SLOTS: u32 = 1024;

impl MappedThreads {
    /// Maps the first slots of the array of `slots` slots behind `fd` read-only; threads are
    /// read with their split where `split`.
    pub fn map(fd: BorrowedFd<'_>, slots: u32, split: bool) -> io::Result<Self> {
        let fd = fd.try_clone_to_owned()?;
        let map = map_slots(&fd, FIRST_SLOTS.min(slots))?;
        Ok(Self {
            fd,
            map: Some(map),
            mapped: FIRST_SLOTS.min(slots),
            slots,
            split,
        })
    }

    /// Maps at least the slots below `high` (at most the array's), and a quarter more for
    /// the threads to come: remaps are few (each grows the mapping by a quarter at least) and
    /// the mapping stays within 1.25 times the slots in use. The old mapping goes first, so the
    /// two never count in the tool's peak size together.
    pub fn cover(&mut self, high: u32) -> io::Result<()> {
        let high = high.min(self.slots);
        if high <= self.mapped {
            return Ok(());
        }
        let mapped = high
            .max(self.mapped)
            .saturating_add(high.max(self.mapped) / 4)
            .min(self.slots);
        self.map = None;
        match map_slots(&self.fd, mapped) {
            Ok(map) => {
                (self.map, self.mapped) = (Some(map), mapped);
                Ok(())
            }
            Err(error) => {
                // Back to what was mapped; failing that, nothing is (no slot is read).
                self.map = map_slots(&self.fd, self.mapped).ok();
                if self.map.is_none() {
                    self.mapped = 0;
                }
                Err(error)
            }
        }
    }

    /// The header and first `nr` slots of live thread `tid` from slot `slot`, its split pushed
    /// onto `splits` where splits are read; `None` (and nothing pushed) when the slot does not
    /// hold `tid` (it exited: its final record is in the ring) or is beyond the mapping (see
    /// [`Self::cover`]).
    pub fn get(
        &self,
        slot: u32,
        tid: u32,
        nr: usize,
        splits: &mut Vec<WaitBehind>,
    ) -> Option<ThreadRecord> {
        self.copy(slot, Some(tid), nr, splits)
    }

    /// Hands the live thread of every mapped slot below `high` (the highest slot the kernel
    /// took, plus one: see [`Self::cover`]) to `each`, with its first `nr` slots, its split
    /// pushed onto `splits` first where splits are read.
    pub fn each(
        &self,
        high: u32,
        nr: usize,
        splits: &mut Vec<WaitBehind>,
        mut each: impl FnMut(ThreadRecord),
    ) {
        for slot in 0..high.min(self.mapped) {
            if let Some(record) = self.copy(slot, None, nr, splits) {
                each(record);
            }
        }
    }

    /// Asks the CPU for the parts of slot `slot` that [`Self::get`] copies with `nr` slots, to
    /// be read soon (see [`crate::prefetch`]): the header, the split only where splits are
    /// read, and the first `nr` counter slots; nothing beyond the mapping. (Asking for the
    /// record's whole span brought the split's four lines in for every thread with the split
    /// off, where a software-set record is one line.)
    pub fn prefetch(&self, slot: u32, nr: usize) {
        let Some(totals) = self.slot(slot) else {
            return;
        };
        let start = totals.cast::<u8>();
        let whole = record_len(nr);
        if self.split {
            prefetch::bytes(start, whole);
        } else {
            prefetch::bytes(start, RECORD_BEHIND_AT);
            prefetch::bytes(start.wrapping_add(RECORD_SLOTS_AT), whole - RECORD_SLOTS_AT);
        }
    }

    /// The tid and process of the live thread in each mapped slot below `high`.
    pub fn tids(&self, high: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..high.min(self.mapped)).filter_map(|slot| {
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

    /// Slot `slot`'s thread (thread `tid`'s only, where given), copied as the module's note
    /// says, its split pushed onto `splits` where splits are read; `None` (and nothing pushed)
    /// when free, another thread's, beyond the array, or taken by another thread during the
    /// copy. The split goes straight to `splits`: handed back beside the record, its 248 bytes
    /// were moved with every record (a copy each) even where splits are not read.
    fn copy(
        &self,
        slot: u32,
        tid: Option<u32>,
        nr: usize,
        splits: &mut Vec<WaitBehind>,
    ) -> Option<ThreadRecord> {
        let totals = self.slot(slot)?;
        // SAFETY: a slot inside the mapping; its fields are plain old data, read whole
        // (volatile: the kernel writes them while we read).
        unsafe {
            let held = (&raw const (*totals).header.tid).read_volatile();
            if held == 0 || tid.is_some_and(|tid| tid != held) {
                return None;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let header = (&raw const (*totals).header).read_volatile();
            let split = self
                .split
                .then(|| (&raw const (*totals).behind).read_volatile());
            let charged = &raw const (*totals).charged.slots;
            let slots: Slots = (0..nr.min(topdown_common::MAX_COUNTERS))
                .map(|i| charged.cast::<Reading>().add(i).read_volatile())
                .collect();
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let again = (&raw const (*totals).header.tid).read_volatile();
            if header.tid != held || header.tgid == 0 || again != held {
                return None;
            }
            splits.extend(split);
            Some(ThreadRecord { header, slots })
        }
    }

    /// A pointer to slot `slot`; `None` beyond the mapping.
    fn slot(&self, slot: u32) -> Option<*const ThreadTotals> {
        let map = self.map.as_ref().filter(|_| slot < self.mapped)?;
        // SAFETY: inside the mapping (checked against the slots mapped).
        Some(unsafe { map.as_ptr().cast::<ThreadTotals>().add(slot as usize) })
    }
}

/// A new read-only mapping of the first `slots` slots of the array behind `fd`.
fn map_slots(fd: &OwnedFd, slots: u32) -> io::Result<MmapRaw> {
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
    // The kernel sized the map's memory to hold every slot, rounded up to pages.
    MmapOptions::new()
        .len(len)
        .map_raw_read_only(fd.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd as _, FromRawFd as _};

    use super::*;

    /// `BPF_MAP_CREATE` of an mmap-able array of `slots` [`ThreadTotals`]; `None` without the
    /// privilege.
    fn thread_array(slots: u32) -> Option<OwnedFd> {
        /// `BPF_F_MMAPABLE`.
        const MMAPABLE: u32 = 1 << 10;
        // map_type (2: array), key_size, value_size, max_entries, map_flags (union bpf_attr's
        // first member, zero beyond).
        let mut attr = [0u32; 30];
        attr[..5].copy_from_slice(&[2, 4, size_of::<ThreadTotals>() as u32, slots, MMAPABLE]);
        // SAFETY: a zeroed bpf_attr with its map-creation fields set.
        let fd = unsafe { libc::syscall(libc::SYS_bpf, 0, attr.as_mut_ptr(), size_of_val(&attr)) };
        if fd < 0 {
            let error = io::Error::last_os_error();
            assert_eq!(
                error.raw_os_error(),
                Some(libc::EPERM),
                "BPF_MAP_CREATE: {error}"
            );
            return None;
        }
        // SAFETY: the kernel just returned this descriptor to us.
        Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// Writes `totals` into slot `slot` as the kernel programs would (`BPF_MAP_UPDATE_ELEM`).
    fn write(fd: &OwnedFd, slot: u32, totals: &ThreadTotals) {
        // map_fd, pad, key, value, flags (the elem member).
        let attr = [
            u64::from(fd.as_raw_fd() as u32),
            (&raw const slot) as u64,
            std::ptr::from_ref(totals) as u64,
            0,
        ];
        // SAFETY: a bpf_attr elem member pointing at a key and value of the map's sizes.
        let rc = unsafe { libc::syscall(libc::SYS_bpf, 2, attr.as_ptr(), size_of_val(&attr)) };
        assert_eq!(rc, 0, "BPF_MAP_UPDATE_ELEM: {}", io::Error::last_os_error());
    }

    fn totals(tid: u32, tgid: u32, count: u64) -> ThreadTotals {
        let mut totals = ThreadTotals::new(tid, tgid);
        totals.charged.slots[0].count = count;
        totals.charged.slots[1].count = count + 1;
        totals.behind.rest.idle_ns = count;
        totals
    }

    /// A thread is read from its slot only while the slot holds its tid, a freed slot's zeroed
    /// header is never a thread, and slots beyond the first mapping are read once it grows to
    /// cover them; the test needs root, and says so without it.
    #[test]
    fn slots_read_back_as_the_kernel_wrote_them_and_the_mapping_grows() {
        let Some(fd) = thread_array(5000) else {
            eprintln!("SKIPPED: creating a BPF map needs root (CAP_BPF): run as root, as CI does");
            return;
        };
        write(&fd, 3, &totals(41, 40, 1000));
        write(&fd, 4000, &totals(42, 40, 2000));
        // A freed slot: tid and header zeroed, readings left.
        write(&fd, 5, &totals(0, 0, 77));
        let mut mapped = MappedThreads::map(fd.as_fd(), 5000, true).unwrap();

        let mut splits = Vec::new();
        let read = mapped
            .get(3, 41, 2, &mut splits)
            .expect("slot 3 holds thread 41");
        assert_eq!((read.header.tid, read.header.tgid), (41, 40));
        assert_eq!(
            splits.iter().map(|s| s.rest.idle_ns).collect::<Vec<_>>(),
            [1000],
            "its split, read"
        );
        let unsplit = MappedThreads::map(fd.as_fd(), 5000, false).unwrap();
        let mut none = Vec::new();
        let lean = unsplit
            .get(3, 41, 2, &mut none)
            .expect("slot 3 holds thread 41");
        assert_eq!(
            (none.len(), lean.slots.clone()),
            (0, read.slots.clone()),
            "with the split off, not read"
        );
        assert_eq!(
            read.slots.iter().map(|r| r.count).collect::<Vec<_>>(),
            [1000, 1001]
        );
        let mut splits = Vec::new();
        assert!(
            mapped.get(3, 99, 2, &mut splits).is_none(),
            "another tid: not that thread"
        );
        assert!(
            mapped.get(5, 0, 2, &mut splits).is_none(),
            "a freed slot is no thread"
        );
        assert!(
            mapped.get(4000, 42, 2, &mut splits).is_none(),
            "beyond the first mapping"
        );
        assert!(splits.is_empty(), "no split pushed for a thread not read");

        mapped.cover(4001).unwrap();
        let far = mapped.get(4000, 42, 1, &mut splits).expect("covered now");
        assert_eq!(far.slots.len(), 1);
        assert_eq!(far.slots[0].count, 2000);
        let (mut all, mut splits) = (Vec::new(), Vec::new());
        mapped.each(4001, 2, &mut splits, |record| all.push(record.header.tid));
        assert_eq!(all, [41, 42], "every thread once, a freed slot left out");
        assert_eq!(
            splits.iter().map(|s| s.rest.idle_ns).collect::<Vec<_>>(),
            [1000, 2000],
            "a split for each thread read, in its order"
        );
        assert_eq!(mapped.tids(4001).collect::<Vec<_>>(), [(41, 40), (42, 40)]);

        mapped.cover(u32::MAX).unwrap();
        assert!(
            mapped.get(4999, 1, 1, &mut splits).is_none(),
            "the last slot: free"
        );
        assert!(
            mapped.get(5000, 1, 1, &mut splits).is_none(),
            "beyond the array"
        );
    }
}
