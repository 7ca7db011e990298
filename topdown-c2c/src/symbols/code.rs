//! What perf shows for a code address in c2c reports: the symbol (`[.] name`), the object's
//! short name and the source line, from the ELF file of the sample's mapping (blazesym), with
//! perf's spellings for what cannot be resolved.

use std::{collections::HashMap, path::Path};

use blazesym::symbolize::{Input, Symbolized, Symbolizer, source::Elf, source::Source};

use crate::perf_file::contents::PerfData;

/// perf's `SRCLINE_UNKNOWN`.
const SRCLINE_UNKNOWN: &str = "??:0";

/// The code at one address, as perf's symbol, dso and srcline columns show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Code {
    /// `[.] name`, `[k] name`, or `[.] 0x...` when no symbol holds the address.
    pub symbol: String,
    /// Whether `symbol` is a resolved name (perf pads and cuts only those).
    pub resolved: bool,
    /// The object's short name (`app`, `libc.so.6`), `[unknown]` without a mapping.
    pub object: String,
    /// `file.c:42`, or `??:0`.
    pub srcline: String,
}

/// Resolves code addresses of one recording, each object opened once.
pub struct CodeNames<'a> {
    recording: &'a PerfData,
    symbolizer: Symbolizer,
    cache: HashMap<(u32, u64, bool), Code>,
    /// Whether each object path may be opened as an object (see [`symbolizable`]): the
    /// recording names them, so they are input.
    readable: HashMap<String, bool>,
}

impl<'a> CodeNames<'a> {
    /// Names for `recording`'s samples; object paths are read as the recording names them
    /// (relative ones from the current directory, as perf does).
    pub fn new(recording: &'a PerfData) -> Self {
        Self {
            recording,
            symbolizer: Symbolizer::new(),
            cache: HashMap::new(),
            readable: HashMap::new(),
        }
    }

    /// The name of thread `tid` (its latest COMM record), empty when unknown.
    pub fn comm(&self, tid: u32) -> String {
        self.recording.comms.get(&tid).cloned().unwrap_or_default()
    }

    /// The code at `ip` in process `pid`, sampled in kernel mode or not.
    pub fn code(&mut self, pid: u32, ip: u64, kernel: bool) -> Code {
        if let Some(code) = self.cache.get(&(pid, ip, kernel)) {
            return code.clone();
        }
        let level = if kernel { 'k' } else { '.' };
        let mapping = if kernel {
            None
        } else {
            self.recording.mapping(pid, ip)
        };
        let mut code = Code {
            symbol: format!("[{level}] {ip:#018x}"),
            resolved: false,
            object: "[unknown]".into(),
            srcline: SRCLINE_UNKNOWN.into(),
        };
        if let Some(map) = mapping {
            code.object = Path::new(&map.path)
                .file_name()
                .map_or_else(|| map.path.clone(), |n| n.to_string_lossy().into_owned());
            let regular = *self
                .readable
                .entry(map.path.clone())
                .or_insert_with(|| symbolizable(Path::new(&map.path)));
            let source = Source::Elf(Elf::new(&map.path));
            let offset = ip.wrapping_sub(map.start).wrapping_add(map.pgoff);
            if regular
                && let Ok(Symbolized::Sym(sym)) = self
                    .symbolizer
                    .symbolize_single(&source, Input::FileOffset(offset))
            {
                code.symbol = format!("[{level}] {}", sym.name);
                code.resolved = true;
                if let Some(info) = sym.code_info
                    && let Some(line) = info.line
                {
                    let file = Path::new(&info.file);
                    let name = file.file_name().unwrap_or(file.as_os_str());
                    code.srcline = format!("{}:{line}", name.to_string_lossy());
                }
            }
        }
        self.cache.insert((pid, ip, kernel), code.clone());
        code
    }
}

/// Filesystems whose files are the kernel's, not objects: `/proc/kcore` is a regular file of
/// 128 TiB that parses as ELF, and many others are regular files generated on read.
const PSEUDO_FILESYSTEMS: [i64; 11] = [
    0x9fa0,      // proc
    0x6265_6572, // sysfs
    0x6462_6720, // debugfs
    0x7472_6163, // tracefs
    0x6367_7270, // cgroup2
    0x0002_7e0b, // cgroup
    0x7363_6673, // securityfs
    0xcafe_4a11, // bpf
    0x6265_6570, // configfs
    0xde5e_81e4, // efivarfs
    0x6165_676c, // pstore
];

/// Whether `path` may be handed to the symbolizer: a regular file (a FIFO would block, a
/// device flood), on a filesystem that holds files rather than the kernel's views, starting
/// with the ELF magic.
pub(super) fn symbolizable(path: &Path) -> bool {
    use std::{io::Read as _, os::unix::ffi::OsStrExt as _};
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path and a statfs to fill.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c_path.as_ptr(), &raw mut fs) } != 0
        || PSEUDO_FILESYSTEMS.contains(&(fs.f_type as i64))
    {
        return false;
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok_and(|()| magic == *b"\x7fELF")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_elf_files_on_real_filesystems_are_symbolized() {
        let exe = std::env::current_exe().unwrap();
        assert!(symbolizable(&exe), "{} is an ELF file", exe.display());
        for kernel_view in [
            "/proc/kcore",
            "/proc/self/status",
            "/sys/kernel/btf/vmlinux",
        ] {
            assert!(!symbolizable(Path::new(kernel_view)), "{kernel_view}");
        }
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("not-elf");
        std::fs::write(&text, "hello").unwrap();
        assert!(!symbolizable(&text), "a text file");
        assert!(!symbolizable(dir.path()), "a directory");
        assert!(!symbolizable(Path::new("/dev/zero")), "a device");
        assert!(!symbolizable(&dir.path().join("missing")), "a missing file");
    }
}
