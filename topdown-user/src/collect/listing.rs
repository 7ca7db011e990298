//! Which live threads a snapshot reads: the ones the kernel listed as charged since the previous
//! snapshot, not every entry of the thread map. On a host with 100,000 threads, most of which
//! did not run in an interval, a read then costs per thread that ran (issue 33).
//!
//! The kernel puts a thread on the `CHARGED` ring ([`ListedThread`]: its tid, slot and epoch) at
//! its first charge in each epoch (`LIST_EPOCH`, see the kernel's `account::list`). Before each
//! read, userspace advances the epoch, waits out the charges running then, and drains the ring.
//! Two races could make a thread charged since this read miss the next one:
//! - a thread listed in the new epoch before the drain (it ran between the advance and the
//!   drain) and charged again after its value was read: that charge lists nothing (it is on the
//!   list for this epoch already). Its entry says the new epoch: it is read again at the next
//!   read (carried).
//! - a charge that read the old epoch before the advance and wrote the thread's totals after
//!   its value was read (a preempted vCPU can stretch those nanoseconds). The wait closes it:
//!   `membarrier(MEMBARRIER_CMD_GLOBAL)` is an RCU grace period, and the kernel runs tracepoint
//!   and perf-event programs inside RCU read-side sections, so every charge that read the old
//!   epoch has returned when it does. Where it cannot be had (`nohz_full` CPUs refuse it),
//!   every tid drained is carried to the next read, which closes both races at the price of
//!   reading each listed thread twice.
//!
//! Carrying only the new epoch's entries halves the lookups where the threads that run change
//! from one interval to the next (a pool of mostly idle threads; issue 33).
//!
//! A list that filled up (counted by the kernel as [`Stat::ChargedListFull`]) or a lost thread
//! record ([`Stat::RecordRingFull`], whose thread then leaves the map unseen) makes the next
//! read a whole one, which also drops threads that left the map without a record.

use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{Array, MapData, RingBuf},
};
use topdown_common::{names::map, stats::Stat, thread::ListedThread};

use super::snapshot::Stats;

/// The userspace half of the kernel's list of charged threads.
pub struct Listing {
    /// The kernel's list: [`ListedThread`] records.
    list: RingBuf<MapData>,
    /// The epoch the kernel lists threads for now.
    epoch: u64,
    /// The threads to read once more at the next read (see the module's note).
    carried: Vec<ListedThread>,
    /// How many threads the previous read returned: the next one's list starts that large
    /// (grown one push at a time, a list of 20,000 was copied a dozen times).
    previous_len: usize,
    /// Whether running charges can be waited out here (see [`wait_out_running_programs`]);
    /// `false` once the kernel refused.
    waits: bool,
    /// Every read is a whole one ([`super::CollectorOptions::read_whole`]).
    read_whole: bool,
    /// [`Stat::ChargedListFull`] and [`Stat::RecordRingFull`] as of the previous read.
    fallbacks_seen: (u64, u64),
}

impl Listing {
    /// Takes the kernel's list out of `bpf` and starts its first epoch (new totals hold epoch
    /// 0, so every thread is listed at its first charge). Running charges are waited out
    /// before each drain where `wait` (and the kernel can). Call before the programs attach.
    pub fn start(bpf: &mut Ebpf, read_whole: bool, wait: bool) -> Result<Self> {
        let mut listing = Self {
            list: RingBuf::try_from(
                bpf.take_map(map::CHARGED)
                    .context("the BPF object has no CHARGED map")?,
            )?,
            epoch: 0,
            carried: Vec::new(),
            previous_len: 0,
            waits: wait,
            read_whole,
            fallbacks_seen: (0, 0),
        };
        listing.advance_epoch(bpf)?;
        Ok(listing)
    }

    /// Starts a new epoch, waits out the charges running, drains the list, and returns the
    /// threads to read now: the ones just drained and the ones carried from the previous read,
    /// by tid, each once.
    pub fn advance(&mut self, bpf: &mut Ebpf) -> Result<Vec<ListedThread>> {
        self.advance_epoch(bpf)?;
        self.waits = self.waits && wait_out_running_programs();
        // Only the low half of the epoch is listed; it wraps after 2^32 reads.
        let new_epoch = self.epoch as u32;
        let mut threads = Vec::with_capacity(self.previous_len.max(self.carried.len()));
        threads.append(&mut self.carried);
        while let Some(item) = self.list.next() {
            if let Some(listed) = decode(&item) {
                threads.push(listed);
                if !self.waits || listed.epoch == new_epoch {
                    self.carried.push(listed);
                }
            }
        }
        once_each(&mut threads);
        once_each(&mut self.carried);
        self.previous_len = threads.len();
        Ok(threads)
    }

    /// Whether this read must read the whole map: asked for, or the kernel counted a full list
    /// or a lost thread record since the previous read (`stats`: read after
    /// [`Self::advance`]).
    pub fn must_read_whole(&mut self, stats: &Stats) -> bool {
        let seen = (
            stats.get(Stat::ChargedListFull),
            stats.get(Stat::RecordRingFull),
        );
        let grew = seen != self.fallbacks_seen;
        self.fallbacks_seen = seen;
        self.read_whole || grew
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

/// Keeps each thread of `threads` once, in tid order: the latest-listed of its entries (a
/// thread listed in two epochs keeps its slot while it lives; a tid reused since has another).
fn once_each(threads: &mut Vec<ListedThread>) {
    // A stable sort keeps entries of one tid in the order listed; the last one is kept.
    threads.sort_by_key(|thread| thread.tid);
    threads.reverse();
    threads.dedup_by_key(|thread| thread.tid);
    threads.reverse();
}

/// One entry of the kernel's list; `None` when it is short.
fn decode(bytes: &[u8]) -> Option<ListedThread> {
    let field = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(*bytes.get(at..at + 4)?.first_chunk()?))
    };
    Some(ListedThread {
        tid: field(0)?,
        epoch: field(4)?,
        slot: field(8)?,
    })
}

/// Waits until every BPF program running now has returned: `membarrier(MEMBARRIER_CMD_GLOBAL)`
/// waits out an RCU grace period (on more than one CPU; on one, no program runs while this
/// does), and tracepoint and perf-event programs run inside RCU read-side sections. `false`
/// where the kernel refuses it (`nohz_full` CPUs, or no `CONFIG_MEMBARRIER`). It sleeps, for
/// milliseconds; it costs no CPU.
fn wait_out_running_programs() -> bool {
    /// `MEMBARRIER_CMD_GLOBAL` in `enum membarrier_cmd`.
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes no pointers.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0 }
}
