#!/usr/bin/env bash
# The tool's cost as live threads grow (see BENCHMARKS.md and scale.py).
# Usage: scale.sh TOPDOWN_BPF ROUNDS [THREADS...]
set -euo pipefail
topdown=$1
rounds=${2:-3}
shift 2 || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1000 5000 20000)
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "scale: needs root" >&2; exit 1; }
sleepers=$(mktemp -d)/sleepers
gcc -O2 -pthread -o "$sleepers" "$root/xtask/bench/sleepers.c"
python3 "$root/xtask/bench/scale.py" "$topdown" "$sleepers" "$rounds" "${counts[@]}"
echo
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $rounds interleaved rounds of 10 s each way; date: $(date -u +%F)"
