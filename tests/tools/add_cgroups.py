#!/usr/bin/env python3
"""Add cgroups to a perf.data written by ../shared/tools/gen_perf_data.py, as
`perf record --all-cgroups` records them: PERF_SAMPLE_CGROUP in every attr's
sample_type (the attrs section and HEADER_EVENT_DESC), the cgroup id appended
to every sample (it is the last field gen_perf_data.py writes), and one
PERF_RECORD_CGROUP (id, path) per cgroup at the start of the data.

usage: add_cgroups.py SPEC.json IN.data OUT.data   (stdlib only)
SPEC "cgroups": {"<pid>": {"id": N, "path": "/a/b"}}; other pids get id 1 ("/").
"""
import json, struct, sys

PERF_SAMPLE_CGROUP = 1 << 21
REC_SAMPLE, REC_CGROUP = 9, 19
HEADER_EVENT_DESC = 12
SAMPLE_TYPE_AT = 24  # offset of sample_type in perf_event_attr


def pad8(b):
    return b + b"\0" * (-len(b) % 8)


def add_cgroup_bit(blob, at):
    (st,) = struct.unpack_from("<Q", blob, at + SAMPLE_TYPE_AT)
    struct.pack_into("<Q", blob, at + SAMPLE_TYPE_AT, st | PERF_SAMPLE_CGROUP)


def main(spec_path, src, dst):
    spec = json.load(open(spec_path))
    cgroups = {int(pid): (c["id"], c["path"]) for pid, c in spec["cgroups"].items()}
    f = bytearray(open(src, "rb").read())
    assert f[:8] == b"PERFILE2"
    (attr_size,) = struct.unpack_from("<Q", f, 16)
    attrs_off, attrs_len, data_off, data_len = struct.unpack_from("<QQQQ", f, 24)
    for at in range(attrs_off, attrs_off + attrs_len, attr_size):
        add_cgroup_bit(f, at)

    # Data: PERF_RECORD_CGROUP records first (with gen_perf_data.py's sample_id trailer), then
    # every record, samples with their cgroup id appended.
    data = bytearray()
    seen = {(1, "/")} | set(cgroups.values())
    for cid, path in sorted(seen):
        body = struct.pack("<Q", cid) + pad8(path.encode() + b"\0")
        body += struct.pack("<IIQQII", 0, 0, 0, 101, 0, 0)
        data += struct.pack("<IHH", REC_CGROUP, 0, 8 + len(body)) + body
    at = data_off
    while at < data_off + data_len:
        rtype, misc, size = struct.unpack_from("<IHH", f, at)
        record = bytes(f[at:at + size])
        if rtype == REC_SAMPLE:
            (pid,) = struct.unpack_from("<I", record, 16)  # header, IP, then pid/tid
            cid = cgroups.get(pid, (1, "/"))[0]
            record = struct.pack("<IHH", rtype, misc, size + 8) + record[8:]
            record += struct.pack("<Q", cid)
        data += record
        at += size
    delta = len(data) - data_len

    # Feature sections follow the data: shift their offsets, and mark the attrs in
    # HEADER_EVENT_DESC too.
    feat_table = data_off + data_len
    bits = int.from_bytes(f[72:104], "little")
    feats = [i for i in range(256) if bits >> i & 1]
    table = bytearray(f[feat_table:feat_table + 16 * len(feats)])
    payload = bytearray(f[feat_table + 16 * len(feats):])
    base = feat_table + 16 * len(feats)
    for n, feat in enumerate(feats):
        off, length = struct.unpack_from("<QQ", table, 16 * n)
        if feat == HEADER_EVENT_DESC:
            nr, size = struct.unpack_from("<II", payload, off - base)
            p = off - base + 8
            for _ in range(nr):
                add_cgroup_bit(payload, p)
                p += size
                (nr_ids,) = struct.unpack_from("<I", payload, p)
                (slen,) = struct.unpack_from("<I", payload, p + 4)
                p += 8 + slen + 8 * nr_ids
        struct.pack_into("<QQ", table, 16 * n, off + delta, length)
    struct.pack_into("<Q", f, 48, len(data))
    out = bytes(f[:data_off]) + bytes(data) + bytes(table) + bytes(payload)
    open(dst, "wb").write(out)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
