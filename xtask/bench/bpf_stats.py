"""What the benchmark scripts read from the kernel's BPF statistics (kernel.bpf_stats_enabled)."""

import json
import subprocess


def switch_program():
    """(run_time_ns, run_cnt) of the loaded program named sched_switch; (0, 0) without one."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], stdout=subprocess.PIPE, check=True,
                         text=True).stdout
    for prog in json.loads(out):
        if prog.get("name") == "sched_switch":
            return prog.get("run_time_ns", 0), prog.get("run_cnt", 0)
    return 0, 0
