#!/usr/bin/env python3
"""The tool's cost on a busy host (issue 55; see BENCHMARKS.md).

Usage: busy.py TOPDOWN_BPF SLEEPERS ROUNDS

1. Busy threads: for each count in THREADS (default 20000 100000), the sleepers program
   (xtask/bench/sleepers.c) starts that many threads of one process, each waking every second
   at a random phase for a few microseconds of work, so every thread runs in every interval.
   Machine-wide, at -I 1000, each for WINDOWS intervals in its steady state (default 10):
   - `--per-thread --json` to a pipe (read and dropped), measured from its first interval's
     document to the WINDOWS-th after it;
   - the full-screen view (`--per-thread` in a tmux pane of 200x50, redrawn every second: `-I`
     would print tables), measured over WINDOWS
     seconds from its fourth second;
   - `record -o FILE`, measured the same way, with the bytes the recording grew by per thread
     per window.
2. Thousands of containers: for each count in CGROUPS (default 5000 20000), as many leaf cgroups
   in the unified hierarchy, nested as systemd and Kubernetes nest them (half
   `system.slice/svc-N.service`, half `kubepods.slice/kubepods-burstable.slice/
   kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`, two containers a pod), each with
   one process waking every second for a few microseconds; then
   - `serve -I 1000` scraped every second by this script: the server's CPU per second, each
     scrape's time to the last byte (median and worst), the scrape's size;
   - `--per-container -I 1000 --json`, measured as in 1.
   The cgroups are created before and removed after.

OUTPUTS="json view record" (the default) picks part 1's outputs.
BASELINE=BINARY runs another build of the tool the same way in the same rounds, interleaved;
BASELINE=A:B runs two (named "baseline" and "baseline 2").

The figures are the tool's CPU (the nanoseconds on CPU the scheduler books for each of its
threads, /proc/PID/task/*/schedstat) per interval (per second for serve), per live thread or
cgroup, and its peak RSS (VmHWM). ROUNDS runs of each, interleaved; medians. The load the
sleepers make is printed beside (their own CPU per second).
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from host import cgroup2_mount, cpu_seconds

TOPDOWN, SLEEPERS, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3])
# The builds measured: (name, binary).
BUILDS = [("", TOPDOWN)] + [
    ("baseline" if i == 0 else f"baseline {i + 1}", binary)
    for i, binary in enumerate(b for b in os.environ.get("BASELINE", "").split(":") if b)]
THREADS = [int(n) for n in os.environ.get("THREADS", "20000 100000").split()]
CGROUPS = [int(n) for n in os.environ.get("CGROUPS", "5000 20000").split()]
WINDOWS = int(os.environ.get("WINDOWS", "10"))
# The thread part's outputs measured: any of json, view, record.
OUTPUTS = os.environ.get("OUTPUTS", "json view record").split()
if not OUTPUTS or set(OUTPUTS) - {"json", "view", "record"}:
    sys.exit(f"busy: OUTPUTS={' '.join(OUTPUTS)!r}: name some of json, view, record")
PORT = 19464


def peak_rss_mb(pid):
    """VmHWM of `pid` in MB (0 when gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def per_document(argv):
    """Runs argv (one JSON document a line on stdout); CPU seconds per interval from the first
    interval's document to WINDOWS after it, and peak RSS."""
    err = tempfile.TemporaryFile(mode="w+")
    tool = subprocess.Popen(argv + ["--duration", str(WINDOWS + 4)], stdout=subprocess.PIPE,
                            stderr=err)
    marks = []
    rss = 0
    for _ in tool.stdout:
        if len(marks) <= WINDOWS:
            marks.append(cpu_seconds(tool.pid))
            rss = max(rss, peak_rss_mb(tool.pid))
    err.seek(0)
    if tool.wait() != 0:
        sys.exit(f"busy: {' '.join(argv)} exited with {tool.returncode}:\n{err.read()}")
    if len(marks) <= WINDOWS or None in marks:
        sys.exit(f"busy: {' '.join(argv)} wrote {len(marks)} documents, fewer than "
                 f"{WINDOWS + 1}")
    return {"cpu": (marks[WINDOWS] - marks[0]) / WINDOWS, "rss": rss}


def over_seconds(pid, settle, why, grows=None):
    """CPU seconds of `pid` per second over WINDOWS seconds from `settle` seconds after now, and
    how much `grows()` grew per second meanwhile; `why()` says what the tool said if it ended
    before."""
    time.sleep(settle)
    c0, t0, g0 = cpu_seconds(pid), time.monotonic(), grows() if grows else 0
    time.sleep(WINDOWS)
    c1, t1, g1 = cpu_seconds(pid), time.monotonic(), grows() if grows else 0
    if c0 is None or c1 is None:
        sys.exit(f"busy: the tool exited while measured:\n{why()}")
    return (c1 - c0) / (t1 - t0), (g1 - g0) / (t1 - t0), peak_rss_mb(pid)


def view(tool):
    """The full-screen view in a tmux pane."""
    session = f"topdown-busy-{os.getpid()}"
    cmd = f"{tool} --per-thread --duration {WINDOWS + 8}; sleep 60"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "50", cmd],
                   check=True)
    try:
        shell = subprocess.run(["tmux", "display", "-p", "-t", session, "#{pane_pid}"],
                               check=True, capture_output=True, text=True).stdout.strip()
        # The pane's shell runs the tool, then waits (so what it said stays on the screen).
        pid = None
        deadline = time.monotonic() + 10
        while pid is None and time.monotonic() < deadline:
            found = subprocess.run(["pgrep", "-P", shell], capture_output=True, text=True)
            pid = int(found.stdout.split()[0]) if found.stdout.split() else None
            time.sleep(0.1)
        if pid is None:
            sys.exit("busy: the full-screen view did not start")
        def screen():
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                  capture_output=True, text=True).stdout

        cpu, _, rss = over_seconds(pid, 4, screen)
        if "tid" not in screen().lower():
            sys.exit(f"busy: the full-screen view shows no thread table:\n{screen()}")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], stderr=subprocess.DEVNULL)
    return {"cpu": cpu, "rss": rss}


def record(tool, work):
    """`record -o FILE`: CPU per second and the file's growth per second."""
    out = os.path.join(work, "busy.rec")
    said = os.path.join(work, "record.err")
    with open(said, "w") as err:
        tool = subprocess.Popen([tool, "record", "-o", out, "--force", "-I", "1000",
                                 "--duration", str(WINDOWS + 8)],
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        cpu, grew, rss = over_seconds(tool.pid, 4, lambda: open(said).read(),
                                      lambda: os.path.getsize(out))
    finally:
        tool.wait()
    if tool.returncode != 0:
        sys.exit(f"busy: record exited with {tool.returncode}")
    return {"cpu": cpu, "rss": rss, "bytes": grew}


def serve(tool, count):
    """`serve -I 1000` scraped every second: CPU per second, scrape times, scrape size."""
    url = f"http://127.0.0.1:{PORT}/metrics"
    tool = subprocess.Popen([tool, "serve", "--listen", f"127.0.0.1:{PORT}", "-I", "1000",
                             "--max-series", str(2 * count + 1000), "--duration",
                             "3600"],  # ended by this script
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times, size = [], 0

    def scrape():
        start = time.monotonic()
        with urllib.request.urlopen(url, timeout=120) as answer:
            body = answer.read()
        return time.monotonic() - start, len(body)

    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                scrape()
                break
            except OSError:
                if time.monotonic() > deadline or tool.poll() is not None:
                    sys.exit("busy: serve never answered")
                time.sleep(0.2)
        # Two windows in, then WINDOWS scrapes a second apart.
        for _ in range(2):
            time.sleep(1)
            scrape()
        c0, t0 = cpu_seconds(tool.pid), time.monotonic()
        for i in range(WINDOWS):
            took, size = scrape()
            times.append(took)
            time.sleep(max(0, t0 + i + 1 - time.monotonic()))
        c1, t1 = cpu_seconds(tool.pid), time.monotonic()
        rss = peak_rss_mb(tool.pid)
    finally:
        tool.terminate()
        tool.wait()
    return {"cpu": (c1 - c0) / (t1 - t0), "rss": rss, "median_scrape": statistics.median(times),
            "worst_scrape": max(times), "bytes": size}


def make_cgroups(base, count):
    """`count` leaf cgroups under `base`, nested as systemd and Kubernetes nest them; returns
    every directory made, parents first."""
    made = [base]
    leaves = []
    system = os.path.join(base, "system.slice")
    kube = os.path.join(base, "kubepods.slice", "kubepods-burstable.slice")
    made += [system, os.path.dirname(kube), kube]
    for i in range(count):
        if i % 2 == 0:
            leaf = os.path.join(system, f"svc-{i}.service")
        else:
            pod = i // 4
            uid = f"{pod:08x}_1b2c_4d5e_8f90_{pod:012x}"
            pod_dir = os.path.join(kube, f"kubepods-burstable-pod{uid}.slice")
            if pod_dir != made[-1] and not os.path.isdir(pod_dir):
                made.append(pod_dir)
            leaf = os.path.join(pod_dir, f"cri-containerd-{i:064x}.scope")
        made.append(leaf)
        leaves.append(leaf)
    for path in made:
        os.makedirs(path, exist_ok=True)
    return made, leaves


def remove_cgroups(made):
    for path in reversed(made):
        try:
            os.rmdir(path)
        except OSError:
            pass


def sleepers(argv):
    """Starts the sleepers; returns the process once every thread or process started."""
    proc = subprocess.Popen([SLEEPERS, *argv], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("started"):
        sys.exit(f"busy: sleepers did not start: {line!r}")
    # Each first naps a random part of its period: a period later all are in step.
    time.sleep(2)
    return proc


def load_of(proc):
    """The sleepers' CPU per second of wall time over about two seconds (the load the tool
    measures beside): divided by the time that passed, not the time asked for, which a
    saturated machine stretches."""
    c0, t0 = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(2)
    return (cpu_seconds(proc.pid) - c0) / (time.monotonic() - t0)


def median(results, key):
    return statistics.median(r[key] for r in results)


def threads_part(work):
    print("| live threads, each running every second | output | tool CPU per interval (median) "
          "| per thread per interval | peak RSS | recording bytes per thread per window |")
    print("|---:|---|---:|---:|---:|---:|")
    for count in THREADS:
        proc = sleepers([str(count), "1000", str(3600)])
        load = load_of(proc)
        ways = {}
        for build, tool in BUILDS:
            every = {
                "json": (f"--json{build and f' ({build})'}", lambda tool=tool: per_document(
                    [tool, "--per-thread", "-I", "1000", "--json"])),
                "view": (f"full-screen view{build and f' ({build})'}",
                         lambda tool=tool: view(tool)),
                "record": (f"record{build and f' ({build})'}",
                           lambda tool=tool: record(tool, work)),
            }
            ways.update(every[output] for output in OUTPUTS)
        results = {name: [] for name in ways}
        try:
            for _ in range(ROUNDS):
                for name, way in ways.items():
                    results[name].append(way())
        finally:
            proc.kill()
            proc.wait()
        for name, rs in results.items():
            cpu = median(rs, "cpu")
            recorded = (f"{median(rs, 'bytes') / count:.0f}" if name.startswith("record")
                        else "-")
            print(f"| {count:,} (their own load: {load:.2f} CPU) | {name} | {cpu * 1e3:.1f} ms | "
                  f"{cpu * 1e6 / count:.2f} us | {median(rs, 'rss'):.0f} MB | {recorded} |",
                  flush=True)


def cgroups_part(work):
    base = os.path.join(cgroup2_mount("busy"), "topdown-busy")
    print()
    print("| leaf cgroups, a process each running every second | output | tool CPU per second "
          "(median) | per cgroup | scrape: median, worst | scrape size | peak RSS |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for count in CGROUPS:
        made, leaves = make_cgroups(base, count)
        proc = None
        try:
            listing = os.path.join(work, "cgroups")
            with open(listing, "w") as f:
                f.write("".join(leaf + "\n" for leaf in leaves))
            proc = sleepers([str(count), "1000", str(3600), "processes", listing])
            ways = {}
            for build, tool in BUILDS:
                ways.update({
                    f"serve, scraped every second{build and f' ({build})'}":
                        lambda tool=tool: serve(tool, count),
                    f"--per-container --json{build and f' ({build})'}":
                        lambda tool=tool: per_document(
                            [tool, "--per-container", "-I", "1000", "--json"]),
                })
            results = {name: [] for name in ways}
            for _ in range(ROUNDS):
                for name, way in ways.items():
                    results[name].append(way())
        finally:
            # The sleepers' children outlive it: every one is killed, then the cgroups empty.
            subprocess.run(["pkill", "-KILL", "-f", "^" + re.escape(SLEEPERS) + " "],
                           stderr=subprocess.DEVNULL)
            if proc:
                proc.wait()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                    open(os.path.join(leaf, "cgroup.procs")).read() for leaf in leaves):
                time.sleep(0.5)
            remove_cgroups(made)
        for name, rs in results.items():
            cpu = median(rs, "cpu")
            scrapes = (f"{median(rs, 'median_scrape') * 1e3:.0f} ms, "
                       f"{max(r['worst_scrape'] for r in rs) * 1e3:.0f} ms"
                       if "serve" in name else "-")
            size = f"{median(rs, 'bytes') / 1e6:.1f} MB" if "serve" in name else "-"
            print(f"| {count:,} | {name} | {cpu * 1e3:.1f} ms | {cpu * 1e6 / count:.2f} us | "
                  f"{scrapes} | {size} | {median(rs, 'rss'):.0f} MB |", flush=True)


def main():
    with tempfile.TemporaryDirectory() as work:
        if THREADS:
            threads_part(work)
        if CGROUPS:
            cgroups_part(work)
    print()
    print(f"machine: {os.cpu_count()} vCPU, {os.uname().release}; {ROUNDS} interleaved rounds, "
          f"{WINDOWS} windows each; date: {time.strftime('%Y-%m-%d', time.gmtime())}")


main()
