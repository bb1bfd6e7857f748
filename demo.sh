#!/usr/bin/env bash
# gpuhost on a machine that is not an Oracle Linux GPU host (a laptop, CI): installs the tools
# the demo needs when missing (`scripts/deps.sh demo`: rpm, dnf, createrepo_c, dkms, ...; no
# server, nothing left running; a line per package while apt-get works), installs gpuhost on your PATH
# (`cargo install --path agent`), builds the synthetic Oracle Linux 8 package universe of the
# test world, makes an install root from it and runs the real thing against it: facts, plan,
# apply, and a second apply that changes nothing. On a real node the same binary runs
# `gpuhost apply --profile ol8-uek --set driver.local_repo_rpm=...`.
# Measured on a fresh Debian 12 (a minbase root with rustup's stable toolchain, 2 shared
# cores): `./demo.sh --keep target/demo` took 2 min 15 s to 2 min 45 s, 148 packages installed
# among it (2026-12-05).
#
# Usage: ./demo.sh [--keep DIR]      (./demo.sh --help: this text)
#   Without --keep the root is thrown away at the end.
#   --keep DIR  keeps the demo in DIR: the root (DIR/root), its profile (DIR/profile.toml) and
#               DIR/env; `. DIR/env` then lets you run gpuhost on it yourself:
#                   gpuhost plan --profile "$DEMO_PROFILE" --root "$DEMO_ROOT"
#               Run again with the same DIR, the demo re-uses that root (nothing to change).
# Environment: GPUHOST_BIN=PATH runs that gpuhost binary instead of installing one (the tests
# walk this demo with the binary they built).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

keep=""
usage() {
  cat <<EOF
usage: $0 [--keep DIR]
Installs what the demo needs (scripts/deps.sh demo) and gpuhost's release build on your PATH,
builds the test world's synthetic Oracle Linux repos, makes an Oracle Linux 8 install root and
runs gpuhost facts, plan, apply and apply again (nothing changes) against it.
  --keep DIR  keep the demo in DIR (the root, its profile, DIR/env); run again with the same
              DIR to re-use the root. Without it the root is removed at the end.
  --help      this text
Network: the OS's package repos (the demo's tools) and the crate registry (cargo install).
EOF
}
case "${1:-}" in
  "") ;;
  -h | --help) usage; exit 0 ;;
  --keep) [ -n "${2:-}" ] || { usage >&2; exit 2; }; keep=$2 ;;
  *) usage >&2; exit 2 ;;
esac

"$here/scripts/deps.sh" demo
if [ -n "${GPUHOST_BIN:-}" ]; then
  gpuhost=$GPUHOST_BIN
else
  # The release build, as the RPM ships it: a few minutes more to compile the first time, but
  # gpuhost runs about 15 times faster than a debug build (plan --bundle: 0.15 s against 2.3 s).
  echo "==> cargo install --locked --path agent (the release build of gpuhost, on your PATH)" >&2
  cargo install --quiet --locked --force --path "$here/agent"
  bindir=${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}/bin
  gpuhost=$bindir/gpuhost
  if [ "$(command -v gpuhost || true)" != "$gpuhost" ]; then
    echo "==> note: $bindir is not first on your PATH; add it (export PATH=\"$bindir:\$PATH\") to type plain \`gpuhost\`" >&2
  fi
fi

world=$here/target/testworld
echo "==> building the test world (synthetic OL8/OL9 repos, real rpmbuild + createrepo_c)" >&2
"$here/tests/world/build-world.sh" "$world"
# (mkroot.sh, the test world's root maker, runs rpm and dnf itself with the world's HOME; gpuhost
# needs none: it finds the root's rpm database at /var/lib/rpm, where Oracle Linux keeps it, and
# tells rpm and dnf so.)

if [ -n "$keep" ]; then
  mkdir -p "$keep"
  dir=$(cd "$keep" && pwd)
else
  dir=$(mktemp -d /tmp/gpuhost-demo.XXXXXX)
  trap 'rm -rf "$dir"' EXIT
fi
root=$dir/root
uek_old=5.15.0-200.131.27.el8uek.x86_64
uek_new=5.15.0-204.147.6.2.el8uek.x86_64
if [ -d "$root/var/lib/rpm" ]; then
  echo "==> re-using the demo root $root" >&2
else
  "$here/tests/world/mkroot.sh" "$world" "$root" --os ol8 --kernel "$uek_old" --kernel "$uek_new"
fi
driver_rpm=$world/rpms/cuda-local/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm
# The built-in ol8-uek profile with Docker CE and the toolkit from the world's repos (no
# internet), and NVIDIA's local repo package from the world.
cat > "$dir/profile.toml" <<EOF
# The demo's profile: the built-in ol8-uek, with the test world's repos and driver package.
extends = "$here/tests/world/profiles/ol8-uek.toml"

[driver]
local_repo_rpm = "$driver_rpm"
EOF
cat > "$dir/env" <<EOF
# Written by gpuhost's demo.sh. \`. $dir/env\` to run gpuhost on the demo root yourself:
#   gpuhost plan --profile "\$DEMO_PROFILE" --root "\$DEMO_ROOT"
export DEMO_ROOT='$root'
export DEMO_PROFILE='$dir/profile.toml'
# The test world's NVIDIA local repo packages, named as NVIDIA names them (another driver to
# upgrade to: cuda-repo-rhel8-12-4-local-12.4.1_550.54.15-1.x86_64.rpm).
export DEMO_DRIVERS='$world/rpms/cuda-local'
EOF

args=(--profile "$dir/profile.toml" --root "$root")
# Each command in bold on a terminal; plain text in a log or a pipe (no escape codes there).
if [ -t 1 ]; then
  step() { printf '\n\033[1m$ gpuhost %s\033[0m\n' "$*"; }
else
  step() { printf '\n$ gpuhost %s\n' "$*"; }
fi
run() { step "$@"; "$gpuhost" "$@"; }
run facts --root "$root"
run plan "${args[@]}"
run apply "${args[@]}"
echo; echo "# again, on the converged root: nothing changes, no dnf runs, no progress lines"
run apply "${args[@]}"
echo
if [ -n "$keep" ]; then
  echo "The demo root is kept in $root. Use it yourself:"
  echo "  . $dir/env"
  echo "  gpuhost plan --profile \"\$DEMO_PROFILE\" --root \"\$DEMO_ROOT\""
  echo "  gpuhost profiles show ol8-uek --all      # every profile key, its meaning and default"
else
  echo "The demo root ($root) is removed; ./demo.sh --keep DIR keeps it for a look around."
fi
