#!/usr/bin/env bash
# `gpuhost serve` on a real GPU machine: scrape latency against `nvidia-smi -q` and one-shot
# `gpuhost status --format json`, where a sweep's time goes, and a hung-probe drill.
# Usage: bench/serve-gpu-run.sh BINARY OUTDIR [BASELINE_BINARY]
#
# Scrapes are timed by two clients, both without a process started per scrape:
# - python3 (bench/scrape-timer.py): a new connection per scrape, the body read in chunks —
#   what the server takes to answer;
# - bash's /dev/tcp with $EPOCHREALTIME (the method of the first figures): bash reads a socket
#   one byte per system call, so a 13 kB /metrics body adds milliseconds of its own.
# "fresh": --max-age 0.001, so every scrape waits for a new sweep (NVML through the long-lived
# probe child, sysfs, kernel log); "cached": the default 1 s cache. BASELINE_BINARY (e.g. a build
# of the previous commit) gets the same scrapes, interleaved, for a before/after on one machine.
# `gpuhost sweep-profile 50` times each part of a sweep (profile.json).
set -uo pipefail
bin=$(realpath "$1"); out=$2; mkdir -p "$out"
base=${3:+$(realpath "$3")}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
timer="$here/scrape-timer.py"
log=$out/serve-log.txt
export GPUHOST_RUN_DIR="$out/run"
mkdir -p "$out/run"
wall_us() { local t0=$EPOCHREALTIME; "$@" >/dev/null 2>&1; local t1=$EPOCHREALTIME; echo $(( ${t1/./} - ${t0/./} )); }
median_ms() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1000}'; }
range_ms() { sort -n | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.1f-%.1f", lo/1000, hi/1000}'; }
bash_scrape() { # port path -> microseconds
  local t0=$EPOCHREALTIME body
  exec 3<>"/dev/tcp/127.0.0.1/$1"; printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$2" >&3
  IFS= read -r -d '' -u 3 body; exec 3<&-
  local t1=$EPOCHREALTIME; echo $(( ${t1/./} - ${t0/./} ))
}
get() { exec 3<>"/dev/tcp/127.0.0.1/$1"; printf 'GET %s HTTP/1.0\r\n\r\n' "$2" >&3; cat <&3; exec 3<&-; }
start() { # binary port maxage [env...]
  local b=$1 port=$2 age=$3; shift 3
  env GPUHOST_LOG=warn,gpuhost_serve=debug,gpuhost_health=debug "$@" "$b" serve \
    --listen "127.0.0.1:$port" --max-age "$age" --timeout 2 2>>"$log" &
  spid=$!
  for _ in $(seq 50); do (get "$port" /healthz 2>/dev/null | grep -q '^HTTP') && return; sleep 0.1; done
}
stop() { kill -TERM "$spid"; wait "$spid"; echo "server exit: $?" >>"$log"; }
# scrapes TAG BINARY: fresh and cached, both clients; files $out/TAG-{fresh,cached}-{py,bash}.us
scrapes() {
  local tag=$1 b=$2
  echo "== $tag: $b" >>"$log"
  start "$b" 19471 0.001
  for _ in $(seq 5); do bash_scrape 19471 /metrics >/dev/null; done
  python3 "$timer" 19471 /metrics 200 >"$out/$tag-fresh-py.us"
  for _ in $(seq 100); do bash_scrape 19471 /metrics; done >"$out/$tag-fresh-bash.us"
  echo "$tag probe children (fresh server): $(pgrep -P "$spid" | wc -l)" >>"$log"
  get 19471 /metrics >"$out/$tag-metrics.http"
  stop
  start "$b" 19472 1
  for _ in $(seq 5); do bash_scrape 19472 /metrics >/dev/null; done
  python3 "$timer" 19472 /metrics 200 >"$out/$tag-cached-py.us"
  for _ in $(seq 100); do bash_scrape 19472 /metrics; done >"$out/$tag-cached-bash.us"
  stop
}

{ echo "== host"; nvidia-smi -L; head -1 /proc/driver/nvidia/version; nproc; uname -r; } >>"$log" 2>&1
"$bin" status --format json >/dev/null 2>&1; nvidia-smi -q >/dev/null 2>&1
"$bin" sweep-profile 50 >"$out/profile.json" 2>>"$log"
s=(); n=()
for i in $(seq 20); do s+=("$(wall_us "$bin" status --format json)"); n+=("$(wall_us nvidia-smi -q)"); done
sm=$(printf '%s\n' "${s[@]}" | median_ms); nm=$(printf '%s\n' "${n[@]}" | median_ms)
[ -n "$base" ] && scrapes before "$base"
scrapes after "$bin"
[ -n "$base" ] && scrapes before2 "$base"
echo "== drill: $bin (the /status capture, then the hung probe)" >>"$log"
start "$bin" 19474 1; get 19474 /status >"$out/status.http"; stop
# Hung-probe drill: the probe child hangs while the file exists (deadline 2 s).
start "$bin" 19473 0.1 GPUHOST_PROBE_HANG_FILE="$out/run/hang"
touch "$out/run/hang"; sleep 0.2
t=$(bash_scrape 19473 /healthz); h=$(get 19473 /healthz | tail -1)
rm -f "$out/run/hang"; sleep 3; h2=$(get 19473 /healthz | head -1)
stop
{
  echo "one-shot gpuhost status --format json, median of 20: $sm ms ($(printf '%s\n' "${s[@]}" | range_ms))"
  echo "nvidia-smi -q, median of 20: $nm ms ($(printf '%s\n' "${n[@]}" | range_ms))"
  for tag in before after before2; do
    [ -f "$out/$tag-fresh-py.us" ] || continue
    for kind in fresh cached; do
      py=$(median_ms <"$out/$tag-$kind-py.us"); ba=$(median_ms <"$out/$tag-$kind-bash.us")
      awk -v t="$tag" -v k="$kind" -v p="$py" -v b="$ba" -v pr="$(range_ms <"$out/$tag-$kind-py.us")" \
        -v n="$nm" -v s="$sm" 'BEGIN {printf "%-7s %-6s scrape: python %6.2f ms (%s; %.3fx nvidia-smi -q, %.3fx status), bash /dev/tcp %6.2f ms (%.3fx, %.3fx)\n", t, k, p, pr, p/n, p/s, b, b/n, b/s}'
    done
  done
  echo "targets: scrape <= 0.1x nvidia-smi -q and <= 0.3x one-shot status"
  echo "hung-probe drill: first /healthz after the hang took $((t/1000)) ms; then: $h; after the hang file was removed: $h2"
} | tee -a "$log"
# Per-sweep breakdown from the servers' debug lines (fresh servers: many sweeps each).
python3 - "$log" <<'EOF' | tee -a "$log"
import re, statistics, sys
tag, rows = None, {}
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("== "):
        tag = line.split()[1].rstrip(":")
        continue
    m = re.search(r"sweep: .* in ([\d.]+) ms: collected in ([\d.]+) ms \(NVML probe ([\d.]+) ms round trip, its GPU sweep ([\d.]+|-) ms\), rendered in ([\d.]+) ms", line)
    if m:
        rows.setdefault(tag, {}).setdefault("sweep", []).append([float("nan") if x == "-" else float(x) for x in m.groups()])
    else:
        m = re.search(r"sweep: .* in ([\d.]+) ms$", line.strip())
        if m:
            rows.setdefault(tag, {}).setdefault("old", []).append(float(m.group(1)))
    m = re.search(r"driver-free reads \(beside the NVML probe\): ([\d.]+) ms", line)
    if m:
        rows.setdefault(tag, {}).setdefault("host", []).append(float(m.group(1)))
for tag, r in rows.items():
    if r.get("old"):
        print(f"{tag}: {len(r['old'])} sweeps, median sweep {statistics.median(r['old']):.2f} ms (no breakdown in this build's log)")
    sw = r.get("sweep", [])
    if not sw:
        continue
    med = [statistics.median(c) for c in zip(*sw)]
    host = statistics.median(r["host"]) if r.get("host") else float("nan")
    print(f"{tag}: {len(sw)} sweeps, medians: sweep {med[0]:.2f} ms = collected {med[1]:.2f} "
          f"(NVML probe round trip {med[2]:.2f}, its GPU sweep {med[3]:.2f}; driver-free reads "
          f"{host:.2f} beside it) + rendered {med[4]:.2f}")
EOF
