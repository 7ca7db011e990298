//! What perf shows for a code address in c2c reports: the symbol (`[.] name`), the object's
//! short name and the source line, from the ELF file of the sample's mapping (blazesym), with
//! perf's spellings for what cannot be resolved.

use std::{collections::HashMap, path::Path};

use blazesym::symbolize::{Input, Symbolized, Symbolizer, source::Elf, source::Source};

use super::perf_data::Recording;

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
    recording: &'a Recording,
    symbolizer: Symbolizer,
    cache: HashMap<(u32, u64, bool), Code>,
    /// Whether each object path names a regular file (the recording names them, so they are
    /// input: a FIFO or a device there would block or flood the report).
    readable: HashMap<String, bool>,
}

impl<'a> CodeNames<'a> {
    /// Names for `recording`'s samples; object paths are read as the recording names them
    /// (relative ones from the current directory, as perf does).
    pub fn new(recording: &'a Recording) -> Self {
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
                .or_insert_with(|| std::fs::metadata(&map.path).is_ok_and(|m| m.is_file()));
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
