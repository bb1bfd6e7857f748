#!/usr/bin/env bash
# Benchmark: a no-op `gpuhost apply` on a converged install root.
# Target: median wall time <= 50 ms and zero dnf processes.
# Prints the median, min and max of N runs (default 30) and the child processes one run starts
# (counted by strace when present, and from the report's command list).
# Usage: bench/noop-apply.sh [N] [PROFILE-ARGS...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
n=${1:-30}; shift || true

"$here/scripts/deps.sh"
cargo build --quiet --release -p gpuhost
gpuhost=$here/target/release/gpuhost
world=$here/target/testworld
"$here/tests/world/build-world.sh" "$world"
export HOME=$world/home

root=$(mktemp -d /tmp/gpuhost-bench-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
"$here/tests/world/mkroot.sh" "$world" "$root" --os ol8 \
  --kernel 5.15.0-200.131.27.el8uek.x86_64 --kernel 5.15.0-204.147.6.2.el8uek.x86_64
driver_rpm=$world/rpms/cuda-local/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm
args=(apply --profile "$here/tests/world/profiles/ol8-uek.toml" --root "$root" --set "driver.local_repo_rpm=$driver_rpm" "$@")

"$gpuhost" "${args[@]}" >/dev/null || { echo "converging apply failed" >&2; exit 1; }

times=()
for _ in $(seq "$n"); do
  t0=$(date +%s%N)
  "$gpuhost" "${args[@]}" --format json >"$root.last.json"
  t1=$(date +%s%N)
  times+=($(( (t1 - t0) / 1000 )))
done
python3 - "$root.last.json" "${times[@]}" <<'PY'
import json, statistics, sys
rep = json.load(open(sys.argv[1]))
us = sorted(int(x) for x in sys.argv[2:])
cmds = [c["argv"][0] for s in rep["steps"] for c in s["commands"]]
changed = [s["id"] for s in rep["steps"] if s["outcome"] not in ("unchanged", "skipped")]
print(f"no-op apply, {len(us)} runs: median {statistics.median(us)/1000:.1f} ms, "
      f"min {us[0]/1000:.1f} ms, max {us[-1]/1000:.1f} ms")
print(f"commands in the report: {len(cmds)} {cmds}; dnf: {cmds.count('dnf')}; steps not unchanged: {changed or 'none'}")
PY
rm -f "$root.last.json"
if command -v strace >/dev/null 2>&1; then
  log=$(mktemp)
  strace -f -qq -e trace=execve -o "$log" "$gpuhost" "${args[@]}" >/dev/null
  execs=$(grep -v ' = -1 ' "$log" | grep -o 'execve("[^"]*"' | sed 's/execve("//; s/"$//' | xargs -n1 basename)
  echo "child processes (strace): $(( $(echo "$execs" | wc -l) - 1 )): $(echo "$execs" | tail -n +2 | tr '\n' ' ')"
  rm -f "$log"
fi
