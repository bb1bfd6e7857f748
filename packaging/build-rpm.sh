#!/usr/bin/env bash
# Builds the gpuhost RPM: gpuhost and its NVML probe helper (gpuhost-nvml-probe, found beside
# it) linked against the target's glibc (cargo-zigbuild), the man
# pages and shell completions generated with the binary itself, then rpmbuild on
# packaging/gpuhost.spec. It never packages a binary that would not start on the target: the
# newest GLIBC symbol version the binary needs (objdump -T) must be at most the target's glibc
# (Oracle Linux 8: 2.28, Oracle Linux 9 and 10: 2.34), else it fails (exit 1) and packages
# nothing.
# Usage: packaging/build-rpm.sh [--target x86_64|aarch64] [BINARY] [OUTDIR] [DIST]
#   --target  the machine the package is for (default: this one's, `uname -m`). aarch64 (Grace
#           nodes) from an x86_64 machine: cross-built by cargo-zigbuild (rustup target add
#           aarch64-unknown-linux-gnu), checked with binutils-aarch64-linux-gnu's objdump; the
#           man pages and completions (the same text for every arch) come from a gpuhost built
#           for this machine (cargo build -p gpuhost; GPUHOST_RPM_HOST_BIN names another).
#   BINARY  default: built here with cargo-zigbuild against the target's glibc; cargo-zigbuild
#           (cargo install --locked cargo-zigbuild) and zig (the ziglang package from PyPI, in a
#           venv under target/zig-venv) are installed when missing. Pass "" to keep the default
#           and give OUTDIR or DIST.
#   OUTDIR  default: target/rpm      DIST  default: .el8 (or .el9, .el10)
# Environment: GPUHOST_RPM_PROFILE=release (default) or dev: the cargo profile of the built
# binary (tests build a dev binary: quicker); GPUHOST_RPM_FAST=1: a faster, larger payload.
# Prints the path of the built RPM.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
arch=$(uname -m)
if [ "${1:-}" = --target ]; then
  [ $# -ge 2 ] || { echo "build-rpm: --target needs x86_64 or aarch64" >&2; exit 2; }
  arch=$2
  shift 2
fi
case $arch in x86_64 | aarch64) ;; *) echo "build-rpm: --target $arch: give x86_64 or aarch64" >&2; exit 2 ;; esac
bin=${1:-}
out=${2:-$here/target/rpm}
dist=${3:-.el8}
case $dist in
  .el8) glibc=2.28; os="Oracle Linux 8" ;;
  .el9) glibc=2.34; os="Oracle Linux 9" ;;
  .el10) glibc=2.34; os="Oracle Linux 10" ;;
  *) echo "build-rpm: DIST $dist: give .el8, .el9 or .el10" >&2; exit 2 ;;
esac
# The objdump that reads the target's binaries.
objdump=objdump
if [ "$arch" != "$(uname -m)" ]; then objdump=$arch-linux-gnu-objdump; fi

# cargo-zigbuild and zig, installed when missing: into the checkout's target/ (cargo-zigbuild
# with `cargo install --root target/cargo-zigbuild`, zig from PyPI into target/zig-venv), and
# their caches there too (zig's global cache and cargo-zigbuild's wrappers follow
# XDG_CACHE_HOME): nothing of theirs lands in HOME.
zig_tools() {
  local zig_root=$here/target/cargo-zigbuild
  export PATH="$zig_root/bin:$PATH"
  export XDG_CACHE_HOME=$here/target/zig-cache
  if ! command -v cargo-zigbuild >/dev/null 2>&1; then
    echo "build-rpm: installing cargo-zigbuild (cargo install --locked --root $zig_root cargo-zigbuild)" >&2
    cargo install --quiet --locked --root "$zig_root" cargo-zigbuild >&2
  fi
  if ! command -v zig >/dev/null 2>&1 && ! python3 -m ziglang version >/dev/null 2>&1; then
    local venv=$here/target/zig-venv
    if [ ! -x "$venv/bin/python3" ] || ! "$venv/bin/python3" -m ziglang version >/dev/null 2>&1; then
      echo "build-rpm: installing zig (pip install ziglang, in $venv)" >&2
      python3 -m venv "$venv" >&2 \
        || { echo "build-rpm: python3 -m venv failed: install python3-venv (Debian) and run again" >&2; exit 1; }
      "$venv/bin/pip" install --quiet --no-cache-dir ziglang >&2
    fi
    # cargo-zigbuild runs `python3 -m ziglang` when no zig is on the PATH.
    export PATH="$venv/bin:$PATH"
  fi
}

if [ -z "$bin" ]; then
  zig_tools
  profile=${GPUHOST_RPM_PROFILE:-release}
  case $profile in release) dir=release ;; dev) dir=debug ;; *) echo "build-rpm: GPUHOST_RPM_PROFILE=$profile: give release or dev" >&2; exit 2 ;; esac
  echo "build-rpm: cargo zigbuild --profile $profile -p gpuhost --target $arch-unknown-linux-gnu.$glibc" >&2
  (cd "$here" && cargo zigbuild --quiet --locked --profile "$profile" -p gpuhost --target "$arch-unknown-linux-gnu.$glibc" >&2)
  # Where cargo put it: $CARGO_TARGET_DIR when set (relative to the workspace), else target/.
  target_dir=${CARGO_TARGET_DIR:-target}
  case $target_dir in /*) ;; *) target_dir=$here/$target_dir ;; esac
  bin=$target_dir/$arch-unknown-linux-gnu/$dir/gpuhost
fi
# The NVML probe helper is built with gpuhost (the same package) and lies beside it.
probe=$(dirname "$bin")/gpuhost-nvml-probe
[ -x "$probe" ] || { echo "build-rpm: $probe not found: gpuhost's NVML probe helper is built beside it (cargo build -p gpuhost builds both); pass a BINARY whose directory holds it. Nothing was packaged." >&2; exit 1; }
# So is the active checks' child (gpuhost status --active).
active=$(dirname "$bin")/gpuhost-active-probe
[ -x "$active" ] || { echo "build-rpm: $active not found: gpuhost's active checks' child is built beside it (cargo build -p gpuhost builds it); pass a BINARY whose directory holds it. Nothing was packaged." >&2; exit 1; }
# The newest glibc symbol version each binary needs must be one the target has.
command -v "$objdump" >/dev/null 2>&1 \
  || { echo "build-rpm: $objdump not found: install binutils$( [ "$objdump" = objdump ] || echo "-$arch-linux-gnu") (it checks which glibc $bin needs)" >&2; exit 1; }
for b in "$bin" "$probe" "$active"; do
  need=$("$objdump" -T "$b" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -n1)
  if [ -z "$need" ]; then
    echo "build-rpm: $b has no GLIBC symbol versions: not a dynamically linked glibc binary" >&2; exit 1
  fi
  if [ "$(printf '%s\n%s\n' "$need" "$glibc" | sort -V | tail -n1)" != "$glibc" ]; then
    echo "build-rpm: $b needs glibc $need; $os has $glibc: it would not start there. Nothing was packaged. Run packaging/build-rpm.sh without BINARY (it builds with cargo-zigbuild against glibc $glibc), or pass a binary linked against glibc <= $glibc" >&2
    exit 1
  fi
  echo "build-rpm: $b needs glibc $need (<= $glibc, $os, $arch)" >&2
done
# What generates the version, man pages and completions: the binary itself, or for another
# arch one built for this machine from the same source (the texts do not depend on the arch).
gen=$bin
if [ "$arch" != "$(uname -m)" ]; then
  gen=${GPUHOST_RPM_HOST_BIN:-}
  if [ -z "$gen" ]; then
    echo "build-rpm: cargo build -p gpuhost (this machine's, for the man pages and completions)" >&2
    (cd "$here" && cargo build --quiet --locked -p gpuhost >&2)
    target_dir=${CARGO_TARGET_DIR:-target}
    case $target_dir in /*) ;; *) target_dir=$here/$target_dir ;; esac
    gen=$target_dir/debug/gpuhost
  fi
fi
version=$("$gen" --version | awk '{print $2}')
top=$(mktemp -d)
trap 'rm -rf "$top"' EXIT
src=$top/SOURCES
mkdir -p "$src" "$out"
cp "$bin" "$src/gpuhost"
cp "$probe" "$src/gpuhost-nvml-probe"
cp "$active" "$src/gpuhost-active-probe"
# One man page per command (gpuhost.1, gpuhost-apply.1, ...), as one tarball source.
"$gen" generate man --dir "$top/man"
tar -C "$top/man" -cf "$src/gpuhost-man.tar" .
# The documents the README links to (docs/*.md), beside it in the package's doc directory.
tar -C "$here" -cf "$src/gpuhost-docs.tar" docs
"$gen" generate completions bash > "$src/gpuhost.bash"
"$gen" generate completions zsh > "$src/_gpuhost"
"$gen" generate completions fish > "$src/gpuhost.fish"
cp "$here/packaging/gpuhost-resume.service" "$here/packaging/gpuhost-status.service" \
   "$here/packaging/gpuhost-status.timer" "$here/packaging/gpuhost-serve.service" "$here/packaging/gpuhost-kernel@.service" \
   "$here/packaging/95-gpuhost.install" "$here/packaging/gpuhost-alerts.yml" "$here/packaging/gpuhost-dashboard.json" \
   "$here/README.md" "$src/"
# Every built-in profile (profiles/*.toml), as one tarball source.
(cd "$here/profiles" && tar -cf "$src/gpuhost-profiles.tar" ./*.toml)
# gzip payloads: readable by every rpm on OL8/OL9 (Debian's rpm would default to zstd).
# GPUHOST_RPM_FAST=1 (tests) trades size for speed.
payload=w6.gzdio
[ "${GPUHOST_RPM_FAST:-0}" = 1 ] && payload=w1.gzdio
HOME=$top rpmbuild -bb --quiet \
  --define "_binary_payload $payload" \
  --define "_topdir $top" \
  --define "gpuhost_version $version" \
  --define "dist $dist" \
  --define "gpuhost_glibc $glibc" \
  --define "_unitdir /usr/lib/systemd/system" \
  --define "_sharedstatedir /var/lib" \
  --target "$arch" \
  "$here/packaging/gpuhost.spec" >&2
rpm=$(find "$top/RPMS" -name "gpuhost-$version-1$dist.$arch.rpm" | head -n1)
[ -n "$rpm" ] || { echo "build-rpm: rpmbuild produced no RPM" >&2; exit 1; }
cp "$rpm" "$out/"
echo "$out/$(basename "$rpm")"
