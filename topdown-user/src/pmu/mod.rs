//! What the machine can count: PMUs from sysfs, and the counter sets built on them.

pub mod counter_set;
pub mod event_key;
pub mod event_spec;
pub mod event_table;
pub mod groups;
pub mod machine;
pub mod memory_events;
pub mod sysfs;
pub mod topdown_model;
pub mod topology;
