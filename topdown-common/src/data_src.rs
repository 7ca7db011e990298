//! `union perf_mem_data_src` (include/uapi/linux/perf_event.h) decoded into its fields.

/// `mem_op` bits.
pub mod op {
    /// Not available.
    pub const NA: u64 = 0x01;
    /// Load.
    pub const LOAD: u64 = 0x02;
    /// Store.
    pub const STORE: u64 = 0x04;
    /// Prefetch.
    pub const PFETCH: u64 = 0x08;
    /// Code execution.
    pub const EXEC: u64 = 0x10;
}

/// `mem_lvl` bits.
pub mod lvl {
    /// Not available.
    pub const NA: u64 = 0x01;
    /// Hit level.
    pub const HIT: u64 = 0x02;
    /// Miss level.
    pub const MISS: u64 = 0x04;
    /// L1.
    pub const L1: u64 = 0x08;
    /// Line fill buffer.
    pub const LFB: u64 = 0x10;
    /// L2.
    pub const L2: u64 = 0x20;
    /// L3.
    pub const L3: u64 = 0x40;
    /// Local DRAM.
    pub const LOC_RAM: u64 = 0x80;
    /// Remote DRAM, one hop.
    pub const REM_RAM1: u64 = 0x100;
    /// Remote DRAM, two hops.
    pub const REM_RAM2: u64 = 0x200;
    /// Remote cache, one hop.
    pub const REM_CCE1: u64 = 0x400;
    /// Remote cache, two hops.
    pub const REM_CCE2: u64 = 0x800;
    /// I/O memory.
    pub const IO: u64 = 0x1000;
    /// Uncached memory.
    pub const UNC: u64 = 0x2000;
}

/// `mem_snoop` bits.
pub mod snoop {
    /// Not available.
    pub const NA: u64 = 0x01;
    /// No snoop.
    pub const NONE: u64 = 0x02;
    /// Snoop hit.
    pub const HIT: u64 = 0x04;
    /// Snoop miss.
    pub const MISS: u64 = 0x08;
    /// Snoop hit modified.
    pub const HITM: u64 = 0x10;
}

/// `mem_snoopx` bits.
pub mod snoopx {
    /// Forward.
    pub const FWD: u64 = 0x01;
    /// Transfer from a peer cache.
    pub const PEER: u64 = 0x02;
}

/// `mem_lock`, `mem_blk` bits.
pub mod flags {
    /// `mem_lock`: locked transaction.
    pub const LOCKED: u64 = 0x02;
    /// `mem_blk`: blocked by a data conflict.
    pub const BLK_DATA: u64 = 0x02;
    /// `mem_blk`: blocked by an address conflict.
    pub const BLK_ADDR: u64 = 0x04;
}

/// The fields of one `data_src` word, at their uapi bit offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSrc {
    /// `mem_op:5` at bit 0.
    pub op: u64,
    /// `mem_lvl:14` at bit 5.
    pub lvl: u64,
    /// `mem_snoop:5` at bit 19.
    pub snoop: u64,
    /// `mem_lock:2` at bit 24.
    pub lock: u64,
    /// `mem_dtlb:7` at bit 26.
    pub dtlb: u64,
    /// `mem_lvl_num:4` at bit 33.
    pub lvl_num: u64,
    /// `mem_remote:1` at bit 37.
    pub remote: bool,
    /// `mem_snoopx:2` at bit 38.
    pub snoopx: u64,
    /// `mem_blk:3` at bit 40.
    pub blk: u64,
    /// `mem_hops:3` at bit 43.
    pub hops: u64,
}

const fn bits(word: u64, at: u32, width: u32) -> u64 {
    (word >> at) & ((1 << width) - 1)
}

impl DataSrc {
    /// Decodes a raw `data_src` word.
    pub const fn decode(word: u64) -> Self {
        Self {
            op: bits(word, 0, 5),
            lvl: bits(word, 5, 14),
            snoop: bits(word, 19, 5),
            lock: bits(word, 24, 2),
            dtlb: bits(word, 26, 7),
            lvl_num: bits(word, 33, 4),
            remote: bits(word, 37, 1) == 1,
            snoopx: bits(word, 38, 2),
            blk: bits(word, 40, 3),
            hops: bits(word, 43, 3),
        }
    }

    /// Encodes the fields back into a `data_src` word.
    pub const fn encode(&self) -> u64 {
        self.op
            | self.lvl << 5
            | self.snoop << 19
            | self.lock << 24
            | self.dtlb << 26
            | self.lvl_num << 33
            | (self.remote as u64) << 37
            | self.snoopx << 38
            | self.blk << 40
            | self.hops << 43
    }

    /// perf's "remote, with no hop count" (Intel reports an unknown remote level this way).
    pub const fn mrem(&self) -> bool {
        self.remote && self.hops == 0
    }
}
