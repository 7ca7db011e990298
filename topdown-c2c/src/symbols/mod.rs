//! Names for sampled addresses: code (symbol, object, source line, through blazesym) and data
//! (the variable and field at an address, or the type of the accessing instruction's operand,
//! from DWARF). One DWARF reader (`dwarf`) serves both data namers.

pub mod code;
pub mod data_names;
mod dwarf;
pub mod operand_types;
