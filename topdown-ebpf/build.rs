//! Rebuild the BPF object when bpf-linker changes (it is the linker, not a dependency cargo sees).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
