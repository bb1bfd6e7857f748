#!/usr/bin/env bash
# Everything `gpuhost status` needs from a real GPU machine, in one go (see bench/RESULTS-status.md):
# all output formats, the snapshot fixture, a driver-free sysfs capture, a hung-probe drill, and
# the timing against nvidia-smi -q. Usage: bench/status-gpu-run.sh BINARY OUTDIR
set -uo pipefail
bin=$(realpath "$1"); out=$2
mkdir -p "$out" /tmp/gh-bin
cp "$bin" /tmp/gh-bin/gpuhost && chmod +x /tmp/gh-bin/gpuhost
export PATH=/tmp/gh-bin:$PATH
log=$out/log.txt
{
  echo "== host"; uname -a; nvidia-smi -L; cat /proc/driver/nvidia/version; id -u
  ls -la /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* 2>&1
  systemctl is-active docker nvidia-persistenced nvidia-fabricmanager 2>&1
  dmesg 2>/dev/null | grep -i 'NVRM' | tail -20
  echo "== gpuhost status (table)"; gpuhost status; echo "rc=$?"
} >"$log" 2>&1
gpuhost status >"$out/table.txt" 2>&1; echo "table rc=$?" >>"$log"
gpuhost status --format json >"$out/status.json" 2>>"$log"; echo "json rc=$?" >>"$log"
gpuhost status --format prometheus --textfile "$out/textfile.prom" >"$out/prometheus.txt" 2>>"$log"; echo "prometheus rc=$?" >>"$log"
gpuhost status --dump-snapshot >"$out/h200-snapshot.json" 2>>"$log"; echo "dump rc=$?" >>"$log"
{
  echo "== hung-probe drill (probe sleeps 3 s, --timeout 1)"
  t0=$EPOCHREALTIME; GPUHOST_PROBE_DELAY_MS=3000 gpuhost status --timeout 1 | head -3; echo "rc=${PIPESTATUS[0]}"
  t1=$EPOCHREALTIME; echo "wall ms: $(( (${t1/./} - ${t0/./}) / 1000 ))"
  echo "== nvml probe alone x5"; for i in 1 2 3 4 5; do t0=$EPOCHREALTIME; gpuhost nvml-probe >/dev/null; t1=$EPOCHREALTIME; echo -n "$(( (${t1/./} - ${t0/./}) / 1000 )) "; done; echo
  echo "== bench"; GPUHOST=gpuhost bash bench/status-vs-nvidia-smi.sh 20
} >>"$log" 2>&1
# Driver-free capture of the NVIDIA PCI functions, for sysfs fixtures.
cap=/tmp/gh-cap; rm -rf $cap; mkdir -p $cap/proc/driver/nvidia
cat /proc/driver/nvidia/version >$cap/proc/driver/nvidia/version 2>/dev/null
for d in /sys/bus/pci/devices/*; do
  [ "$(cat $d/vendor)" = 0x10de ] || continue
  t=$cap/sys/bus/pci/devices/$(basename $d); mkdir -p $t
  for f in vendor device class current_link_speed max_link_speed current_link_width max_link_width aer_dev_correctable aer_dev_nonfatal aer_dev_fatal; do
    [ -r $d/$f ] && cat $d/$f >$t/$f 2>/dev/null
  done
  head -c 64 $d/config >$t/config; readlink $d/driver >$t/driver.link
done
tar czf "$out/h200-sysfs.tgz" -C $cap .
tail -n 40 "$log"
