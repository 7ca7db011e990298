//! c2c on this host: the model is the `topdown-c2c` crate's (re-exported here); this room
//! splits its ranked lines by the cgroup or container of the sampled tasks ([`groups`]).

pub mod groups;

pub use topdown_c2c::c2c::*;
