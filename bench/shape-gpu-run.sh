#!/usr/bin/env bash
# After issue 33 ("three commands, one shape"): every way gpuhost reaches NVML, on a real GPU
# machine, with the binaries built from one commit. status in every format (the probe helper
# `gpuhost-nvml-probe`, and the `gpuhost nvml-probe` subcommand when the helper is missing), the
# hidden subcommands (nvml-probe, nvml-calls, sweep-profile), `gpuhost serve` (its long-lived
# `gpuhost nvml-serve` child) and `status` answered by it, and the old probe flags refused.
# Usage: bench/shape-gpu-run.sh DIR_WITH_BINARIES OUTDIR
set -uo pipefail
src=$(realpath "$1"); out=$2; mkdir -p "$out" /tmp/gh-bin
cp "$src/gpuhost" "$src/gpuhost-nvml-probe" /tmp/gh-bin/ && chmod +x /tmp/gh-bin/*
export PATH=/tmp/gh-bin:$PATH GPUHOST_RUN_DIR=/tmp/gh-run
mkdir -p "$GPUHOST_RUN_DIR"
log=$out/log.txt
get() { exec 3<>"/dev/tcp/127.0.0.1/$1"; printf 'GET %s HTTP/1.0\r\n\r\n' "$2" >&3; cat <&3; exec 3<&-; }
verdicts() { python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["status"], sorted((c["id"], str(c.get("gpu")), c["severity"]) for c in r["checks"]))'; }
probe() { python3 -c 'import json,sys; r=json.load(sys.stdin); n=r["snapshot"]["nvml"]; print("probe:", n.get("status"), "gpus:", len(n.get("gpus") or []), "driver:", n.get("driver_version"), "ms:", n.get("duration_ms"), "peak KiB:", n.get("peak_rss_kib"), "served_by:", r["snapshot"].get("served_by"))'; }
{
  echo "== host"; nvidia-smi -L; head -1 /proc/driver/nvidia/version; uname -r; id -u
  echo "== status (table)"; gpuhost status --fresh; echo "rc=$?"
  for f in json prometheus npd; do gpuhost status --fresh --format $f >"$out/status.$f" 2>&1; echo "status --format $f rc=$? bytes=$(wc -c <"$out/status.$f")"; done
  echo "== probe through the helper (gpuhost-nvml-probe beside gpuhost)"
  gpuhost status --fresh --format json | probe
  echo "== probe without the helper (gpuhost nvml-probe, the subcommand)"
  mv /tmp/gh-bin/gpuhost-nvml-probe /tmp/gh-bin/helper.off
  gpuhost status --fresh --format json | probe
  mv /tmp/gh-bin/helper.off /tmp/gh-bin/gpuhost-nvml-probe
  echo "== gpuhost nvml-probe (one JSON line)"; gpuhost nvml-probe | head -c 300; echo; echo "rc=${PIPESTATUS[0]}"
  echo "== gpuhost nvml-calls"; gpuhost nvml-calls >"$out/nvml-calls.json"; echo "rc=$? bytes=$(wc -c <"$out/nvml-calls.json")"
  echo "== gpuhost sweep-profile 3"; gpuhost sweep-profile 3 | head -c 600; echo; echo "rc=${PIPESTATUS[0]}"
  echo "== old probe flags are refused (exit 3: UNKNOWN, as every argument status refuses)"
  for f in --nvml-probe --nvml-serve --nvml-calls "--sweep-profile=3"; do gpuhost status $f >/dev/null 2>&1; echo "status $f rc=$?"; done
  echo "== gpuhost serve"
  gpuhost serve --listen 127.0.0.1:19481 2>"$out/serve-stderr.txt" & spid=$!
  for _ in $(seq 50); do (get 19481 /healthz 2>/dev/null | grep -q '^HTTP') && break; sleep 0.1; done
  echo "probe children of serve: $(ps -o args= --ppid $spid)"
  get 19481 /healthz | head -1; get 19481 /metrics >"$out/metrics.http"; head -1 "$out/metrics.http"
  echo "metrics series: $(grep -c '^gpuhost_' "$out/metrics.http")"
  echo "== status answered by serve, and fresh: the same checks"
  gpuhost status --format json >"$out/served.json"; echo "served rc=$?"
  probe <"$out/served.json"
  a=$(verdicts <"$out/served.json"); b=$(gpuhost status --fresh --format json | verdicts)
  echo "served: $a"; echo "fresh:  $b"; [ "$a" = "$b" ] && echo "SAME" || echo "DIFFERENT"
  kill -TERM $spid; wait $spid; echo "serve exit: $?"
} >"$log" 2>&1
cat "$log"
