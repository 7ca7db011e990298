#!/usr/bin/env bash
# c2c report speed: `topdown-bpf c2c report --stdio` against `perf c2c report --stdio` on the
# same generated perf.data (xtask/bench/c2c_spec.py -> ../shared/tools/gen_perf_data.py), both
# pinned to CPU 1, runs interleaved, medians and the ratio reported, with each tool's peak RSS.
# The outputs must be identical (same counts, same tables). Usage: c2c-report.sh TOPDOWN_BPF RUNS
set -euo pipefail
topdown=$1
runs=${2:-5}
samples=${SAMPLES:-1000000}
here=$(cd "$(dirname "$0")" && pwd)
gen=$(cd "$here/../../../shared/tools" && pwd)/gen_perf_data.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 "$here/c2c_spec.py" "$samples" spec.json
python3 "$gen" spec.json perf.data

# One timed run: "<seconds> <peak KB>" on stdout, the report in $2.
timed() {
  /usr/bin/time -f "%e %M" -o time.txt taskset -c 1 "$@" > "$out" 2>/dev/null
  cat time.txt
}
ours=() theirs=() ours_kb=() theirs_kb=()
for i in $(seq "$runs"); do
  out=ours.txt; read -r t kb < <(timed "$topdown" c2c report --stdio -i perf.data); ours+=("$t"); ours_kb+=("$kb")
  out=perf.txt; read -r t kb < <(timed perf c2c report --stdio -i perf.data); theirs+=("$t"); theirs_kb+=("$kb")
  cmp -s ours.txt perf.txt || { echo "c2c-report: outputs differ" >&2; diff ours.txt perf.txt | head >&2; exit 1; }
  echo "run $i/$runs: topdown-bpf ${ours[-1]} s, perf ${theirs[-1]} s" >&2
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mo=$(median "${ours[@]}"); mt=$(median "${theirs[@]}")
echo
echo "| tool | median s | peak RSS MB |"
echo "|---|---:|---:|"
echo "| topdown-bpf c2c report --stdio | $mo | $(( $(median "${ours_kb[@]}") / 1024 )) |"
echo "| perf c2c report --stdio ($(perf --version | awk '{print $3}')) | $mt | $(( $(median "${theirs_kb[@]}") / 1024 )) |"
echo
echo "speed-up: $(awk -v a="$mt" -v b="$mo" 'BEGIN {printf "%.1f", a / b}')x; outputs identical"
echo "machine: $(nproc) vCPU, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $samples samples, $(du -m perf.data | cut -f1) MB; runs: $runs, pinned to CPU 1; date: $(date +%F)"
