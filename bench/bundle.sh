#!/usr/bin/env bash
# Benchmark: `gpuhost bundle` for the default ol8-uek profile, and applying it offline.
# Builds the bundle N times (default 5) from a fresh OL8 UEK root of the test world (the
# ol8-uek profile with the world's Docker/toolkit mirrors and NVIDIA's 12.2 local repo
# package), then applies it once to a fresh root whose repos point at nothing, and again
# (converged). Prints the build time (median, min, max), the bundle's size (directory and
# .tar) and package count, and the two apply times (each includes verifying the manifest).
# Usage: bench/bundle.sh [N]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
n=${1:-5}

"$here/scripts/deps.sh"
cargo build --quiet --release -p gpuhost
gpuhost=$here/target/release/gpuhost
world=$here/target/testworld
"$here/tests/world/build-world.sh" "$world"
export HOME=$world/home
kver=5.15.0-204.147.6.2.el8uek.x86_64
driver_rpm=$world/rpms/cuda-local/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm
profile=$here/tests/world/profiles/ol8-uek.toml

tmp=$(mktemp -d /var/tmp/gpuhost-bench-bundle.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$here/tests/world/mkroot.sh" "$world" "$tmp/src" --os ol8 --kernel "$kver"

ms() { echo $(( ($2 - $1) / 1000000 )); }
times=()
for i in $(seq "$n"); do
  rm -rf "$tmp/bundle" "$tmp/bundle.tar"
  t0=$(date +%s%N)
  "$gpuhost" bundle --profile "$profile" --set "driver.local_repo_rpm=$driver_rpm" \
    --root "$tmp/src" --out "$tmp/bundle" --tar --format json >"$tmp/made.json"
  t1=$(date +%s%N)
  times+=("$(ms "$t0" "$t1")")
done

"$here/tests/world/mkroot.sh" "$world" "$tmp/off" --os ol8 --kernel "$kver"
rm -rf "$tmp/off/srv/repos"
sed -i 's|^baseurl=.*|baseurl=file:///nonexistent/gpuhost-offline/|' "$tmp/off"/etc/yum.repos.d/*.repo
t0=$(date +%s%N)
"$gpuhost" apply --bundle "$tmp/bundle.tar" --root "$tmp/off" --format json >"$tmp/apply1.json" 2>/dev/null
t1=$(date +%s%N)
"$gpuhost" apply --bundle "$tmp/bundle.tar" --root "$tmp/off" --format json >"$tmp/apply2.json" 2>/dev/null
t2=$(date +%s%N)
python3 - "$tmp" "$(ms "$t0" "$t1")" "$(ms "$t1" "$t2")" "${times[@]}" <<'PY'
import json, statistics, sys
tmp, first, second, *ts = sys.argv[1:]
ts = sorted(int(t) for t in ts)
made = json.load(open(f"{tmp}/made.json"))
a1 = json.load(open(f"{tmp}/apply1.json"))
a2 = json.load(open(f"{tmp}/apply2.json"))
def mib(b): return f"{b / 1048576:.2f} MiB"
print(f"bundle, {len(ts)} builds: median {statistics.median(ts) / 1000:.2f} s, min {ts[0] / 1000:.2f} s, max {ts[-1] / 1000:.2f} s")
print(f"size: {made['packages']} packages, {mib(made['bytes'])} in the directory, {mib(made['tar_bytes'])} as .tar; modules {made['modules']}")
changed = [s['id'] for s in a1['steps'] if s['outcome'] == 'changed']
again = [s['id'] for s in a2['steps'] if s['outcome'] not in ('unchanged', 'skipped')]
print(f"offline apply from the .tar: exit {a1['exit_code']}, {first} ms, changed {len(changed)} steps")
print(f"second offline apply: exit {a2['exit_code']}, {second} ms, steps not unchanged: {again or 'none'}")
PY
