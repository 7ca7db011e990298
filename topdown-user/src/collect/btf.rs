//! Member offsets of kernel structs, read from the kernel's BTF (`/sys/kernel/btf/vmlinux`), so
//! the kernel programs never hard-code one kernel's layout. Only what offsets need is parsed:
//! type records are walked to find a struct by name and its members (anonymous structs and
//! unions included, as the kernel nests fields in them).

use std::{collections::HashMap, fs, path::Path};

use anyhow::{Context as _, Result, bail, ensure};

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

/// One type record: kind, name, and for structs and unions their members.
#[derive(Debug)]
struct Type {
    kind: u32,
    name: u32,
    members: Vec<Member>,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    name: u32,
    type_id: u32,
    bit_offset: u32,
}

/// The parsed type section of a BTF blob.
#[derive(Debug)]
pub struct KernelBtf {
    strings: Vec<u8>,
    /// Index `i` holds type id `i + 1`.
    types: Vec<Type>,
    structs_by_name: HashMap<String, u32>,
}

impl KernelBtf {
    /// The running kernel's BTF.
    pub fn from_sys_fs() -> Result<Self> {
        Self::from_file(Path::new("/sys/kernel/btf/vmlinux"))
    }

    /// BTF from a file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let data = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&data).with_context(|| format!("parsing BTF in {}", path.display()))
    }

    /// Parses a little-endian BTF blob.
    pub fn parse(data: &[u8]) -> Result<Self> {
        let u16_at = |at: usize| -> Result<u16> {
            Ok(u16::from_le_bytes(
                data.get(at..at + 2).context("truncated")?.try_into()?,
            ))
        };
        let u32_at = |at: usize| -> Result<u32> {
            Ok(u32::from_le_bytes(
                data.get(at..at + 4).context("truncated")?.try_into()?,
            ))
        };
        ensure!(u16_at(0)? == MAGIC, "not little-endian BTF (bad magic)");
        let header_len = u32_at(4)? as usize;
        let (type_off, type_len) = (u32_at(8)? as usize, u32_at(12)? as usize);
        let (str_off, str_len) = (u32_at(16)? as usize, u32_at(20)? as usize);
        let strings = data
            .get(header_len + str_off..header_len + str_off + str_len)
            .context("string section out of bounds")?
            .to_vec();
        let mut types = Vec::new();
        let mut at = header_len + type_off;
        let end = at + type_len;
        while at < end {
            let (name, info) = (u32_at(at)?, u32_at(at + 4)?);
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31 == 1;
            at += 12;
            let mut members = Vec::new();
            let extra = match kind {
                1 | 14 | 17 => 4, // INT, VAR, DECL_TAG
                3 => 12,          // ARRAY
                KIND_STRUCT | KIND_UNION => {
                    for i in 0..vlen {
                        let m = at + 12 * i;
                        let offset = u32_at(m + 8)?;
                        members.push(Member {
                            name: u32_at(m)?,
                            type_id: u32_at(m + 4)?,
                            bit_offset: if kind_flag {
                                offset & 0x00ff_ffff
                            } else {
                                offset
                            },
                        });
                    }
                    12 * vlen
                }
                6 | 13 => 8 * vlen,   // ENUM, FUNC_PROTO
                15 | 19 => 12 * vlen, // DATASEC, ENUM64
                2 | 7..=12 | 16 | 18 => 0,
                other => bail!("unknown BTF kind {other} at byte {at}"),
            };
            at += extra;
            types.push(Type {
                kind,
                name,
                members,
            });
        }
        let mut btf = Self {
            strings,
            types,
            structs_by_name: HashMap::new(),
        };
        for (index, ty) in btf.types.iter().enumerate() {
            if (ty.kind == KIND_STRUCT || ty.kind == KIND_UNION) && ty.name != 0 {
                let name = btf.string(ty.name).to_owned();
                // The first definition wins; later ones are duplicates from modules.
                btf.structs_by_name.entry(name).or_insert(index as u32 + 1);
            }
        }
        Ok(btf)
    }

    fn string(&self, offset: u32) -> &str {
        let rest = self.strings.get(offset as usize..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    /// Byte offset of `member` in `struct name`, looking into anonymous structs and unions.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32> {
        let id = *self
            .structs_by_name
            .get(name)
            .with_context(|| format!("the kernel's BTF has no struct {name}"))?;
        let bits = self
            .find_member(id, member, 0)
            .with_context(|| format!("struct {name} has no member {member} in the kernel's BTF"))?;
        ensure!(bits % 8 == 0, "{name}.{member} is a bit field");
        Ok(bits / 8)
    }

    fn find_member(&self, id: u32, member: &str, depth: u32) -> Option<u32> {
        let ty = self.types.get(id.checked_sub(1)? as usize)?;
        for m in &ty.members {
            if m.name != 0 && self.string(m.name) == member {
                return Some(m.bit_offset);
            }
        }
        if depth > 8 {
            return None;
        }
        // Anonymous members point straight at their struct or union in kernel BTF.
        ty.members.iter().filter(|m| m.name == 0).find_map(|m| {
            let inner = self.types.get(m.type_id.checked_sub(1)? as usize)?;
            if inner.kind != KIND_STRUCT && inner.kind != KIND_UNION {
                return None;
            }
            Some(m.bit_offset + self.find_member(m.type_id, member, depth + 1)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny BTF blob: `struct task { int a; union { int b; int pid; }; int tgid; }`.
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0task\0a\0b\0pid\0tgid\0".to_vec();
        let s = |name: &str| {
            let needle = format!("\0{name}\0");
            strings
                .windows(needle.len())
                .position(|w| w == needle.as_bytes())
                .unwrap() as u32
                + 1
        };
        let mut types = Vec::new();
        let mut push = |words: &[u32]| words.iter().for_each(|w| types.extend(w.to_le_bytes()));
        push(&[s("int"), 1 << 24, 4, 32]); // 1: int
        push(&[0, (KIND_UNION << 24) | 2, 4, s("b"), 1, 0, s("pid"), 1, 0]); // 2: anon union
        push(&[
            s("task"),
            (KIND_STRUCT << 24) | 3,
            12,
            s("a"),
            1,
            0,
            0,
            2,
            32,
            s("tgid"),
            1,
            64,
        ]);
        let mut out = Vec::new();
        for w in [
            u32::from(MAGIC) | 1 << 16,
            24,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend(w.to_le_bytes());
        }
        out.extend(&types);
        out.extend(&strings);
        out
    }

    #[test]
    fn finds_direct_and_nested_members() {
        let btf = KernelBtf::parse(&blob()).unwrap();
        assert_eq!(btf.member_offset("task", "a").unwrap(), 0);
        assert_eq!(btf.member_offset("task", "pid").unwrap(), 4);
        assert_eq!(btf.member_offset("task", "tgid").unwrap(), 8);
        assert!(btf.member_offset("task", "nope").is_err());
        assert!(btf.member_offset("nope", "a").is_err());
        assert!(KernelBtf::parse(&[0; 24]).is_err());
    }

    #[test]
    fn reads_the_running_kernels_task_struct() {
        let Ok(btf) = KernelBtf::from_sys_fs() else {
            eprintln!("SKIPPED: no /sys/kernel/btf/vmlinux on this machine");
            return;
        };
        let pid = btf.member_offset("task_struct", "pid").unwrap();
        let tgid = btf.member_offset("task_struct", "tgid").unwrap();
        assert_eq!(tgid, pid + 4, "pid_t pid; pid_t tgid; sit side by side");
        // What the c2c filter reads: distinct, 8-byte aligned u64 fields.
        let mut offsets: Vec<u32> = ["data_src", "addr", "weight", "phys_addr", "sample_flags"]
            .iter()
            .map(|member| btf.member_offset("perf_sample_data", member).unwrap())
            .collect();
        assert!(offsets.iter().all(|o| o % 8 == 0), "{offsets:?}");
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), 5);
        assert_eq!(
            btf.member_offset("bpf_perf_event_data_kern", "data")
                .unwrap()
                % 8,
            0
        );
    }
}
