//! `-e` event specs resolved as a live run resolves them, on the Ice Lake sysfs fixture (perf
//! syntax, raw, generic names, the CPU's named events, libpfm4 style) and after the list split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdown_user::pmu::{
    event_spec::{EventResolver, split_event_list},
    event_table::EventTable,
    sysfs::SysRoot,
};

thread_local! {
    /// Built once: reading the fixture's PMU and the model's event table per input made the
    /// target ~70 times slower, without covering anything the first build does not.
    static RESOLVER: EventResolver<'static> = EventResolver::new(
        // Once per thread, for the life of the process.
        Box::leak(Box::new(SysRoot::at(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/sysfs/icelake"
        )))),
        Some("cpu"),
        EventTable::for_model("icelake"),
    )
    .expect("the fixture's PMU");
}

fuzz_target!(|spec: &str| {
    RESOLVER.with(|resolver| {
        for one in split_event_list(spec).unwrap_or_default() {
            let _ = resolver.resolve(&one);
        }
    });
});
