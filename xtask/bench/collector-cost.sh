#!/usr/bin/env bash
# Collector cost, six tables (see BENCHMARKS.md). Usage: collector-cost.sh TOPDOWN_BPF RUNS
#  1. Software set: pinned `perf bench sched pipe` (pure context switching on CPU 0) with no
#     collector, topdown-bpf machine-wide, topdown-bpf narrowed to another process (every switch
#     here is between unwatched threads), a bpftrace program doing per-thread on-CPU accounting,
#     and `perf stat` counting cpu-clock and msr/tsc per task; topdown-bpf machine-wide once more
#     without reading run-queue delay (TOPDOWN_BPF_NO_WAITS: the cost of that one load). Interleaved runs, medians, ratios
#     against the same run's baseline, all measured with kernel.bpf_stats_enabled off (it adds
#     two clock reads to every program run); each switch program's mean ns per run from a second
#     benchmark run with it on.
#  2. Per counter read: topdown-bpf with N = 1, 5 and 9 software counters read at every switch.
#  3. Per-set estimates: counters and lookups of each TopDown set (examples/switch_reads.rs)
#     times the costs of table 2.
#  4. Churn (churn.py): two threads starting and joining threads as fast as they can for 5 s,
#     alone, under each way of running topdown-bpf and under perf stat: exits/s, ratios, the
#     collector's CPU per exited thread, records lost, sched_switch ns/run during churn.
#  5. Where the switch program's nanoseconds go: the program stopped after each of its stages
#     (TOPDOWN_BPF_SWITCH_STOP), the first an empty program, interleaved in the same run.
#  6. Only with BASELINE=/path/to/another/topdown-bpf: the whole switch program (machine-wide,
#     software set) of TOPDOWN_BPF, with and without neighbours (TOPDOWN_BPF_NO_NEIGHBOURS),
#     and narrowed (`-p` of another process: every switch unwatched), against BASELINE's,
#     interleaved (each run in another order: the order alone moved medians by 10 ns), with
#     per-run differences.
#  7. The migrate program (tp_btf/sched_migrate_task: a queued thread's wait on the CPU it
#     leaves, split over that CPU's history from Linux 5.19) under `perf bench sched messaging
#     -g 4 -l 1500` unpinned (160 threads on every CPU: wakeup migrations, most of them of a
#     sleeping thread, and load balancing of queued ones): runs per benchmark and ns per run,
#     with BASELINE's too when given, interleaved.
# TABLES=1 (or 12, 4, ...) runs only those tables.
set -euo pipefail
tables=${TABLES:-12345}
topdown=$1
runs=${2:-7}
loops=${LOOPS:-200000}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "collector-cost: needs root" >&2; exit 1; }

cargo build -q --release -p topdown-tests --bin churn --manifest-path "$root/Cargo.toml"
churn=$root/target/release/churn
reads_table=$(cargo run -q --release -p topdown-user --example switch_reads \
  --manifest-path "$root/Cargo.toml" -- "$root/tests/fixtures/sysfs")

sysctl -qw kernel.bpf_stats_enabled=0
# bpftrace's tracepoints need tracefs.
[ -d /sys/kernel/tracing/events/sched ] || mount -t tracefs tracefs /sys/kernel/tracing
sleep infinity & idle_pid=$!
trap 'sysctl -qw kernel.bpf_stats_enabled=0; kill $(jobs -p) 2>/dev/null || true' EXIT

bpftrace_prog='tracepoint:sched:sched_switch {
  $now = nsecs;
  if (@last[cpu]) { @oncpu[args->prev_pid] = @oncpu[args->prev_pid] + ($now - @last[cpu]); }
  @last[cpu] = $now;
  @switches[args->prev_pid] = count();
}'

pipe_ops() { # ops/sec of one pinned run; extra arguments wrap the benchmark (perf stat ...)
  taskset -c 0 "$@" perf bench sched pipe -l "$loops" 2>/dev/null | awk '/ops\/sec/ {print $1}'
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
  # Throughput without bpf_stats, then the program's cost per run with it.
  local ops; ops=$(pipe_ops)
  sysctl -qw kernel.bpf_stats_enabled=1
  read -r t0 c0 < <(prog_stats "$pattern")
  loops=$((loops / 2)) pipe_ops >/dev/null
  read -r t1 c1 < <(prog_stats "$pattern")
  sysctl -qw kernel.bpf_stats_enabled=0
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  local ns="n/a"
  [ "$c1" -gt "$c0" ] && ns=$(( (t1 - t0) / (c1 - c0) ))
  echo "$ops $ns"
}

median() { printf '%s\n' "$@" | grep -v n/a | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }

if [[ $tables == *1* ]]; then
echo "## 1. Software set ($runs interleaved runs)" >&2
base=(); td=(); tdns=(); nw=(); nwns=(); nar=(); narns=(); bt=(); btns=(); ps=(); wins=0
for i in $(seq 1 "$runs"); do
  base+=("$(pipe_ops)")
  read -r ops ns < <(with_collector sched_switch "$topdown" --duration 600 -o /dev/null)
  td+=("$ops"); tdns+=("$ns")
  read -r ops ns < <(with_collector sched_switch env TOPDOWN_BPF_NO_WAITS=1 "$topdown" --duration 600 -o /dev/null)
  nw+=("$ops"); nwns+=("$ns")
  read -r ops ns < <(with_collector sched_switch "$topdown" -p "$idle_pid" --duration 600 -o /dev/null)
  nar+=("$ops"); narns+=("$ns")
  read -r ops ns < <(with_collector sched_sw bpftrace -e "$bpftrace_prog")
  bt+=("$ops"); btns+=("$ns")
  ps+=("$(pipe_ops perf stat -e cpu-clock,msr/tsc/ -x, -o /dev/null --)")
  ahead=$(python3 -c "print(int(${td[-1]} > ${bt[-1]} and ${td[-1]} > ${ps[-1]}))")
  wins=$((wins + ahead))
  echo "run $i/$runs: baseline ${base[-1]}  topdown-bpf ${td[-1]} (${tdns[-1]} ns/run)  without waits ${nw[-1]} (${nwns[-1]} ns/run)  narrowed ${nar[-1]} (${narns[-1]} ns/run)  bpftrace ${bt[-1]} (${btns[-1]} ns/run)  perf stat ${ps[-1]}  ahead of both: $ahead" >&2
done
mb=$(median "${base[@]}")
echo
echo "| configuration | median ops/s | ratio vs none | switch program, median ns/run |"
echo "|---|---:|---:|---:|"
echo "| no collector | $mb | 1.000 | - |"
echo "| topdown-bpf, software set, machine-wide | $(median "${td[@]}") | $(ratio "$(median "${td[@]}")" "$mb") | $(median "${tdns[@]}") |"
echo "| topdown-bpf, the same without reading run-queue delay | $(median "${nw[@]}") | $(ratio "$(median "${nw[@]}")" "$mb") | $(median "${nwns[@]}") |"
echo "| topdown-bpf, narrowed (\`-p\` of another process) | $(median "${nar[@]}") | $(ratio "$(median "${nar[@]}")" "$mb") | $(median "${narns[@]}") |"
echo "| bpftrace (timestamp accounting) | $(median "${bt[@]}") | $(ratio "$(median "${bt[@]}")" "$mb") | $(median "${btns[@]}") |"
echo "| perf stat -e cpu-clock,msr/tsc/ (per-task counting) | $(median "${ps[@]}") | $(ratio "$(median "${ps[@]}")" "$mb") | - |"
echo
echo "topdown-bpf ahead of both bpftrace and perf stat in $wins of $runs runs."
echo "Switch program ns/run with and without reading run-queue delay, per run: ${tdns[*]} / ${nwns[*]}"
fi

if [[ $tables == *2* || $tables == *3* ]]; then
echo "## 2. Per counter read" >&2
declare -A events=(
  [1]="msr/tsc/"
  [5]="msr/tsc/,context-switches,cpu-migrations,page-faults,minor-faults"
  [9]="msr/tsc/,context-switches,cpu-migrations,page-faults,minor-faults,major-faults,alignment-faults,emulation-faults,cpu-clock"
)
declare -A per_n
zero=()
for i in $(seq 1 "$runs"); do
  read -r _ ns < <(with_collector sched_switch "$topdown" --duration 600 -o /dev/null)
  zero+=("$ns")
done
per_n[0]=$(median "${zero[@]}")
for n in 1 5 9; do
  vals=()
  for i in $(seq 1 "$runs"); do
    read -r _ ns < <(with_collector sched_switch "$topdown" -e "${events[$n]}" --duration 600 -o /dev/null)
    vals+=("$ns")
  done
  per_n[$n]=$(median "${vals[@]}")
  echo "N=$n: ${vals[*]}" >&2
done
per_read=$(python3 -c "print(round((${per_n[9]} - ${per_n[0]}) / 9))")
echo
echo "| counters read per switch | median ns/run | ns per read over N = 0 |"
echo "|---:|---:|---:|"
for n in 0 1 5 9; do
  per=$([ "$n" = 0 ] && echo "-" || python3 -c "print(round((${per_n[$n]} - ${per_n[0]}) / $n))")
  echo "| $n | ${per_n[$n]} | $per |"
done

echo
echo "Estimated switch program cost per TopDown set = ${per_n[0]} ns (N = 0: state and thread"
echo "lookups, the task's runtime and clock loads) + counters read x $per_read ns (software events standing in):"
echo
echo "$reads_table" | python3 -c '
import sys
base, per = float(sys.argv[1]), float(sys.argv[2])
for line in sys.stdin:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells[0] == "CPU (model)":
        print(line.rstrip() + " estimated ns/run |")
    elif cells[0].startswith("---"):
        print(line.rstrip() + "---:|")
    else:
        print(line.rstrip() + f" {base + per * int(cells[2]):.0f} |")' "${per_n[0]}" "$per_read"

fi
if [[ $tables == *5* ]]; then
echo "## 5. Where the switch program's nanoseconds go" >&2
# The same program stopped at each of its stages (TOPDOWN_BPF_SWITCH_STOP: a loader-set constant,
# so the verifier drops the branches not taken), interleaved: stage 0 is an empty program on the
# same tracepoint, measured in the same run.
stages=(0 1 2 3 4 whole)
declare -A stage_ns
for i in $(seq 1 "$runs"); do
  line="run $i/$runs:"
  for stage in "${stages[@]}"; do
    if [ "$stage" = whole ]; then
      read -r _ ns < <(with_collector sched_switch "$topdown" --duration 600 -o /dev/null)
    else
      read -r _ ns < <(with_collector sched_switch env TOPDOWN_BPF_SWITCH_STOP="$stage" "$topdown" --duration 600 -o /dev/null)
    fi
    stage_ns[$stage]="${stage_ns[$stage]:-} $ns"
    line="$line $stage: $ns"
  done
  echo "$line" >&2
done
declare -A what=(
  [0]="empty program (returns at entry: the trampoline, its run-time accounting and the call)"
  [1]="+ this CPU's state (one per-CPU array lookup)"
  [2]="+ the switch noted (prev's and next's tid, clocks and runtime loads, unreported-switch check)"
  [3]="+ the charge begun (the CPU's clock moved on, the switch counted)"
  [4]="+ prev's totals found in the thread map (its switch count loads, its slot by tid: two array loads)"
  [whole]="+ the charge (clock, run-queue delay, name on first switch, list epoch)"
)
echo
# What a part adds is the median of its per-run differences with the stage before it (both
# measured in the same run, a few seconds apart), not the difference of two medians: runs here
# spread by half again, and the medians of neighbouring stages can come out in either order.
echo "| switch program stopped after | median ns/run | added by this part (median of per-run differences) |"
echo "|---|---:|---:|"
before=""
for stage in "${stages[@]}"; do
  # shellcheck disable=SC2086
  m=$(median ${stage_ns[$stage]})
  if [ -z "$before" ]; then
    added="-"
  else
    # shellcheck disable=SC2086
    read -r -a now <<< ${stage_ns[$stage]}
    # shellcheck disable=SC2086
    read -r -a then <<< ${stage_ns[$before]}
    diffs=()
    for i in "${!now[@]}"; do
      diffs+=("$((now[i] - then[i]))")
    done
    added=$(median "${diffs[@]}")
  fi
  echo "| ${what[$stage]} | $m | $added |"
  before=$stage
done
echo
for stage in "${stages[@]}"; do
  echo "Stage $stage, ns/run per run:${stage_ns[$stage]}"
done
fi
if [[ $tables == *6* && -n ${BASELINE:-} ]]; then
echo "## 6. The whole switch program against $BASELINE" >&2
base_ns=(); this_ns=(); off_ns=(); diffs=(); off_diffs=()
base_nar=(); this_nar=(); nar_diffs=()
# One of the five builds' switch program, ns per run: baseline, this build, this build without
# neighbours, and the first two narrowed.
switch_ns() {
  case $1 in
    0) with_collector sched_switch "$BASELINE" --duration 600 -o /dev/null ;;
    1) with_collector sched_switch "$topdown" --duration 600 -o /dev/null ;;
    2) with_collector sched_switch env TOPDOWN_BPF_NO_NEIGHBOURS=1 "$topdown" --duration 600 -o /dev/null ;;
    3) with_collector sched_switch "$BASELINE" -p "$idle_pid" --duration 600 -o /dev/null ;;
    4) with_collector sched_switch "$topdown" -p "$idle_pid" --duration 600 -o /dev/null ;;
  esac | awk '{print $2}'
}
for i in $(seq 1 "$runs"); do
  # Each run starts one build later: a build that always ran after another ran slower in
  # session 36 (12 and 14 of 15 rounds) for no reason in its code.
  got=()
  for k in 0 1 2 3 4; do
    j=$(( (k + i) % 5 ))
    got[j]=$(switch_ns "$j")
  done
  b=${got[0]} t=${got[1]} o=${got[2]} bn=${got[3]} tn=${got[4]}
  base_ns+=("$b"); this_ns+=("$t"); off_ns+=("$o"); base_nar+=("$bn"); this_nar+=("$tn")
  [ "$b" = n/a ] || [ "$t" = n/a ] || diffs+=("$((t - b))")
  [ "$b" = n/a ] || [ "$o" = n/a ] || off_diffs+=("$((o - b))")
  [ "$bn" = n/a ] || [ "$tn" = n/a ] || nar_diffs+=("$((tn - bn))")
  echo "run $i/$runs: baseline $b this build $t without neighbours $o; narrowed: baseline $bn this build $tn" >&2
done
echo
echo "| switch program, ns per run | median | per run |"
echo "|---|---:|---|"
echo "| baseline ($BASELINE) | $(median "${base_ns[@]}") | ${base_ns[*]} |"
echo "| this build ($topdown) | $(median "${this_ns[@]}") | ${this_ns[*]} |"
echo "| this build without neighbours (TOPDOWN_BPF_NO_NEIGHBOURS=1) | $(median "${off_ns[@]}") | ${off_ns[*]} |"
echo "| this build minus baseline, per run | $(median "${diffs[@]}") | ${diffs[*]} |"
echo "| without neighbours minus baseline, per run | $(median "${off_diffs[@]}") | ${off_diffs[*]} |"
echo "| baseline narrowed (\`-p\` of an idle process) | $(median "${base_nar[@]}") | ${base_nar[*]} |"
echo "| this build narrowed | $(median "${this_nar[@]}") | ${this_nar[*]} |"
echo "| narrowed, this build minus baseline, per run | $(median "${nar_diffs[@]}") | ${nar_diffs[*]} |"
echo
fi
if [[ $tables == *7* ]]; then
echo "## 7. The migrate program" >&2
with_messaging() { # the collector command follows; prints "runs ns/run" of its migrate program
  taskset -c 1 "$@" >/dev/null 2>&1 &
  local pid=$!
  sleep 3
  sysctl -qw kernel.bpf_stats_enabled=1
  read -r t0 c0 < <(prog_stats sched_migrate)
  perf bench sched messaging -g 4 -l 1500 >/dev/null 2>&1
  read -r t1 c1 < <(prog_stats sched_migrate)
  sysctl -qw kernel.bpf_stats_enabled=0
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  local ns="n/a"
  [ "$c1" -gt "$c0" ] && ns=$(( (t1 - t0) / (c1 - c0) ))
  echo "$((c1 - c0)) $ns"
}
m_this=(); m_base=(); m_runs=()
for i in $(seq 1 "$runs"); do
  read -r n t < <(with_messaging "$topdown" --per-cgroup --duration 600 -o /dev/null)
  m_this+=("$t"); m_runs+=("$n")
  if [ -n "${BASELINE:-}" ]; then
    read -r _ b < <(with_messaging "$BASELINE" --per-cgroup --duration 600 -o /dev/null)
    m_base+=("$b")
  fi
  echo "run $i/$runs: this build $t ns/run over $n runs; baseline ${m_base[-1]:-none}" >&2
done
echo
echo "| migrate program, ns per run | median | per run |"
echo "|---|---:|---|"
echo "| this build ($topdown) | $(median "${m_this[@]}") | ${m_this[*]} |"
[ -z "${BASELINE:-}" ] || echo "| baseline ($BASELINE) | $(median "${m_base[@]}") | ${m_base[*]} |"
echo "| program runs per benchmark | $(median "${m_runs[@]}") | ${m_runs[*]} |"
echo
fi
if [[ $tables == *4* ]]; then
echo "## 4. Churn" >&2
echo
python3 "$root/xtask/bench/churn.py" "$topdown" "$churn" "$runs"
echo
fi
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); runs: $runs x perf bench sched pipe -l $loops pinned to CPU 0, collectors on CPU 1; date: $(date -u +%F)"
