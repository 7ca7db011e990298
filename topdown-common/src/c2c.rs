//! perf c2c's classification of memory samples (`c2c_decode_stats` in
//! tools/perf/util/mem-events.c), reproduced exactly, once, for the BPF filter and for userspace.

use crate::data_src::{DataSrc, flags, lvl, op, snoop, snoopx};

/// perf's `struct c2c_stats`: how many samples fell in each class. The field names are perf's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "perf's counter names, documented on C2cStats::add_sample"
)]
pub struct C2cStats {
    pub nr_entries: u64,
    pub locks: u64,
    pub store: u64,
    pub st_uncache: u64,
    pub st_noadrs: u64,
    pub st_l1hit: u64,
    pub st_l1miss: u64,
    pub st_na: u64,
    pub load: u64,
    pub ld_excl: u64,
    pub ld_shared: u64,
    pub ld_uncache: u64,
    pub ld_io: u64,
    pub ld_miss: u64,
    pub ld_noadrs: u64,
    pub ld_fbhit: u64,
    pub ld_l1hit: u64,
    pub ld_l2hit: u64,
    pub ld_llchit: u64,
    pub lcl_hitm: u64,
    pub rmt_hitm: u64,
    pub tot_hitm: u64,
    pub lcl_peer: u64,
    pub rmt_peer: u64,
    pub tot_peer: u64,
    pub rmt_hit: u64,
    pub lcl_dram: u64,
    pub rmt_dram: u64,
    pub blk_data: u64,
    pub blk_addr: u64,
    pub nomap: u64,
    pub noparse: u64,
}

/// How far a sample was decoded (perf's return value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Fully classified (perf returns 0).
    Full,
    /// Counted, but with no data address (`ld_noadrs` / `st_noadrs`).
    NoAddress,
    /// Neither load nor store (`noparse`).
    Unparsable,
    /// Classified, but its data or code address is in no mapping (`nomap`).
    NoMap,
}

impl C2cStats {
    /// Sets every counter from `values`, in the order of [`Self::named`] (saved totals).
    pub const fn set_named(&mut self, values: &[u64; 32]) {
        self.nr_entries = values[0];
        self.locks = values[1];
        self.store = values[2];
        self.st_uncache = values[3];
        self.st_noadrs = values[4];
        self.st_l1hit = values[5];
        self.st_l1miss = values[6];
        self.st_na = values[7];
        self.load = values[8];
        self.ld_excl = values[9];
        self.ld_shared = values[10];
        self.ld_uncache = values[11];
        self.ld_io = values[12];
        self.ld_miss = values[13];
        self.ld_noadrs = values[14];
        self.ld_fbhit = values[15];
        self.ld_l1hit = values[16];
        self.ld_l2hit = values[17];
        self.ld_llchit = values[18];
        self.lcl_hitm = values[19];
        self.rmt_hitm = values[20];
        self.tot_hitm = values[21];
        self.lcl_peer = values[22];
        self.rmt_peer = values[23];
        self.tot_peer = values[24];
        self.rmt_hit = values[25];
        self.lcl_dram = values[26];
        self.rmt_dram = values[27];
        self.blk_data = values[28];
        self.blk_addr = values[29];
        self.nomap = values[30];
        self.noparse = values[31];
    }

    /// Every counter with perf's name for it, in declaration order (for JSON and tests).
    pub const fn named(&self) -> [(&'static str, u64); 32] {
        [
            ("nr_entries", self.nr_entries),
            ("locks", self.locks),
            ("store", self.store),
            ("st_uncache", self.st_uncache),
            ("st_noadrs", self.st_noadrs),
            ("st_l1hit", self.st_l1hit),
            ("st_l1miss", self.st_l1miss),
            ("st_na", self.st_na),
            ("load", self.load),
            ("ld_excl", self.ld_excl),
            ("ld_shared", self.ld_shared),
            ("ld_uncache", self.ld_uncache),
            ("ld_io", self.ld_io),
            ("ld_miss", self.ld_miss),
            ("ld_noadrs", self.ld_noadrs),
            ("ld_fbhit", self.ld_fbhit),
            ("ld_l1hit", self.ld_l1hit),
            ("ld_l2hit", self.ld_l2hit),
            ("ld_llchit", self.ld_llchit),
            ("lcl_hitm", self.lcl_hitm),
            ("rmt_hitm", self.rmt_hitm),
            ("tot_hitm", self.tot_hitm),
            ("lcl_peer", self.lcl_peer),
            ("rmt_peer", self.rmt_peer),
            ("tot_peer", self.tot_peer),
            ("rmt_hit", self.rmt_hit),
            ("lcl_dram", self.lcl_dram),
            ("rmt_dram", self.rmt_dram),
            ("blk_data", self.blk_data),
            ("blk_addr", self.blk_addr),
            ("nomap", self.nomap),
            ("noparse", self.noparse),
        ]
    }

    /// perf's `total_loads` for its tables: the sum of its load columns (LLC misses and cache
    /// hits). An Intel remote HITM is both `rmt_hitm` and `rmt_dram`, so it counts twice here,
    /// unlike in `load`.
    pub const fn table_loads(&self) -> u64 {
        self.ld_fbhit
            + self.ld_l1hit
            + self.ld_l2hit
            + self.ld_llchit
            + self.lcl_hitm
            + self.rmt_hit
            + self.rmt_hitm
            + self.lcl_dram
            + self.rmt_dram
    }

    /// perf's `get_stores`: stores that hit, missed or had no level.
    pub const fn table_stores(&self) -> u64 {
        self.st_l1hit + self.st_l1miss + self.st_na
    }

    /// perf's `total_records` for its tables: [`Self::table_loads`] plus
    /// [`Self::table_stores`].
    pub const fn table_records(&self) -> u64 {
        self.table_loads() + self.table_stores()
    }

    /// Adds one sample: its `data_src`, data address, and whether both its data and code
    /// addresses fall in a known mapping. Mirrors `c2c_decode_stats` branch for branch:
    /// - `locks`, `blk_data`, `blk_addr` for every sample;
    /// - loads: no address -> `ld_noadrs`; on a HIT: UNC, IO, LFB, L1 each count; L2 ->
    ///   `ld_l2hit` (+ `lcl_peer` on a peer snoop); L3 -> `lcl_hitm` on HITM else `ld_llchit`
    ///   (+ `lcl_peer`); LOC_RAM -> `lcl_dram`; REM_RAM1/2 or remote-without-hops -> `rmt_dram`;
    ///   DRAM splits into `ld_shared` (snoop HIT) / `ld_excl`. Independently of HIT: REM_CCE1/2
    ///   or remote-without-hops -> `rmt_hit` (snoop HIT), `rmt_hitm` (HITM), `rmt_hit` +
    ///   `rmt_peer` (PEER). MISS -> `ld_miss`. HITM and PEER also bump `tot_hitm` / `tot_peer`;
    /// - stores: no address -> `st_noadrs`; HIT: UNC -> `st_uncache`, L1 -> `st_l1hit`; MISS with
    ///   L1 -> `st_l1miss`; NA -> `st_na`;
    /// - anything else -> `noparse`; classified samples without a mapping -> `nomap`.
    pub fn add_sample(&mut self, data_src: u64, daddr: u64, mapped: bool) -> Decoded {
        let src = DataSrc::decode(data_src);
        self.nr_entries += 1;
        if src.lock & flags::LOCKED != 0 {
            self.locks += 1;
        }
        if src.blk & flags::BLK_DATA != 0 {
            self.blk_data += 1;
        }
        if src.blk & flags::BLK_ADDR != 0 {
            self.blk_addr += 1;
        }
        if src.op & op::LOAD != 0 {
            self.load += 1;
            if daddr == 0 {
                self.ld_noadrs += 1;
                return Decoded::NoAddress;
            }
            self.add_load(&src);
        } else if src.op & op::STORE != 0 {
            self.store += 1;
            if daddr == 0 {
                self.st_noadrs += 1;
                return Decoded::NoAddress;
            }
            self.add_store(src.lvl);
        } else {
            self.noparse += 1;
            return Decoded::Unparsable;
        }
        if !mapped {
            self.nomap += 1;
            return Decoded::NoMap;
        }
        Decoded::Full
    }

    /// A load with a data address, as [`C2cStats::add_sample`] says.
    #[inline(always)]
    fn add_load(&mut self, src: &DataSrc) {
        let (level, sn, sx) = (src.lvl, src.snoop, src.snoopx);
        let mrem = src.mrem();
        if level & lvl::HIT != 0 {
            if level & lvl::UNC != 0 {
                self.ld_uncache += 1;
            }
            if level & lvl::IO != 0 {
                self.ld_io += 1;
            }
            if level & lvl::LFB != 0 {
                self.ld_fbhit += 1;
            }
            if level & lvl::L1 != 0 {
                self.ld_l1hit += 1;
            }
            if level & lvl::L2 != 0 {
                self.ld_l2hit += 1;
                if sx & snoopx::PEER != 0 {
                    self.peer_local();
                }
            }
            if level & lvl::L3 != 0 {
                if sn & snoop::HITM != 0 {
                    self.lcl_hitm += 1;
                    self.tot_hitm += 1;
                } else {
                    self.ld_llchit += 1;
                }
                if sx & snoopx::PEER != 0 {
                    self.peer_local();
                }
            }
            if level & lvl::LOC_RAM != 0 {
                self.lcl_dram += 1;
                self.dram_sharing(sn);
            }
            if level & (lvl::REM_RAM1 | lvl::REM_RAM2) != 0 || mrem {
                self.rmt_dram += 1;
                self.dram_sharing(sn);
            }
        }
        if level & (lvl::REM_CCE1 | lvl::REM_CCE2) != 0 || mrem {
            if sn & snoop::HIT != 0 {
                self.rmt_hit += 1;
            } else if sn & snoop::HITM != 0 {
                self.rmt_hitm += 1;
                self.tot_hitm += 1;
            } else if sx & snoopx::PEER != 0 {
                self.rmt_hit += 1;
                self.rmt_peer += 1;
                self.tot_peer += 1;
            }
        }
        if level & lvl::MISS != 0 {
            self.ld_miss += 1;
        }
    }

    /// A store with a data address at cache level bits `level`, as
    /// [`C2cStats::add_sample`] says.
    #[inline(always)]
    fn add_store(&mut self, level: u64) {
        if level & lvl::HIT != 0 {
            if level & lvl::UNC != 0 {
                self.st_uncache += 1;
            }
            if level & lvl::L1 != 0 {
                self.st_l1hit += 1;
            }
        }
        if level & lvl::MISS != 0 && level & lvl::L1 != 0 {
            self.st_l1miss += 1;
        }
        if level & lvl::NA != 0 {
            self.st_na += 1;
        }
    }

    /// Adds `other`'s counts (perf's `c2c_add_stats`).
    pub const fn add(&mut self, other: &Self) {
        self.add_times(other, 1);
    }

    /// Adds `other`'s counts `times` times (the counts of `times` samples classified alike).
    pub const fn add_times(&mut self, other: &Self, times: u64) {
        self.nr_entries += other.nr_entries * times;
        self.locks += other.locks * times;
        self.store += other.store * times;
        self.st_uncache += other.st_uncache * times;
        self.st_noadrs += other.st_noadrs * times;
        self.st_l1hit += other.st_l1hit * times;
        self.st_l1miss += other.st_l1miss * times;
        self.st_na += other.st_na * times;
        self.load += other.load * times;
        self.ld_excl += other.ld_excl * times;
        self.ld_shared += other.ld_shared * times;
        self.ld_uncache += other.ld_uncache * times;
        self.ld_io += other.ld_io * times;
        self.ld_miss += other.ld_miss * times;
        self.ld_noadrs += other.ld_noadrs * times;
        self.ld_fbhit += other.ld_fbhit * times;
        self.ld_l1hit += other.ld_l1hit * times;
        self.ld_l2hit += other.ld_l2hit * times;
        self.ld_llchit += other.ld_llchit * times;
        self.lcl_hitm += other.lcl_hitm * times;
        self.rmt_hitm += other.rmt_hitm * times;
        self.tot_hitm += other.tot_hitm * times;
        self.lcl_peer += other.lcl_peer * times;
        self.rmt_peer += other.rmt_peer * times;
        self.tot_peer += other.tot_peer * times;
        self.rmt_hit += other.rmt_hit * times;
        self.lcl_dram += other.lcl_dram * times;
        self.rmt_dram += other.rmt_dram * times;
        self.blk_data += other.blk_data * times;
        self.blk_addr += other.blk_addr * times;
        self.nomap += other.nomap * times;
        self.noparse += other.noparse * times;
    }

    const fn peer_local(&mut self) {
        self.lcl_peer += 1;
        self.tot_peer += 1;
    }

    const fn dram_sharing(&mut self, sn: u64) {
        if sn & snoop::HIT != 0 {
            self.ld_shared += 1;
        } else {
            self.ld_excl += 1;
        }
    }
}

/// Whether a sample belongs to a shared cache line's story: a load that hit a modified line in
/// another cache (HITM) or was served by a peer cache (PEER). What the BPF filter forwards.
pub const fn is_contended_load(data_src: u64) -> bool {
    let src = DataSrc::decode(data_src);
    src.op & op::LOAD != 0 && (src.snoop & snoop::HITM != 0 || src.snoopx & snoopx::PEER != 0)
}

/// A memory sample the kernel filter forwarded (a contended load over the latency threshold,
/// or a store).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct C2cRecord {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU.
    pub cpu: u32,
    /// Always zero (keeps the u64 fields aligned).
    pub reserved: u32,
    /// cgroup2 id of the sampled task.
    pub cgroup_id: u64,
    /// Code address.
    pub ip: u64,
    /// Data address.
    pub addr: u64,
    /// `union perf_mem_data_src`.
    pub data_src: u64,
    /// Load latency in cycles.
    pub weight: u64,
    /// Physical data address.
    pub phys_addr: u64,
}

/// The c2c filter's own counters, indexed into its per-CPU `C2C_COUNTERS` array.
pub mod counter {
    /// Loss: the samples ring buffer was full, a sample to forward was dropped.
    pub const RING_FULL: u32 = 0;
    /// Loss: a sample's fields could not be read.
    pub const READ_ERROR: u32 = 1;
    /// Samples forwarded to userspace.
    pub const FORWARDED: u32 = 2;
    /// Stores not forwarded with `--stores contended`: their line had no HITM yet (by design,
    /// not a loss; they are still classified).
    pub const STORES_SKIPPED: u32 = 3;
    /// Loss of precision: a contended line could not be remembered (the line map was full), so
    /// later stores to it may be skipped.
    pub const LINE_MAP_FULL: u32 = 4;
    /// Number of counters.
    pub const COUNT: u32 = 5;
    /// The offsets the loader sets, in `C2C_OFFSETS` order: `bpf_perf_event_data_kern.regs`
    /// and `.data`, `perf_sample_data.{sample_flags, data_src, addr, weight, phys_addr}`,
    /// `pt_regs.ip`.
    pub const OFFSETS: usize = 8;
    /// The `sample_flags` offset of a kernel without that field (before Linux 6.1).
    pub const NO_SAMPLE_FLAGS: u32 = u32::MAX;
}

#[cfg(feature = "user")]
// SAFETY: repr(C), only u64 fields.
unsafe impl aya::Pod for C2cStats {}

#[cfg(feature = "user")]
// SAFETY: repr(C), u32 and u64 fields without padding.
unsafe impl aya::Pod for C2cRecord {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data_src::lvl::*;

    /// A data_src word from its fields.
    fn src(op: u64, lvl: u64, snoop: u64) -> DataSrc {
        DataSrc {
            op,
            lvl,
            snoop,
            lock: 0,
            dtlb: 0,
            lvl_num: 0,
            remote: false,
            snoopx: 0,
            blk: 0,
            hops: 0,
        }
    }

    /// The stats of one sample, and what `add_sample` said.
    fn one(src: DataSrc, daddr: u64, mapped: bool) -> (C2cStats, Decoded) {
        let mut stats = C2cStats::default();
        let decoded = stats.add_sample(src.encode(), daddr, mapped);
        (stats, decoded)
    }

    /// The stats of one load with `changes` applied to what every mapped load counts.
    fn load(changes: impl FnOnce(&mut C2cStats)) -> C2cStats {
        let mut stats = C2cStats {
            nr_entries: 1,
            load: 1,
            ..C2cStats::default()
        };
        changes(&mut stats);
        stats
    }

    fn store(changes: impl FnOnce(&mut C2cStats)) -> C2cStats {
        let mut stats = C2cStats {
            nr_entries: 1,
            store: 1,
            ..C2cStats::default()
        };
        changes(&mut stats);
        stats
    }

    const ADDR: u64 = 0x7f00_0000_1040;
    const LOAD: u64 = op::LOAD;

    #[test]
    fn data_src_fields_round_trip_at_their_uapi_offsets() {
        let word = 0x2_0000_0000 | 1 << 37 | 2 << 38 | 4 << 40 | 3 << 43 | 0x42 | 0x10 << 19;
        let d = DataSrc::decode(word);
        assert_eq!((d.op, d.lvl, d.snoop), (0x02, 0x02, 0x10));
        assert_eq!(
            (d.lvl_num, d.remote, d.snoopx, d.blk, d.hops),
            (1, true, 2, 4, 3)
        );
        assert_eq!(d.encode(), word);
        assert!(!d.mrem(), "hops 3: not the no-hop remote");
    }

    #[test]
    fn load_hit_levels() {
        let hit = |l: u64| one(src(LOAD, HIT | l, snoop::NONE), ADDR, true);
        assert_eq!(hit(L1), (load(|s| s.ld_l1hit = 1), Decoded::Full));
        assert_eq!(hit(LFB).0, load(|s| s.ld_fbhit = 1));
        assert_eq!(hit(UNC).0, load(|s| s.ld_uncache = 1));
        assert_eq!(hit(IO).0, load(|s| s.ld_io = 1));
        assert_eq!(hit(L2).0, load(|s| s.ld_l2hit = 1));
        assert_eq!(hit(L3).0, load(|s| s.ld_llchit = 1));
        // Without the HIT bit none of the hit levels count.
        assert_eq!(one(src(LOAD, L1, snoop::NONE), ADDR, true).0, load(|_| {}));
    }

    #[test]
    fn local_hitm_and_peers() {
        let hitm = one(src(LOAD, HIT | L3, snoop::HITM), ADDR, true).0;
        assert_eq!(hitm, load(|s| (s.lcl_hitm, s.tot_hitm) = (1, 1)));
        let mut l3_peer = src(LOAD, HIT | L3, snoop::NONE);
        l3_peer.snoopx = snoopx::PEER;
        assert_eq!(
            one(l3_peer, ADDR, true).0,
            load(|s| (s.ld_llchit, s.lcl_peer, s.tot_peer) = (1, 1, 1))
        );
        let mut l2_peer = src(LOAD, HIT | L2, snoop::NONE);
        l2_peer.snoopx = snoopx::PEER;
        assert_eq!(
            one(l2_peer, ADDR, true).0,
            load(|s| (s.ld_l2hit, s.lcl_peer, s.tot_peer) = (1, 1, 1))
        );
        assert!(is_contended_load(src(LOAD, HIT | L3, snoop::HITM).encode()));
        assert!(is_contended_load(l2_peer.encode()));
        assert!(!is_contended_load(src(LOAD, HIT | L3, snoop::HIT).encode()));
        assert!(!is_contended_load(
            src(op::STORE, HIT | L1, snoop::HITM).encode()
        ));
    }

    #[test]
    fn dram_local_remote_shared_exclusive() {
        let dram = |l: u64, sn: u64| one(src(LOAD, HIT | l, sn), ADDR, true).0;
        assert_eq!(
            dram(LOC_RAM, snoop::HIT),
            load(|s| (s.lcl_dram, s.ld_shared) = (1, 1))
        );
        assert_eq!(
            dram(LOC_RAM, snoop::MISS),
            load(|s| (s.lcl_dram, s.ld_excl) = (1, 1))
        );
        assert_eq!(
            dram(REM_RAM1, snoop::HIT),
            load(|s| (s.rmt_dram, s.ld_shared) = (1, 1))
        );
        assert_eq!(
            dram(REM_RAM2, snoop::NONE),
            load(|s| (s.rmt_dram, s.ld_excl) = (1, 1))
        );
    }

    #[test]
    fn remote_cache_hits_hitms_and_peers() {
        let rem = |sn: u64, sx: u64| {
            let mut s = src(LOAD, HIT | REM_CCE1, sn);
            s.snoopx = sx;
            one(s, ADDR, true).0
        };
        assert_eq!(rem(snoop::HIT, 0), load(|s| s.rmt_hit = 1));
        assert_eq!(
            rem(snoop::HITM, 0),
            load(|s| (s.rmt_hitm, s.tot_hitm) = (1, 1))
        );
        assert_eq!(
            rem(snoop::NONE, snoopx::PEER),
            load(|s| (s.rmt_hit, s.rmt_peer, s.tot_peer) = (1, 1, 1))
        );
        // HIT wins over HITM and PEER: the checks are an else-if chain.
        assert_eq!(
            rem(snoop::HIT | snoop::HITM, snoopx::PEER),
            load(|s| s.rmt_hit = 1)
        );
        let two_hops = one(src(LOAD, REM_CCE2, snoop::HITM), ADDR, true).0;
        assert_eq!(
            two_hops,
            load(|s| (s.rmt_hitm, s.tot_hitm) = (1, 1)),
            "no HIT bit needed"
        );
    }

    #[test]
    fn intel_remote_hitm_counts_as_remote_dram_and_remote_hitm() {
        // lvl HIT|REM_CCE1, remote bit, no hops: perf counts it twice.
        let mut s = src(LOAD, HIT | REM_CCE1, snoop::HITM);
        s.remote = true;
        assert_eq!(
            one(s, ADDR, true).0,
            load(|s| (s.rmt_dram, s.ld_excl, s.rmt_hitm, s.tot_hitm) = (1, 1, 1, 1))
        );
        // lvl_num ANY_CACHE + remote + HITM without the HIT bit counts once.
        let mut any = src(LOAD, NA, snoop::HITM);
        any.lvl_num = 0xb;
        any.remote = true;
        assert_eq!(
            one(any, ADDR, true).0,
            load(|s| (s.rmt_hitm, s.tot_hitm) = (1, 1))
        );
        // With hops the remote bit means a core of the same node (Power): not mrem.
        any.hops = 1;
        assert_eq!(one(any, ADDR, true).0, load(|_| {}));
    }

    #[test]
    fn misses_no_address_locks_blocks() {
        assert_eq!(
            one(src(LOAD, MISS | L3, snoop::NA), ADDR, true).0,
            load(|s| s.ld_miss = 1)
        );
        let (stats, decoded) = one(src(LOAD, HIT | L1, snoop::NONE), 0, false);
        assert_eq!(
            (stats, decoded),
            (load(|s| s.ld_noadrs = 1), Decoded::NoAddress),
            "no nomap"
        );
        let mut locked = src(LOAD, HIT | L1, snoop::NONE);
        locked.lock = flags::LOCKED;
        locked.blk = flags::BLK_DATA | flags::BLK_ADDR;
        assert_eq!(
            one(locked, ADDR, true).0,
            load(|s| (s.ld_l1hit, s.locks, s.blk_data, s.blk_addr) = (1, 1, 1, 1))
        );
    }

    #[test]
    fn stores() {
        let st = |l: u64| one(src(op::STORE, l, snoop::NA), ADDR, true).0;
        assert_eq!(st(HIT | L1), store(|s| s.st_l1hit = 1));
        assert_eq!(st(HIT | UNC), store(|s| s.st_uncache = 1));
        assert_eq!(st(MISS | L1), store(|s| s.st_l1miss = 1));
        assert_eq!(st(NA), store(|s| s.st_na = 1));
        assert_eq!(
            st(MISS | L2),
            store(|_| {}),
            "a store miss counts only with L1"
        );
        let (stats, decoded) = one(src(op::STORE, HIT | L1, snoop::NA), 0, true);
        assert_eq!(
            (stats, decoded),
            (store(|s| s.st_noadrs = 1), Decoded::NoAddress)
        );
    }

    #[test]
    fn unparsable_and_unmapped() {
        let (stats, decoded) = one(src(op::NA, HIT | L1, snoop::NONE), ADDR, true);
        assert_eq!(decoded, Decoded::Unparsable);
        assert_eq!(
            stats,
            C2cStats {
                nr_entries: 1,
                noparse: 1,
                ..C2cStats::default()
            }
        );
        let (stats, decoded) = one(src(LOAD, HIT | L3, snoop::HITM), ADDR, false);
        assert_eq!(decoded, Decoded::NoMap);
        assert_eq!(
            stats,
            load(|s| (s.lcl_hitm, s.tot_hitm, s.nomap) = (1, 1, 1)),
            "classified, then nomap"
        );
    }
}
