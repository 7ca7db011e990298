#!/usr/bin/env bash
# Thread churn (see BENCHMARKS.md). Usage: churn.sh TOPDOWN_BPF ROUNDS
# The churn program's two creator threads start and join threads as fast as they can for 5 s;
# its own count of exited threads per second, in interleaved rounds: alone; under topdown-bpf
# machine-wide (started 3 s before, no output until the end); under topdown-bpf -- CHURN; under
# `perf stat -e cpu-clock,msr/tsc/ -- CHURN` (per-task counting inherited by every thread). Then,
# with kernel.bpf_stats_enabled=1 in a round of its own, the sched_switch program's mean ns per
# run during churn and the tool's own CPU per exited thread (machine-wide).
set -euo pipefail
topdown=$1
rounds=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "churn: needs root" >&2; exit 1; }
cargo build -q --release -p topdown-tests --bin churn --manifest-path "$root/Cargo.toml"
churn=("$root/target/release/churn" --seconds 5 --creators 2)
rate() { python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if "exits_per_s" in l][-1]["exits_per_s"])'; }
machine_wide() {
  "$topdown" --duration 11 -o /dev/null 2>/dev/null &
  local tool=$!
  sleep 3
  "${churn[@]}" | rate
  wait "$tool"
}
sysctl -qw kernel.bpf_stats_enabled=0
echo "| round | alone | machine-wide | -- CHURN | perf stat -- CHURN |"
echo "|---:|---:|---:|---:|---:|"
for round in $(seq "$rounds"); do
  alone=$("${churn[@]}" | rate)
  wide=$(machine_wide)
  cmd=$("$topdown" -o /dev/null -- "${churn[@]}" 2>/dev/null | rate)
  perf=$(perf stat -e cpu-clock,msr/tsc/ -o /dev/null -- "${churn[@]}" | rate)
  echo "| $round | $alone | $wide ($(python3 -c "print(f'{$wide/$alone:.2f}')")) | $cmd ($(python3 -c "print(f'{$cmd/$alone:.2f}')")) | $perf ($(python3 -c "print(f'{$perf/$alone:.2f}')")) |"
done

# The switch program's cost and the tool's CPU during churn (bpf_stats adds two clock reads to
# every program run, so this round's exits/s are not compared).
prog_stats() {
  bpftool prog show -j | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name") == "sched_switch":
        print(p.get("run_time_ns", 0), p.get("run_cnt", 0))
        break
else:
    print(0, 0)'
}
sysctl -qw kernel.bpf_stats_enabled=1
"$topdown" --duration 11 -o /dev/null 2>/dev/null &
tool=$!
sleep 3
read -r ns0 runs0 < <(prog_stats)
cpu0=$(awk '{print $14 + $15}' "/proc/$tool/stat")
exits=$("${churn[@]}" | python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if "exits" in l][-1]["exits"])')
read -r ns1 runs1 < <(prog_stats)
cpu1=$(awk '{print $14 + $15}' "/proc/$tool/stat")
wait "$tool"
sysctl -qw kernel.bpf_stats_enabled=0
ticks=$(getconf CLK_TCK)
python3 - "$ns0" "$runs0" "$ns1" "$runs1" "$cpu0" "$cpu1" "$exits" "$ticks" <<'EOF'
import sys
ns0, runs0, ns1, runs1, cpu0, cpu1, exits, ticks = map(int, sys.argv[1:])
runs = runs1 - runs0
cpu_ns = (cpu1 - cpu0) * 1e9 / ticks
print()
print(f"sched_switch during churn: {(ns1 - ns0) / max(runs, 1):.0f} ns per run over {runs} runs; "
      f"topdown-bpf's own CPU {cpu_ns / 1e6:.0f} ms for {exits} exited threads = "
      f"{cpu_ns / max(exits, 1):.0f} ns per exited thread (utime + stime, {1e3 / ticks:.0f} ms ticks)")
EOF
