#!/usr/bin/env bash
# Bytes an always-on store takes per hour (see BENCHMARKS.md): for each count of live threads
# (default 100, 1,000 and 20,000, each waking every second for a few microseconds of work:
# xtask/bench/sleepers.c, so every thread runs in every window), `record --store` machine-wide
# at -I 1000 and at -I 10000 (the systemd unit's interval) side by side for SECONDS (default
# 120), RUNS times; prints the median bytes per hour of each, and per thread per window.
# Usage: store-bytes.sh TOPDOWN_BPF RUNS [THREADS...]
set -euo pipefail
topdown=$1
runs=${2:-1}
shift 2 || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 1000 20000)
seconds=${SECONDS_PER_RUN:-120}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "store-bytes: needs root" >&2; exit 1; }
most=$(printf '%s\n' "${counts[@]}" | sort -n | tail -1)
pid_max=$(cat /proc/sys/kernel/pid_max)
map_count=$(cat /proc/sys/vm/max_map_count)
work=$(mktemp -d)
trap 'sysctl -q -w kernel.pid_max="$pid_max" vm.max_map_count="$map_count"; kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
[ "$pid_max" -ge $((most * 2)) ] || sysctl -q -w kernel.pid_max=$((most * 2))
[ "$map_count" -ge $((most * 4)) ] || sysctl -q -w vm.max_map_count=$((most * 4))
gcc -O2 -pthread -o "$work/sleepers" "$root/xtask/bench/sleepers.c"
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "| live threads (each runs every second) | -I | bytes per hour (median) | per run | bytes per thread per window |"
echo "|---:|---:|---:|---|---:|"
for n in "${counts[@]}"; do
  declare -a fast=() slow=()
  for r in $(seq 1 "$runs"); do
    "$work/sleepers" "$n" 1000 $((seconds + 30)) >/dev/null & sleepers=$!
    sleep 8
    rm -rf "$work/fast" "$work/slow"
    "$topdown" record --store "$work/fast" -I 1000 --duration "$seconds" >/dev/null 2>"$work/fast.err" & a=$!
    "$topdown" record --store "$work/slow" -I 10000 --duration "$seconds" >/dev/null 2>"$work/slow.err" & b=$!
    wait $a $b
    kill $sleepers 2>/dev/null || true; wait $sleepers 2>/dev/null || true
    f=$(du -sb "$work/fast" | cut -f1); s=$(du -sb "$work/slow" | cut -f1)
    fast+=($((f * 3600 / seconds))); slow+=($((s * 3600 / seconds)))
    echo "threads $n run $r/$runs: -I 1000 $f bytes, -I 10000 $s bytes in $seconds s" >&2
  done
  mf=$(median "${fast[@]}"); ms=$(median "${slow[@]}")
  echo "| $n | 1000 | $mf | ${fast[*]} | $((mf / 3600 / n)) |"
  echo "| $n | 10000 | $ms | ${slow[*]} | $((ms * 10 / 3600 / n)) |"
done
echo
echo "machine: $(nproc) vCPU, $(uname -r); $seconds s a run, machine-wide, the software set; date: $(date -u +%F)"
