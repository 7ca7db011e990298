//! Which variable, and which field of it, a sampled data address is: for data in a mapping of an
//! ELF file (a program's or a library's globals and statics), the DWARF of that file names the
//! variable at the address (`DW_TAG_variable` with a `DW_OP_addr` location) and its type's layout
//! names the member at the offset (`pair.b`, `slots[3].head`); without DWARF, the symbol table
//! names the variable only (`counters+0x8`). Data no variable's address holds (heap, stack) is
//! named by the type of the accessing instruction's operand ([`super::operand_types`]).

use std::{collections::HashMap, fs::File, path::Path};

use gimli::AttributeValue;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use super::{
    dwarf::{self, Layout, field, type_layout},
    operand_types,
};
use crate::perf_file::contents::PerfData;

#[derive(Clone, Debug)]
struct Variable {
    address: u64,
    size: u64,
    name: String,
    layout: Layout,
}

/// One ELF file's loadable segments and variables.
#[derive(Debug)]
struct ObjectData {
    /// The file, mapped (its code and DWARF are read again for operand types).
    bytes: memmap2::Mmap,
    /// `(file offset, file size, virtual address)` of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    /// By address.
    variables: Vec<Variable>,
    /// Whether the names come from DWARF (fields too) or only from the symbol table.
    dwarf: bool,
}

/// A data address named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataName {
    /// `counters.b`, `slots[3].head`, `counters+0x8` without DWARF, or the pointee's type and
    /// member (`struct pair.b`) for data named by an operand's type.
    pub name: String,
    /// What named it.
    pub source: NameSource,
}

/// What named a data address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameSource {
    /// The DWARF variable at the address, and its type's members.
    Dwarf,
    /// The symbol table only (no DWARF): the variable, not its fields.
    Symbols,
    /// The type of the pointer `pointer` of `function` that the sampled instruction accessed
    /// the data through (heap or stack data; DWARF of the code).
    OperandType {
        /// The pointer variable.
        pointer: String,
        /// Its function.
        function: String,
    },
}

impl NameSource {
    /// Its name in JSON (`named_by`).
    pub const fn key(&self) -> &'static str {
        match self {
            Self::Dwarf => "dwarf",
            Self::Symbols => "symbols",
            Self::OperandType { .. } => "operand_type",
        }
    }
}

/// Names data addresses of one recording, each object read once.
pub struct DataNames<'a> {
    recording: &'a PerfData,
    objects: HashMap<String, Option<ObjectData>>,
    /// Operand names by (object, code address in it).
    operands: HashMap<(String, u64), Option<DataName>>,
}

impl<'a> DataNames<'a> {
    /// For the mappings of `recording`.
    pub fn new(recording: &'a PerfData) -> Self {
        Self {
            recording,
            objects: HashMap::new(),
            operands: HashMap::new(),
        }
    }

    /// The object mapped at `addr` of process `pid`, with `addr` as an address of that object.
    fn object_at(&mut self, pid: u32, addr: u64) -> Option<(&str, &ObjectData, u64)> {
        let map = self.recording.mappings.get(&pid)?.find(addr)?;
        let file_offset = addr - map.start + map.pgoff;
        let object = self
            .objects
            .entry(map.path.clone())
            .or_insert_with(|| read_object(Path::new(&map.path)))
            .as_ref()?;
        let vaddr = object
            .segments
            .iter()
            .find(|(offset, size, _)| *offset <= file_offset && file_offset < offset + size)
            .map(|(offset, _, vaddr)| vaddr + (file_offset - offset))?;
        Some((&map.path, object, vaddr))
    }

    /// The data the instruction at `ip` of process `pid` accessed, named by the type of the
    /// pointer it went through (see [`super::operand_types`]); `None` where the code has no
    /// DWARF saying which variable holds the operand's base register there.
    pub fn by_operand(&mut self, pid: u32, ip: u64) -> Option<DataName> {
        let map = self.recording.mappings.get(&pid)?.find(ip)?;
        let file_offset = ip - map.start + map.pgoff;
        let key = (map.path.clone(), file_offset);
        if let Some(known) = self.operands.get(&key) {
            return known.clone();
        }
        let named = self.object_at(pid, ip).and_then(|(_, object, pc)| {
            let start = usize::try_from(file_offset).ok()?;
            let code = object
                .bytes
                .get(start..(start + 15).min(object.bytes.len()))?;
            let operand = operand_types::memory_operand(code, pc)?;
            let elf = object::File::parse(&*object.bytes).ok()?;
            let sections = dwarf::sections(&elf)?;
            let dwarf = dwarf::borrow(&sections, &elf);
            let found = operand_types::name(&dwarf, pc, operand)?;
            Some(DataName {
                name: found.name,
                source: NameSource::OperandType {
                    pointer: found.pointer,
                    function: found.function,
                },
            })
        });
        self.operands.insert(key, named.clone());
        named
    }

    /// The variable (and field) at data address `addr` of process `pid`; `None` where the
    /// address is not in a mapped ELF file or no symbol holds it.
    pub fn name(&mut self, pid: u32, addr: u64) -> Option<DataName> {
        let (_, object, vaddr) = self.object_at(pid, addr)?;
        let at = object.variables.partition_point(|v| v.address <= vaddr);
        let variable = object.variables[..at]
            .last()
            .filter(|v| vaddr < v.address + v.size.max(1))?;
        let offset = vaddr - variable.address;
        let name = if object.dwarf {
            let mut name = variable.name.clone();
            field(&variable.layout, offset, &mut name, 0);
            name
        } else if offset == 0 {
            variable.name.clone()
        } else {
            format!("{}+{offset:#x}", variable.name)
        };
        Some(DataName {
            name,
            source: if object.dwarf {
                NameSource::Dwarf
            } else {
                NameSource::Symbols
            },
        })
    }
}

/// Reads the ELF file at `path`: its segments, and its variables from DWARF or, without it,
/// from the symbol table. `None` for what is not a readable ELF file on a real filesystem.
fn read_object(path: &Path) -> Option<ObjectData> {
    if !super::code::symbolizable(path) {
        return None;
    }
    let file = File::open(path).ok()?;
    // SAFETY: read only; a file changed meanwhile gives wrong names, never an access outside
    // the mapping (the parsers check every offset).
    let bytes = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let elf = object::File::parse(&*bytes).ok()?;
    let segments = elf
        .segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            (offset, size, s.address())
        })
        .collect();
    let mut variables = dwarf_variables(&elf).unwrap_or_default();
    let dwarf = !variables.is_empty();
    if !dwarf {
        variables = elf
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Data && s.address() != 0)
            .filter_map(|s| {
                Some(Variable {
                    address: s.address(),
                    size: s.size(),
                    name: s.name().ok()?.to_owned(),
                    layout: Layout::Leaf,
                })
            })
            .collect();
    }
    variables.sort_by_key(|v| v.address);
    Some(ObjectData {
        bytes,
        segments,
        variables,
        dwarf,
    })
}

/// Every variable with a fixed address in the DWARF of `elf`, with its type's layout.
fn dwarf_variables(elf: &object::File<'_>) -> Option<Vec<Variable>> {
    let sections = dwarf::sections(elf)?;
    let dwarf = dwarf::borrow(&sections, elf);
    let mut variables = Vec::new();
    let mut headers = dwarf.units();
    while let Ok(Some(header)) = headers.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut cursor = unit.entries();
        while let Ok(Some(entry)) = cursor.next_dfs() {
            if entry.tag() != gimli::DW_TAG_variable {
                continue;
            }
            let Some(AttributeValue::Exprloc(expression)) = entry.attr_value(gimli::DW_AT_location)
            else {
                continue;
            };
            let mut operations = expression.operations(unit.encoding());
            let Ok(Some(gimli::Operation::Address { address })) = operations.next() else {
                continue;
            };
            // A definition of a declared variable names it through its declaration.
            let declared = match entry.attr_value(gimli::DW_AT_specification) {
                Some(AttributeValue::UnitRef(offset)) => unit.entry(offset).ok(),
                _ => None,
            };
            let named = |attr| {
                entry
                    .attr_value(attr)
                    .or_else(|| declared.as_ref().and_then(|d| d.attr_value(attr)))
            };
            let Some(name) = named(gimli::DW_AT_name)
                .and_then(|n| dwarf.attr_string(&unit, n).ok())
                .map(|n| n.to_string_lossy().into_owned())
            else {
                continue;
            };
            let Some(AttributeValue::UnitRef(kind)) = named(gimli::DW_AT_type) else {
                continue;
            };
            let (size, layout) = type_layout(&dwarf, &unit, kind, 0);
            variables.push(Variable {
                address,
                size,
                name,
                layout,
            });
        }
    }
    Some(variables)
}
