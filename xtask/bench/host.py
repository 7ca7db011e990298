"""What the benchmark scripts read of processes and cgroups from /proc."""

import os
import sys


def cpu_seconds(pid):
    """CPU time of every thread of process `pid` so far, in seconds (schedstat's first field:
    ns on CPU); None once the process is gone. Threads that exit between the listing and the
    read are left out (the tool's threads live as long as it does)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return None
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1e9


def cgroup2_mount(script):
    """Where the unified hierarchy is mounted (hybrid hosts mount it below /sys/fs/cgroup); the
    calling `script` exits saying so where it is not."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[fields.index("-") + 1] == "cgroup2":
                return fields[4]
    sys.exit(f"{script}: needs the unified cgroup2 hierarchy mounted")
