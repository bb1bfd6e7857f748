#!/usr/bin/env bash
# Where the peak RSS of an NVML client goes, on a GPU machine (issue 27): /proc/PID/smaps and
# status of gpuhost's NVML probe at its end, of `nvidia-smi -q` and of the CSV line (both in
# their loop mode, read after their first round), and of bench/nvml-floor (a minimal C
# client); then peak RSS (bench/spawn-rss) of each, with glibc's malloc as it is and with one
# arena, interleaved. bench/rss-anatomy.py summarises the smaps by mapping.
#
# Usage: bench/rss-anatomy-gpu-run.sh BINARY OUTDIR [BINARY2 ...]   (RUNS=7)
set -uo pipefail
bin=$(realpath "$1"); out=$2; shift 2
runs=${RUNS:-7}
here=$(dirname "$(realpath "$0")")
mkdir -p "$out" /tmp/gh-rss
cp "$bin" /tmp/gh-rss/gpuhost && chmod +x /tmp/gh-rss/gpuhost
[ -x "$(dirname "$bin")/gpuhost-nvml-probe" ] && cp "$(dirname "$bin")/gpuhost-nvml-probe" /tmp/gh-rss/
n=2; for extra in "$@"; do cp "$extra" /tmp/gh-rss/gpuhost$n; chmod +x /tmp/gh-rss/gpuhost$n; n=$((n+1)); done
export PATH=/tmp/gh-rss:$PATH
export GPUHOST_RUN_DIR=/tmp/gh-run-rss
rm -rf "$GPUHOST_RUN_DIR"; mkdir -p "$GPUHOST_RUN_DIR"
csv="index,name,ecc.mode.current,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,remapped_rows.pending,temperature.gpu,power.draw,clocks_event_reasons.active"
keep() { # PID NAME: the process's maps as they are now
  cat "/proc/$1/smaps" >"$out/$2.smaps" 2>/dev/null
  cat "/proc/$1/status" >"$out/$2.status" 2>/dev/null
  cat /proc/"$1"/task/*/comm >"$out/$2.threads" 2>/dev/null
  echo "$2: pid $1 $(grep -E 'VmHWM|VmRSS' "$out/$2.status" | tr -s ' \t' ' ' | tr '\n' ' ') threads $(wc -l <"$out/$2.threads")"
}
{
  uname -r; head -1 /proc/driver/nvidia/version; nvidia-smi -L
  # The boot cache warm, as on any run after the first.
  gpuhost status --fresh --format json >/dev/null
  GPUHOST_PROBE_EXIT_DELAY_MS=4000 gpuhost status --fresh --format json >"$out/status.json"
  sleep 0.5
  # The one-shot's probe, left leaving: the helper (or, without one, the forked copy).
  keep "$(pgrep -f 'gpuhost-nvml-probe' | head -1)" probe
  GPUHOST_NVML_PROBE= GPUHOST_PROBE_EXIT_DELAY_MS=4000 gpuhost status --fresh --format json >/dev/null
  sleep 0.5
  keep "$(pgrep -f 'gpuhost status --fresh' | head -1)" probe-forked
  nvidia-smi -q -l 1 >/dev/null & p=$!; sleep 2.5; keep $p smi-q; kill $p
  nvidia-smi --query-gpu=$csv --format=csv -l 1 >/dev/null & p=$!; sleep 2.5; keep $p smi-csv; kill $p
  NVML_FLOOR_PAUSE_MS=3000 "$here/nvml-floor" >"$out/floor.txt" & p=$!; sleep 1.5; keep $p floor; wait $p
  cat "$out/floor.txt"
  wait
  echo "== peak RSS KiB (spawn-rss), $runs interleaved rounds: wall ms, peak KiB, rc"
  one=glibc.malloc.arena_max=1
  declare -A cmds=(
    [status]="gpuhost status --fresh --format json"
    [status-arena1]="env GLIBC_TUNABLES=$one gpuhost status --fresh --format json"
    [smi-q]="nvidia-smi -q"
    [smi-q-arena1]="env GLIBC_TUNABLES=$one nvidia-smi -q"
    [smi-csv]="nvidia-smi --query-gpu=$csv --format=csv"
    [floor]="$here/nvml-floor"
    [floor-arena1]="env GLIBC_TUNABLES=$one $here/nvml-floor"
    [floor-noattach]="$here/nvml-floor 2"
  )
  n=2; for extra in "$@"; do cmds[status$n]="gpuhost$n status --fresh --format json"; n=$((n+1)); done
  for name in "${!cmds[@]}"; do "$here/spawn-rss" ${cmds[$name]} >/dev/null; done
  for r in $(seq "$runs"); do
    for name in "${!cmds[@]}"; do echo "$name $("$here/spawn-rss" ${cmds[$name]})"; done
  done | sort >"$out/peaks.txt"
  python3 - "$out/peaks.txt" <<'EOF'
import sys, statistics, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    name, ms, kib, rc = l.split()
    d[name].append((float(ms), int(kib), rc))
for name, v in sorted(d.items()):
    print(f"{name:16s} wall {statistics.median(x[0] for x in v):7.2f} ms  peak {statistics.median(x[1] for x in v):6.0f} KiB (min {min(x[1] for x in v)}, max {max(x[1] for x in v)})  rc {sorted(set(x[2] for x in v))}")
EOF
} 2>&1 | tee "$out/log.txt"
