#!/usr/bin/env bash
# Multi-GPU evidence for `gpuhost status` (issue 7), in one go; runs on one GPU too.
# Usage: bench/status-multi-gpu-run.sh BINARY OUTDIR      (see bench/MULTI-GPU.md)
#
# Writes to OUTDIR (7 files, within the device tool's 8):
#   log.txt            host facts, NVSwitches, Fabric Manager, nvidia-smi nvlink/fabric/topo,
#                      probe timings (concurrent vs GPUHOST_PROBE_SEQUENTIAL=1), the benchmark
#   nvml-calls.json    `gpuhost nvml-calls`: every NVLink/fabric call's raw NVML rc, per GPU
#   snapshot.json      `gpuhost status --dump-snapshot` (the replay fixture)
#   status.json, table.txt, prometheus.prom   the three output formats
#   sysfs.tgz          the NVIDIA PCI functions' sysfs files (GPUs and NVSwitches)
set -uo pipefail
bin=$(realpath "$1"); out=$2
mkdir -p "$out" /tmp/gh-bin
cp "$bin" /tmp/gh-bin/gpuhost && chmod +x /tmp/gh-bin/gpuhost
export PATH=/tmp/gh-bin:$PATH
log=$out/log.txt
ms() { echo $(( (${2/./} - ${1/./}) / 1000 )); }
{
  echo "== host"; uname -r; nproc; id -u; nvidia-smi -L; cat /proc/driver/nvidia/version
  echo "== NVIDIA PCI functions (address device class driver)"
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x10de ] || continue
    echo "$(basename "$d") $(cat "$d/device") $(cat "$d/class") $(basename "$(readlink "$d/driver" 2>/dev/null)" 2>/dev/null)"
  done
  echo "== /proc/driver/nvidia-nvswitch/devices"; ls /proc/driver/nvidia-nvswitch/devices 2>&1
  echo "== fabric manager"
  systemctl is-active docker nvidia-persistenced nvidia-fabricmanager 2>&1
  rpm -q nvidia-fabricmanager nvidia-fabric-manager 2>&1
  nv-fabricmanager --version 2>&1 | head -3
  echo "== nvidia-smi nvlink -s"; timeout 60 nvidia-smi nvlink -s 2>&1 | head -200
  echo "== nvidia-smi nvlink -e"; timeout 60 nvidia-smi nvlink -e 2>&1 | head -200
  echo "== nvidia-smi -q (fabric)"; timeout 60 nvidia-smi -q 2>&1 | grep -i -A6 '^ *fabric' | head -100
  echo "== nvidia-smi topo -m"; timeout 60 nvidia-smi topo -m 2>&1
} >"$log" 2>&1
gpuhost nvml-calls >"$out/nvml-calls.json" 2>>"$log"; echo "nvml-calls rc=$?" >>"$log"
gpuhost status --dump-snapshot >"$out/snapshot.json" 2>>"$log"; echo "dump rc=$?" >>"$log"
gpuhost status --format json >"$out/status.json" 2>>"$log"; echo "json rc=$?" >>"$log"
gpuhost status >"$out/table.txt" 2>&1; echo "table rc=$?" >>"$log"
gpuhost status --format prometheus >"$out/prometheus.prom" 2>>"$log"; echo "prometheus rc=$?" >>"$log"
{
  echo "== nvml-calls summary (call name without link → result: count)"
  grep -o '"call": "[^"(]*\|"result": "[^"]*"' "$out/nvml-calls.json" | paste - - | sort | uniq -c
  for mode in concurrent sequential; do
    [ $mode = sequential ] && export GPUHOST_PROBE_SEQUENTIAL=1
    echo "== probe alone, $mode, x7 (wall ms; then sweep_wall_ms and per-GPU sweep_ms of the last)"
    for i in 1 2 3 4 5 6 7; do t0=$EPOCHREALTIME; gpuhost nvml-probe >/tmp/probe.json; t1=$EPOCHREALTIME; echo -n "$(ms $t0 $t1) "; done; echo
    grep -o '"sweep_wall_ms":[0-9.]*' /tmp/probe.json; grep -o '"sweep_ms":[0-9.]*' /tmp/probe.json | tr '\n' ' '; echo
    echo "== bench, $mode sweep"; GPUHOST=gpuhost bash bench/status-vs-nvidia-smi.sh 20
  done
  unset GPUHOST_PROBE_SEQUENTIAL
} >>"$log" 2>&1
cap=/tmp/gh-cap; rm -rf $cap; mkdir -p $cap/proc/driver/nvidia
cat /proc/driver/nvidia/version >$cap/proc/driver/nvidia/version 2>/dev/null
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x10de ] || continue
  t=$cap/sys/bus/pci/devices/$(basename "$d"); mkdir -p "$t"
  for f in vendor device class current_link_speed max_link_speed current_link_width max_link_width aer_dev_correctable aer_dev_nonfatal aer_dev_fatal; do
    [ -r "$d/$f" ] && cat "$d/$f" >"$t/$f" 2>/dev/null
  done
  head -c 64 "$d/config" >"$t/config"; readlink "$d/driver" >"$t/driver.link"
done
tar czf "$out/sysfs.tgz" -C $cap .
tail -n 60 "$log"
