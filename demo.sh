#!/usr/bin/env bash
# gpuhost in a minute, on a machine that is not an Oracle Linux GPU host (a laptop, CI):
# installs the tools it needs (rpm, dnf, createrepo_c, ...), builds gpuhost, builds the
# synthetic Oracle Linux 8 package universe of the test world, makes a throwaway install root
# from it and runs the real thing against it: plan, apply, and a second apply that changes
# nothing. On a real node the same binary runs `gpuhost apply --profile ol8-uek`.
#
# Usage: ./demo.sh [--keep]     (--keep leaves the install root in place for a look around)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

"$here/scripts/deps.sh"
echo "==> building gpuhost" >&2
cargo build --quiet -p gpuhost
gpuhost=$here/target/debug/gpuhost

world=$here/target/testworld
echo "==> building the test world (synthetic OL8/OL9 repos, real rpmbuild + createrepo_c)" >&2
"$here/tests/world/build-world.sh" "$world"
export HOME=$world/home   # rpm's database path inside install roots: /var/lib/rpm, as on OL

root=$(mktemp -d /tmp/gpuhost-demo-root.XXXXXX)
if [ "${1:-}" != "--keep" ]; then trap 'rm -rf "$root"' EXIT; fi
uek_old=5.15.0-200.131.27.el8uek.x86_64
uek_new=5.15.0-204.147.6.2.el8uek.x86_64
"$here/tests/world/mkroot.sh" "$world" "$root" --os ol8 --kernel "$uek_old" --kernel "$uek_new"
driver_rpm=$world/rpms/cuda-local/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm
# The built-in ol8-uek profile, with Docker CE and the toolkit from the world's repos (no internet).
args=(--profile "$here/tests/world/profiles/ol8-uek.toml" --root "$root" --set "driver.local_repo_rpm=$driver_rpm")

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
step gpuhost facts --root "$root"
"$gpuhost" facts --root "$root"
step gpuhost plan "${args[@]}"
"$gpuhost" plan "${args[@]}"
step gpuhost apply "${args[@]}"
"$gpuhost" apply "${args[@]}" || rc=$?
if [ "${rc:-0}" -ne 0 ]; then echo "apply exited ${rc}" >&2; exit "$rc"; fi
echo; echo "# again, on the converged root: nothing changes and no dnf runs"
step gpuhost apply "${args[@]}"
"$gpuhost" apply "${args[@]}"
echo
echo "The install root was $root$([ "${1:-}" = "--keep" ] && echo " (kept)" || echo " (removed)")."
