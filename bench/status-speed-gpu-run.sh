#!/usr/bin/env bash
# Issue 27 on a GPU machine, in one go (see bench/RESULTS-status.md): one-shot `gpuhost status`
# with the boot cache cold (once) and warm, `nvidia-smi -q`, the light `--query-gpu` CSV line
# health scripts use, and `gpuhost status` answered by a running `gpuhost serve` over its
# socket — interleaved, wall time and peak RSS (bench/status-speed.py) — plus where the time
# goes (sweep-profile, strace when present).
#
# Usage: bench/status-speed-gpu-run.sh BINARY [BASELINE_BINARY] OUTDIR     (RUNS=25)
set -uo pipefail
bin=$(realpath "$1")
if [ $# -ge 3 ]; then base=$(realpath "$2"); out=$3; else base=; out=$2; fi
runs=${RUNS:-25}
here=$(dirname "$(realpath "$0")")
mkdir -p "$out" /tmp/gh-bin
cp "$bin" /tmp/gh-bin/gpuhost && chmod +x /tmp/gh-bin/gpuhost
# The NVML probe helper, built beside gpuhost, where gpuhost looks for it.
[ -x "$(dirname "$bin")/gpuhost-nvml-probe" ] && cp "$(dirname "$bin")/gpuhost-nvml-probe" /tmp/gh-bin/
[ -n "$base" ] && cp "$base" /tmp/gh-bin/gpuhost-base && chmod +x /tmp/gh-bin/gpuhost-base
export PATH=/tmp/gh-bin:$PATH
export GPUHOST_RUN_DIR=/tmp/gh-run
rm -rf "$GPUHOST_RUN_DIR"; mkdir -p "$GPUHOST_RUN_DIR"
csv="index,name,ecc.mode.current,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,remapped_rows.pending,temperature.gpu,power.draw,clocks_event_reasons.active"
speed() { python3 "$here/status-speed.py" "$@"; }
# The small static launcher (bench/spawn-rss.c), when built and beside this script.
[ -x "$here/spawn-rss" ] && export SPAWN_RSS=$here/spawn-rss
ms() { echo $(( (${2/./} - ${1/./}) / 1000 )); }
log=$out/log.txt
{
  echo "== host"; uname -r; nvidia-smi -L; head -1 /proc/driver/nvidia/version; nproc; id -u
  for t in strace perf ltrace python3; do command -v $t || echo "no $t"; done
  ls -lid /sys/module/nvidia; cat /proc/driver/nvidia/gpus/*/information
  echo "== the CSV line"; nvidia-smi --query-gpu=$csv --format=csv; echo "rc=$?"

  echo "== first run after boot (nothing kept), then the boot cache"
  t0=$EPOCHREALTIME; gpuhost status --fresh --dump-snapshot >"$out/snapshot-cold.json"; t1=$EPOCHREALTIME
  echo "cold: rc=$? $(ms $t0 $t1) ms"
  cp "$GPUHOST_RUN_DIR/boot-cache.json" "$out/boot-cache.json"
  t0=$EPOCHREALTIME; gpuhost status --fresh --dump-snapshot >"$out/snapshot-warm.json"; t1=$EPOCHREALTIME
  echo "warm: rc=$? $(ms $t0 $t1) ms"
  GPUHOST_LOG=gpuhost_health=debug gpuhost status --fresh 2>&1 | grep -i 'cache\|probe' | head
  gpuhost status --fresh --format json >"$out/status-fresh.json"; echo "json rc=$?"
  gpuhost status --fresh >"$out/table-fresh.txt"; echo "table rc=$?"

  echo "== where the time goes (sweep-profile 20: warm boot cache x3, then every field)"
  for i in 1 2 3; do gpuhost sweep-profile 20 >"$out/profile-warm-$i.json"; done
  GPUHOST_PROBE_REREAD=1 GPUHOST_PROBE_NO_CUDA=1 gpuhost sweep-profile 20 >"$out/profile-every-field.json"
  python3 - "$out" <<'EOF'
import json, sys
for f in ["profile-warm-1", "profile-warm-2", "profile-warm-3", "profile-every-field"]:
    n = json.load(open(f"{sys.argv[1]}/{f}.json"))["nvml"]
    first = sorted(n["calls_first_us"].items(), key=lambda kv: -kv[1])
    print(f, "lib_load", n["lib_load_ms"], "init", n["init_ms"], "first_sweep", n["first_sweep_ms"],
          "boot_cache", n["first_sweep_boot_cache"], "kept", n["sweep_kept_ms"]["median"], "shutdown", n["shutdown_ms"])
    print("   first calls (us):", ", ".join(f"{k} {v:.0f}" for k, v in first[:12]))
EOF
  if command -v strace >/dev/null; then
    strace -f -tt -T -o "$out/strace-probe.txt" gpuhost nvml-probe >/dev/null
    strace -f -c -o "$out/strace-probe-count.txt" gpuhost nvml-probe >/dev/null
    strace -f -tt -T -o "$out/strace-nvidia-smi-csv.txt" nvidia-smi --query-gpu=$csv --format=csv >/dev/null
  fi

  echo "== process start"
  echo "launcher: ${SPAWN_RSS:-python posix_spawn}"
  speed 20 "$out/start.json" true=/bin/true version="gpuhost --version" \
    judge-only="gpuhost status --format json --from-snapshot $out/snapshot-warm.json"

  # The floor: a minimal C program that loads NVML and asks the CSV line's questions
  # (bench/nvml-floor.c: gcc -O2 -o bench/nvml-floor bench/nvml-floor.c -ldl), when built.
  floor=(); [ -x "$here/nvml-floor" ] && { "$here/nvml-floor"; floor=(nvml-floor="$here/nvml-floor"); }
  echo "== the one-shot's probe: its own peak RSS, and the report's wall time"
  for i in 1 2 3; do gpuhost status --format json --fresh | python3 -c 'import json,sys; n=json.load(sys.stdin)["snapshot"]["nvml"]; print("probe peak_rss_kib", n.get("peak_rss_kib"), "duration_ms", n.get("duration_ms"))'; done

  echo "== A: one-shot (warm boot cache) against nvidia-smi, no server"
  a=(oneshot="gpuhost status --format json --fresh" probe-program="gpuhost nvml-probe" "${floor[@]}"
     oneshot-with-nvmlShutdown="env GPUHOST_PROBE_SHUTDOWN=1 gpuhost status --format json --fresh")
  # The helper alone, and the one-shot with the probe forked from gpuhost instead of it.
  [ -x /tmp/gh-bin/gpuhost-nvml-probe ] && a+=(probe-helper="gpuhost-nvml-probe"
     oneshot-forked="env GPUHOST_NVML_PROBE= gpuhost status --format json --fresh")
  [ -n "$base" ] && a+=(oneshot-before="gpuhost-base status --format json")
  speed "$runs" "$out/A-oneshot.json" "${a[@]}" nvidia-smi-q="nvidia-smi -q" \
    nvidia-smi-csv="nvidia-smi --query-gpu=$csv --format=csv"

  echo "== C: one-shot with nothing kept (boot cache removed before each run)"
  speed 5 "$out/C-cold.json" cold:oneshot="gpuhost status --format json --fresh" nvidia-smi-q="nvidia-smi -q"

  echo "== B: status answered by gpuhost serve (default --max-age 1) against nvidia-smi"
  gpuhost serve --listen 127.0.0.1:0 >/dev/null 2>"$out/serve.log" &
  srv=$!
  for _ in $(seq 100); do [ -S "$GPUHOST_RUN_DIR/serve.sock" ] && break; sleep 0.05; done
  ls -la "$GPUHOST_RUN_DIR"
  speed "$runs" "$out/B-served.json" served="gpuhost status --format json" \
    nvidia-smi-q="nvidia-smi -q" nvidia-smi-csv="nvidia-smi --query-gpu=$csv --format=csv" \
    oneshot-beside-server="gpuhost status --format json --fresh"
  for f in table json prometheus npd; do
    gpuhost status --format $f >"$out/served-$f.txt"; echo "served $f rc=$?"
    gpuhost status --fresh --format $f >"$out/fresh-$f.txt"; echo "fresh $f rc=$?"
  done
  child=$(pgrep -P $srv | head -1)
  grep -H 'VmRSS\|VmHWM' /proc/$srv/status /proc/$child/status
  kill $srv; wait $srv
  cat "$out/serve.log"
} >"$log" 2>&1
tail -n 80 "$log"
