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
