//! The DWARF reader that code and data naming share: an ELF file's sections (decompressed), read
//! with gimli in the file's byte order, and the layouts of types, to name the member at an
//! offset (`pair.b`, `slots[3].head`).

use std::borrow::Cow;

use gimli::{AttributeValue, EndianSlice, RunTimeEndian, Unit, UnitOffset};
use object::{Object as _, ObjectSection as _};

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
pub(super) fn sections<'a>(elf: &object::File<'a>) -> Option<gimli::DwarfSections<Cow<'a, [u8]>>> {
    gimli::DwarfSections::load(|id| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(elf
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    })
    .ok()
}

/// `sections` read in the byte order of `elf`.
pub(super) fn borrow<'a>(
    sections: &'a gimli::DwarfSections<Cow<'_, [u8]>>,
    elf: &object::File<'_>,
) -> gimli::Dwarf<Reader<'a>> {
    let endian = endian(elf);
    sections.borrow(|section| EndianSlice::new(section, endian))
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
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => (
            size.unwrap_or(0),
            Layout::Struct(members(dwarf, unit, offset, depth)),
        ),
        gimli::DW_TAG_array_type => {
            let (element_size, element) = inner.map_or((0, Layout::Leaf), |inner| {
                type_layout(dwarf, unit, inner, depth + 1)
            });
            let count = elements(unit, offset);
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

/// The members of the structure, class or union at `offset` of `unit` (`depth` deep), each
/// with its name, offset and layout.
fn members(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<Reader<'_>>,
    offset: UnitOffset,
    depth: usize,
) -> Vec<Member> {
    let mut members = Vec::new();
    let Ok(mut tree) = unit.entries_tree(Some(offset)) else {
        return members;
    };
    let Ok(root) = tree.root() else {
        return members;
    };
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
            Some(AttributeValue::UnitRef(kind)) => type_layout(dwarf, unit, kind, depth + 1),
            _ => (0, Layout::Leaf),
        };
        members.push(Member {
            name,
            offset: at,
            size,
            layout,
        });
    }
    members
}

/// How many elements the array type at `offset` of `unit` holds: the product of its
/// dimensions' lengths (`DW_AT_count`, else `DW_AT_upper_bound` + 1; 0 where neither).
fn elements(unit: &Unit<Reader<'_>>, offset: UnitOffset) -> u64 {
    let mut count = 1u64;
    let Ok(mut tree) = unit.entries_tree(Some(offset)) else {
        return count;
    };
    let Ok(root) = tree.root() else {
        return count;
    };
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
    count
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
