#!/usr/bin/env bash
# Benchmark (issue 41, item 1, aarch64): what building Grace's kmods costs on an x86_64 build
# host through an aarch64 root under qemu-user (binfmt), as `gpuhost kmod build --root
# <aarch64 root>` runs make and gcc there, against building natively on this machine.
#
# The same real C code is compiled both ways: NVIDIA's OS-agnostic nvidia-modeset core
# (open-gpu-kernel-modules' src/nvidia-modeset, C of the same kind as kernel-open's), with
# `make -j<CPUs>`: natively by this machine's gcc 12, and in an aarch64 root holding Debian's
# arm64 gcc 12, binutils and make (apt-get download …:arm64), where uname says aarch64 and every
# compiler process runs under qemu-aarch64. The wall-time ratio, applied to bench/kmod-build.sh's
# real kernel-open build, is the cost of an aarch64 kmod built this way.
# Usage: bench/qemu-compile-ratio.sh [SRC]   (SRC: an open-gpu-kernel-modules checkout;
#        default /var/tmp/kmod-bench/src, bench/kmod-build.sh's)
set -euo pipefail
src=${1:-/var/tmp/kmod-bench/src}
work=${WORK:-/var/tmp/qemu-ratio}
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || { echo "no qemu-aarch64 binfmt (tests/world/binfmt.sh)" >&2; exit 2; }
root=$work/root
if [ ! -x "$root/usr/bin/aarch64-linux-gnu-g++-12" ] || [ ! -x "$root/usr/bin/xz" ]; then
  mkdir -p "$work/debs" "$root"
  (cd "$work/debs" && apt-get download gcc-12:arm64 cpp-12:arm64 libgcc-12-dev:arm64 libisl23:arm64 \
    libmpc3:arm64 libmpfr6:arm64 libgmp10:arm64 libzstd1:arm64 zlib1g:arm64 libc6:arm64 \
    libc6-dev:arm64 linux-libc-dev:arm64 binutils-aarch64-linux-gnu:arm64 libbinutils:arm64 \
    libctf0:arm64 libctf-nobfd0:arm64 libjansson4:arm64 make:arm64 libgprofng0:arm64 \
    libcrypt-dev:arm64 libcrypt1:arm64 bash:arm64 libtinfo6:arm64 busybox-static:arm64 \
    xz-utils:arm64 liblzma5:arm64 g++-12:arm64 libstdc++-12-dev:arm64 libstdc++6:arm64 >/dev/null 2>&1)
  for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$root"; done
  ln -sf bash "$root/bin/sh"
  mkdir -p "$root/tmp" "$root/usr/local/bin"
  chmod 1777 "$root/tmp"
  for t in gcc cc; do ln -sf aarch64-linux-gnu-gcc-12 "$root/usr/bin/$t"; done
  for t in g++ c++; do ln -sf aarch64-linux-gnu-g++-12 "$root/usr/bin/$t"; done
  ln -sf aarch64-linux-gnu-cpp-12 "$root/usr/bin/cpp"
  for t in as ld ar nm objcopy objdump ranlib strip readelf; do
    [ -e "$root/usr/bin/aarch64-linux-gnu-$t" ] && ln -sf "aarch64-linux-gnu-$t" "$root/usr/bin/$t"
  done
  /usr/sbin/chroot "$root" /bin/busybox --install -s /usr/local/bin
fi
mkdir -p "$root/dev" "$root/etc"
[ -e "$root/dev/null" ] || mknod -m 666 "$root/dev/null" c 1 3
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
copy() {
  rm -rf "$1"
  mkdir -p "$1"
  (cd "$src" && cp -a src utils.mk version.mk nv-compiler.sh "$1/")
  rm -rf "$1"/src/nvidia-modeset/_out
}
jobs=$(nproc)
copy "$work/native"
t0=$(date +%s.%N)
make -s -C "$work/native/src/nvidia-modeset" -j"$jobs" >"$work/native.log" 2>&1 || { tail "$work/native.log" >&2; exit 1; }
t1=$(date +%s.%N)
copy "$root/build"
t2=$(date +%s.%N)
PATH=/usr/bin:/usr/local/bin:/bin /usr/sbin/chroot "$root" make -s -C /build/src/nvidia-modeset -j"$jobs" >"$work/qemu.log" 2>&1 || { tail "$work/qemu.log" >&2; exit 1; }
t3=$(date +%s.%N)
native=$(ls "$work"/native/src/nvidia-modeset/_out/Linux_*/nv-modeset-kernel.o)
arm=$(ls "$root"/build/src/nvidia-modeset/_out/Linux_*/nv-modeset-kernel.o)
file "$native" "$arm" | sed 's/, BuildID.*//'
python3 - "$t0" "$t1" "$t2" "$t3" "$jobs" <<'PY'
import sys
t0, t1, t2, t3, jobs = sys.argv[1:6]
n, q = float(t1) - float(t0), float(t3) - float(t2)
print(f"| nvidia-modeset core, make -j{jobs} | native x86_64 | aarch64 root under qemu-user | ratio |")
print("|---|---|---|---|")
print(f"| wall (s) | {n:.1f} | {q:.1f} | {q / n:.1f}x |")
PY
