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
# The settings a check must never change (current clocks are readings, not settings).
q=persistence_mode,mig.mode.current,mig.mode.pending,compute_mode,power.limit,enforced.power.limit,clocks.applications.graphics,clocks.applications.memory,ecc.mode.current,ecc.mode.pending
nvidia-smi --query-gpu=$q --format=csv > "$out/settings-before.txt" 2>&1

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
sleep 0.5
kill -TERM "$pid"
wait "$pid"; echo "rc=$?" >> "$out/sigterm.err"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$out/after-sigterm-apps.txt" 2>&1

# A GPU with a compute process on it: left alone, then checked with --force.
if [ -d /opt/torch ]; then
  log "busy GPU"
  py=$(ls /opt/torch/bin/python3 /opt/torch/bin/python 2>/dev/null | head -1); [ -n "$py" ] || py=python3
  "$py" -c "import torch, time; x = torch.ones(1 << 20, device='cuda'); torch.cuda.synchronize(); time.sleep(12)" &
  busy=$!
  sleep 6
  "$probe" --seconds 15 > "$out/busy.json" 2> "$out/busy.err"; echo "rc=$?" >> "$out/busy.err"
  "$probe" --seconds 15 --force > "$out/busy-force.json" 2> "$out/busy-force.err"; echo "rc=$?" >> "$out/busy-force.err"
  wait "$busy"
fi

log "0.5 s limit"
"$probe" --seconds 0.5 > "$out/limit1.json" 2> "$out/limit1.err"; echo "rc=$?" >> "$out/limit1.err"

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
nvidia-smi --query-gpu=$q --format=csv > "$out/settings-after.txt" 2>&1
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
mkvariant noimm 's/^//' "--no-imm"
# The copy kernel with 2 or 8 vectors in flight per thread instead of 4.
unrolled() { # N: checks.ptx with gpuhost_copy taking N vectors a turn
  python3 - "$1" active/src/ptx/checks.ptx <<'PY'
import re, sys
n = int(sys.argv[1]); text = open(sys.argv[2]).read()
start = text.index(".visible .entry gpuhost_copy("); end = text.index("\n}\n", start) + 2
body = [".visible .entry gpuhost_copy(\n\t.param .u64 dst,\n\t.param .u64 src,\n\t.param .u64 n16\n)\n{",
  "\t.reg .pred %p;", "\t.reg .b32 %r<8>;", f"\t.reg .b32 %v<{4*n}>;", f"\t.reg .b64 %rd<{20+2*n}>;",
  "\tld.param.u64 %rd1, [dst];", "\tld.param.u64 %rd2, [src];", "\tld.param.u64 %rd3, [n16];",
  "\tcvta.to.global.u64 %rd1, %rd1;", "\tcvta.to.global.u64 %rd2, %rd2;",
  "\tmov.u32 %r1, %ctaid.x;", "\tmov.u32 %r2, %ntid.x;", "\tmov.u32 %r3, %tid.x;", "\tmov.u32 %r4, %nctaid.x;",
  "\tmad.lo.u32 %r5, %r1, %r2, %r3;", "\tcvt.u64.u32 %rd4, %r5;", "\tmul.wide.u32 %rd5, %r2, %r4;",
  "\tshl.b64 %rd6, %rd5, 4;", "\tshl.b64 %rd7, %rd4, 4;", "\tshl.b64 %rd8, %rd3, 4;", f"\tmul.lo.u64 %rd9, %rd6, {n};",
  "\tsetp.ge.u64 %p, %rd7, %rd8;", "\t@%p bra DONE;", "LOOP:"]
for j in range(n):
    body.append(f"\tadd.s64 %rd{20+j}, %rd2, %rd7;" if j == 0 else f"\tadd.s64 %rd{20+j}, %rd{19+j}, %rd6;")
for j in range(n):
    body.append(f"\tld.global.v4.u32 {{%v{4*j}, %v{4*j+1}, %v{4*j+2}, %v{4*j+3}}}, [%rd{20+j}];")
for j in range(n):
    body.append(f"\tadd.s64 %rd{20+n+j}, %rd1, %rd7;" if j == 0 else f"\tadd.s64 %rd{20+n+j}, %rd{19+n+j}, %rd6;")
for j in range(n):
    body.append(f"\tst.global.v4.u32 [%rd{20+n+j}], {{%v{4*j}, %v{4*j+1}, %v{4*j+2}, %v{4*j+3}}};")
body += ["\tadd.s64 %rd7, %rd7, %rd9;", "\tsetp.lt.u64 %p, %rd7, %rd8;", "\t@%p bra LOOP;", "DONE:", "\tret;", "}"]
print(text[:start] + "\n".join(body) + text[end:])
PY
}
for n in 2 8; do
  mkdir -p "$out/variants/copy$n"
  unrolled $n > "$out/variants/copy$n/checks.ptx"
  python3 active/src/ptx/gen_compute.py > "$out/variants/copy$n/compute.ptx"
done
for v in base noimm copy2 copy8; do
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

# Launch shapes of the copy kernel (blocks per SM x threads), with 4 and 8 vectors in flight.
log "copy launch shapes"
for shape in 1x1024 2x1024 2x512 4x512 4x256 8x256 16x128 32x64; do
  for v in base copy8; do
    for i in 1 2; do
      GPUHOST_ACTIVE_COPY_LAUNCH=$shape GPUHOST_ACTIVE_PTX_DIR=$out/variants/$v "$probe" --seconds 15 > "$out/variants/$v/shape-$shape-$i.json" 2>&1
      python3 - "$v@$shape" "$out/variants/$v/shape-$shape-$i.json" <<'PY' | tee -a "$out/log.txt"
import json, sys
r = json.load(open(sys.argv[2])); h = r["gpus"][0]["hbm"]
print(f"shape {sys.argv[1]:14} copy {h['kernel_gbps']:.0f} dtod {h['dtod_gbps']:.0f} ratio {h['kernel_gbps']/h['dtod_gbps']:.3f}")
PY
    done
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
