//! `-e` event specs resolved as a live run resolves them, on the Ice Lake sysfs fixture (perf
//! syntax, raw, generic names, the CPU's named events, libpfm4 style) and after the list split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdown_user::pmu::{
    event_spec::{EventResolver, split_event_list},
    event_table::EventTable,
    sysfs::SysRoot,
};

fuzz_target!(|spec: &str| {
    let sys = SysRoot::at(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/sysfs/icelake"
    ));
    let resolver = EventResolver::new(&sys, Some("cpu"), EventTable::for_model("icelake"))
        .expect("the fixture's PMU");
    for one in split_event_list(spec) {
        let _ = resolver.resolve(&one);
    }
});
