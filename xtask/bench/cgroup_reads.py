#!/usr/bin/env python3
"""Counter reads per switch when only cgroups are reported, for two containers (BENCHMARKS.md).

Usage: cgroup_reads.py TOPDOWN_BPF ROUNDS SWITCH_READS_TABLE

Two cgroups in the unified (cgroup2) hierarchy stand in for two containers, each running its own
workload, unpinned on every CPU, for 5 s:
- "services": container A runs hackbench (`perf bench sched messaging -t -g 2 -l 100000`: 80
  threads passing messages through sockets), container B a ping-pong of two processes (`perf
  bench sched pipe`): most switches stay inside one container;
- "cross ping-pong": a process in A and a process in B ping-pong through two pipes: every
  switch between them crosses containers (the worst case for reading at cgroup switches).
topdown-bpf runs machine-wide with one counter (`msr/tsc/`, a software event standing in for a
hardware one), once with `--per-thread` (every switch reads) and once with `--per-cgroup` (reads
only at cgroup switches), and with the software set alone (no read), interleaved, ROUNDS
rounds, kernel.bpf_stats_enabled=1 for the switch program's ns per run. From its final JSON
document: switches, ticks and `counter_set_reads`. SWITCH_READS_TABLE is the output of
`examples/switch_reads.rs` (counters each TopDown set reads per read); the estimate for a set =
the cgroup-only program's cost without its reads + reads per switch x the set's counters x the
per-read cost measured here (per-thread msr/tsc/ minus the software set, per read).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bpf_stats import switch_program
from host import cgroup2_mount

TOPDOWN, ROUNDS, TABLE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
SECONDS = 5

MOUNT = cgroup2_mount("cgroup_reads")
BASE = os.path.join(MOUNT, "topdown-bench")
CONTAINERS = [os.path.join(BASE, name) for name in ("container-a", "container-b")]

PING_PONG = r"""
import os, sys, time
r, w = int(sys.argv[1]), int(sys.argv[2])
end = time.monotonic() + float(sys.argv[3])
first = sys.argv[4] == "1"
if first:
    os.write(w, b"x")
while time.monotonic() < end:
    if not os.read(r, 1):
        break
    os.write(w, b"x")
"""


def in_container(index, argv, **kwargs):
    """Starts argv inside container `index` (it joins the cgroup before exec)."""
    procs = os.path.join(CONTAINERS[index], "cgroup.procs")

    def join():
        with open(procs, "w") as f:
            f.write("0")

    return subprocess.Popen(argv, preexec_fn=join, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **kwargs)


def services():
    return [
        in_container(0, ["timeout", str(SECONDS), "perf", "bench", "sched", "messaging", "-t",
                         "-g", "2", "-l", "100000"]),
        in_container(1, ["timeout", str(SECONDS), "perf", "bench", "sched", "pipe", "-l",
                         "100000000"]),
    ]


def cross_ping_pong():
    a_to_b = os.pipe()
    b_to_a = os.pipe()
    a = in_container(0, [sys.executable, "-c", PING_PONG, str(b_to_a[0]), str(a_to_b[1]),
                         str(SECONDS), "1"], pass_fds=(b_to_a[0], a_to_b[1]))
    b = in_container(1, [sys.executable, "-c", PING_PONG, str(a_to_b[0]), str(b_to_a[1]),
                         str(SECONDS), "0"], pass_fds=(a_to_b[0], b_to_a[1]))
    for fd in (*a_to_b, *b_to_a):
        os.close(fd)
    return [a, b]


WORKLOADS = [("services", services), ("cross ping-pong", cross_ping_pong)]
MODES = [
    ("software set, --per-thread", ["--per-thread"]),
    ("msr/tsc/, --per-thread", ["--per-thread", "-e", "msr/tsc/"]),
    ("msr/tsc/, --per-cgroup", ["--per-cgroup", "-e", "msr/tsc/"]),
]


def measure(workload, args, report):
    """One run: the workload under topdown-bpf ARGS; the switch program's ns/run and the final
    document's switches, ticks and reads (during the workload and around it)."""
    tool = subprocess.Popen([TOPDOWN, *args, "--duration", str(SECONDS + 3), "--json", "-o",
                             report], stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    ns0, runs0 = switch_program()
    for child in workload():
        child.wait()
    ns1, runs1 = switch_program()
    if tool.wait() != 0:
        sys.exit(f"cgroup_reads: topdown-bpf {args} failed")
    with open(report) as f:
        stats = [json.loads(l) for l in f if l.strip()][-1]["kernel_stats"]
    return {
        "ns_per_run": (ns1 - ns0) / max(runs1 - runs0, 1),
        "switches": stats["context_switches"],
        "ticks": stats["ticks"],
        "reads": stats["counter_set_reads"],
    }


def set_rows():
    """(label, counters read per read) for the Ice Lake and Sapphire Rapids sets."""
    rows = []
    for line in open(TABLE):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith(("Ice Lake", "Sapphire Rapids")):
            rows.append((f"{cells[0]} L{cells[1]}", int(cells[2])))
    return rows


def main():
    for path in (BASE, *CONTAINERS):
        os.makedirs(path, exist_ok=True)
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=True)
    results = {(w, m): [] for w, _ in WORKLOADS for m, _ in MODES}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            for _ in range(ROUNDS):
                for wname, workload in WORKLOADS:
                    for mname, args in MODES:
                        results[(wname, mname)].append(measure(workload, args, report))
    finally:
        subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=0"], check=True)
        for path in (*CONTAINERS, BASE):
            try:
                os.rmdir(path)
            except OSError:
                pass

    def med(wname, mname, key):
        return statistics.median(r[key] for r in results[(wname, mname)])

    def reads_per_charge(wname, mname):
        return statistics.median(r["reads"] / max(r["switches"] + r["ticks"], 1)
                                 for r in results[(wname, mname)])

    print("| workload | mode | switches | ticks | counter set reads | reads per switch or tick "
          "| sched_switch ns/run |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for wname, _ in WORKLOADS:
        for mname, _ in MODES:
            print(f"| {wname} | {mname} | {med(wname, mname, 'switches'):,.0f} | "
                  f"{med(wname, mname, 'ticks'):,.0f} | {med(wname, mname, 'reads'):,.0f} | "
                  f"{reads_per_charge(wname, mname):.3f} | "
                  f"{med(wname, mname, 'ns_per_run'):.0f} |")

    print()
    print("| workload | set | counters read per switch, every switch | estimated ns/run "
          "| counters read per switch, cgroup switches only | estimated ns/run |")
    print("|---|---|---:|---:|---:|---:|")
    for wname, _ in WORKLOADS:
        soft = med(wname, MODES[0][0], "ns_per_run")
        thread_ns = med(wname, MODES[1][0], "ns_per_run")
        cgroup_ns = med(wname, MODES[2][0], "ns_per_run")
        thread_reads = reads_per_charge(wname, MODES[1][0])
        cgroup_reads = reads_per_charge(wname, MODES[2][0])
        per_read = (thread_ns - soft) / max(thread_reads, 1e-9)
        cgroup_base = cgroup_ns - cgroup_reads * per_read
        for label, counters in set_rows():
            every = thread_reads * counters
            only = cgroup_reads * counters
            print(f"| {wname} | {label} | {every:.2f} | {soft + every * per_read:.0f} | "
                  f"{only:.2f} | {cgroup_base + only * per_read:.0f} |")
        print(f"| {wname} | (per read, measured: {per_read:.0f} ns; cgroup-only program "
              f"without reads: {cgroup_base:.0f} ns; software set: {soft:.0f} ns) | | | | |")


main()
