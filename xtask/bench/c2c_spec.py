#!/usr/bin/env python3
"""Write a gen_perf_data.py spec of N memory samples spread over many cache lines, for the
c2c report benchmark. Two shapes:

- repeated (default): three processes, private anonymous and shared file memory, every load
  class c2c counts, stores, 4 CPUs on 2 nodes. 20,000 distinct samples, each repeated
  N/20,000 times in a row, or with --interleave drawn at random N times (no two neighbours
  alike). Flatters caches and hash tables: kept to compare with earlier sessions.
- --distinct: what a recording of a busy many-core host looks like: 4 processes of 16
  threads (64 threads) on 64 CPUs in 2 NUMA nodes, 64 MiB of memory (32 MiB of shared file
  memory mapped by all, 8 MiB of private anonymous memory each), every sample drawn on its
  own (a random thread, CPU, code address among 512 per process, 8-byte word of the 64 MiB,
  every load class and 30 % stores): almost every sample is its own entry.

usage: c2c_spec.py N OUT.json [--interleave | --distinct]"""
import json, random, sys

n, out = int(sys.argv[1]), sys.argv[2]
interleave = "--interleave" in sys.argv[3:]
distinct = "--distinct" in sys.argv[3:]
random.seed(42)
classes = [
    {"op": "LOAD", "lvl": "HIT|L3", "snoop": "HITM", "lvl_num": "L3", "dtlb": "L1|HIT", "lock": "NA"},
    {"op": "LOAD", "lvl": "MISS|REM_CCE1", "snoop": "HITM", "lvl_num": "ANY_CACHE", "remote": 1,
     "dtlb": "L1|HIT", "lock": "NA"},
    {"op": "LOAD", "lvl": "HIT|L1", "snoop": "NONE", "lvl_num": "L1", "dtlb": "L1|HIT", "lock": "NA"},
    {"op": "LOAD", "lvl": "HIT|L2", "snoop": "NONE", "lvl_num": "L2", "dtlb": "L1|HIT", "lock": "NA"},
    {"op": "LOAD", "lvl": "HIT|LOC_RAM", "snoop": "HIT", "lvl_num": "RAM", "dtlb": "L1|HIT", "lock": "NA"},
]
store = {"op": "STORE", "lvl": "HIT|L1", "snoop": "NA", "dtlb": "L1|HIT", "lock": "NA"}
if distinct:
    random.seed(42)
    loads = [
        {"op": "LOAD", "lvl": "HIT|L3", "snoop": "HITM", "lvl_num": "L3", "dtlb": "L1|HIT", "lock": "NA"},
        {"op": "LOAD", "lvl": "MISS|REM_CCE1", "snoop": "HITM", "lvl_num": "ANY_CACHE", "remote": 1,
         "dtlb": "L1|HIT", "lock": "NA"},
        {"op": "LOAD", "lvl": "HIT|L1", "snoop": "NONE", "lvl_num": "L1", "dtlb": "L1|HIT", "lock": "NA"},
        {"op": "LOAD", "lvl": "HIT|L2", "snoop": "NONE", "lvl_num": "L2", "dtlb": "L1|HIT", "lock": "NA"},
        {"op": "LOAD", "lvl": "HIT|LFB", "snoop": "NONE", "lvl_num": "LFB", "dtlb": "L1|HIT", "lock": "NA"},
        {"op": "LOAD", "lvl": "HIT|L3", "snoop": "HIT", "lvl_num": "L3", "dtlb": "L1|HIT", "lock": "NA"},
        {"op": "LOAD", "lvl": "HIT|LOC_RAM", "snoop": "HIT", "lvl_num": "RAM", "dtlb": "L1|HIT", "lock": "NA"},
        {"op": "LOAD", "lvl": "HIT|REM_RAM1", "snoop": "HIT", "lvl_num": "RAM", "remote": 1,
         "dtlb": "L1|HIT", "lock": "NA"},
        {"op": "LOAD", "lvl": "HIT|REM_CCE1", "snoop": "HIT", "lvl_num": "ANY_CACHE", "remote": 1,
         "dtlb": "L1|HIT", "lock": "NA"},
    ]
    stores = [{"op": "STORE", "lvl": "HIT|L1", "snoop": "NA", "dtlb": "L1|HIT", "lock": "NA"},
              {"op": "STORE", "lvl": "MISS|L1", "snoop": "NA", "dtlb": "L1|HIT", "lock": "NA"}]
    procs = []
    for i in range(4):
        pid = 2000 + 1000 * i
        base = 0x400000 + i * 0x100000
        procs.append({"pid": pid, "comm": f"w{i}", "tids": [pid + t for t in range(16)],
                      "mmaps": [
                          {"start": hex(base), "len": "0x10000", "filename": f"w{i}-bin/w{i}", "prot": 5,
                           "symbols": [{"addr": hex(base + 0x1000 + 0x100 * k), "size": "0x100",
                                        "name": f"func_{i}_{k}"} for k in range(16)]},
                          {"start": "0x7f1000000000", "len": hex(32 << 20),
                           "filename": "/dev/shm/bench", "prot": 3, "flags": 1, "maj": 0, "min": 25,
                           "ino": 4242, "phys": "0x40000000"},
                          {"start": "0x7f0000000000", "len": hex(8 << 20), "filename": "//anon", "prot": 3,
                           "phys": hex(0x80000000 + i * (8 << 20))}]})
    spec = {"nr_cpus": 64, "numa_nodes": [{"cpus": "0-31"}, {"cpus": "32-63"}], "phys_addr": True,
            "processes": procs}
    # Written one sample at a time: ten million samples as Python objects would take gigabytes.
    with open(out, "w") as f:
        f.write(json.dumps(spec)[:-1] + ', "samples": [')
        for k in range(n):
            i = random.randrange(4)
            proc = procs[i]
            if random.random() < 0.5:
                addr = 0x7f1000000000 + random.randrange(32 << 17) * 8
            else:
                addr = 0x7f0000000000 + random.randrange(8 << 17) * 8
            ip = 0x400000 + i * 0x100000 + 0x1000 + 0x100 * random.randrange(16) + random.randrange(32)
            s = {"pid": proc["pid"], "tid": random.choice(proc["tids"]), "cpu": random.randrange(64),
                 "ip": hex(ip), "addr": hex(addr)}
            if random.random() < 0.3:
                s["store"] = True
                s["data_src"] = random.choice(stores)
            else:
                s["data_src"] = random.choice(loads)
                s["weight"] = random.randrange(5, 400)
            f.write((", " if k else "") + json.dumps(s))
        f.write("]}")
    sys.exit(0)

procs = []
for i, pid in enumerate([2000, 3000, 4000]):
    base = 0x400000 + i * 0x100000
    procs.append({"pid": pid, "comm": f"w{i}", "tids": [pid, pid + 1],
                  "mmaps": [
                      {"start": hex(base), "len": "0x10000", "filename": f"w{i}-bin/w{i}", "prot": 5,
                       "symbols": [{"addr": hex(base + 0x1000 + 0x100 * k), "size": "0x100",
                                    "name": f"func_{i}_{k}"} for k in range(16)]},
                      {"start": hex(0x7f1000000000 + i * 0x1000000000), "len": "0x100000",
                       "filename": "/dev/shm/bench", "prot": 3, "flags": 1, "maj": 0, "min": 25,
                       "ino": 4242, "phys": "0x2000000"},
                      {"start": "0x7f0000000000", "len": "0x1000000", "filename": "//anon", "prot": 3,
                       "phys": hex(0x10000000 * (i + 1))}]})
entries, per = 20000, max(1, n // 20000)
samples = []
for k in range(entries):
    i = random.randrange(3)
    pid = procs[i]["pid"]
    shared = random.random() < 0.5
    line = random.randrange(4096)
    base = (0x7f1000000000 + i * 0x1000000000) if shared else 0x7f0000000000
    addr = base + line * 64 + random.randrange(8) * 8
    is_store = random.random() < 0.3
    ip = 0x400000 + i * 0x100000 + 0x1000 + 0x100 * random.randrange(16) + random.randrange(32)
    s = {"pid": pid, "tid": pid + random.randrange(2), "cpu": random.randrange(4), "ip": hex(ip),
         "addr": hex(addr), "count": per}
    if is_store:
        s["store"] = True
        s["data_src"] = store
    else:
        s["data_src"] = random.choice(classes)
        s["weight"] = random.randrange(5, 400)
    samples.append(s)
if interleave:
    rng = random.Random(7)
    samples = [{k: v for k, v in rng.choice(samples).items() if k != "count"} for _ in range(n)]
spec = {"nr_cpus": 4, "numa_nodes": [{"cpus": "0-1"}, {"cpus": "2-3"}], "phys_addr": True,
        "processes": procs, "samples": samples}
json.dump(spec, open(out, "w"))
