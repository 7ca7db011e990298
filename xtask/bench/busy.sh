#!/usr/bin/env bash
# The tool's cost on a busy host: every thread running every interval, thousands of containers,
# serve scraped every second (issue 55; busy.py says what it measures, BENCHMARKS.md has results).
# Usage: busy.sh TOPDOWN_BPF ROUNDS   (THREADS="20000 100000", CGROUPS="5000 20000", WINDOWS=10,
#                                     OUTPUTS="json view record")
set -euo pipefail
topdown=$1
rounds=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "busy: needs root" >&2; exit 1; }
command -v tmux >/dev/null || { echo "busy: needs tmux (apt-get install tmux)" >&2; exit 1; }
# Room for the threads: a pid each and two mappings each (a stack and its guard page), raised
# for the run and restored after.
most=$(printf '%s\n' ${THREADS:-20000 100000} ${CGROUPS:-5000 20000} | sort -n | tail -1)
pid_max=$(cat /proc/sys/kernel/pid_max)
map_count=$(cat /proc/sys/vm/max_map_count)
threads_max=$(cat /proc/sys/kernel/threads-max)
work=$(mktemp -d)
trap 'sysctl -q -w kernel.pid_max="$pid_max" vm.max_map_count="$map_count" kernel.threads-max="$threads_max"; rm -rf "$work"' EXIT
[ "$pid_max" -ge $((most * 2)) ] || sysctl -q -w kernel.pid_max=$((most * 2))
[ "$map_count" -ge $((most * 4)) ] || sysctl -q -w vm.max_map_count=$((most * 4))
[ "$threads_max" -ge $((most * 2)) ] || sysctl -q -w kernel.threads-max=$((most * 2))
gcc -O2 -pthread -o "$work/sleepers" "$root/xtask/bench/sleepers.c"
python3 "$root/xtask/bench/busy.py" "$topdown" "$work/sleepers" "$rounds"
