//! The region API as a C shared library (`include/topdown_region.h`):
//! `cargo build --release -p topdown-user --example topdown_region` writes
//! `target/release/examples/libtopdown_region.so`. The functions are
//! `topdown_user::region::c_api`'s; this crate only makes them a shared library.

pub use topdown_user::region::c_api::*;
