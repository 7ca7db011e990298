//! The BPF object built by `cargo xtask build-ebpf`, embedded in the binary.

use anyhow::{Result, bail};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/topdown-ebpf.o"));

/// The embedded object, or an error that says how to build it.
pub fn bytes() -> Result<&'static [u8]> {
    if OBJECT.is_empty() {
        bail!(
            "this binary was built without its BPF object: build with `cargo xtask build-ebpf` \
             first, or run it through `cargo xtask run`"
        );
    }
    Ok(OBJECT)
}

#[cfg(test)]
mod tests {
    use ::object::{Object as _, ObjectSymbol as _};
    use topdown_common::names::{global, map, program};

    /// Every map, global and program the loader names (`topdown_common::names`) is a symbol
    /// of the built object: a renamed `static` or function on the kernel side fails here, not
    /// at load time on a user's host.
    #[test]
    fn the_object_has_every_name_the_loader_uses() {
        let bytes = match super::bytes() {
            Ok(bytes) => bytes,
            Err(error) if std::env::var_os("CI").is_none() => {
                eprintln!("SKIPPED: no BPF object in this build ({error:#})");
                return;
            }
            Err(error) => panic!("CI builds the BPF object first: {error:#}"),
        };
        let elf = ::object::File::parse(bytes).expect("the BPF object is an ELF file");
        let symbols: std::collections::HashSet<&str> =
            elf.symbols().filter_map(|s| s.name().ok()).collect();
        for name in map::ALL.iter().chain(&global::ALL).chain(&program::ALL) {
            assert!(symbols.contains(name), "the BPF object has no {name}");
        }
    }
}
