//! Which variable, and which field of it, a sampled data address is: for data in a mapping of an
//! ELF file (a program's or a library's globals and statics), the DWARF of that file names the
//! variable at the address (`DW_TAG_variable` with a `DW_OP_addr` location) and its type's layout
//! names the member at the offset (`pair.b`, `slots[3].head`); without DWARF, the symbol table
//! names the variable only (`counters+0x8`). Data no variable's address holds (heap, stack) is
//! named by the type of the accessing instruction's operand ([`super::operand_types`]).

use std::{borrow::Cow, collections::HashMap, fs::File, path::Path};

use gimli::{AttributeValue, EndianSlice, RunTimeEndian, Unit, UnitOffset};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use super::perf_data::Recording;

/// How deep a type's layout is followed (nested structs and arrays).
const MAX_DEPTH: usize = 8;

/// What a type holds, as far as naming an offset in it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// Nothing inside to name (a scalar, a pointer, an unknown type).
    Leaf,
    /// Members at their offsets, with their sizes.
    Struct(Vec<Member>),
    /// Elements of `size` bytes each.
    Array { size: u64, element: Box<Layout> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Member {
    name: String,
    offset: u64,
    size: u64,
    layout: Layout,
}

/// A global or static variable.
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
    recording: &'a Recording,
    objects: HashMap<String, Option<ObjectData>>,
    /// Operand names by (object, code address in it).
    operands: HashMap<(String, u64), Option<DataName>>,
}

impl<'a> DataNames<'a> {
    /// For the mappings of `recording`.
    pub fn new(recording: &'a Recording) -> Self {
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
            let operand = super::operand_types::memory_operand(code, pc)?;
            let elf = object::File::parse(&*object.bytes).ok()?;
            let sections = dwarf_sections(&elf)?;
            let dwarf = sections.borrow(|section| EndianSlice::new(section, endian(&elf)));
            let found = super::operand_types::name(&dwarf, pc, operand)?;
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

/// Appends to `name` the member of `layout` at `offset` (`.b`, `[3]`), and its own members.
pub(super) fn field(layout: &Layout, offset: u64, name: &mut String, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match layout {
        Layout::Leaf => {}
        Layout::Struct(members) => {
            if let Some(member) = members
                .iter()
                .find(|m| m.offset <= offset && offset < m.offset + m.size.max(1))
            {
                name.push('.');
                name.push_str(&member.name);
                field(&member.layout, offset - member.offset, name, depth + 1);
            }
        }
        Layout::Array { size, element } if *size > 0 => {
            name.push_str(&format!("[{}]", offset / size));
            field(element, offset % size, name, depth + 1);
        }
        Layout::Array { .. } => {}
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

/// DWARF read from a file's bytes.
pub(super) type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// The byte order of `elf`.
fn endian(elf: &object::File<'_>) -> RunTimeEndian {
    if elf.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    }
}

/// The DWARF sections of `elf` (decompressed where compressed; empty where absent).
fn dwarf_sections<'a>(elf: &object::File<'a>) -> Option<gimli::DwarfSections<Cow<'a, [u8]>>> {
    gimli::DwarfSections::load(|id| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(elf
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    })
    .ok()
}

/// Every variable with a fixed address in the DWARF of `elf`, with its type's layout.
fn dwarf_variables(elf: &object::File<'_>) -> Option<Vec<Variable>> {
    let sections = dwarf_sections(elf)?;
    let dwarf = sections.borrow(|section| EndianSlice::new(section, endian(elf)));
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

/// The size and layout of the type at `offset` of `unit`.
pub(super) fn type_layout(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<Reader<'_>>,
    offset: UnitOffset,
    depth: usize,
) -> (u64, Layout) {
    let Ok(entry) = unit.entry(offset) else {
        return (0, Layout::Leaf);
    };
    let size = entry
        .attr_value(gimli::DW_AT_byte_size)
        .and_then(|v| v.udata_value());
    let inner = match entry.attr_value(gimli::DW_AT_type) {
        Some(AttributeValue::UnitRef(inner)) => Some(inner),
        _ => None,
    };
    if depth > MAX_DEPTH {
        return (size.unwrap_or(0), Layout::Leaf);
    }
    match entry.tag() {
        gimli::DW_TAG_typedef
        | gimli::DW_TAG_const_type
        | gimli::DW_TAG_volatile_type
        | gimli::DW_TAG_atomic_type
        | gimli::DW_TAG_restrict_type => inner.map_or((0, Layout::Leaf), |inner| {
            type_layout(dwarf, unit, inner, depth + 1)
        }),
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
            let mut members = Vec::new();
            if let Ok(mut tree) = unit.entries_tree(Some(offset))
                && let Ok(root) = tree.root()
            {
                let mut children = root.children();
                while let Ok(Some(child)) = children.next() {
                    let member = child.entry();
                    if member.tag() != gimli::DW_TAG_member {
                        continue;
                    }
                    let name = member
                        .attr_value(gimli::DW_AT_name)
                        .and_then(|n| dwarf.attr_string(unit, n).ok())
                        .map_or_else(
                            || "<anonymous>".to_owned(),
                            |n| n.to_string_lossy().into_owned(),
                        );
                    let at = member
                        .attr_value(gimli::DW_AT_data_member_location)
                        .and_then(|v| v.udata_value())
                        .unwrap_or(0);
                    let (size, layout) = match member.attr_value(gimli::DW_AT_type) {
                        Some(AttributeValue::UnitRef(kind)) => {
                            type_layout(dwarf, unit, kind, depth + 1)
                        }
                        _ => (0, Layout::Leaf),
                    };
                    members.push(Member {
                        name,
                        offset: at,
                        size,
                        layout,
                    });
                }
            }
            (size.unwrap_or(0), Layout::Struct(members))
        }
        gimli::DW_TAG_array_type => {
            let (element_size, element) = inner.map_or((0, Layout::Leaf), |inner| {
                type_layout(dwarf, unit, inner, depth + 1)
            });
            let mut count = 1u64;
            if let Ok(mut tree) = unit.entries_tree(Some(offset))
                && let Ok(root) = tree.root()
            {
                let mut children = root.children();
                while let Ok(Some(child)) = children.next() {
                    let range = child.entry();
                    if range.tag() != gimli::DW_TAG_subrange_type {
                        continue;
                    }
                    let length = range
                        .attr_value(gimli::DW_AT_count)
                        .and_then(|v| v.udata_value())
                        .or_else(|| {
                            range
                                .attr_value(gimli::DW_AT_upper_bound)
                                .and_then(|v| v.udata_value())
                                .map(|upper| upper + 1)
                        })
                        .unwrap_or(0);
                    count = count.saturating_mul(length);
                }
            }
            (
                size.unwrap_or(element_size.saturating_mul(count)),
                Layout::Array {
                    size: element_size,
                    element: Box::new(element),
                },
            )
        }
        _ => (size.unwrap_or(0), Layout::Leaf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_name_the_member_down_to_array_elements() {
        let inner = Layout::Struct(vec![
            Member {
                name: "head".into(),
                offset: 0,
                size: 8,
                layout: Layout::Leaf,
            },
            Member {
                name: "tail".into(),
                offset: 8,
                size: 8,
                layout: Layout::Leaf,
            },
        ]);
        let outer = Layout::Struct(vec![
            Member {
                name: "lock".into(),
                offset: 0,
                size: 4,
                layout: Layout::Leaf,
            },
            Member {
                name: "slots".into(),
                offset: 8,
                size: 64,
                layout: Layout::Array {
                    size: 16,
                    element: Box::new(inner),
                },
            },
        ]);
        let named = |offset| {
            let mut name = "queue".to_owned();
            field(&outer, offset, &mut name, 0);
            name
        };
        assert_eq!(named(0), "queue.lock");
        assert_eq!(named(8), "queue.slots[0].head");
        assert_eq!(named(8 + 3 * 16 + 8), "queue.slots[3].tail");
        assert_eq!(named(5), "queue", "padding after lock: the variable only");
    }
}
