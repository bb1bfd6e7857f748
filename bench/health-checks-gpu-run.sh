#!/usr/bin/env bash
# Issue 15's evidence on a real GPU machine, in one go (see bench/RESULTS-status.md):
# - `gpuhost nvml-calls`: the raw NVML return code of every call the probe rests on
#   (PCIe replay, InfoROM, VBIOS, GSP firmware, SRAM ECC, memory error counters per location,
#   NVLink, fabric) and the CUDA check (libcuda.so.1, cuInit), uncached;
# - the snapshot fixture (first run: no CUDA cache, cuInit timed), every output format, a
#   second run a few seconds later (rates against the first run's baseline, CUDA from cache);
# - the probe alone with and without the CUDA check, and cold cuInit timings;
# - the status benchmark against `nvidia-smi -q` (bench/status-vs-nvidia-smi.sh), warm (the
#   normal case: cuInit's success kept) and cold (the cache removed before every run).
# Usage: bench/health-checks-gpu-run.sh BINARY OUTDIR [BENCH_SCRIPT]
set -uo pipefail
bin=$(realpath "$1"); out=$2
bench=${3:-$(dirname "$0")/status-vs-nvidia-smi.sh}
mkdir -p "$out" /tmp/gh-bin
cp "$bin" /tmp/gh-bin/gpuhost && chmod +x /tmp/gh-bin/gpuhost
export PATH=/tmp/gh-bin:$PATH
export GPUHOST_RUN_DIR=/tmp/gh-run
rm -rf "$GPUHOST_RUN_DIR"
log=$out/log.txt
ms() { echo $(( (${2/./} - ${1/./}) / 1000 )); }
{
  echo "== host"; uname -a; nvidia-smi -L; cat /proc/driver/nvidia/version; id -u
  ls -la /dev/nvidia* 2>&1
  ls -la /usr/lib/x86_64-linux-gnu/libcuda.so* /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* 2>&1
  nvidia-smi -q -d ECC,PAGE_RETIREMENT 2>&1 | head -80
  nvidia-smi --query-gpu=vbios_version,inforom.img,pcie.link.gen.current --format=csv 2>&1
  dmesg 2>/dev/null | grep -E 'NVRM|SXid' | tail -20
} >"$log" 2>&1
gpuhost nvml-calls >"$out/h200-nvml-calls.json" 2>>"$log"; echo "nvml-calls rc=$?" >>"$log"
rm -rf "$GPUHOST_RUN_DIR"
gpuhost status --dump-snapshot >"$out/h200-snapshot.json" 2>>"$log"; echo "dump (cold) rc=$?" >>"$log"
sleep 3
gpuhost status >"$out/table.txt" 2>&1; echo "table rc=$?" >>"$log"
gpuhost status --format json >"$out/status.json" 2>>"$log"; echo "json rc=$?" >>"$log"
gpuhost status --format prometheus --textfile "$out/textfile.prom" >/dev/null 2>>"$log"; echo "prometheus rc=$?" >>"$log"
{
  echo "== second run (rates against the kept baseline; CUDA from the cache)"
  cat "$out/table.txt"
  echo "== run dir"; ls -la "$GPUHOST_RUN_DIR"; cat "$GPUHOST_RUN_DIR"/counters.json; echo; cat "$GPUHOST_RUN_DIR"/cuda-init.json; echo
  echo "== probe alone x5, warm (CUDA cached)"
  for i in 1 2 3 4 5; do t0=$EPOCHREALTIME; gpuhost nvml-probe >/dev/null; t1=$EPOCHREALTIME; echo -n "$(ms $t0 $t1) "; done; echo
  echo "== probe alone x5, no CUDA check (GPUHOST_PROBE_NO_CUDA=1)"
  for i in 1 2 3 4 5; do t0=$EPOCHREALTIME; GPUHOST_PROBE_NO_CUDA=1 gpuhost nvml-probe >/dev/null; t1=$EPOCHREALTIME; echo -n "$(ms $t0 $t1) "; done; echo
  echo "== probe alone x5, cold (cache removed each time); cuInit ms from the probe's answer"
  for i in 1 2 3 4 5; do rm -f "$GPUHOST_RUN_DIR/cuda-init.json"; t0=$EPOCHREALTIME; gpuhost nvml-probe >/tmp/p.json; t1=$EPOCHREALTIME; echo "wall $(ms $t0 $t1) ms; $(grep -o '"init_ms":[0-9.]*' /tmp/p.json)"; done
  echo "== hung-probe drill (probe sleeps 3 s, --timeout 1)"
  t0=$EPOCHREALTIME; GPUHOST_PROBE_DELAY_MS=3000 gpuhost status --timeout 1 | head -3; echo "rc=${PIPESTATUS[0]}"
  t1=$EPOCHREALTIME; echo "wall ms: $(ms $t0 $t1)"
  sleep 2
  echo "== bench, warm (the normal case)"; GPUHOST=gpuhost bash "$bench" 20
  echo "== bench, cold (cuda-init.json removed before each gpuhost run)"
  cat >/tmp/gh-bin/gpuhost-cold <<'EOF'
#!/usr/bin/env bash
rm -f "$GPUHOST_RUN_DIR/cuda-init.json"
exec gpuhost "$@"
EOF
  chmod +x /tmp/gh-bin/gpuhost-cold
  GPUHOST=gpuhost-cold bash "$bench" 20
} >>"$log" 2>&1
tail -n 60 "$log"
