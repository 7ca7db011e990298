//! Writes a [`PerfData`] as a perf.data file that `topdown-bpf c2c report -i` and `perf c2c
//! report -i` both read (`c2c record -o`): one attribute per event, COMM, MMAP2 and CGROUP
//! records, the memory samples, and the feature sections c2c needs (event names, CPU count,
//! NUMA and memory-block topology). The kernel's counts of every sample, forwarded or not, go in
//! a feature section of our own (perf skips it), so a saved live recording reports the same
//! statistics as the live run.

use std::collections::BTreeSet;

use perf_event_open_sys::bindings;
use topdown_common::c2c::C2cStats;

use super::{
    contents::{PerfData, SAMPLE_TYPE, TOTALS_FEATURE},
    records::kind::{self, MISC_COMM_EXEC, MISC_KERNEL, MISC_MMAP_DATA, MISC_USER},
};
/// The one event id every sample carries (the first event's).
const FIRST_ID: u64 = 1;

const PROT_EXEC: u32 = 4;

const FEAT_BUILD_ID: u32 = 2;
const FEAT_HOSTNAME: u32 = 3;
const FEAT_OSRELEASE: u32 = 4;
const FEAT_VERSION: u32 = 5;
const FEAT_ARCH: u32 = 6;
const FEAT_NRCPUS: u32 = 7;
const FEAT_EVENT_DESC: u32 = 12;
const FEAT_NUMA_TOPOLOGY: u32 = 14;
const FEAT_SAMPLE_TIME: u32 = 21;
const FEAT_MEM_TOPOLOGY: u32 = 22;

/// Little-endian bytes under construction.
#[derive(Default)]
struct Bytes(Vec<u8>);

impl Bytes {
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A NUL-terminated string padded to 8 bytes (record file names).
    fn c_string(&mut self, text: &str) -> &mut Self {
        self.0.extend_from_slice(text.as_bytes());
        self.0.push(0);
        while !self.0.len().is_multiple_of(8) {
            self.0.push(0);
        }
        self
    }
    /// perf's `do_write_string`: a u32 length, then the text padded with NULs to 64 bytes.
    fn perf_string(&mut self, text: &str) -> &mut Self {
        let len = (text.len() + 1).next_multiple_of(64);
        self.u32(len as u32);
        self.0.extend_from_slice(text.as_bytes());
        self.0.resize(self.0.len() + len - text.len(), 0);
        self
    }
}

/// `PERF_ATTR_SIZE_VER7`: the attribute size perf 6.1 still reads (it refuses larger ones as
/// "a more recent ABI"); everything c2c needs is in it.
const ATTR_SIZE: usize = 128;

/// The attribute every event gets: every sample field c2c reads, ids in samples.
fn attr(sample_type: u64) -> Vec<u8> {
    let mut attr = bindings::perf_event_attr {
        size: ATTR_SIZE as u32,
        type_: bindings::PERF_TYPE_RAW,
        sample_type,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.set_sample_id_all(1);
    attr.set_precise_ip(3);
    // SAFETY: perf_event_attr is plain old data of at least ATTR_SIZE bytes; its first
    // ATTR_SIZE bytes are the VER7 layout perf.data stores.
    unsafe {
        std::slice::from_raw_parts(
            (&raw const attr).cast::<u8>(),
            ATTR_SIZE.min(size_of::<bindings::perf_event_attr>()),
        )
    }
    .to_vec()
}

/// `recording` as the bytes of a perf.data file, with `totals` (every sample the kernel
/// classified) when given. The caller writes them (`c2c record` into a new file that no link
/// or planted file can redirect).
pub fn encode(recording: &PerfData, totals: Option<&C2cStats>) -> Vec<u8> {
    let has_cgroups = recording.samples.iter().any(|s| s.cgroup != 0);
    let mut sample_type = u64::from(SAMPLE_TYPE);
    if has_cgroups {
        sample_type |= u64::from(bindings::PERF_SAMPLE_CGROUP);
    }
    let events: Vec<String> = if recording.events.is_empty() {
        vec!["mem".into()]
    } else {
        recording.events.clone()
    };
    let attr_bytes = attr(sample_type);
    let data = data_section(recording, has_cgroups);
    let features = features(recording, &events, &attr_bytes, totals);
    file(&events, &attr_bytes, &data, &features)
}

/// The span of the samples' times: the first's and the last's.
fn times(recording: &PerfData) -> (u64, u64) {
    let first = recording.samples.first().map_or(0, |s| s.time);
    let last = recording.samples.last().map_or(0, |s| s.time);
    (first, last)
}

/// Appends a record of `kind` with `misc` and its `body` to `data`.
fn record(data: &mut Bytes, kind: u32, misc: u16, body: Bytes) {
    data.u32(kind).u16(misc).u16((8 + body.0.len()) as u16);
    data.0.extend_from_slice(&body.0);
}

/// The data section: who the processes are (COMM), what they map (MMAP2), their cgroups
/// (CGROUP, `has_cgroups`), the samples, and a round marker that closes it (perf takes an empty
/// data section for an unfinished recording).
fn data_section(recording: &PerfData, has_cgroups: bool) -> Bytes {
    let (first_time, _) = times(recording);
    let mut data = Bytes::default();
    // Every record's sample id: pid, tid, time, id, cpu, reserved.
    let trailer = |b: &mut Bytes, pid: u32, tid: u32| {
        b.u32(pid)
            .u32(tid)
            .u64(first_time)
            .u64(FIRST_ID)
            .u32(0)
            .u32(0);
    };
    let threads: BTreeSet<(u32, u32)> = recording.samples.iter().map(|s| (s.pid, s.tid)).collect();
    for &(pid, tid) in &threads {
        let comm = recording.comms.get(&tid).map_or("", String::as_str);
        let mut body = Bytes::default();
        body.u32(pid).u32(tid).c_string(comm);
        trailer(&mut body, pid, tid);
        let misc = if pid == tid { MISC_COMM_EXEC } else { 0 };
        record(&mut data, kind::COMM, misc, body);
    }
    let mut pids: Vec<&u32> = recording.mappings.keys().collect();
    pids.sort();
    for pid in pids {
        for m in recording.mappings[pid].list() {
            let mut body = Bytes::default();
            body.u32(*pid)
                .u32(*pid)
                .u64(m.start)
                .u64(m.end - m.start)
                .u64(m.pgoff);
            body.u32(m.dev_ino.0)
                .u32(m.dev_ino.1)
                .u64(m.dev_ino.2)
                .u64(0);
            body.u32(m.prot).u32(if m.shared { 1 } else { 2 });
            body.c_string(&m.path);
            trailer(&mut body, *pid, *pid);
            let misc = MISC_USER
                | if m.prot & PROT_EXEC == 0 {
                    MISC_MMAP_DATA
                } else {
                    0
                };
            record(&mut data, kind::MMAP2, misc, body);
        }
    }
    if has_cgroups {
        let mut ids: Vec<(&u64, &String)> = recording.cgroups.iter().collect();
        ids.sort();
        for (id, path) in ids {
            let mut body = Bytes::default();
            body.u64(*id).c_string(path);
            trailer(&mut body, 0, 0);
            record(&mut data, kind::CGROUP, 0, body);
        }
    }
    for s in &recording.samples {
        let mut body = Bytes::default();
        body.u64(s.ip)
            .u32(s.pid)
            .u32(s.tid)
            .u64(s.time)
            .u64(s.addr)
            .u64(FIRST_ID);
        body.u32(s.cpu)
            .u32(0)
            .u64(1)
            .u64(s.weight)
            .u64(s.data_src)
            .u64(s.phys_addr);
        if has_cgroups {
            body.u64(s.cgroup);
        }
        let misc = if s.kernel { MISC_KERNEL } else { MISC_USER };
        record(&mut data, kind::SAMPLE, misc, body);
    }
    record(&mut data, kind::FINISHED_ROUND, 0, Bytes::default());
    data
}

/// The feature sections c2c reads: the host, the event names and attributes, the CPU count,
/// NUMA and memory-block topology, the samples' time span, and our `totals`.
fn features(
    recording: &PerfData,
    events: &[String],
    attr_bytes: &[u8],
    totals: Option<&C2cStats>,
) -> Vec<(u32, Bytes)> {
    let mut features: Vec<(u32, Bytes)> = Vec::new();
    let string = |feature, text: &str| {
        let mut b = Bytes::default();
        b.perf_string(text);
        (feature, b)
    };
    let uname = crate::cpus::host_names();
    features.push((FEAT_BUILD_ID, Bytes::default()));
    features.push(string(FEAT_HOSTNAME, &uname.0));
    features.push(string(FEAT_OSRELEASE, &uname.1));
    features.push(string(
        FEAT_VERSION,
        concat!("topdown-bpf ", env!("CARGO_PKG_VERSION")),
    ));
    features.push(string(FEAT_ARCH, std::env::consts::ARCH));
    let nr_cpus = recording
        .numa_cpus
        .iter()
        .flatten()
        .map(|c| c + 1)
        .chain(recording.samples.iter().map(|s| s.cpu + 1))
        .max()
        .unwrap_or(1);
    let mut b = Bytes::default();
    b.u32(nr_cpus).u32(nr_cpus);
    features.push((FEAT_NRCPUS, b));
    let mut b = Bytes::default();
    b.u32(events.len() as u32).u32(attr_bytes.len() as u32);
    for (i, name) in events.iter().enumerate() {
        b.0.extend_from_slice(attr_bytes);
        b.u32(1).perf_string(name).u64(FIRST_ID + i as u64);
    }
    features.push((FEAT_EVENT_DESC, b));
    features.push((FEAT_NUMA_TOPOLOGY, numa_topology(recording, nr_cpus)));
    let (first_time, last_time) = times(recording);
    let mut b = Bytes::default();
    b.u64(first_time).u64(last_time);
    features.push((FEAT_SAMPLE_TIME, b));
    if let Some(memory) = &recording.memory {
        let mut b = Bytes::default();
        b.u64(1)
            .u64(memory.block_size)
            .u64(memory.nodes.len() as u64);
        for (node, bitmap) in &memory.nodes {
            let blocks: u64 = bitmap.iter().map(|w| u64::from(w.count_ones())).sum();
            b.u64(*node)
                .u64(blocks * memory.block_size)
                .u64(bitmap.len() as u64 * 64);
            for word in bitmap {
                b.u64(*word);
            }
        }
        features.push((FEAT_MEM_TOPOLOGY, b));
    }
    if let Some(totals) = totals {
        let mut b = Bytes::default();
        for (_, value) in totals.named() {
            b.u64(value);
        }
        features.push((TOTALS_FEATURE, b));
    }
    features
}

/// The NUMA nodes and their CPUs (one node of `nr_cpus` CPUs where the recording has none).
fn numa_topology(recording: &PerfData, nr_cpus: u32) -> Bytes {
    let numa = if recording.numa_cpus.is_empty() {
        vec![(0..nr_cpus).collect::<Vec<u32>>()]
    } else {
        recording.numa_cpus.clone()
    };
    let mut b = Bytes::default();
    b.u32(numa.len() as u32);
    for (node, cpus) in numa.iter().enumerate() {
        let list = crate::cpus::cpu_list(cpus.iter().map(|&c| u64::from(c)));
        b.u32(node as u32).u64(0).u64(0).perf_string(&list);
    }
    b
}

/// The file: header, ids, attributes, `data`, the feature table, the features' payloads.
fn file(events: &[String], attr_bytes: &[u8], data: &Bytes, features: &[(u32, Bytes)]) -> Vec<u8> {
    const HEADER: u64 = 104;
    let attr_entry = attr_bytes.len() as u64 + 16;
    let ids_offset = HEADER;
    let attrs_offset = ids_offset + 8 * events.len() as u64;
    let data_offset = attrs_offset + attr_entry * events.len() as u64;
    let table_offset = data_offset + data.0.len() as u64;
    let mut out = Bytes::default();
    out.0.extend_from_slice(b"PERFILE2");
    out.u64(HEADER).u64(attr_entry);
    out.u64(attrs_offset).u64(attr_entry * events.len() as u64);
    out.u64(data_offset).u64(data.0.len() as u64);
    out.u64(0).u64(0);
    let mut bitmap = [0u64; 4];
    for (feature, _) in features {
        bitmap[(*feature / 64) as usize] |= 1 << (feature % 64);
    }
    for word in bitmap {
        out.u64(word);
    }
    for i in 0..events.len() as u64 {
        out.u64(FIRST_ID + i);
    }
    for i in 0..events.len() as u64 {
        out.0.extend_from_slice(attr_bytes);
        out.u64(ids_offset + 8 * i).u64(8);
    }
    out.0.extend_from_slice(&data.0);
    let mut at = table_offset + 16 * features.len() as u64;
    for (_, payload) in features {
        out.u64(at).u64(payload.0.len() as u64);
        at += payload.0.len() as u64;
    }
    for (_, payload) in features {
        out.0.extend_from_slice(&payload.0);
    }
    out.0
}
