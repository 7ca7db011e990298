//! What a live c2c recording learns from this machine instead of a perf.data file: each
//! process's mappings (`/proc/PID/maps`, read while it runs), the CPUs of each NUMA node and the
//! node of each block of physical memory (`/sys/devices/system/{node,memory}`).

use std::{fs, path::Path};

use super::{contents::MemoryTopology, maps::Mapping};
use crate::cpus::parse_cpu_list;

/// The mappings of process `pid`, empty if it is gone.
pub fn mappings(pid: u32) -> Vec<Mapping> {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|text| parse_maps(&text))
        .unwrap_or_default()
}

/// The name of thread `tid` of process `pid`, empty if it is gone.
pub fn comm(pid: u32, tid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_default()
}

/// `start-end perms offset maj:min inode path` lines; the `s` permission marks MAP_SHARED.
fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let perms = fields.next()?;
            let pgoff = u64::from_str_radix(fields.next()?, 16).ok()?;
            let (maj, min) = fields.next()?.split_once(':')?;
            let inode: u64 = fields.next()?.parse().ok()?;
            let path = fields.collect::<Vec<_>>().join(" ");
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                pgoff,
                dev_ino: (
                    u32::from_str_radix(maj, 16).ok()?,
                    u32::from_str_radix(min, 16).ok()?,
                    inode,
                ),
                shared: perms.as_bytes().get(3) == Some(&b's'),
                prot: [(0, b'r', 1), (1, b'w', 2), (2, b'x', 4)]
                    .iter()
                    .filter(|(i, c, _)| perms.as_bytes().get(*i) == Some(c))
                    .map(|(_, _, bit)| bit)
                    .sum(),
                path: if path.is_empty() {
                    "//anon".into()
                } else {
                    path
                },
            })
        })
        .collect()
}

/// Node directories (`node0`, `node1`, ...) under `root`, by node number.
fn nodes(root: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let mut nodes: Vec<(u64, std::path::PathBuf)> = fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let number = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
            Some((number, e.path()))
        })
        .collect();
    nodes.sort();
    nodes
}

/// Each NUMA node's CPUs, in node order (one node holding every CPU without NUMA).
pub fn numa_cpus(sys_devices: &Path) -> Vec<Vec<u32>> {
    nodes(&sys_devices.join("system/node"))
        .into_iter()
        .filter_map(|(_, dir)| {
            let list = fs::read_to_string(dir.join("cpulist")).ok()?;
            parse_cpu_list(&list).ok()
        })
        .collect()
}

/// Which node holds each block of physical memory (what perf records as HEADER_MEM_TOPOLOGY).
pub fn memory_topology(sys_devices: &Path) -> Option<MemoryTopology> {
    let size = fs::read_to_string(sys_devices.join("system/memory/block_size_bytes")).ok()?;
    let block_size = u64::from_str_radix(size.trim(), 16).ok()?;
    let nodes = nodes(&sys_devices.join("system/node"))
        .into_iter()
        .map(|(node, dir)| {
            let mut bitmap: Vec<u64> = Vec::new();
            for entry in fs::read_dir(dir)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
            {
                let name = entry.file_name();
                let Some(block) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("memory"))
                    .and_then(|n| n.parse::<u64>().ok())
                else {
                    continue;
                };
                let word = (block / 64) as usize;
                if bitmap.len() <= word {
                    bitmap.resize(word + 1, 0);
                }
                bitmap[word] |= 1 << (block % 64);
            }
            (node, bitmap)
        })
        .collect();
    Some(MemoryTopology { block_size, nodes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_become_mappings() {
        let text = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
7f1000000000-7f1000100000 rw-s 00002000 00:19 4242        /dev/shm/ring buffer
7ffd1c6a0000-7ffd1c6c1000 rw-p 00000000 00:00 0 \n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[0].path, "/usr/bin/dbus-daemon");
        assert_eq!(maps[0].dev_ino, (8, 2, 173521));
        assert!(
            maps[1].shared && maps[1].pgoff == 0x2000 && maps[1].path == "/dev/shm/ring buffer"
        );
        assert_eq!(
            (maps[2].path.as_str(), maps[2].dev_ino),
            ("//anon", (0, 0, 0))
        );
    }

    #[test]
    fn memory_blocks_map_to_their_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        fs::create_dir_all(sys.join("system/memory")).unwrap();
        fs::write(sys.join("system/memory/block_size_bytes"), "8000000\n").unwrap();
        for (node, blocks, cpus) in [(0, [0, 1], "0-1"), (1, [2, 70], "2,3")] {
            let dir = sys.join(format!("system/node/node{node}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("cpulist"), format!("{cpus}\n")).unwrap();
            for block in blocks {
                fs::create_dir_all(dir.join(format!("memory{block}"))).unwrap();
            }
        }
        let topology = memory_topology(sys).unwrap();
        assert_eq!(topology.block_size, 0x800_0000);
        assert_eq!(topology.node_of(0x800_0000 + 5), Some(0));
        assert_eq!(topology.node_of(70 * 0x800_0000), Some(1));
        assert_eq!(numa_cpus(sys), vec![vec![0, 1], vec![2, 3]]);
    }
}
