#!/usr/bin/env bash
# c2c report speed: `topdown-bpf c2c report --stdio` against `perf c2c report --stdio` on the
# same generated perf.data (xtask/bench/c2c_spec.py, written by the c2c_spec_data test program
# with the tool's own perf.data writer). Each
# run times, back to back: perf and ours pinned to CPUs $CPUS (default 0-1; perf reads on one
# thread, ours on two), then ours pinned to one CPU ($ONE, default 1). Medians, the median of
# the per-run ratios (neighbouring runs share this noisy host's state), and peak RSS. Every
# output must equal perf's. Shapes (c2c_spec.py): DISTINCT=1, samples drawn one by one over
# 64 threads, 64 CPUs and 64 MiB (what a busy host records; almost every sample its own entry);
# INTERLEAVE=1, 20,000 distinct samples in random order; neither, runs of equal samples.
# Usage: c2c-report.sh TOPDOWN_BPF RUNS
set -euo pipefail
topdown=$1
runs=${2:-5}
samples=${SAMPLES:-1000000}
cpus=${CPUS:-0-1}
one=${ONE:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cargo build --release -q --manifest-path "$root/Cargo.toml" -p topdown-tests --bin c2c_spec_data
gen="$root/target/release/c2c_spec_data"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 "$here/c2c_spec.py" "$samples" spec.json ${INTERLEAVE:+--interleave} ${DISTINCT:+--distinct}
"$gen" spec.json . > /dev/null

# One timed run on CPUs $1 of the rest: "<seconds> <peak KB>", the report in $out.
timed() {
  local on=$1 start end
  shift
  start=$(date +%s%N)
  /usr/bin/time -f "%M" -o rss.txt taskset -c "$on" "$@" > "$out" 2>/dev/null
  end=$(date +%s%N)
  awk -v us=$(( (end - start) / 1000 )) -v kb="$(cat rss.txt)" 'BEGIN { printf "%.3f %s\n", us / 1e6, kb }'
}
: > runs.txt
for i in $(seq "$runs"); do
  out=perf.txt; read -r tp kp < <(timed "$cpus" perf c2c report --stdio -i perf.data)
  out=ours.txt; read -r to ko < <(timed "$cpus" "$topdown" c2c report --stdio -i perf.data)
  cmp -s ours.txt perf.txt || { echo "c2c-report: outputs differ" >&2; diff ours.txt perf.txt | head >&2; exit 1; }
  out=ours1.txt; read -r t1 _ < <(timed "$one" "$topdown" c2c report --stdio -i perf.data)
  cmp -s ours1.txt perf.txt || { echo "c2c-report: one-CPU output differs" >&2; exit 1; }
  echo "$tp $kp $to $ko $t1" >> runs.txt
  echo "run $i/$runs: perf $tp s, topdown-bpf $to s (one CPU: $t1 s)" >&2
done
python3 - "$cpus" "$one" <<'PY'
import statistics as st, sys
cpus, one = sys.argv[1], sys.argv[2]
runs = [list(map(float, l.split())) for l in open("runs.txt")]
col = lambda i: [r[i] for r in runs]
perf, ours, ours1 = col(0), col(2), col(4)
ratio = [p / o for p, o in zip(perf, ours)]
ratio1 = [p / o for p, o in zip(perf, ours1)]
print("| tool | CPUs | median s | peak RSS MB |")
print("|---|---|---:|---:|")
print(f"| topdown-bpf c2c report --stdio | {cpus} | {st.median(ours):.3f} | {st.median(col(3)) / 1024:.0f} |")
print(f"| topdown-bpf c2c report --stdio | {one} | {st.median(ours1):.3f} | |")
print(f"| perf c2c report --stdio | {cpus} | {st.median(perf):.3f} | {st.median(col(1)) / 1024:.0f} |")
print()
print(f"speed-up, median of per-run ratios: {st.median(ratio):.1f}x on CPUs {cpus} "
      f"(lowest {min(ratio):.1f}x), {st.median(ratio1):.1f}x with ours on one CPU "
      f"(lowest {min(ratio1):.1f}x); outputs identical")
PY
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); perf $(perf --version | awk '{print $3}'); $samples samples${INTERLEAVE:+ (interleaved)}${DISTINCT:+ (distinct)}, $(du -m perf.data | cut -f1) MB; runs: $runs; date: $(date +%F)"
