#!/usr/bin/env bash
# Bytes an always-on store takes per hour (see BENCHMARKS.md): for each count of live threads
# (default 100, 1,000 and 20,000, each waking every second for a few microseconds of work:
# xtask/bench/sleepers.c, so every thread runs in every window), `record --store` machine-wide
# at -I 1000 and at -I 10000 (the systemd unit's interval) side by side for SECONDS (default
# 120), RUNS times; prints the median bytes per hour of each, and per thread per window.
# SHAPE=processes makes the sleepers N processes of one thread each. BELOW=PATH also runs Meta's
# `below record` beside them on the same host, at -i 1 and -i 10, with its strongest documented
# compression (--compress --dict-compress-chunk-size 16), for the comparison issue 53 asks.
# Usage: store-bytes.sh TOPDOWN_BPF RUNS [THREADS...]
set -euo pipefail
topdown=$1
runs=${2:-1}
shift 2 || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 1000 20000)
seconds=${SECONDS_PER_RUN:-120}
shape=${SHAPE:-threads}
below=${BELOW:-}
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
cgroup2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
# `below record` in the background: its own config (store, log, the cgroup2 mount), port.
start_below() { # NAME INTERVAL_S PORT
  mkdir -p "$work/$1/log"
  printf 'log_dir = "%s"\nstore_dir = "%s"\ncgroup_root = "%s"\n' \
    "$work/$1/log" "$work/$1/store" "$cgroup2" > "$work/$1.conf"
  "$below" --config "$work/$1.conf" record -i "$2" --port "$3" --compress \
    --dict-compress-chunk-size 16 >/dev/null 2>"$work/$1.err" &
}
tools=("topdown-bpf -I 1000" "topdown-bpf -I 10000")
[ -z "$below" ] || tools+=("below -i 1" "below -i 10")
echo "| live $shape (each runs every second) | recorder | bytes per hour (median) | per run | bytes per sleeper per window |"
echo "|---:|---|---:|---|---:|"
for n in "${counts[@]}"; do
  declare -A sizes=()
  for r in $(seq 1 "$runs"); do
    mode=(); [ "$shape" = threads ] || mode=(processes)
    "$work/sleepers" "$n" 1000 $((seconds + 30)) "${mode[@]}" >/dev/null & sleepers=$!
    sleep 8
    rm -rf "$work/fast" "$work/slow" "$work/below1" "$work/below10"
    "$topdown" record --store "$work/fast" -I 1000 --duration "$seconds" >/dev/null 2>"$work/fast.err" & a=$!
    "$topdown" record --store "$work/slow" -I 10000 --duration "$seconds" >/dev/null 2>"$work/slow.err" & b=$!
    if [ -n "$below" ]; then
      start_below below1 1 18001; c=$!
      start_below below10 10 18002; d=$!
    fi
    wait $a $b
    if [ -n "$below" ]; then kill -INT $c $d; wait $c $d || true; fi
    kill $sleepers 2>/dev/null || true; wait $sleepers 2>/dev/null || true
    dirs=(fast slow); [ -z "$below" ] || dirs+=(below1/store below10/store)
    for i in "${!dirs[@]}"; do
      bytes=$(du -sb "$work/${dirs[$i]}" | cut -f1)
      sizes[$i]="${sizes[$i]:-} $((bytes * 3600 / seconds))"
      echo "$shape $n run $r/$runs: ${tools[$i]}: $bytes bytes in $seconds s" >&2
    done
  done
  for i in "${!tools[@]}"; do
    # shellcheck disable=SC2086
    m=$(median ${sizes[$i]})
    interval=${tools[$i]##* }; [ "$interval" -ge 1000 ] || interval=$((interval * 1000))
    echo "| $n | ${tools[$i]} | $m |${sizes[$i]} | $((m * interval / 1000 / 3600 / n)) |"
  done
  unset sizes
done
echo
echo "machine: $(nproc) vCPU, $(uname -r); $seconds s a run, machine-wide, the software set; date: $(date -u +%F)"
