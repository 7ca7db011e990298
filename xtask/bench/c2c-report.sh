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
# PERF=0 leaves perf out (at ten million samples it needs tens of GB); BASELINE=BINARY times
# another build of the tool in the same runs (its output must equal ours): the ratio then is
# baseline / ours. Ten million distinct samples: SAMPLES=10000000 DISTINCT=1 PERF=0 (writing
# the file takes ~3 min and ~24 GB, the spec read whole as JSON).
# Usage: c2c-report.sh TOPDOWN_BPF RUNS
set -euo pipefail
# Paths as given, resolved before the run moves to its own directory.
absolute() { case $1 in */*) echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")" ;; *) echo "$1" ;; esac; }
topdown=$(absolute "$1")
[ -z "${BASELINE:-}" ] || BASELINE=$(absolute "$BASELINE")
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
# The reference each run compares against: perf, or BASELINE with PERF=0.
reference=(perf c2c report --stdio -i perf.data)
name="perf c2c report --stdio"
if [ "${PERF:-1}" = 0 ]; then
  [ -n "${BASELINE:-}" ] || { echo "c2c-report: PERF=0 needs BASELINE=BINARY" >&2; exit 1; }
  reference=("$BASELINE" c2c report --stdio -i perf.data)
  name="baseline ($BASELINE)"
fi
for i in $(seq "$runs"); do
  out=ref.txt; read -r tp kp < <(timed "$cpus" "${reference[@]}")
  out=ours.txt; read -r to ko < <(timed "$cpus" "$topdown" c2c report --stdio -i perf.data)
  cmp -s ours.txt ref.txt || { echo "c2c-report: outputs differ" >&2; diff ours.txt ref.txt | head >&2; exit 1; }
  out=ours1.txt; read -r t1 _ < <(timed "$one" "$topdown" c2c report --stdio -i perf.data)
  cmp -s ours1.txt ref.txt || { echo "c2c-report: one-CPU output differs" >&2; exit 1; }
  tb=0 kb=0
  if [ -n "${BASELINE:-}" ] && [ "${PERF:-1}" != 0 ]; then
    out=base.txt; read -r tb kb < <(timed "$cpus" "$BASELINE" c2c report --stdio -i perf.data)
    cmp -s base.txt ref.txt || { echo "c2c-report: baseline output differs" >&2; exit 1; }
  fi
  echo "$tp $kp $to $ko $t1 $tb $kb" >> runs.txt
  echo "run $i/$runs: $name $tp s, topdown-bpf $to s (one CPU: $t1 s)" >&2
done
python3 - "$cpus" "$one" "$name" <<'PY'
import statistics as st, sys
cpus, one, name = sys.argv[1], sys.argv[2], sys.argv[3]
runs = [list(map(float, l.split())) for l in open("runs.txt")]
col = lambda i: [r[i] for r in runs]
ref, ours, ours1, base = col(0), col(2), col(4), col(5)
ratio = [p / o for p, o in zip(ref, ours)]
ratio1 = [p / o for p, o in zip(ref, ours1)]
print("| tool | CPUs | median s | peak RSS MB |")
print("|---|---|---:|---:|")
print(f"| topdown-bpf c2c report --stdio | {cpus} | {st.median(ours):.3f} | {st.median(col(3)) / 1024:.0f} |")
print(f"| topdown-bpf c2c report --stdio | {one} | {st.median(ours1):.3f} | |")
print(f"| {name} | {cpus} | {st.median(ref):.3f} | {st.median(col(1)) / 1024:.0f} |")
if any(base):
    print(f"| baseline | {cpus} | {st.median(base):.3f} | {st.median(col(6)) / 1024:.0f} |")
print()
print(f"speed-up against {name}, median of per-run ratios: {st.median(ratio):.1f}x on CPUs "
      f"{cpus} (lowest {min(ratio):.1f}x), {st.median(ratio1):.1f}x with ours on one CPU "
      f"(lowest {min(ratio1):.1f}x); outputs identical")
if any(base):
    b = [p / o for p, o in zip(base, ours)]
    print(f"against the baseline: {st.median(b):.2f}x (lowest {min(b):.2f}x)")
print("per run (s):", " ".join(f"{o:.2f}" for o in ours))
PY
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); perf $(perf --version | awk '{print $3}'); $samples samples${INTERLEAVE:+ (interleaved)}${DISTINCT:+ (distinct)}, $(du -m perf.data | cut -f1) MB; runs: $runs; date: $(date +%F)"
