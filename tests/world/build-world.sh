#!/usr/bin/env bash
# Builds the gpuhost test world (a synthetic Oracle Linux 8/9 package universe) into OUT.
# Usage: build-world.sh OUT
# Cached: OUT/.stamp holds a hash of this script, gen.py and the tools/inputs; if it matches,
# the script exits at once. Otherwise OUT is rebuilt from scratch (into OUT.tmp.<pid>, then
# renamed into place). See README.md.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$(dirname "$1")"
out=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")

busybox=""
for b in /bin/busybox /usr/bin/busybox; do
  if [ -x "$b" ] && file -L "$b" 2>/dev/null | grep -q 'statically linked'; then busybox=$b; break; fi
  if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi
done
[ -n "$busybox" ] || { echo "build-world: a static busybox is needed (apt-get install -y busybox-static)" >&2; exit 1; }
for t in rpmbuild createrepo_c modifyrepo_c python3 rpm; do
  command -v "$t" >/dev/null || { echo "build-world: $t is missing (apt-get install -y rpm createrepo-c python3)" >&2; exit 1; }
done
# The kernel's sign-file (kernel-devel ships it; NVIDIA's precompiled modules are signed with it
# at world build) and openssl (the test NVIDIA key; the openssl package): real binaries.
sign_file=""
for f in /usr/lib/linux-kbuild-6.1/scripts/sign-file /usr/lib/linux-kbuild-*/scripts/sign-file /usr/src/kernels/*/scripts/sign-file; do
  [ -x "$f" ] && { sign_file=$f; break; }
done
[ -n "$sign_file" ] || { echo "build-world: the kernel's sign-file is missing (apt-get install -y linux-kbuild-6.1)" >&2; exit 1; }
command -v openssl >/dev/null || { echo "build-world: openssl is missing (apt-get install -y openssl)" >&2; exit 1; }

# The aarch64 releases (OL9/OL10 for Grace) need Debian's arm64 userspace, as .debs (scripts/deps.sh
# test downloads them: ARM64_DEBS below) and binutils-aarch64-linux-gnu's `as` (the NVIDIA module
# objects); their roots run it through qemu-user-static (tests/world/binfmt.sh). Without them the
# world has no aarch64 releases, and OUT/aarch64.missing says why.
arm64_debs=${GPUHOST_WORLD_ARM64_DEBS:-/var/cache/gpuhost-world/arm64}
mapfile -t ARM64_DEBS < <(grep -v '^#' "$here/arm64-debs.txt")
arm64_files=(); arm64_missing=""
for p in "${ARM64_DEBS[@]}"; do
  f=$(ls "$arm64_debs/${p}"_*_arm64.deb 2>/dev/null | sort -V | tail -n1 || true)
  if [ -n "$f" ]; then arm64_files+=("$f"); else arm64_missing+=" $p:arm64"; fi
done
command -v aarch64-linux-gnu-as >/dev/null || arm64_missing+=" binutils-aarch64-linux-gnu"
[ -z "$arm64_missing" ] || arm64_files=()

stamp=$( { cat "$here/build-world.sh" "$here/gen.py" "$here/arm64-debs.txt"; sha256sum "$busybox" "$sign_file" "$(command -v openssl)" ${arm64_files[@]+"${arm64_files[@]}"}; echo "arm64 missing:$arm64_missing"; rpmbuild --version; createrepo_c --version; } | sha256sum | cut -d' ' -f1)
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ]; then
  exit 0
fi

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/home"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/.buildhome"
arm64_root=""
if [ -z "$arm64_missing" ]; then
  arm64_root=$tmp/.arm64
  mkdir -p "$arm64_root"
  for f in "${arm64_files[@]}"; do dpkg-deb -x "$f" "$arm64_root"; done
else
  echo "no aarch64 releases: missing$arm64_missing (scripts/deps.sh test)" > "$tmp/aarch64.missing"
fi
HOME="$tmp/.buildhome" GPUHOST_WORLD_ARM64_ROOT="$arm64_root" python3 "$here/gen.py" "$tmp" "$busybox"
rm -rf "$tmp/.buildhome" "$tmp/.arm64"
printf '%%_dbpath /var/lib/rpm\n' > "$tmp/home/.rpmmacros"
echo "$stamp" > "$tmp/.stamp"
# Swap into place. Roots made from an older world keep working only until this point.
if [ -e "$out" ]; then
  mv "$out" "$out.old.$$"
  mv "$tmp" "$out"
  rm -rf "$out.old.$$"
else
  mv "$tmp" "$out"
fi
trap - EXIT
