//! A perf.data file, whole, through `c2c report`'s reading, aggregation (with the sharing
//! labels' per-word table) and the tables that need no symbols (statistics and the Shared Data
//! Cache Line Table with its sharing columns). Errors are fine; a panic, an abort, a hang or a
//! huge allocation is a finding.
#![no_main]

use std::io::Write as _;

use libfuzzer_sys::fuzz_target;
use topdown_user::{
    c2c::{aggregate, options::ReportOptions, rank, sharing},
    report::c2c::{line_table, stats},
    symbols::data_names,
};

fuzz_target!(|data: &[u8]| {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    file.write_all(data).expect("writing the input");
    let options = ReportOptions {
        sharing: true,
        ..ReportOptions::default()
    };
    if let Ok((recording, data)) = aggregate::read_file(file.path(), options, &|_| {}) {
        let _ = stats::render(&data, &recording.events, options);
        let mut names = data_names::DataNames::new(&recording);
        let ranking = rank::rank(&data, options);
        let fixes: Vec<_> = ranking
            .lines
            .iter()
            .map(|line| sharing::fix(&data, line, &mut names, options.line_size()))
            .collect();
        let _ = line_table::render(&data, &ranking, options, &fixes);
    }
});
