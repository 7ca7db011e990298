#!/usr/bin/env bash
# Collector cost: pinned `perf bench sched pipe` (pure context switching on CPU 0) with no
# collector, with topdown-bpf, and with a bpftrace program doing the same per-thread on-CPU
# accounting; plus each sched_switch program's mean ns per run from kernel.bpf_stats_enabled.
# Runs are interleaved (baseline, topdown-bpf, bpftrace, repeat) and medians reported, with
# ratios against the baseline of the same run. Usage: collector-cost.sh TOPDOWN_BPF RUNS
set -euo pipefail
topdown=$1
runs=${2:-7}
loops=${LOOPS:-200000}
[ "$(id -u)" = 0 ] || { echo "collector-cost: needs root" >&2; exit 1; }

sysctl -qw kernel.bpf_stats_enabled=1
# bpftrace's tracepoints need tracefs.
[ -d /sys/kernel/tracing/events/sched ] || mount -t tracefs tracefs /sys/kernel/tracing
trap 'sysctl -qw kernel.bpf_stats_enabled=0; kill $(jobs -p) 2>/dev/null || true' EXIT

bpftrace_prog='tracepoint:sched:sched_switch {
  $now = nsecs;
  if (@last[cpu]) { @oncpu[args->prev_pid] = @oncpu[args->prev_pid] + ($now - @last[cpu]); }
  @last[cpu] = $now;
  @switches[args->prev_pid] = count();
}'

pipe_ops() { # ops/sec of one pinned run
  taskset -c 0 perf bench sched pipe -l "$loops" 2>/dev/null | awk '/ops\/sec/ {print $1}'
}

# Sum run_time_ns and run_cnt of the loaded programs whose name matches $1.
prog_stats() {
  bpftool -j prog show 2>/dev/null | python3 -c '
import json, sys
pat = sys.argv[1]
t = c = 0
for p in json.load(sys.stdin):
    if pat in p.get("name", ""):
        t += p.get("run_time_ns", 0); c += p.get("run_cnt", 0)
print(t, c)' "$1"
}

with_collector() { # $1 = name pattern of its switch program; the collector command follows
  local pattern=$1; shift
  taskset -c 1 "$@" >/dev/null 2>&1 &
  local pid=$!
  sleep 3
  read -r t0 c0 < <(prog_stats "$pattern")
  local ops; ops=$(pipe_ops)
  read -r t1 c1 < <(prog_stats "$pattern")
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  local ns="n/a"
  [ "$c1" -gt "$c0" ] && ns=$(( (t1 - t0) / (c1 - c0) ))
  echo "$ops $ns"
}

base=(); td=(); tdns=(); bt=(); btns=()
for i in $(seq 1 "$runs"); do
  base+=("$(pipe_ops)")
  read -r ops ns < <(with_collector sched_switch "$topdown" --duration 600 -o /dev/null)
  td+=("$ops"); tdns+=("$ns")
  read -r ops ns < <(with_collector sched_sw bpftrace -e "$bpftrace_prog")
  bt+=("$ops"); btns+=("$ns")
  echo "run $i/$runs: baseline ${base[-1]}  topdown-bpf ${td[-1]} (${tdns[-1]} ns/run)  bpftrace ${bt[-1]} (${btns[-1]} ns/run)" >&2
done

median() { printf '%s\n' "$@" | grep -v n/a | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mb=$(median "${base[@]}"); mt=$(median "${td[@]}"); mbt=$(median "${bt[@]}")
echo
echo "| configuration | median ops/s | ratio vs none | sched_switch program, median ns/run |"
echo "|---|---:|---:|---:|"
echo "| no collector | $mb | 1.000 | - |"
echo "| topdown-bpf (software set) | $mt | $(python3 -c "print(f'{$mt/$mb:.3f}')") | $(median "${tdns[@]}") |"
echo "| bpftrace (timestamp accounting) | $mbt | $(python3 -c "print(f'{$mbt/$mb:.3f}')") | $(median "${btns[@]}") |"
echo
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); runs: $runs x perf bench sched pipe -l $loops pinned to CPU 0, collectors on CPU 1; date: $(date -u +%F)"
