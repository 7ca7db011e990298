#!/usr/bin/env bash
# The tool's cost as live threads grow (see BENCHMARKS.md and scale.py).
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
echo
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $rounds interleaved rounds of 10 s each way; date: $(date -u +%F)"
