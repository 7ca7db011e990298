//! Data that no variable's address names (heap, stack, anonymous memory) named by the type of the
//! instruction that accessed it, as perf's data-type profiling (`perf annotate --data-type`) does:
//! the instruction at the sample's IP is decoded (x86-64, iced-x86), its memory operand's base
//! register and displacement taken, and the DWARF of the code's object asked which variable of
//! the function (or of a function inlined there, or of a block) holds that register at that IP
//! (a `DW_OP_regN` location, for the whole scope or from a location list). If its type is a
//! pointer to (or a reference of) a struct, class or union, the member at the displacement is the
//! field (`struct pair.b`); a pointer to a scalar names the scalar type. With an index register
//! (`p[i].b`) the displacement is taken within one element.
//!
//! Not named: accesses through a register no variable is said to live in at that IP (a pointer
//! loaded from the stack at `-O0`, or recomputed: perf follows the data flow of the function's
//! instructions for those, this does not), through `DW_OP_breg`/`DW_OP_entry_value` locations,
//! RIP-relative ones (globals: named by their address already), and code on other architectures.

use gimli::{AttributeValue, Register, Unit, UnitOffset};
use iced_x86::{Decoder, DecoderOptions, OpKind};

use super::dwarf::{Layout, Reader, field, type_layout};

/// How deep scopes and types are followed.
const MAX_DEPTH: usize = 16;

/// The memory operand of a decoded instruction: `[base + index * scale + displacement]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryOperand {
    /// The base register, as DWARF numbers it.
    pub base: Register,
    /// The displacement.
    pub displacement: i64,
    /// Whether an index register is added (an element of an array of the pointee).
    pub indexed: bool,
}

/// The memory operand of the x86-64 instruction at the start of `code` (at address `ip`), when
/// it has one with a general-purpose 64-bit base register.
pub fn memory_operand(code: &[u8], ip: u64) -> Option<MemoryOperand> {
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let instruction = decoder.decode();
    if instruction.is_invalid()
        || !(0..instruction.op_count()).any(|i| instruction.op_kind(i) == OpKind::Memory)
    {
        return None;
    }
    use iced_x86::Register as R;
    let base = match instruction.memory_base() {
        R::RAX => gimli::X86_64::RAX,
        R::RDX => gimli::X86_64::RDX,
        R::RCX => gimli::X86_64::RCX,
        R::RBX => gimli::X86_64::RBX,
        R::RSI => gimli::X86_64::RSI,
        R::RDI => gimli::X86_64::RDI,
        R::RBP => gimli::X86_64::RBP,
        R::RSP => gimli::X86_64::RSP,
        R::R8 => gimli::X86_64::R8,
        R::R9 => gimli::X86_64::R9,
        R::R10 => gimli::X86_64::R10,
        R::R11 => gimli::X86_64::R11,
        R::R12 => gimli::X86_64::R12,
        R::R13 => gimli::X86_64::R13,
        R::R14 => gimli::X86_64::R14,
        R::R15 => gimli::X86_64::R15,
        _ => return None,
    };
    Some(MemoryOperand {
        base,
        displacement: instruction.memory_displacement64() as i64,
        indexed: instruction.memory_index() != R::None,
    })
}

/// The data an operand reached, named by the pointer it went through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperandName {
    /// The pointee type and the member at the displacement: `struct pair.b`.
    pub name: String,
    /// The pointer variable: `p`.
    pub pointer: String,
    /// The function it is a variable of (the inlined one where it was inlined).
    pub function: String,
}

/// The name of the data `operand` of the instruction at `pc` reached, from `dwarf`.
pub fn name(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    pc: u64,
    operand: MemoryOperand,
) -> Option<OperandName> {
    let mut headers = dwarf.units();
    while let Ok(Some(header)) = headers.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        if !dwarf
            .unit_ranges(&unit)
            .is_ok_and(|ranges| contains(ranges, pc))
        {
            continue;
        }
        let Ok(mut tree) = unit.entries_tree(None) else {
            continue;
        };
        let Ok(root) = tree.root() else {
            continue;
        };
        let mut found = None;
        search(dwarf, &unit, root, pc, operand.base, "", 0, &mut found);
        if let Some((_, variable)) = found {
            return describe(dwarf, &unit, variable, operand);
        }
    }
    None
}

/// A variable found in the register: its depth of scope, name, type and function.
struct Candidate {
    pointer: String,
    function: String,
    kind: UnitOffset,
}

/// Finds, under `node`, the innermost variable of a scope holding `pc` that lives in `register`.
#[allow(clippy::too_many_arguments)]
fn search<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    unit: &Unit<Reader<'a>>,
    node: gimli::EntriesTreeNode<'_, '_, Reader<'a>>,
    pc: u64,
    register: Register,
    function: &str,
    depth: usize,
    found: &mut Option<(usize, Candidate)>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut children = node.children();
    while let Ok(Some(child)) = children.next() {
        let entry = child.entry();
        match entry.tag() {
            gimli::DW_TAG_subprogram
            | gimli::DW_TAG_inlined_subroutine
            | gimli::DW_TAG_lexical_block => {
                if !dwarf
                    .die_ranges(unit, entry)
                    .is_ok_and(|ranges| contains(ranges, pc))
                {
                    continue;
                }
                let name = if entry.tag() == gimli::DW_TAG_lexical_block {
                    function.to_owned()
                } else {
                    entity_name(dwarf, unit, entry).unwrap_or_else(|| "?".to_owned())
                };
                search(dwarf, unit, child, pc, register, &name, depth + 1, found);
            }
            gimli::DW_TAG_namespace => {
                search(dwarf, unit, child, pc, register, function, depth + 1, found);
            }
            gimli::DW_TAG_formal_parameter | gimli::DW_TAG_variable if !function.is_empty() => {
                if found.as_ref().is_some_and(|(d, _)| *d > depth)
                    || location_register(dwarf, unit, entry, pc) != Some(register)
                {
                    continue;
                }
                let (Some(pointer), Some(kind)) = (
                    entity_name(dwarf, unit, entry),
                    attribute(unit, entry, gimli::DW_AT_type).and_then(|v| match v {
                        AttributeValue::UnitRef(kind) => Some(kind),
                        _ => None,
                    }),
                ) else {
                    continue;
                };
                if pointee(unit, kind).is_some() {
                    *found = Some((
                        depth,
                        Candidate {
                            pointer,
                            function: function.to_owned(),
                            kind,
                        },
                    ));
                }
            }
            _ => {}
        }
    }
}

/// Whether any of `ranges` holds `pc`.
fn contains(mut ranges: gimli::RangeIter<Reader<'_>>, pc: u64) -> bool {
    while let Ok(Some(range)) = ranges.next() {
        if range.begin <= pc && pc < range.end {
            return true;
        }
    }
    false
}

/// The attribute `name` of `entry`, or of the entry it is a concrete instance or the definition
/// of (`DW_AT_abstract_origin`, `DW_AT_specification`).
fn attribute<'a>(
    unit: &Unit<Reader<'a>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'a>>,
    name: gimli::DwAt,
) -> Option<AttributeValue<Reader<'a>>> {
    let mut value = entry.attr_value(name);
    let mut origin = entry.clone();
    for _ in 0..MAX_DEPTH {
        if value.is_some() {
            break;
        }
        let next = [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification]
            .into_iter()
            .find_map(|link| match origin.attr_value(link) {
                Some(AttributeValue::UnitRef(offset)) => unit.entry(offset).ok(),
                _ => None,
            })?;
        value = next.attr_value(name);
        origin = next;
    }
    value
}

/// The name of `entry` (through its origin or declaration).
fn entity_name<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    unit: &Unit<Reader<'a>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'a>>,
) -> Option<String> {
    let name = attribute(unit, entry, gimli::DW_AT_name)?;
    Some(
        dwarf
            .attr_string(unit, name)
            .ok()?
            .to_string_lossy()
            .into_owned(),
    )
}

/// The register `entry`'s value is in at `pc`, if its location says a register there.
fn location_register<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    unit: &Unit<Reader<'a>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'a>>,
    pc: u64,
) -> Option<Register> {
    let value = entry.attr_value(gimli::DW_AT_location)?;
    let expression = match value {
        AttributeValue::Exprloc(expression) => expression,
        other => {
            let mut list = dwarf.attr_locations(unit, other).ok()??;
            loop {
                let location = list.next().ok()??;
                if location.range.begin <= pc && pc < location.range.end {
                    break location.data;
                }
            }
        }
    };
    let mut operations = expression.operations(unit.encoding());
    match (operations.next(), operations.next()) {
        (Ok(Some(gimli::Operation::Register { register })), Ok(None)) => Some(register),
        _ => None,
    }
}

/// The type a pointer or reference type at `kind` points to (through typedefs and qualifiers).
fn pointee(unit: &Unit<Reader<'_>>, mut kind: UnitOffset) -> Option<UnitOffset> {
    for _ in 0..MAX_DEPTH {
        let entry = unit.entry(kind).ok()?;
        let inner = match entry.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(inner)) => Some(inner),
            _ => None,
        };
        match entry.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => kind = inner?,
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => return inner,
            _ => return None,
        }
    }
    None
}

/// The type's name as C writes it: `struct pair`, `pair_t`, `long`, `const char *`.
fn type_name(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<Reader<'_>>,
    kind: UnitOffset,
) -> String {
    let mut qualifiers = String::new();
    let mut kind = kind;
    for _ in 0..MAX_DEPTH {
        let Ok(entry) = unit.entry(kind) else { break };
        let named = entry
            .attr_value(gimli::DW_AT_name)
            .and_then(|n| dwarf.attr_string(unit, n).ok())
            .map(|n| n.to_string_lossy().into_owned());
        let inner = match entry.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(inner)) => Some(inner),
            _ => None,
        };
        let prefix = match entry.tag() {
            gimli::DW_TAG_structure_type => "struct ",
            gimli::DW_TAG_class_type => "class ",
            gimli::DW_TAG_union_type => "union ",
            gimli::DW_TAG_enumeration_type => "enum ",
            gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type | gimli::DW_TAG_atomic_type => {
                qualifiers.push_str(match entry.tag() {
                    gimli::DW_TAG_const_type => "const ",
                    gimli::DW_TAG_volatile_type => "volatile ",
                    _ => "_Atomic ",
                });
                match inner {
                    Some(inner) => {
                        kind = inner;
                        continue;
                    }
                    None => return format!("{qualifiers}void"),
                }
            }
            gimli::DW_TAG_pointer_type => {
                return match inner {
                    Some(inner) => format!("{qualifiers}{} *", type_name(dwarf, unit, inner)),
                    None => format!("{qualifiers}void *"),
                };
            }
            _ => "",
        };
        return format!(
            "{qualifiers}{prefix}{}",
            named.as_deref().unwrap_or("<anonymous>")
        );
    }
    format!("{qualifiers}?")
}

/// The name of what `operand` reached through the pointer `variable`.
fn describe(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<Reader<'_>>,
    variable: Candidate,
    operand: MemoryOperand,
) -> Option<OperandName> {
    let target = pointee(unit, variable.kind)?;
    let (size, layout) = type_layout(dwarf, unit, target, 0);
    let offset = if operand.indexed && size > 0 {
        operand.displacement.rem_euclid(size as i64) as u64
    } else {
        u64::try_from(operand.displacement).ok()?
    };
    if size > 0 && offset >= size && !matches!(layout, Layout::Leaf) {
        // Past the end of the pointee: not this type's data (`p + 1`, a container_of).
        return None;
    }
    let mut name = type_name(dwarf, unit, target);
    field(&layout, offset, &mut name, 0);
    Some(OperandName {
        name,
        pointer: variable.pointer,
        function: variable.function,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_operands_give_their_base_register_and_displacement() {
        // mov rax, [rdi+8]
        assert_eq!(
            memory_operand(&[0x48, 0x8b, 0x47, 0x08], 0x1000),
            Some(MemoryOperand {
                base: gimli::X86_64::RDI,
                displacement: 8,
                indexed: false
            })
        );
        // mov [r12+rax*8+16], rsi: an element of an array
        assert_eq!(
            memory_operand(&[0x49, 0x89, 0x74, 0xc4, 0x10], 0x1000),
            Some(MemoryOperand {
                base: gimli::X86_64::R12,
                displacement: 16,
                indexed: true
            })
        );
        // ret: no memory operand; mov rax, [rip+0x10]: a global, named by its address
        assert_eq!(memory_operand(&[0xc3], 0x1000), None);
        assert_eq!(
            memory_operand(&[0x48, 0x8b, 0x05, 0x10, 0, 0, 0], 0x1000),
            None
        );
        // cut short
        assert_eq!(memory_operand(&[0x48, 0x8b], 0x1000), None);
    }
}
