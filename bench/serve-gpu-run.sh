#!/usr/bin/env bash
# `gpuhost serve` on a real GPU machine: scrape latency against `nvidia-smi -q` and one-shot
# `gpuhost status --format json`, and a hung-probe drill. Usage: bench/serve-gpu-run.sh BINARY OUTDIR
# Each scrape is one HTTP/1.0 request over bash's /dev/tcp (no process started per scrape),
# timed with $EPOCHREALTIME. "fresh": --max-age 0.001, so every scrape waits for a new sweep
# (NVML through the long-lived probe child, sysfs, kernel log); "cached": the default 1 s cache.
set -uo pipefail
bin=$(realpath "$1"); out=$2; mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log=$out/serve-log.txt
wall_us() { local t0=$EPOCHREALTIME; "$@" >/dev/null 2>&1; local t1=$EPOCHREALTIME; echo $(( ${t1/./} - ${t0/./} )); }
median_ms() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1000}'; }
scrape() { # port path -> microseconds
  local t0=$EPOCHREALTIME body
  exec 3<>"/dev/tcp/127.0.0.1/$1"; printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$2" >&3
  IFS= read -r -d '' -u 3 body; exec 3<&-
  local t1=$EPOCHREALTIME; echo $(( ${t1/./} - ${t0/./} ))
}
start() { # port maxage [env...]
  local port=$1 age=$2; shift 2
  env GPUHOST_RUN_DIR="$out/run" "$@" "$bin" serve --listen "127.0.0.1:$port" --max-age "$age" --timeout 2 2>>"$log" &
  spid=$!; sleep 1
}
mkdir -p "$out/run"
{ echo "== host"; nvidia-smi -L; cat /proc/driver/nvidia/version | head -1; nproc; } >>"$log" 2>&1
"$bin" status --format json >/dev/null 2>&1; nvidia-smi -q >/dev/null 2>&1
s=(); n=()
for i in $(seq 20); do s+=("$(wall_us "$bin" status --format json)"); n+=("$(wall_us nvidia-smi -q)"); done
sm=$(printf '%s\n' "${s[@]}" | median_ms); nm=$(printf '%s\n' "${n[@]}" | median_ms)
start 19471 0.001; fresh=()
for i in $(seq 5); do scrape 19471 /metrics >/dev/null; done
for i in $(seq 100); do fresh+=("$(scrape 19471 /metrics)"); done
curl -s "127.0.0.1:19471/metrics" >"$out/metrics.prom" 2>/dev/null || { exec 3<>/dev/tcp/127.0.0.1/19471; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; cat <&3 >"$out/metrics.prom"; }
exec 3<>/dev/tcp/127.0.0.1/19471; printf 'GET /status HTTP/1.0\r\n\r\n' >&3; cat <&3 >"$out/status.http"
echo "probe children (fresh server): $(pgrep -P $spid | wc -l)" >>"$log"
kill -TERM $spid; wait $spid; echo "fresh server exit: $?" >>"$log"
start 19472 1; cached=()
for i in $(seq 5); do scrape 19472 /metrics >/dev/null; done
for i in $(seq 200); do cached+=("$(scrape 19472 /metrics)"); done
kill -TERM $spid; wait $spid
# Hung-probe drill: the probe child hangs while the file exists (deadline 2 s).
start 19473 0.1 GPUHOST_PROBE_HANG_FILE="$out/run/hang"
touch "$out/run/hang"; sleep 0.2
t=$(scrape 19473 /healthz); exec 3<>/dev/tcp/127.0.0.1/19473; printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3; h=$(cat <&3 | tail -1)
rm -f "$out/run/hang"; sleep 3; exec 3<>/dev/tcp/127.0.0.1/19473; printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3; h2=$(cat <&3 | head -1)
kill -TERM $spid; wait $spid
fm=$(printf '%s\n' "${fresh[@]}" | median_ms); cm=$(printf '%s\n' "${cached[@]}" | median_ms)
{
  echo "one-shot gpuhost status --format json, median of 20: $sm ms"
  echo "nvidia-smi -q, median of 20: $nm ms"
  echo "scrape /metrics, fresh sweep each (max-age 0.001), median of 100: $fm ms (all ms: $(printf '%s\n' "${fresh[@]}" | awk '{printf "%.1f ", $1/1000}'))"
  echo "scrape /metrics, cached (max-age 1), median of 200: $cm ms"
  awk -v f="$fm" -v c="$cm" -v n="$nm" -v s="$sm" 'BEGIN {printf "ratios: fresh/nvidia-smi %.3f (target <= 0.1), fresh/status %.3f (target <= 0.3), cached/nvidia-smi %.4f, cached/status %.4f\n", f/n, f/s, c/n, c/s}'
  echo "hung-probe drill: first /healthz after the hang took $((t/1000)) ms; then: $h; after the hang file was removed: $h2"
} | tee -a "$log"
