//! A PMU's `format/` file and the value a term gives it (`config:0-7,21` and `0x3c`), as the
//! sysfs reader applies them; then the same text as an `events/` alias's terms on the fixture's
//! `cpu` PMU.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdown_user::pmu::sysfs::{EventConfig, SysRoot, place_bits};

fuzz_target!(|input: (&str, u64, &str)| {
    let (format, value, terms) = input;
    let _ = place_bits(format, value, &mut EventConfig::default());
    let sys = SysRoot::at(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sysfs/icelake"
    ));
    if let Ok(Some(pmu)) = sys.pmu("cpu") {
        let _ = pmu.encode(terms);
    }
});
