#!/usr/bin/env bash
# Makes this machine run aarch64 programs: the kernel's binfmt_misc hands aarch64 ELF files to
# Debian's qemu-user-static (`qemu-aarch64`), registered with the line Debian ships for systemd
# (/usr/lib/binfmt.d/qemu-aarch64.conf: flags F (the interpreter is opened now, so it also runs
# in chroots: rpm's scriptlets, DKMS), P, O). The world's aarch64 roots need it: their /bin/sh,
# bash, make, kmod, strip, xz, openssl and sign-file are Debian's arm64 binaries.
# Idempotent. Needs root (mounts binfmt_misc when it is not mounted). Exit 1 with the reason
# when it cannot be done.
set -euo pipefail
bm=/proc/sys/fs/binfmt_misc
if [ -e "$bm/qemu-aarch64" ] && grep -q '^enabled' "$bm/qemu-aarch64"; then
  exit 0
fi
conf=/usr/lib/binfmt.d/qemu-aarch64.conf
[ -f "$conf" ] || { echo "binfmt: $conf is missing (apt-get install -y qemu-user-static)" >&2; exit 1; }
if [ ! -e "$bm/register" ]; then
  mount -t binfmt_misc binfmt_misc "$bm" 2>/dev/null \
    || { echo "binfmt: binfmt_misc is not mounted at $bm and cannot be (needs root, and a privileged container)" >&2; exit 1; }
fi
if [ ! -e "$bm/qemu-aarch64" ]; then
  grep -v '^#' "$conf" > "$bm/register" 2>/dev/null \
    || { echo "binfmt: registering $conf in $bm/register failed (needs root)" >&2; exit 1; }
fi
echo 1 > "$bm/qemu-aarch64"
