//! The mappings of a process, as perf.data's MMAP records or `/proc/PID/maps` give them, and
//! the mapping an address falls in: the latest recorded over it, as a new mmap replaces what it
//! overlaps.

/// One mapping of a process, from an MMAP or MMAP2 record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Device major and minor, inode (0 for anonymous memory).
    pub dev_ino: (u32, u32, u64),
    /// `MAP_SHARED`.
    pub shared: bool,
    /// `PROT_READ` 1, `PROT_WRITE` 2, `PROT_EXEC` 4 (0 when the record did not say).
    pub prot: u32,
    /// The mapped file (`//anon` for anonymous memory).
    pub path: String,
}

impl Mapping {
    /// Whether `addr` falls in this mapping.
    pub const fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }
}

/// A range of addresses that shows one mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    start: u64,
    end: u64,
    /// Index of the mapping in [`ProcessMaps::list`].
    index: u32,
}

/// A process's mappings in the order they were recorded, and where each address falls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessMaps {
    list: Vec<Mapping>,
    /// Disjoint ranges sorted by address, each showing the latest mapping recorded over it.
    segments: Vec<Segment>,
}

impl ProcessMaps {
    /// Records `mapping`: it hides what it overlaps of earlier ones.
    pub fn push(&mut self, mapping: Mapping) {
        let (start, end) = (mapping.start, mapping.end);
        let index = self.list.len() as u32;
        self.list.push(mapping);
        if start >= end {
            return;
        }
        let mut segments = Vec::with_capacity(self.segments.len() + 2);
        for segment in &self.segments {
            if segment.end <= start || segment.start >= end {
                segments.push(*segment);
                continue;
            }
            if segment.start < start {
                segments.push(Segment {
                    end: start,
                    ..*segment
                });
            }
            if segment.end > end {
                segments.push(Segment {
                    start: end,
                    ..*segment
                });
            }
        }
        segments.push(Segment { start, end, index });
        segments.sort_unstable_by_key(|s| s.start);
        self.segments = segments;
    }

    /// The mapping `addr` falls in: the latest recorded that holds it.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        // A few segments are scanned faster than they are bisected.
        let segment = if self.segments.len() <= 16 {
            self.segments.iter().find(|s| addr < s.end)?
        } else {
            self.segments
                .get(self.segments.partition_point(|s| s.end <= addr))?
        };
        (segment.start <= addr).then(|| &self.list[segment.index as usize])
    }

    /// Every mapping, in the order recorded.
    pub fn list(&self) -> &[Mapping] {
        &self.list
    }
}

impl FromIterator<Mapping> for ProcessMaps {
    fn from_iter<I: IntoIterator<Item = Mapping>>(mappings: I) -> Self {
        let mut maps = Self::default();
        for mapping in mappings {
            maps.push(mapping);
        }
        maps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(start: u64, end: u64, pgoff: u64) -> Mapping {
        Mapping {
            start,
            end,
            pgoff,
            dev_ino: (0, 0, 0),
            shared: false,
            prot: 0,
            path: String::new(),
        }
    }

    #[test]
    fn a_later_mapping_hides_what_it_overlaps() {
        let maps: ProcessMaps = [
            mapping(0x1000, 0x5000, 1),
            mapping(0x2000, 0x3000, 2),
            mapping(0x0, 0x1800, 3),
        ]
        .into_iter()
        .collect();
        let at = |addr| maps.find(addr).map(|m| m.pgoff);
        assert_eq!(at(0x1500), Some(3));
        assert_eq!(at(0x1800), Some(1));
        assert_eq!(at(0x2fff), Some(2));
        assert_eq!(at(0x3000), Some(1));
        assert_eq!(at(0x4fff), Some(1));
        assert_eq!(at(0x5000), None);
        assert_eq!(maps.list().len(), 3);
    }

    /// Against the plain rule (the last recorded mapping that holds the address), on random
    /// overlapping mappings.
    #[test]
    fn lookups_agree_with_the_latest_mapping_that_holds_the_address() {
        let mut next = crate::perf_file::test_random(0x9e37_79b9_7f4a_7c15_u64);
        for _ in 0..50 {
            let list: Vec<Mapping> = (0..next(40))
                .map(|i| {
                    let start = next(64) * 0x100;
                    mapping(start, start + next(16) * 0x100, i)
                })
                .collect();
            let maps: ProcessMaps = list.iter().cloned().collect();
            for addr in (0..0x5000).step_by(0x40) {
                let expected = list.iter().rev().find(|m| m.contains(addr));
                assert_eq!(maps.find(addr), expected, "address {addr:#x} in {list:?}");
            }
        }
    }
}
