#!/usr/bin/env bash
# The tool's cost as live threads grow (see BENCHMARKS.md and scale.py), then c2c report at a
# million and ten million samples (C2C=0 leaves it out; see c2c-report.sh).
# Usage: scale.sh TOPDOWN_BPF ROUNDS [THREADS...]
set -euo pipefail
topdown=$1
rounds=${2:-3}
shift 2 || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1000 10000 30000 100000)
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "scale: needs root" >&2; exit 1; }
# Room for the threads: a pid each (kernel.pid_max is 32,768 on many machines) and two mappings
# each (a stack and its guard page: vm.max_map_count), raised for the run and restored after.
most=$(printf '%s\n' "${counts[@]}" | sort -n | tail -1)
pid_max=$(cat /proc/sys/kernel/pid_max)
map_count=$(cat /proc/sys/vm/max_map_count)
trap 'sysctl -q -w kernel.pid_max="$pid_max" vm.max_map_count="$map_count"' EXIT
[ "$pid_max" -ge $((most * 2)) ] || sysctl -q -w kernel.pid_max=$((most * 2))
[ "$map_count" -ge $((most * 4)) ] || sysctl -q -w vm.max_map_count=$((most * 4))
sleepers=$(mktemp -d)/sleepers
gcc -O2 -pthread -o "$sleepers" "$root/xtask/bench/sleepers.c"
python3 "$root/xtask/bench/scale.py" "$topdown" "$sleepers" "$rounds" "${counts[@]}"
# c2c report at a million and ten million samples as a busy host records them (c2c-report.sh,
# DISTINCT=1): ten million only where the machine has the ~30 GB writing the file takes.
if [ "${C2C:-1}" != 0 ]; then
  echo
  echo "c2c report, 1,000,000 distinct samples:"
  SAMPLES=1000000 DISTINCT=1 bash "$root/xtask/bench/c2c-report.sh" "$topdown" "$rounds"
  available_gb=$(( $(awk '/MemAvailable/ { print $2 }' /proc/meminfo) / 1048576 ))
  echo
  if [ "$available_gb" -ge 30 ]; then
    echo "c2c report, 10,000,000 distinct samples (perf left out: it needs tens of GB):"
    SAMPLES=10000000 DISTINCT=1 PERF=0 BASELINE="${BASELINE:-$topdown}" \
      bash "$root/xtask/bench/c2c-report.sh" "$topdown" "$rounds"
  else
    echo "c2c report, 10,000,000 samples: skipped, writing the file needs ~30 GB and $available_gb GB are available"
  fi
fi
echo
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $rounds interleaved rounds of 10 s each way; date: $(date -u +%F)"
