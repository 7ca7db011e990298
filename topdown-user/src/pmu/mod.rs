//! What the machine can count: PMUs from sysfs, and the counter sets built on them.

pub mod counter_set;
#[rustfmt::skip]
pub mod generated_events;
pub mod machine;
pub mod sysfs;
pub mod topdown_model;
pub mod topdown_set;
