//! What the machine can count: PMUs from sysfs, and the counter sets built on them.

pub mod counter_set;
pub mod machine;
pub mod sysfs;
pub mod topdown_model;
