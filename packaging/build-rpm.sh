#!/usr/bin/env bash
# Builds the gpuhost RPM from a built binary: generates the man page and shell completions
# with the binary itself, then runs rpmbuild on packaging/gpuhost.spec.
# Usage: packaging/build-rpm.sh [BINARY] [OUTDIR] [DIST]
#   BINARY  default: target/release/gpuhost (built if missing)
#   OUTDIR  default: target/rpm      DIST  default: .el8
# Prints the path of the built RPM.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-}
out=${2:-$here/target/rpm}
dist=${3:-.el8}
if [ -z "$bin" ]; then
  # Oracle Linux 8 has glibc 2.28: link against that, not the build host's newer glibc.
  # cargo-zigbuild does it (cargo install cargo-zigbuild; pip install ziglang).
  if command -v cargo-zigbuild >/dev/null 2>&1; then
    (cd "$here" && cargo zigbuild --quiet --release -p gpuhost --target x86_64-unknown-linux-gnu.2.28)
    bin=$here/target/x86_64-unknown-linux-gnu/release/gpuhost
  else
    echo "build-rpm: cargo-zigbuild not found: the binary will need the build host's glibc" >&2
    (cd "$here" && cargo build --quiet --release -p gpuhost)
    bin=$here/target/release/gpuhost
  fi
fi
# The newest glibc symbol version the binary needs must be one Oracle Linux 8 has.
if command -v objdump >/dev/null 2>&1; then
  need=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)
  if [ -n "$need" ] && [ "$(printf '%s\n2.28\n' "$need" | sort -V | tail -n1)" != 2.28 ]; then
    echo "build-rpm: warning: $bin needs glibc $need; Oracle Linux 8 has 2.28 (build with cargo-zigbuild)" >&2
  fi
fi
version=$("$bin" --version | awk '{print $2}')
top=$(mktemp -d)
trap 'rm -rf "$top"' EXIT
src=$top/SOURCES
mkdir -p "$src" "$out"
cp "$bin" "$src/gpuhost"
"$bin" generate man > "$src/gpuhost.1"
"$bin" generate completions bash > "$src/gpuhost.bash"
"$bin" generate completions zsh > "$src/_gpuhost"
"$bin" generate completions fish > "$src/gpuhost.fish"
cp "$here/packaging/gpuhost-resume.service" "$here/packaging/gpuhost-status.service" \
   "$here/packaging/gpuhost-status.timer" "$here/packaging/gpuhost-serve.service" "$here/packaging/gpuhost-kernel@.service" \
   "$here/packaging/95-gpuhost.install" "$here/README.md" "$here"/profiles/*.toml "$src/"
arch=$(uname -m)
# gzip payloads: readable by every rpm on OL8/OL9 (Debian's rpm would default to zstd).
# GPUHOST_RPM_FAST=1 (tests) trades size for speed.
payload=w6.gzdio
[ "${GPUHOST_RPM_FAST:-0}" = 1 ] && payload=w1.gzdio
HOME=$top rpmbuild -bb --quiet \
  --define "_binary_payload $payload" \
  --define "_topdir $top" \
  --define "gpuhost_version $version" \
  --define "dist $dist" \
  --define "_unitdir /usr/lib/systemd/system" \
  --define "_sharedstatedir /var/lib" \
  --target "$arch" \
  "$here/packaging/gpuhost.spec" >&2
rpm=$(find "$top/RPMS" -name "gpuhost-$version-1$dist.$arch.rpm" | head -n1)
[ -n "$rpm" ] || { echo "build-rpm: rpmbuild produced no RPM" >&2; exit 1; }
cp "$rpm" "$out/"
echo "$out/$(basename "$rpm")"
