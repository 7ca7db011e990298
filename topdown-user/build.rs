//! Embeds the BPF object that `cargo xtask build-ebpf` built (path in `TOPDOWN_EBPF_OBJ`, or the
//! default target path). Without one the binary still builds (for `cargo clippy`, unit tests)
//! and says at run time how to build it.
use std::{env, fs, path::PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=TOPDOWN_EBPF_OBJ");
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let object = env::var_os("TOPDOWN_EBPF_OBJ").map_or_else(
        || manifest.join("../target/bpfel-unknown-none/release/topdown-ebpf"),
        PathBuf::from,
    );
    println!("cargo:rerun-if-changed={}", object.display());
    let dest = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo")).join("topdown-ebpf.o");
    let bytes = fs::read(&object).unwrap_or_default();
    fs::write(&dest, bytes).expect("writing the embedded BPF object into OUT_DIR");
}
