#!/usr/bin/env bash
# The active checks on a real GPU, with the references beside them (bench/RESULTS-active.md).
# Run on the GPU machine from the repository root, with the release binaries in target/release
# (gpuhost-active-probe; gpuhost when present). Writes everything under $OUT (default ./active-out).
#
# - the probe alone, 3 runs: its report (figures, conditions, wall time), peak RSS (/usr/bin/time);
# - the probe under `gpuhost status --active` (table, JSON, Prometheus) when gpuhost is there;
# - each injected fault (hbm, fp32, fp64, mix32, mix64): must be caught;
# - the peer-to-peer path on GPU 0 to itself (--p2p-self);
# - SIGTERM one second in, and a 1 s time limit: what was freed, the exit code;
# - GPU settings before and after (nvidia-smi -q: clocks locked, power limit, persistence, MIG,
#   compute mode): they must not change;
# - references: PyTorch's device copy and pinned copies (/opt/torch), when there; NVIDIA's
#   ptxas and cuobjdump (/usr/local/cuda) on the embedded PTX for sm_80, sm_90, sm_100.
set -u
# Everything is written under one folder and packed into $OUT/active-run.tgz at the end (the
# device machine returns 8 files at most).
final=${OUT:-.}
out=$(mktemp -d)/active-out
mkdir -p "$out"
trap 'tar -czf "$final/active-run.tgz" -C "$(dirname "$out")" active-out' EXIT
probe=${PROBE:-target/release/gpuhost-active-probe}
gpuhost=${GPUHOST:-target/release/gpuhost}
log() { echo "== $*" | tee -a "$out/log.txt"; }

nvidia-smi -L > "$out/gpus.txt" 2>&1
nvidia-smi -q > "$out/smi-before.txt" 2>&1
settings() { grep -E "Persistence Mode|MIG Mode|Current +:|Pending +:|Compute Mode|Requested Power Limit|Current Power Limit|Enforced Power Limit|Applications Clocks|Graphics +: |Memory +: |Locked|Clock Offset" "$1" | grep -v "MHz.*Default" ; }

log "probe, 3 runs"
for i in 1 2 3; do
  /usr/bin/time -v "$probe" --seconds 15 > "$out/probe-$i.json" 2> "$out/probe-$i.time"
  echo "rc=$?" >> "$out/probe-$i.time"
  grep -E "Elapsed|Maximum resident" "$out/probe-$i.time" | tee -a "$out/log.txt"
done

for f in hbm fp32 fp64 mix32 mix64; do
  log "fault $f"
  "$probe" --seconds 15 --inject-fault "$f" > "$out/fault-$f.json" 2> "$out/fault-$f.err"; echo "rc=$?" >> "$out/fault-$f.err"
done

log "p2p self"
"$probe" --seconds 15 --p2p-self > "$out/p2p-self.json" 2> "$out/p2p-self.err"; echo "rc=$?" >> "$out/p2p-self.err"

log "SIGTERM after 1 s"
"$probe" --seconds 15 > "$out/sigterm.json" 2> "$out/sigterm.err" &
pid=$!
sleep 1
kill -TERM "$pid"
wait "$pid"; echo "rc=$?" >> "$out/sigterm.err"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after-sigterm-apps.txt" 2>&1

log "1 s limit"
"$probe" --seconds 1 > "$out/limit1.json" 2> "$out/limit1.err"; echo "rc=$?" >> "$out/limit1.err"

if [ -x "$gpuhost" ]; then
  log "gpuhost status --active"
  for fmt in table json prometheus; do
    /usr/bin/time -v "$gpuhost" status --active --fresh --format "$fmt" > "$out/status-active.$fmt" 2> "$out/status-active.$fmt.time"
    echo "rc=$?" >> "$out/status-active.$fmt.time"
  done
  "$gpuhost" status --active --fresh --format table --active-inject-fault fp32 > "$out/status-active-fault.table" 2>&1; echo "rc=$?" >> "$out/status-active-fault.table"
fi

"$gpuhost" status --active --fresh --dump-snapshot > "$out/status-active-snapshot.json" 2> "$out/status-active-snapshot.err"
nvidia-smi -q > "$out/smi-after.txt" 2>&1
settings "$out/smi-before.txt" > "$out/settings-before.txt"
settings "$out/smi-after.txt" > "$out/settings-after.txt"
if diff "$out/settings-before.txt" "$out/settings-after.txt" > "$out/settings.diff"; then
  log "settings unchanged"
else
  log "SETTINGS CHANGED"; cat "$out/settings.diff"
fi

# Kernel variants (GPUHOST_ACTIVE_PTX_DIR): the copy kernel with streaming (.cs) or read-only
# (.nc) loads, the rate kernels with q as an immediate. Three runs each; one line each.
log "kernel variants"
mkvariant() { # name copy-sed gen-args
  local d=$out/variants/$1; mkdir -p "$d"
  sed -e "$2" active/src/ptx/checks.ptx > "$d/checks.ptx"
  python3 active/src/ptx/gen_compute.py $3 > "$d/compute.ptx"
}
mkvariant base 's/^//' ""
mkvariant cs 's/ld.global.v4.u32/ld.global.cs.v4.u32/; s/st.global.v4.u32/st.global.cs.v4.u32/' ""
mkvariant nc 's/ld.global.v4.u32/ld.global.nc.v4.u32/; s/st.global.v4.u32/st.global.cs.v4.u32/' ""
mkvariant imm 's/^//' "--imm"
mkvariant cs-imm 's/ld.global.v4.u32/ld.global.cs.v4.u32/; s/st.global.v4.u32/st.global.cs.v4.u32/' "--imm"
for v in base cs nc imm cs-imm; do
  for i in 1 2 3; do
    GPUHOST_ACTIVE_PTX_DIR=$out/variants/$v "$probe" --seconds 15 > "$out/variants/$v/run-$i.json" 2>&1
    python3 - "$v" "$out/variants/$v/run-$i.json" <<'PY' | tee -a "$out/log.txt"
import json, sys
r = json.load(open(sys.argv[2])); g = r["gpus"][0]; h = g["hbm"]
c = {x["kernel"]: x for x in g["compute"]}
print(f"{sys.argv[1]:7} copy {h['kernel_gbps']:.0f} dtod {h['dtod_gbps']:.0f} ratio {h['kernel_gbps']/h['dtod_gbps']:.3f}"
      f"  fp32 {c['fma32']['tflops']} fp64 {c['fma64']['tflops']} mism {sum(x['mismatches'] for x in g['compute'])} wall {r['wall_ms']:.0f} ms")
PY
  done
done

if [ -x /usr/local/cuda/bin/ptxas ]; then
  log "ptxas (CUDA toolkit) and SASS"
  /usr/local/cuda/bin/ptxas --version | tail -1 > "$out/ptxas.txt"
  for a in sm_80 sm_90 sm_100; do
    for f in checks compute; do
      /usr/local/cuda/bin/ptxas -arch=$a -v active/src/ptx/$f.ptx -o "$out/$f.$a.cubin" >> "$out/ptxas.txt" 2>&1 || echo "ptxas $f $a FAILED" >> "$out/ptxas.txt"
    done
  done
  if [ -x /usr/local/cuda/bin/cuobjdump ]; then
    /usr/local/cuda/bin/cuobjdump -sass "$out/compute.sm_90.cubin" > "$out/compute.sm_90.sass" 2>&1
    for k in fma32 fma64; do
      echo "$k: FFMA/DFMA in SASS: $(awk "/Function : gpuhost_$k/,/EXIT/" "$out/compute.sm_90.sass" | grep -cE 'FFMA|DFMA')" >> "$out/ptxas.txt"
    done
  fi
fi

if [ -x /opt/torch/bin/python ] || [ -d /opt/torch ]; then
  py=$(ls /opt/torch/bin/python3 /opt/torch/bin/python 2>/dev/null | head -1)
  [ -n "$py" ] || py=python3
  log "PyTorch references"
  PYTHONPATH=${PYTHONPATH:-} "$py" - > "$out/torch.txt" 2>&1 <<'PY'
import time, torch
d = torch.device("cuda")
n = 4 << 30
a = torch.empty(n, dtype=torch.uint8, device=d); b = torch.empty_like(a)
best = 0
for i in range(9):
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); e.synchronize()
    if i: best = max(best, 2 * n / (s.elapsed_time(e) / 1e3) / 1e9)
print(f"torch device copy 4 GiB, best of 8: {best:.1f} GB/s (read+write)")
h = torch.empty(256 << 20, dtype=torch.uint8).pin_memory(); g = torch.empty(256 << 20, dtype=torch.uint8, device=d)
for name, fn in (("h2d", lambda: g.copy_(h, non_blocking=True)), ("d2h", lambda: h.copy_(g, non_blocking=True))):
    v = []
    for i in range(8):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        if i: v.append((256 << 20) / (s.elapsed_time(e) / 1e3) / 1e9)
    v.sort(); print(f"torch pinned {name} 256 MiB, median of 7: {v[len(v)//2]:.1f} GB/s")
for dt, name in ((torch.float32, "fp32"), (torch.float64, "fp64")):
    x = torch.randn(8192, 8192, dtype=dt, device=d)
    torch.backends.cuda.matmul.allow_tf32 = False
    for i in range(3): y = x @ x
    torch.cuda.synchronize(); t = time.time()
    for i in range(10): y = x @ x
    torch.cuda.synchronize(); dt_ = time.time() - t
    print(f"torch {name} GEMM 8192^3 x10: {10 * 2 * 8192**3 / dt_ / 1e12:.1f} TFLOPS")
PY
fi
log done
