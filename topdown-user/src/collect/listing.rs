//! Which live threads a snapshot reads: the ones the kernel listed as charged since the previous
//! snapshot, not every entry of the thread map. On a host with 100,000 threads, most of which
//! did not run in an interval, a read then costs per thread that ran (issue 33).
//!
//! The kernel puts a thread's tid on the `CHARGED` ring at its first charge in each epoch
//! (`LIST_EPOCH`, see the kernel's `account::list`). Before each read, userspace advances the
//! epoch, then drains the ring. Two races make a thread charged since the previous read miss
//! the tids drained now, and both are closed by also reading, once more, the tids drained at
//! the previous read:
//! - a thread listed in the new epoch before the drain (it ran between the advance and the
//!   drain) and charged again after its value was read: that charge lists nothing (it is on the
//!   list for this epoch already);
//! - a charge that read the old epoch before the advance and wrote the thread's totals after
//!   its value was read (a preempted vCPU can stretch those nanoseconds).
//!
//! A list that filled up (counted by the kernel as [`Stat::ChargedListFull`]) or a lost thread
//! record ([`Stat::RecordRingFull`], whose thread then leaves the map unseen) makes the next
//! read a whole one, which also drops threads that left the map without a record. So does a
//! list of more than half the threads the latest whole read found: a lookup per thread costs
//! several times a batch read's share of an entry (BENCHMARKS.md), so when most threads ran,
//! reading them all is cheaper.

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{Array, MapData, RingBuf},
};
use topdown_common::{names::map, stats::Stat};

use super::snapshot::Stats;

/// The userspace half of the kernel's list of charged threads.
pub struct Listing {
    /// The kernel's list: tids, each a `u32` record.
    list: RingBuf<MapData>,
    /// The epoch the kernel lists threads for now.
    epoch: u64,
    /// The tids drained at the previous read, read once more at the next.
    drained_before: Vec<u32>,
    /// Every read is a whole one ([`super::CollectorOptions::read_whole`]).
    read_whole: bool,
    /// [`Stat::ChargedListFull`] and [`Stat::RecordRingFull`] as of the previous read.
    fallbacks_seen: (u64, u64),
    /// Threads in the map at the latest whole read (0 before the first).
    threads_at_whole_read: usize,
}

impl Listing {
    /// Takes the kernel's list out of `bpf` and starts its first epoch (new totals hold epoch
    /// 0, so every thread is listed at its first charge). Call before the programs attach.
    pub fn start(bpf: &mut Ebpf, read_whole: bool) -> Result<Self> {
        let mut listing = Self {
            list: RingBuf::try_from(
                bpf.take_map(map::CHARGED)
                    .context("the BPF object has no CHARGED map")?,
            )?,
            epoch: 0,
            drained_before: Vec::new(),
            read_whole,
            fallbacks_seen: (0, 0),
            threads_at_whole_read: 0,
        };
        listing.advance_epoch(bpf)?;
        Ok(listing)
    }

    /// Starts a new epoch, drains the list, and returns the tids to read now: the ones just
    /// drained and the ones drained at the previous read, sorted, each once.
    pub fn advance(&mut self, bpf: &mut Ebpf) -> Result<Vec<u32>> {
        self.advance_epoch(bpf)?;
        let mut drained = Vec::new();
        while let Some(item) = self.list.next() {
            if let Some(tid) = item.first_chunk::<4>() {
                drained.push(u32::from_ne_bytes(*tid));
            }
        }
        let mut tids = Vec::with_capacity(drained.len() + self.drained_before.len());
        tids.extend_from_slice(&drained);
        tids.append(&mut self.drained_before);
        tids.sort_unstable();
        tids.dedup();
        drained.sort_unstable();
        drained.dedup();
        self.drained_before = drained;
        Ok(tids)
    }

    /// Whether this read of `listed` threads must read the whole map: asked for, the kernel
    /// counted a full list or a lost thread record since the previous read (`stats`: read after
    /// [`Self::advance`]), or the whole map is cheaper to read (see the module's note).
    pub fn must_read_whole(&mut self, listed: usize, stats: &Stats) -> bool {
        let seen = (
            stats.get(Stat::ChargedListFull),
            stats.get(Stat::RecordRingFull),
        );
        let grew = seen != self.fallbacks_seen;
        self.fallbacks_seen = seen;
        self.read_whole || grew || listed * 2 > self.threads_at_whole_read
    }

    /// A whole read found `threads` threads in the map.
    pub fn found_in_whole_read(&mut self, threads: usize) {
        self.threads_at_whole_read = threads;
    }

    fn advance_epoch(&mut self, bpf: &mut Ebpf) -> Result<()> {
        self.epoch += 1;
        let mut epoch: Array<_, u64> = Array::try_from(
            bpf.map_mut(map::LIST_EPOCH)
                .context("the BPF object has no LIST_EPOCH map")?,
        )?;
        epoch
            .set(0, &self.epoch, 0)
            .context("starting a new epoch of the charged-thread list")
    }
}
