//! The subcommands' drivers: the only room that takes the command line's types and wires the
//! others together: live counting (`stat`, with `per_core` and `drilldown`), `serve`, `record`'s
//! and `report`'s recordings, `plot`, `analyze`, `c2c` (report, record, live), `decode`
//! and `generate` (man pages, completions).

pub mod analyze;
pub mod c2c;
pub mod c2c_live;
pub mod check;
pub mod decode;
pub mod diff;
pub mod drilldown;
pub mod generate;
pub mod per_core;
pub mod plot;
pub mod report;
pub mod serve;
pub mod stat;
