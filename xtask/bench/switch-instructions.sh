#!/usr/bin/env bash
# The switch program's instructions per run, counted exactly: no timing noise, no PMU needed.
# Usage: BASELINE=OTHER switch-instructions.sh THIS [ROUNDS]   (static x86_64 builds of
# topdown-bpf; `BASELINE=OTHER cargo xtask bench switch-instructions --runs 3` builds THIS)
#
# Boots Debian's amd64 kernel under QEMU with `-icount shift=0`: the guest's clock advances one
# nanosecond per guest instruction, and its TSC (sched_clock, which `kernel.bpf_stats_enabled`
# reads around every program run) follows that clock. So a program's run_time_ns / run_cnt is
# its instructions per run as the kernel's own x86 JIT emitted them, plus the two clock reads
# every build pays alike; two builds in the same guest differ only by what their programs
# execute. Shape: a ping-pong of two processes over two pipes on the guest's one CPU (every
# switch charges a thread that waited behind the other, so each splits a wait; on the host,
# pinned to one CPU, 45 % of its switches were involuntary by /proc/PID/status), N round
# trips, the tool machine-wide with the software set. Each round runs
# BASELINE, THIS and THIS with TOPDOWN_BPF_NO_NEIGHBOURS; the table has the median per build.
# What this does not count: cache misses and branch mispredictions (none are emulated), so
# it ranks changes to the program's path; the nanoseconds come from `cargo xtask bench
# collector` (table 6) on the host.
set -euo pipefail
baseline=${BASELINE:?switch-instructions: set BASELINE to the build to compare with}
this=$1
rounds=${2:-3}
trips=${TRIPS:-4000}
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/topdown-bpf/kernels/amd64
kernel=${KERNEL:-$(ls "$cache"/vmlinuz-6.12.* 2>/dev/null | sort -V | tail -1)}
busybox=$cache/busybox
if [ -z "$kernel" ] || [ ! -f "$kernel" ] || [ ! -f "$busybox" ]; then
  echo "switch-instructions: no amd64 Debian kernel in $cache: run \`cargo xtask test\` once (it fetches them), or set KERNEL" >&2
  exit 1
fi
for bin in "$baseline" "$this"; do
  if ! ldd "$bin" 2>&1 | grep -Eq 'statically linked|not a dynamic executable'; then
    echo "switch-instructions: $bin is not static: give a release build (cargo xtask build --release)" >&2
    exit 1
  fi
done
command -v qemu-system-x86_64 >/dev/null || {
  echo "switch-instructions: needs qemu-system-x86_64 (cargo xtask test installs it)" >&2
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/root
mkdir -p "$stage"/{bin,dev,proc,sys,tmp}
gcc -O2 -static "$root/xtask/bench/pingpong.c" -o "$stage/bin/pingpong"
cp "$busybox" "$stage/bin/busybox"
for applet in sh mount cat sleep kill awk seq tr poweroff grep rm; do
  ln -s busybox "$stage/bin/$applet"
done
strip -o "$stage/bin/baseline" "$baseline"
strip -o "$stage/bin/this" "$this"
# name binary no-neighbours
printf '%s\n' "baseline /bin/baseline 0" "this /bin/this 0" "this-no-neighbours /bin/this 1" > "$stage/plan"
cat > "$stage/init" <<'EOF'
#!/bin/sh
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
echo 1 > /proc/sys/kernel/bpf_stats_enabled
arg() { tr ' ' '\n' < /proc/cmdline | awk -F= -v k="$1" '$1 == k { print $2 }'; }
# Every BPF program the tool holds: fd, run time, runs.
programs() {
  for f in /proc/$1/fdinfo/*; do
    awk -v f="$f" '/^run_time_ns/ { t = $2 } /^run_cnt/ { c = $2 } END { if (c != "") print f, t, c }' "$f"
  done
}
trips=$(arg trips)
for round in $(seq 1 "$(arg rounds)"); do
  while read -r name bin off; do
    if [ "$off" = 1 ]; then export TOPDOWN_BPF_NO_NEIGHBOURS=1; else unset TOPDOWN_BPF_NO_NEIGHBOURS; fi
    rm -f /tmp/out
    # Started by this shell in the background, the tool inherits SIGINT ignored until its
    # session installs a handler: wait for its record thread (started after every attach).
    $bin --duration 600 -o /tmp/out 2>/tmp/err &
    pid=$!
    i=0
    while [ $i -lt 600 ] && [ -d /proc/$pid ] && ! grep -q records /proc/$pid/task/*/comm 2>/dev/null; do
      sleep 1
      i=$((i + 1))
    done
    sleep 1
    if [ ! -d /proc/$pid ]; then
      echo "@@ failed $name: $(cat /tmp/err)"
      continue
    fi
    programs $pid > /tmp/before
    /bin/pingpong "$trips"
    programs $pid > /tmp/after
    kill -INT $pid
    wait $pid || echo "@@ failed $name: exit status $?"
    # The switch program is the one that ran most.
    awk -v name="$name" 'NR == FNR { t[$1] = $2; c[$1] = $3; next }
      { runs = $3 - c[$1]; if (runs > best) { best = runs; ns = $2 - t[$1] } }
      END { if (best > 0) printf "@@ run %s %d %.1f\n", name, best, ns / best; else print "@@ failed " name ": no program ran" }' /tmp/before /tmp/after
  done < /plan
done
echo "@@ done"
poweroff -f
EOF
chmod +x "$stage/init"
(cd "$stage" && find . | cpio -o -H newc --quiet) > "$work/initramfs.cpio"
echo "switch-instructions: $(basename "$kernel"), $rounds rounds of $trips round trips (each about a minute)" >&2
timeout 1800 qemu-system-x86_64 -nographic -no-reboot -m 2G -smp 1 -icount shift=0 -accel tcg \
  -kernel "$kernel" -initrd "$work/initramfs.cpio" \
  -append "console=ttyS0 quiet tsc=reliable panic=-1 trips=$trips rounds=$rounds" \
  < /dev/null > "$work/console" 2>&1 || true
if grep -a '@@ failed' "$work/console" >&2 || ! grep -aq '@@ done' "$work/console"; then
  echo "switch-instructions: the guest did not finish every run; its console:" >&2
  tail -30 "$work/console" >&2
  exit 1
fi
python3 - "$work/console" "$baseline" "$this" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1], errors="replace"):
    # The console's first line after the firmware's follows its escape sequences.
    at = line.find("@@ run ")
    if at >= 0:
        _, _, name, count, per_run = line[at:].split()
        runs.setdefault(name, []).append(float(per_run))
base = statistics.median(runs["baseline"])
print("| build | instructions per run, median | minus baseline | per round |")
print("|---|---:|---:|---|")
labels = {"baseline": f"baseline ({sys.argv[2]})", "this": f"this ({sys.argv[3]})",
          "this-no-neighbours": "this, TOPDOWN_BPF_NO_NEIGHBOURS"}
for name in ("baseline", "this", "this-no-neighbours"):
    m = statistics.median(runs[name])
    print(f"| {labels[name]} | {m:.0f} | {m - base:+.0f} | {' '.join(f'{v:.0f}' for v in runs[name])} |")
PY
