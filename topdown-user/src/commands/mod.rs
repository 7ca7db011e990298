//! The subcommands' drivers: the only room that takes the command line's types and wires the
//! others together (issue 22 moves every driver here; `stat`, `serve`, `analyze`, `per_core`,
//! `drilldown`, `c2c`'s commands and `plot` are still in their own rooms).

pub mod c2c;
pub mod c2c_live;
pub mod decode;
pub mod report;
