#!/usr/bin/env bash
# Thread churn (see BENCHMARKS.md and churn.py). Usage: churn.sh TOPDOWN_BPF ROUNDS
set -euo pipefail
topdown=$1
rounds=${2:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "churn: needs root" >&2; exit 1; }
cargo build -q --release -p topdown-tests --bin churn --manifest-path "$root/Cargo.toml"
python3 "$root/xtask/bench/churn.py" "$topdown" "$root/target/release/churn" "$rounds"
echo
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $rounds interleaved rounds of churn --seconds 5 --creators 2; date: $(date -u +%F)"
