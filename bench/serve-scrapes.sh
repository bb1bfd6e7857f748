#!/usr/bin/env bash
# 10,000 scrapes of `gpuhost serve`'s /metrics at 50 concurrent connections (ab, keep-alive),
# against a server fed by the real H200 capture (tests/fixtures/status/h200-snapshot.json: the
# host part as captured, the NVML part answered by the long-lived probe child through its pipe
# and deadline, as on a GPU node). Prints p50/p99/max latency, failed requests, the sweeps run,
# requests that waited out the answer deadline (none should: a sweep is always under way or
# startable), and the RSS of the server and of its probe child after warm-up and after each
# round (growth would show round over round).
#
# Usage: bench/serve-scrapes.sh [N] [CONCURRENCY] [ROUNDS]
#        (defaults 10000 50 5; GPUHOST=path/to/gpuhost; MAX_AGE=seconds, default 1;
#         KEEPALIVE=0: a new connection per scrape)
# Needs ab (Debian: apache2-utils). Loopback only; bounded by N.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:-10000}; c=${2:-50}; rounds=${3:-5}; max_age=${MAX_AGE:-1}
ka=-k; [ "${KEEPALIVE:-1}" = 0 ] && ka=
gpuhost=${GPUHOST:-target/release/gpuhost}
command -v ab >/dev/null || { echo "ab not found: apt-get install -y apache2-utils" >&2; exit 2; }
[ -x "$gpuhost" ] || { echo "$gpuhost not found: cargo build --release -p gpuhost (or set GPUHOST)" >&2; exit 2; }
run=$(mktemp -d); trap 'kill "$pid" 2>/dev/null; rm -rf "$run"' EXIT
# debug for the server's crate: one "sweep:" line per sweep, counted below.
GPUHOST_LOG=warn,gpuhost_serve=debug GPUHOST_RUN_DIR=$run "$gpuhost" serve --listen 127.0.0.1:0 --max-age "$max_age" \
  --from-snapshot tests/fixtures/status/h200-snapshot.json 2>"$run/err" &
pid=$!
for _ in $(seq 100); do grep -q listening "$run/err" && break; sleep 0.05; done
addr=$(grep -o 'http://[0-9.:]*' "$run/err" | head -1)
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
probe() { pgrep -P "$pid" | head -1; }
sweeps() { grep -c 'sweep:' "$run/err"; }
# Requests that waited out the answer deadline (no sweep came) and got the last one.
late() { grep -c 'no sweep finished' "$run/err"; }
for _ in $(seq 20); do curl -s -o /dev/null "$addr/metrics"; done
echo "server: $gpuhost serve (pid $pid) at $addr, fed by tests/fixtures/status/h200-snapshot.json"
echo "metrics body: $(curl -s "$addr/metrics" | wc -c) bytes"
echo "cache (--max-age): $max_age s; keep-alive: ${ka:-no}"
echo "RSS after warm-up: server $(rss "$pid") kB, probe child $(rss "$(probe)") kB"
for round in $(seq "$rounds"); do
  out=$(ab -q $ka -n "$n" -c "$c" "$addr/metrics" 2>&1)
  p50=$(awk '$1=="50%" {print $2}' <<<"$out"); p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  max=$(awk '$1=="100%" {print $2}' <<<"$out")
  failed=$(awk '/^Failed requests:/ {print $3}' <<<"$out")
  # ab counts a body whose length differs from the first one as "failed (Length)": /metrics
  # changes between sweeps (durations), so only Connect/Receive/Exceptions are errors.
  kinds=$(grep -A1 '^Failed requests:' <<<"$out" | tail -1 | tr -s ' ')
  non2xx=$(awk '/^Non-2xx responses:/ {print $3}' <<<"$out"); non2xx=${non2xx:-0}
  rps=$(awk '/^Requests per second:/ {print $4}' <<<"$out")
  echo "round $round: $n scrapes, $c concurrent: p50 ${p50} ms, p99 ${p99} ms, max ${max} ms, ab-failed $failed [$kinds], non-2xx $non2xx, $rps req/s; sweeps so far $(sweeps), deadline waits so far $(late); RSS after: server $(rss "$pid") kB, probe child $(rss "$(probe)") kB"
done
echo "probe children: $(pgrep -P "$pid" | wc -l) (pid $(pgrep -P "$pid" | tr '\n' ' '))"
