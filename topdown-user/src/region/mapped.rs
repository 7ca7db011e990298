//! A counter of the calling thread opened with `perf_event_open` and mapped, read from user space
//! with RDPMC through the mmap page protocol (`include/uapi/linux/perf_event.h`): under the
//! page's seqlock (`lock`), when `cap_user_rdpmc` is set and `index` is not 0, the count is
//! `offset` plus RDPMC of counter `index - 1`, sign-extended from `pmc_width` bits. Where the
//! kernel does not allow it (software events, `/sys/bus/event_source/devices/cpu/rdpmc` = 0, a
//! counter not scheduled), the page says so and the count comes from read(2).

use std::{
    fs::File,
    io::Read as _,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    ptr::addr_of,
    sync::atomic::{Ordering, compiler_fence},
};

use anyhow::{Context as _, Result, bail};
use perf_event_open_sys::bindings::{perf_event_attr, perf_event_mmap_page};

/// Bit of the page's `capabilities` that allows RDPMC (`cap_user_rdpmc`).
const CAP_USER_RDPMC: u64 = 1 << 2;

/// The RDPMC state of a mapped counter, read consistently under the page's seqlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageState {
    /// RDPMC index + 1 (0: not readable with RDPMC now).
    pub index: u32,
    /// What to add to the hardware count.
    pub offset: i64,
    /// Bits the hardware counter has.
    pub pmc_width: u16,
    /// Whether user RDPMC is allowed for this counter.
    pub user_rdpmc: bool,
    /// RDPMC of `index - 1`, when allowed (raw, not sign-extended).
    pub raw: Option<u64>,
}

/// An opened, mapped counter of the calling thread.
pub struct MappedCounter {
    file: File,
    /// Its first page (a `perf_event_mmap_page`), unmapped when dropped.
    page: memmap2::MmapRaw,
}

impl MappedCounter {
    /// Opens `attr` for the calling thread on any CPU (in `group`, when given) and maps its
    /// page.
    pub fn open(attr: &perf_event_attr, group: Option<&Self>) -> Result<Self> {
        let mut attr = *attr;
        let group_fd = group.map_or(-1, |g| g.file.as_raw_fd());
        // SAFETY: attr is a valid perf_event_attr; the result is checked.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(
                &raw mut attr,
                0,
                -1,
                group_fd,
                libc::c_ulong::from(perf_event_open_sys::bindings::PERF_FLAG_FD_CLOEXEC),
            )
        };
        if fd < 0 {
            let error = std::io::Error::last_os_error();
            bail!(
                "perf_event_open (type {}, config {:#x}) failed: {error}",
                attr.type_,
                attr.config
            );
        }
        // SAFETY: a new fd nothing else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: sysconf has no preconditions.
        let length = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .context("the page size")?;
        let page = memmap2::MmapOptions::new()
            .len(length)
            .map_raw_read_only(&file)
            .context("mapping the counter's page failed")?;
        Ok(Self { file, page })
    }

    /// The counter's file (for ioctls and read(2)).
    pub const fn file(&self) -> &File {
        &self.file
    }

    /// The page's RDPMC state, read under its seqlock; with `rdpmc`, also RDPMC of the counter
    /// when the page allows it.
    pub fn state(&self, rdpmc: bool) -> PageState {
        let page = self.page.as_ptr().cast::<perf_event_mmap_page>();
        loop {
            // SAFETY: the page is mapped for the life of self; fields are read volatile, as
            // the kernel updates them.
            let (seq, state) = unsafe {
                let seq = addr_of!((*page).lock).read_volatile();
                compiler_fence(Ordering::Acquire);
                let index = addr_of!((*page).index).read_volatile();
                let offset = addr_of!((*page).offset).read_volatile();
                let width = addr_of!((*page).pmc_width).read_volatile();
                let caps = addr_of!((*page).__bindgen_anon_1.capabilities).read_volatile();
                let user_rdpmc = caps & CAP_USER_RDPMC != 0;
                let raw = (rdpmc && user_rdpmc && index != 0).then(|| read_pmc(index - 1));
                (
                    seq,
                    PageState {
                        index,
                        offset,
                        pmc_width: width,
                        user_rdpmc,
                        raw,
                    },
                )
            };
            compiler_fence(Ordering::Acquire);
            // SAFETY: as above.
            if unsafe { addr_of!((*page).lock).read_volatile() } == seq {
                return state;
            }
        }
    }

    /// The count: by RDPMC where the page allows it (offset + the sign-extended counter), else
    /// by read(2). `by_rdpmc` says which.
    pub fn read(&self) -> Result<(u64, bool)> {
        let state = self.state(true);
        if let Some(raw) = state.raw {
            return Ok((
                state
                    .offset
                    .wrapping_add(sign_extend(raw, state.pmc_width))
                    .cast_unsigned(),
                true,
            ));
        }
        Ok((self.read_syscall()?, false))
    }

    /// The count by read(2) (the first u64 of the counter's read format).
    pub fn read_syscall(&self) -> Result<u64> {
        let mut buffer = [0u8; 8];
        (&self.file)
            .read_exact(&mut buffer)
            .context("read(2) of the counter")?;
        Ok(u64::from_ne_bytes(buffer))
    }
}

/// `value`'s low `width` bits as a signed number (the counter's own width).
pub const fn sign_extend(value: u64, width: u16) -> i64 {
    if width == 0 || width >= 64 {
        return value.cast_signed();
    }
    let shift = 64 - width as u32;
    (value << shift).cast_signed() >> shift
}

/// RDPMC of counter `ecx` (a fixed counter: bit 30; the PERF_METRICS value: bit 29).
#[cfg(target_arch = "x86_64")]
pub fn read_pmc(ecx: u32) -> u64 {
    let (low, high): (u32, u32);
    // SAFETY: only called when the mmap page says user RDPMC is allowed for this index.
    unsafe {
        std::arch::asm!(
            "rdpmc",
            in("ecx") ecx,
            out("eax") low,
            out("edx") high,
            options(nomem, nostack, preserves_flags)
        );
    }
    (u64::from(high) << 32) | u64::from(low)
}

/// RDPMC is x86 only: elsewhere no page allows it and counts come from read(2).
#[cfg(not(target_arch = "x86_64"))]
pub fn read_pmc(_ecx: u32) -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sign_extend_from_the_counter_width() {
        assert_eq!(sign_extend(0xffff_ffff_ffff, 48), -1);
        assert_eq!(sign_extend(0x7fff_ffff_ffff, 48), 0x7fff_ffff_ffff);
        assert_eq!(sign_extend(0x1_0000_0005, 32), 5);
        assert_eq!(sign_extend(5, 0), 5);
    }
}
