#!/usr/bin/env python3
"""Thread churn under each way of running topdown-bpf, and under `perf stat` (see BENCHMARKS.md).

Usage: churn.py TOPDOWN_BPF CHURN ROUNDS

The churn program's two creator threads start and join threads as fast as they can for 5 s
(the short threads do no work: the worst case for per-thread bookkeeping); its own count of
exited threads per second is the figure. Interleaved rounds, each: alone; topdown-bpf
machine-wide (started 3 s before, output only at the end); `topdown-bpf -- CHURN`;
`topdown-bpf -I 1000 --json -- CHURN` (a document a second); `perf stat -e
cpu-clock,msr/tsc/ -- CHURN` (per-task counting inherited by every thread). Each collector's own
CPU per exited thread: machine-wide from /proc/PID/stat around the churn (10 ms ticks); with
`-- CHURN`, the collector's rusage at wait4 less the churn's own (it prints its getrusage).
Records lost: the final document's `thread_record_ring_full` + `thread_map_full`. Then, in a
round of its own with kernel.bpf_stats_enabled=1 (it adds two clock reads to every program
run, so that round's exits/s are not compared), the sched_switch program's mean ns per run
during churn, machine-wide. A first churn run, unmeasured, warms the machine up. Writes
Markdown tables to stdout.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bpf_stats import switch_program

TOPDOWN, CHURN, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3])
CHURN_CMD = [CHURN, "--seconds", "5", "--creators", "2"]
TICK = os.sysconf("SC_CLK_TCK")


def done_line(text):
    """The churn's final JSON line."""
    return [json.loads(l) for l in text.splitlines() if '"done"' in l][-1]


def lost_in(report):
    """Records lost, from the final JSON document of a report file."""
    with open(report) as f:
        doc = [json.loads(l) for l in f if l.strip()][-1]
    stats = doc["kernel_stats"]
    return stats["thread_record_ring_full"] + stats["thread_map_full"]


def run_child(argv):
    """Runs argv (which runs the churn); its stdout, and its CPU in ns without the churn's."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        sys.exit(f"churn: {argv[0]} exited with {child.returncode}")
    done = done_line(out)
    total_ns = (usage.ru_utime + usage.ru_stime) * 1e9
    return done, max(total_ns - done["rusage_cpu_ns"], 0)


def proc_cpu_ns(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e9 / TICK


def alone():
    out = subprocess.run(CHURN_CMD, stdout=subprocess.PIPE, check=True, text=True).stdout
    return done_line(out), None, None


def machine_wide(report):
    tool = subprocess.Popen([TOPDOWN, "--duration", "11", "--json", "--force", "-o", report],
                            stderr=subprocess.DEVNULL)
    time.sleep(3)
    before = proc_cpu_ns(tool.pid)
    out = subprocess.run(CHURN_CMD, stdout=subprocess.PIPE, check=True, text=True).stdout
    cpu = proc_cpu_ns(tool.pid) - before
    if tool.wait() != 0:
        sys.exit("churn: topdown-bpf machine-wide failed")
    return done_line(out), cpu, lost_in(report)


def command(report, extra):
    done, cpu = run_child([TOPDOWN, *extra, "--json", "--force", "-o", report, "--", *CHURN_CMD])
    return done, cpu, lost_in(report)


def perf_stat():
    done, cpu = run_child(["perf", "stat", "-e", "cpu-clock,msr/tsc/", "-o", "/dev/null", "--",
                           *CHURN_CMD])
    return done, cpu, None


MODES = [
    ("alone", lambda r: alone()),
    ("topdown-bpf machine-wide", machine_wide),
    ("topdown-bpf -- CHURN", lambda r: command(r, [])),
    ("topdown-bpf -I 1000 --json -- CHURN", lambda r: command(r, ["-I", "1000"])),
    ("perf stat -e cpu-clock,msr/tsc/ -- CHURN", lambda r: perf_stat()),
]


def main():
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=0"], check=True)
    rates = {name: [] for name, _ in MODES}
    ratios = {name: [] for name, _ in MODES}
    cpu_per_exit = {name: [] for name, _ in MODES}
    lost = {name: 0 for name, _ in MODES}
    # A first run is slower than the rest here (page cache, thread stacks): not measured.
    alone()
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        print("| round | " + " | ".join(name for name, _ in MODES) + " |")
        print("|---:|" + "---:|" * len(MODES))
        for round_ in range(1, ROUNDS + 1):
            cells = []
            base = None
            for name, run in MODES:
                done, cpu, lost_now = run(report)
                rate = done["exits_per_s"]
                base = base or rate
                rates[name].append(rate)
                ratios[name].append(rate / base)
                if cpu is not None:
                    cpu_per_exit[name].append(cpu / max(done["exits"], 1))
                if lost_now is not None:
                    lost[name] += lost_now
                cells.append(f"{rate:,.0f}" if name == "alone" else f"{rate:,.0f} ({rate / base:.2f})")
            print(f"| {round_} | " + " | ".join(cells) + " |", flush=True)

        print()
        print("| mode | median exits/s | median ratio to alone | ahead of perf stat (rounds) "
              "| collector CPU per exited thread, median | records lost (all rounds) |")
        print("|---|---:|---:|---:|---:|---:|")
        perf = ratios[MODES[-1][0]]
        for name, _ in MODES:
            ahead = "-"
            if name.startswith("topdown-bpf"):
                wins = sum(1 for ours, theirs in zip(ratios[name], perf) if ours > theirs)
                ahead = f"{wins} of {ROUNDS}"
            per = (f"{statistics.median(cpu_per_exit[name]):,.0f} ns"
                   if cpu_per_exit[name] else "-")
            lost_cell = str(lost[name]) if name.startswith("topdown-bpf") else "-"
            print(f"| {name} | {statistics.median(rates[name]):,.0f} | "
                  f"{statistics.median(ratios[name]):.2f} | {ahead} | {per} | {lost_cell} |")

        # The switch program's cost during churn, machine-wide, bpf_stats on.
        subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=True)
        try:
            tool = subprocess.Popen([TOPDOWN, "--duration", "11", "-o", "/dev/null"],
                                    stderr=subprocess.DEVNULL)
            time.sleep(3)
            ns0, runs0 = switch_program()
            subprocess.run(CHURN_CMD, stdout=subprocess.DEVNULL, check=True)
            ns1, runs1 = switch_program()
            tool.wait()
        finally:
            subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=0"], check=True)
        runs = runs1 - runs0
        print()
        print(f"sched_switch during churn (bpf_stats on, machine-wide): "
              f"{(ns1 - ns0) / max(runs, 1):.0f} ns per run over {runs:,} runs.")


main()
