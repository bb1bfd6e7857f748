#!/usr/bin/env bash
# Time `gpuhost status --format json` against `nvidia-smi -q` on the same machine.
#
# Usage: bench/status-vs-nvidia-smi.sh [RUNS]      (default 15; GPUHOST=path/to/gpuhost)
# One warm-up run of each, then RUNS runs of each, interleaved so both see the same machine
# state. Prints every wall time (ms), then the medians and their ratio. Exit codes of the
# commands are ignored (status exits 1/2/3 when something is not OK); their output is discarded.
set -euo pipefail
runs=${1:-15}
gpuhost=${GPUHOST:-gpuhost}
command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found" >&2; exit 2; }
command -v "$gpuhost" >/dev/null || { echo "$gpuhost not found (set GPUHOST)" >&2; exit 2; }

# Wall time of one command in microseconds, from bash's own clock (no fork for timing).
wall_us() {
    local t0=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || true
    local t1=$EPOCHREALTIME
    echo $(( (${t1/./} - ${t0/./}) ))
}

median_ms() { # microseconds on stdin → median in ms with 2 decimals
    sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1000}'
}

wall_us "$gpuhost" status --format json >/dev/null
wall_us nvidia-smi -q >/dev/null
g=(); n=()
for ((i = 0; i < runs; i++)); do
    g+=("$(wall_us "$gpuhost" status --format json)")
    n+=("$(wall_us nvidia-smi -q)")
done
echo "gpuhost status --format json (ms): $(printf '%s\n' "${g[@]}" | awk '{printf "%.1f ", $1/1000}')"
echo "nvidia-smi -q (ms):                 $(printf '%s\n' "${n[@]}" | awk '{printf "%.1f ", $1/1000}')"
gm=$(printf '%s\n' "${g[@]}" | median_ms)
nm=$(printf '%s\n' "${n[@]}" | median_ms)
echo "runs each: $runs"
echo "median gpuhost status --format json: $gm ms"
echo "median nvidia-smi -q: $nm ms"
awk -v g="$gm" -v n="$nm" 'BEGIN {printf "ratio gpuhost/nvidia-smi: %.3f (target <= 0.35)\n", g/n}'
