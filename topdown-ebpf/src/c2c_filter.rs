//! The c2c filter: runs on every memory sample, classifies it with perf's rules (counted per
//! class, per CPU, so the totals stay exact), and forwards only what c2c needs: contended loads
//! (HITM or peer) at or over the latency threshold, and stores.

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
        bpf_probe_read_kernel,
    },
    macros::map,
    maps::{LruHashMap, PerCpuArray, RingBuf},
    programs::PerfEventContext,
};
use topdown_common::{
    c2c::{C2cRecord, C2cStats, counter, is_contended_load},
    data_src::op,
};

/// Offsets from the kernel's BTF, set by the loader (order: [`counter::OFFSETS`]).
#[unsafe(no_mangle)]
static C2C_OFFSETS: [u32; counter::OFFSETS] = [0; counter::OFFSETS];
/// Loads under this latency (cycles) are not forwarded.
#[unsafe(no_mangle)]
static C2C_LDLAT: u64 = 30;
/// Non-zero: forward only stores to lines already seen with a contended load
/// (`--stores contended`); zero: every store.
#[unsafe(no_mangle)]
static C2C_STORES_CONTENDED: u64 = 0;
/// Forward every Nth record with a wakeup, the others silently (batched wakeups).
const WAKEUP_EVERY: u64 = 64;

const PERF_SAMPLE_ADDR: u64 = 1 << 3;
const PERF_SAMPLE_WEIGHT: u64 = 1 << 14;
const PERF_SAMPLE_DATA_SRC: u64 = 1 << 15;
const PERF_SAMPLE_PHYS_ADDR: u64 = 1 << 19;
const PERF_SAMPLE_WEIGHT_STRUCT: u64 = 1 << 24;

#[map]
static C2C_STATS: PerCpuArray<C2cStats> = PerCpuArray::with_max_entries(1, 0);

#[map]
static C2C_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Lines seen with a contended load: physical line addresses where the sample has one (shared
/// memory has one physical line in every process), virtual ones otherwise.
#[map]
static CONTENDED_LINES: LruHashMap<u64, u8> = LruHashMap::with_max_entries(65536, 0);

/// Forwarded samples; the loader sizes it for c2c runs.
#[map]
static C2C_SAMPLES: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Counts one event of `which` on this CPU; returns the new count.
fn bump(which: u32) -> u64 {
    match C2C_COUNTERS.get_ptr_mut(which) {
        // SAFETY: per-CPU slot.
        Some(slot) => unsafe {
            *slot += 1;
            *slot
        },
        None => 0,
    }
}

/// Reads a u64 at `base + offset` in kernel memory.
#[inline(always)]
fn read(base: *const u8, offset: u32) -> Result<u64, i32> {
    // SAFETY: bpf_probe_read_kernel checks the address.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize).cast::<u64>()) }
}

/// Classifies one sample and forwards it if c2c needs it. Returns 0: the sample itself is not
/// written to any perf buffer.
pub fn filter(ctx: &PerfEventContext) -> u32 {
    // SAFETY: read-only globals the loader sets before loading.
    let (offsets, ldlat) = unsafe {
        (
            core::ptr::read_volatile(&C2C_OFFSETS),
            core::ptr::read_volatile(&C2C_LDLAT),
        )
    };
    let ctx_ptr = ctx.as_ptr().cast::<u8>().cast_const();
    let Ok(data) = read(ctx_ptr, offsets[1]) else {
        bump(counter::READ_ERROR);
        return 0;
    };
    let data = data as *const u8;
    let flags = if offsets[2] == counter::NO_SAMPLE_FLAGS {
        // Before Linux 6.1 (no `sample_flags`): the driver has filled what the event's sample
        // type asks for by the time the program runs, but `phys_addr` only later.
        PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT
    } else {
        let Ok(flags) = read(data, offsets[2]) else {
            bump(counter::READ_ERROR);
            return 0;
        };
        flags
    };
    let field = |set: u64, offset: u32| {
        if flags & set != 0 {
            read(data, offset).unwrap_or(0)
        } else {
            0
        }
    };
    let data_src = field(PERF_SAMPLE_DATA_SRC, offsets[3]);
    let addr = field(PERF_SAMPLE_ADDR, offsets[4]);
    // WEIGHT_STRUCT: the latency is the low 32 bits.
    let weight = field(PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT, offsets[5]) & 0xffff_ffff;
    let phys_addr = field(PERF_SAMPLE_PHYS_ADDR, offsets[6]);

    if let Some(stats) = C2C_STATS.get_ptr_mut(0) {
        // Mappings are known only in userspace: forwarded samples get their nomap there.
        // SAFETY: per-CPU slot.
        unsafe { (*stats).add_sample(data_src, addr, true) };
    }
    let store = data_src & op::STORE != 0;
    let contended = is_contended_load(data_src) && weight >= ldlat;
    if !store && !contended {
        return 0;
    }
    // SAFETY: a read-only global the loader sets before loading.
    if unsafe { core::ptr::read_volatile(&C2C_STORES_CONTENDED) } != 0 {
        let line = if phys_addr != 0 { phys_addr } else { addr } & !63;
        if contended {
            if CONTENDED_LINES.insert(&line, &1, 0).is_err() {
                bump(counter::LINE_MAP_FULL);
            }
        } else if CONTENDED_LINES.get_ptr(&line).is_none() {
            bump(counter::STORES_SKIPPED);
            return 0;
        }
    }
    let Some(mut entry) = C2C_SAMPLES.reserve::<C2cRecord>(0) else {
        bump(counter::RING_FULL);
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: plain helpers.
    let (cpu, cgroup) = unsafe { (bpf_get_smp_processor_id(), bpf_get_current_cgroup_id()) };
    let ip = read(ctx_ptr, offsets[0])
        .and_then(|regs| read(regs as *const u8, offsets[7]))
        .unwrap_or(0);
    entry.write(C2cRecord {
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        cpu,
        reserved: 0,
        cgroup_id: cgroup,
        ip,
        addr,
        data_src,
        weight,
        phys_addr,
    });
    let wakeup = if bump(counter::FORWARDED).is_multiple_of(WAKEUP_EVERY) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wakeup.into());
    0
}
