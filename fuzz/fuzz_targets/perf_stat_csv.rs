//! `perf stat -x` output as `analyze` reads it, with `,` and with a multi-byte separator.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdown_user::import::perf_stat_csv;

fuzz_target!(|text: &str| {
    let _ = perf_stat_csv::parse(text, ",");
    let _ = perf_stat_csv::parse(text, ";;");
});
