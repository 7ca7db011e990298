#!/usr/bin/env bash
# Counter reads per switch when only cgroups are reported, two containers (see cgroup_reads.py
# and BENCHMARKS.md). Usage: cgroup-reads.sh TOPDOWN_BPF ROUNDS
set -euo pipefail
topdown=$1
rounds=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "cgroup-reads: needs root" >&2; exit 1; }
table=$(mktemp)
trap 'rm -f "$table"' EXIT
cargo run -q --release -p topdown-user --example switch_reads --manifest-path "$root/Cargo.toml" \
  -- "$root/tests/fixtures/sysfs" > "$table"
python3 "$root/xtask/bench/cgroup_reads.py" "$topdown" "$rounds" "$table"
echo
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $rounds interleaved rounds; date: $(date -u +%F)"
