#!/usr/bin/env bash
# Benchmark: a first `gpuhost apply` on a fresh Oracle Linux 8 UEK install root — kernel headers,
# NVIDIA's local repo package, build deps (gcc-toolset + DKMS override), the driver module
# stream (DKMS build in its scriptlet), nouveau, persistenced, Docker CE, the container toolkit,
# daemon.json, services — with the real rpm and dnf, on two worlds:
# - `test`: the normal test world (tests/world), a few dozen packages per repo;
# - `big`: the same world with the OL repos' metadata inflated to >= 20,000 package entries
#   (bench/inflate-repodata.py: synthetic primary/filelists/other entries, no RPMs built), as
#   large as the real BaseOS/AppStream/EPEL repos a real host loads on every dnf start.
# Prints, per world: median wall time of N runs (a fresh root each), the dnf transactions and
# dnf processes one run starts, and gpuhost's own time (wall minus the time its child processes
# ran, from the report's per-command durations; apply runs its children one at a time).
# Targets: <= 2 transactions; gpuhost's own time <= 5% of wall.
# Usage: bench/first-apply.sh [N] [GPUHOST-BINARY...]
#   default: 5 runs of a release build of this tree. Several binaries (e.g. an older build to
#   compare with) are run interleaved, run by run, so that load from elsewhere on the machine
#   falls on each alike.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
n=${1:-5}
shift || true
binaries=("$@")

"$here/scripts/deps.sh" >/dev/null
if [ ${#binaries[@]} -eq 0 ]; then
  cargo build --quiet --release -p gpuhost
  binaries=("$here/target/release/gpuhost")
fi
world=$here/target/testworld
"$here/tests/world/build-world.sh" "$world"

# The big world: a copy of the test world with inflated OL8 repo metadata, cached by the test
# world's stamp and the inflater's hash.
big=$here/target/benchworld-big
stamp="$(cat "$world/.stamp") $(sha256sum "$here/bench/inflate-repodata.py" | cut -d' ' -f1)"
if [ "$(cat "$big/.bench-stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$big"
  cp -a "$world" "$big"
  python3 "$here/bench/inflate-repodata.py" "$big/repos/ol8/ol8_baseos_latest" 7000
  python3 "$here/bench/inflate-repodata.py" "$big/repos/ol8/ol8_appstream" 9000
  python3 "$here/bench/inflate-repodata.py" "$big/repos/ol8/ol8_developer_EPEL" 4000
  python3 "$here/bench/inflate-repodata.py" "$big/repos/ol8/ol8_UEKR7" 500
  echo "$stamp" > "$big/.bench-stamp"
fi

export HOME=$world/home
kver=5.15.0-204.147.6.2.el8uek.x86_64
driver_rpm=$world/rpms/cuda-local/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm
profile=$here/tests/world/profiles/ol8-uek.toml
tmp=$(mktemp -d /tmp/gpuhost-first-apply.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

bins=$(IFS=,; echo "${binaries[*]}")
python3 - "$bins" "$n" "$tmp" "$here/tests/world/mkroot.sh" "$kver" "$profile" "$driver_rpm" \
  "test=$world" "big=$big" <<'PY'
import json, os, statistics, subprocess, sys, time
bins, n, tmp, mkroot, kver, profile, driver_rpm = sys.argv[1:8]
bins = bins.split(",")
worlds = [w.split("=", 1) for w in sys.argv[8:]]
TRANSACTIONS = {"install", "remove", "reinstall", "module", "swap", "upgrade", "downgrade"}

def one(gpuhost, world, i):
    root = f"{tmp}/root-{i}"
    subprocess.run(["rm", "-rf", root], check=True)
    subprocess.run([mkroot, world, root, "--os", "ol8", "--kernel", kver], check=True,
                   stdout=subprocess.DEVNULL)
    args = [gpuhost, "apply", "--profile", profile, "--root", root,
            "--set", f"driver.local_repo_rpm={driver_rpm}", "--format", "json"]
    t0 = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"apply failed ({p.returncode}): {p.stdout[-2000:]}{p.stderr[-2000:]}")
    rep = json.loads(p.stdout)
    # A transaction several steps shared is listed under each of them: count it once.
    seen, cmds = set(), []
    for s in rep["steps"]:
        for c in s["commands"]:
            key = json.dumps(c, sort_keys=True)
            if key not in seen:
                seen.add(key)
                cmds.append(c)
    children = sum(c["duration_ms"] for c in cmds) / 1000
    dnf = [c for c in cmds if c["argv"][0] == "dnf"]
    txns = [c for c in dnf
            if next((a for a in c["argv"][1:] if not a.startswith("-")), "") in TRANSACTIONS]
    subprocess.run(["rm", "-rf", root], check=True)
    return wall, wall - children, len(txns), len(dnf), len(cmds)

for name, world in worlds:
    runs = {b: [] for b in bins}
    for i in range(int(n)):
        for b in bins:
            runs[b].append(one(b, world, i))
    for b in bins:
        r = runs[b]
        walls = [x[0] for x in r]
        owns = [x[1] for x in r]
        w, o = statistics.median(walls), statistics.median(owns)
        label = b if len(bins) > 1 else ""
        print(f"{name:>4} world {label}, {len(r)} runs: median wall {w:.2f} s (min {min(walls):.2f}, "
              f"max {max(walls):.2f}); dnf transactions {r[0][2]}, dnf processes {r[0][3]}, "
              f"child processes {r[0][4]}; gpuhost's own time {o*1000:.0f} ms "
              f"({100*o/w:.1f}% of wall)")
print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
      f"({os.cpu_count()} CPUs)")
PY
