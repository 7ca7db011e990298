//! Writes the perf.data of a c2c spec (see `topdown_tests::c2c_spec`) for the c2c report
//! benchmark: `c2c_spec_data SPEC.json DIR` writes `DIR/perf.data` (and the ELF files the
//! spec's mappings name, under DIR).

fn main() {
    let args: Vec<std::path::PathBuf> = std::env::args_os().skip(1).map(Into::into).collect();
    let [spec, dir] = args.as_slice() else {
        eprintln!("usage: c2c_spec_data SPEC.json DIR");
        std::process::exit(2);
    };
    let data = topdown_tests::perf_data_of(spec, dir);
    println!("{}", data.display());
}
