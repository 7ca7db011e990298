#!/usr/bin/env python3
"""Write crafted copies of a valid perf.data, one per way a hostile or broken file has taken a
perf.data reader down (issue 10): counts and sizes that claim more than the file holds, node
ids and CPU numbers no kernel has, files cut short.

usage: craft_perf_data.py VALID.data OUT_DIR   (stdlib only)

Each output is named for what it breaks; variants whose section the valid file lacks are
skipped. Header layout (perf_file_header): magic, size, attr_size, attrs{offset,size} @24,
data{offset,size} @40, event_types{offset,size} @56, feature bits @72..104; the feature table
follows the data section, one {offset,size} per set bit, in bit order.
"""
import struct
import sys
from pathlib import Path

EVENT_DESC, NUMA_TOPOLOGY, MEM_TOPOLOGY = 12, 14, 22
SAMPLE = 9
# perf_event_attr.sample_type bits: the fields a sample holds before its CPU, and the CPU.
BEFORE_CPU = [1 << 16, 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 6, 1 << 9]
CPU = 1 << 7


def u64(b, at):
    return struct.unpack_from("<Q", b, at)[0]


def features(b):
    bits = [u64(b, 72 + 8 * i) for i in range(4)]
    table = u64(b, 40) + u64(b, 48)
    out, index = {}, 0
    for bit in range(256):
        if bits[bit // 64] >> (bit % 64) & 1:
            entry = table + 16 * index
            out[bit] = (u64(b, entry), u64(b, entry + 8))
            index += 1
    return out


def main():
    valid, out = Path(sys.argv[1]).read_bytes(), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    feats = features(valid)

    def write(name, patch):
        b = bytearray(valid)
        patch(b)
        (out / f"{name}.data").write_bytes(bytes(b))

    write("event-types-size", lambda b: struct.pack_into("<Q", b, 64, 1 << 62))
    write("attr-entry-size", lambda b: struct.pack_into("<Q", b, 16, 1))
    attrs, attr_entry = u64(valid, 24), u64(valid, 16)
    write("attr-ids-size", lambda b: struct.pack_into("<Q", b, attrs + attr_entry - 8, 1 << 40))
    write("attr-size-field", lambda b: struct.pack_into("<I", b, attrs + 4, 0xFFFFFFFF))
    write("data-past-end", lambda b: struct.pack_into("<Q", b, 48, len(valid) * 4))
    (out / "truncated.data").write_bytes(valid[: len(valid) // 2])
    if EVENT_DESC in feats:
        at = feats[EVENT_DESC][0]
        write("event-desc-count", lambda b: struct.pack_into("<I", b, at, 0xFFFFFFFF))
    if MEM_TOPOLOGY in feats:
        # version, block size, node count, then per node: id, size, bitmap bits, bitmap.
        at = feats[MEM_TOPOLOGY][0] + 24
        write("mem-topology-node", lambda b: struct.pack_into("<Q", b, at, 0x7FFFFFFF))
    # The first sample's CPU (its fields in perf's order: IDENTIFIER, IP, TID, TIME, ADDR, ID,
    # STREAM_ID, then CPU): a number no kernel has sized a CPU set per entry.
    sample_type = u64(valid, attrs + 24)
    if sample_type & CPU:
        at, end = u64(valid, 40), u64(valid, 40) + u64(valid, 48)
        while at + 8 <= end and struct.unpack_from("<I", valid, at)[0] != SAMPLE:
            at += struct.unpack_from("<H", valid, at + 6)[0] or end
        before = sum(1 for bit in BEFORE_CPU if sample_type & bit)
        if at + 8 <= end:
            write("sample-cpu", lambda b: struct.pack_into("<I", b, at + 8 + 8 * before, 4000000000))
    if NUMA_TOPOLOGY in feats:
        # nr, then per node: id (u32), mem total, mem free (u64), cpu list string (len, text).
        at, size = feats[NUMA_TOPOLOGY]
        length = struct.unpack_from("<I", valid, at + 4 + 20)[0]
        text = b"0-4294967295\0"
        if length >= len(text):
            write("numa-cpus", lambda b: b.__setitem__(slice(at + 28, at + 28 + len(text)), text))


if __name__ == "__main__":
    main()
