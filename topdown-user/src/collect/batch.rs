//! A whole hash map in a few system calls: `BPF_MAP_LOOKUP_BATCH` (Linux 5.6) copies up to
//! [`CHUNK`] keys and values per call, where walking the map costs two calls per entry
//! (`get_next_key`, then a lookup). At 30,000 live threads the walk was 43 % of the tool's time
//! per interval (issue 33). aya 0.16 has no batch operations, so the call is made here, on the
//! map's descriptor; kernels or maps without it are walked as before ([`read_all`] says so).

use std::{
    io,
    mem::{MaybeUninit, size_of},
    os::fd::{AsRawFd as _, BorrowedFd},
};

use aya::Pod;

/// `BPF_MAP_LOOKUP_BATCH` in `enum bpf_cmd`.
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// The kernel's `ENOTSUPP` (524), which it returns for maps without batch operations.
const ENOTSUPP: i32 = 524;
/// Entries asked for per call.
const CHUNK: usize = 1024;

/// `union bpf_attr`'s `batch` member, as `BPF_MAP_*_BATCH` commands take it.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Hands every `(key, value)` of the hash map behind `fd` to `each`, a call's worth at a time
/// (memory holds one call's entries, not the map's); `false` when this kernel or map cannot be
/// read by batch (nothing was handed: the caller walks it instead). A hash map's batch token is
/// its bucket index; entries added or removed while it is read are there or not, as with a
/// walk, and none is seen twice.
pub fn read_each<K: Pod, V: Pod>(
    fd: BorrowedFd<'_>,
    mut each: impl FnMut(K, V),
) -> io::Result<bool> {
    let mut chunk = CHUNK;
    let mut keys: Vec<MaybeUninit<K>> = Vec::new();
    let mut values: Vec<MaybeUninit<V>> = Vec::new();
    let (mut token_in, mut token_out) = (0u32, 0u32);
    let mut first = true;
    loop {
        keys.resize_with(chunk, MaybeUninit::uninit);
        values.resize_with(chunk, MaybeUninit::uninit);
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                (&raw const token_in) as u64
            },
            out_batch: (&raw mut token_out) as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: chunk as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        // SAFETY: `attr` is a valid `bpf_attr` batch member of its exact size; `keys` and
        // `values` have room for `count` entries, and the kernel writes at most that many.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &raw mut attr,
                size_of::<BatchAttr>(),
            )
        };
        let error = (rc < 0).then(io::Error::last_os_error);
        match error.as_ref().and_then(io::Error::raw_os_error) {
            None | Some(libc::ENOENT) => {}
            // A bucket holds more entries than a call asked for: ask for more.
            Some(libc::ENOSPC) => {
                chunk *= 2;
                continue;
            }
            Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP) if first => return Ok(false),
            _ => return Err(error.unwrap_or_else(io::Error::last_os_error)),
        }
        let filled = (attr.count as usize).min(chunk);
        for (key, value) in keys[..filled].iter().zip(&values[..filled]) {
            // SAFETY: the kernel wrote `filled` keys and values (Pod: any bytes are a value).
            unsafe { each(key.assume_init_read(), value.assume_init_read()) };
        }
        // ENOENT: the last bucket was read.
        if error.is_some() {
            return Ok(true);
        }
        token_in = token_out;
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd as _, FromRawFd as _, OwnedFd};

    use super::*;

    /// A value as big as a thread's totals are, so a call's buffer spans many pages.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(C)]
    struct Value([u64; 40]);

    // SAFETY: repr(C), u64s only.
    unsafe impl Pod for Value {}

    /// `BPF_MAP_CREATE` of a hash map of `u32` to [`Value`]; `None` without the privilege.
    fn hash_map(max_entries: u32) -> Option<OwnedFd> {
        // map_type, key_size, value_size, max_entries, map_flags (union bpf_attr's first
        // member, zero beyond).
        let mut attr = [0u32; 30];
        attr[..5].copy_from_slice(&[1, 4, size_of::<Value>() as u32, max_entries, 0]);
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

    fn update(fd: BorrowedFd<'_>, key: u32, value: &Value) {
        // map_fd, pad, key, value, flags (the elem member).
        let mut attr = [0u64; 4];
        attr[0] = u64::from(fd.as_raw_fd() as u32);
        attr[1] = (&raw const key) as u64;
        attr[2] = std::ptr::from_ref(value) as u64;
        // SAFETY: a bpf_attr elem member pointing at a key and value of the map's sizes.
        let rc = unsafe { libc::syscall(libc::SYS_bpf, 2, attr.as_mut_ptr(), size_of_val(&attr)) };
        assert_eq!(rc, 0, "BPF_MAP_UPDATE_ELEM: {}", io::Error::last_os_error());
    }

    /// Every entry of the map behind `fd`, as [`read_each`] hands them; `None` where the kernel
    /// cannot read by batch.
    fn read_all(fd: BorrowedFd<'_>) -> Option<Vec<(u32, Value)>> {
        let mut entries = Vec::new();
        read_each(fd, |key, value| entries.push((key, value)))
            .unwrap()
            .then_some(entries)
    }

    /// Every entry comes back once, with its value, across several calls (more entries than a
    /// call asks for) and for an empty map; the test needs root, and says so without it.
    #[test]
    fn a_hash_map_reads_back_whole_by_batch() {
        let Some(map) = hash_map(8192) else {
            eprintln!("SKIPPED: creating a BPF map needs root (CAP_BPF): run as root, as CI does");
            return;
        };
        let empty = read_all(map.as_fd());
        assert_eq!(empty.map(|e| e.len()), Some(0), "an empty map: no entry");
        let value = |key: u32| Value(std::array::from_fn(|i| u64::from(key) * 1000 + i as u64));
        let keys: Vec<u32> = (0..5000).map(|i| i * 7 + 3).collect();
        for &key in &keys {
            update(map.as_fd(), key, &value(key));
        }
        let mut read =
            read_all(map.as_fd()).expect("this kernel reads hash maps by batch (5.6 and newer)");
        read.sort_by_key(|(key, _)| *key);
        assert_eq!(read.len(), keys.len(), "every entry once");
        for ((key, got), &want) in read.iter().zip(&keys) {
            assert_eq!(*key, want);
            assert_eq!(*got, value(want), "key {key}");
        }
    }
}
