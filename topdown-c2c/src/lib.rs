//! perf.data and what c2c makes of it, with no tie to the collector: [`perf_file`] reads and
//! writes the file `perf c2c record` and `perf mem record` write (and takes the same contents
//! from the running host); [`symbols`] names code and data addresses (blazesym, DWARF);
//! [`c2c`] is the model (memory samples into cache lines, ranked, their Pareto rows named,
//! their sharing analysed); [`cpus`] reads and writes the kernel's CPU lists. `topdown-user`
//! re-exports these and draws them.

pub mod c2c;
pub mod cpus;
pub mod perf_file;
pub mod symbols;
