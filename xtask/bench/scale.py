#!/usr/bin/env python3
"""The tool's own cost as live threads grow (see BENCHMARKS.md, issue 33).

Usage: scale.py TOPDOWN_BPF SLEEPERS ROUNDS THREADS...

For each count of live threads and two shapes of them: the sleepers program
(xtask/bench/sleepers.c) starts that many threads, each waking every 50 ms for a few
microseconds (a busy service: every thread runs in every interval), every 5 s (a pool of
mostly idle threads, as JVM and Go hosts have: a fifth of them run in a 1 s interval), or, from
10,000 threads, every 100 s (idle pools: a hundredth run in an interval), each at a random
phase; then
`topdown-bpf --per-thread -I 1000 --json --duration 10 --max-threads M` (M: twice the threads,
at least 65,536) runs machine-wide, reading only the threads the kernel listed as charged (the
default) and reading every live thread's slot every interval (TOPDOWN_BPF_READ_WHOLE=1, what
a read does after a full list), interleaved, ROUNDS times each; with BASELINE=BINARY, another build
of the tool (reading as it reads by default) in the same rounds. PERIODS=5000,100000 keeps only
those shapes (milliseconds between wakes). The figures are the tool's
CPU (the nanoseconds on CPU the scheduler books for each of its threads,
/proc/PID/task/*/schedstat; 10 ms ticks of /proc/PID/stat were too coarse at 1,000 threads,
a tick or two per run) per interval in the steady state (from its
first interval's output to its last, over the intervals between: the start, whose
preallocated thread map alone costs ~0.2 s at --max-threads 65536, is its own column), and per
live thread per interval; its peak RSS (VmHWM) and, apart, the peak of its own allocations
(RssAnon) and of the file and shared pages it maps (RssFile + RssShmem: the binary and the
kernel's thread map, mapped read-only, whose pages count once read). The sleepers' startup is
not measured. Writes a Markdown table.
"""

import os
import statistics
import subprocess
import sys
import time

from host import cpu_seconds

TOPDOWN, SLEEPERS, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3])
COUNTS = [int(n) for n in sys.argv[4:]]
SECONDS = 10


# How the tool reads the live threads: its name in the table, the build, and the environment
# that says so.
WAYS = [("listed", TOPDOWN, {}),
        ("whole (every slot in use)", TOPDOWN, {"TOPDOWN_BPF_READ_WHOLE": "1"})]
if os.environ.get("BASELINE"):
    WAYS.append(("listed, baseline build", os.environ["BASELINE"], {}))
PERIODS = [int(p) for p in os.environ.get("PERIODS", "").split(",") if p]


def run_tool(way, count):
    """One run of the tool; (steady CPU seconds per interval, CPU seconds to its first
    interval's output, peak RSS, peak RssAnon, peak RssFile + RssShmem, in MB)."""
    env = dict(os.environ)
    env.update(WAYS[way][2])
    tool = subprocess.Popen(
        [WAYS[way][1], "--per-thread", "-I", "1000", "--json",
         "--max-threads", str(max(65536, 2 * count)),
         "--duration", str(SECONDS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    cpu, hwm, anon, mapped = 0.0, 0, 0, 0
    lines = 0
    first = None
    for _ in tool.stdout:
        lines += 1
        try:
            now = cpu_seconds(tool.pid)
            if not now:
                continue
            cpu = now
            if first is None:
                first = cpu
            with open(f"/proc/{tool.pid}/status") as f:
                # An exiting process's status has no VmHWM any more.
                status = {l.split(":")[0]: int(l.split()[1]) for l in f
                          if l.startswith(("VmHWM", "RssAnon", "RssFile", "RssShmem"))}
            hwm = max(hwm, status.get("VmHWM", 0))
            anon = max(anon, status.get("RssAnon", 0))
            mapped = max(mapped, status.get("RssFile", 0) + status.get("RssShmem", 0))
        except (FileNotFoundError, ProcessLookupError):
            pass
    if tool.wait() != 0:
        sys.exit(f"scale: topdown-bpf exited with {tool.returncode}")
    if first is None or lines < 3:
        sys.exit(f"scale: topdown-bpf wrote {lines} documents: too few to measure")
    return (cpu - first) / (lines - 1), first, hwm / 1024, anon / 1024, mapped / 1024


def main():
    print("| live threads | each wakes every | threads read | tool CPU per interval (median, steady) | per live thread per interval | CPU to the first interval | peak RSS | its own (RssAnon) | files and the mapped thread map |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    # Every thread running 20 times a second overloads a small machine past a few thousand
    # threads per CPU (20,000 on 2 vCPUs: a load average of 10,000): that shape stops there.
    busy_limit = 2500 * os.cpu_count()
    shapes = ([(c, 50) for c in COUNTS if c <= busy_limit] + [(c, 5000) for c in COUNTS]
              + [(c, 100000) for c in COUNTS if c >= 10000])
    shapes = [(c, p) for c, p in shapes if not PERIODS or p in PERIODS]
    for count, period in shapes:
        sleepers = subprocess.Popen([SLEEPERS, str(count), str(period),
                                     # Alive through every run (each ~1 s longer than
                                     # its intervals, with its start and its exit).
                                     str((SECONDS + 5) * len(WAYS) * ROUNDS + 30)],
                                    stdout=subprocess.PIPE, text=True)
        assert sleepers.stdout.readline().startswith("started"), "sleepers started"
        time.sleep(2)
        results = [[] for _ in WAYS]
        for _ in range(ROUNDS):
            for way in range(len(WAYS)):
                results[way].append(run_tool(way, count))
        sleepers.kill()
        sleepers.wait()
        for way, (name, _, _) in enumerate(WAYS):
            cpu = statistics.median(r[0] for r in results[way])
            start = statistics.median(r[1] for r in results[way])
            rss, anon, mapped = (statistics.median(r[i] for r in results[way]) for i in (2, 3, 4))
            print(f"| {count} | {period} ms | {name} | {cpu * 1e3:.1f} ms | "
                  f"{cpu * 1e6 / count:.2f} us | {start * 1e3:.0f} ms | {rss:.0f} MB | "
                  f"{anon:.0f} MB | {mapped:.0f} MB |")


main()
