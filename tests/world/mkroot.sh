#!/usr/bin/env bash
# Makes a fresh install root from the test world (see README.md).
# Usage: mkroot.sh WORLD ROOT --os ol8|ol9|ol10|ol9-aarch64|ol10-aarch64|ubuntu [--kernel KVER]...
#                  [--default-kernel KVER] [--extra-rpm NAME]... [--no-repos]
# KVER is a kernel release as `uname -r` prints it (5.15.0-200.131.27.el8uek.x86_64, UEK 64k:
# 6.12.0-103.40.4.3.el10uek.aarch64.64k); the form without the arch suffix is accepted too.
# ROOT must not exist or be empty. An -aarch64 root holds the world's aarch64 packages (nothing
# of them runs here: rpm -i --noscripts).
set -euo pipefail

usage() { echo "usage: $0 WORLD ROOT --os ol8|ol9|ol10|ol9-aarch64|ol10-aarch64|ubuntu [--kernel KVER]... [--default-kernel KVER] [--extra-rpm NAME]... [--no-repos]" >&2; exit 2; }
[ $# -ge 2 ] || usage
world=$(cd "$1" && pwd); root=$2; shift 2
os=""; kernels=(); default=""; extras=(); repos=1
while [ $# -gt 0 ]; do
  case $1 in
    --os) os=$2; shift 2;;
    --kernel) kernels+=("$2"); shift 2;;
    --default-kernel) default=$2; shift 2;;
    --extra-rpm) extras+=("$2"); shift 2;;
    --no-repos) repos=0; shift;;
    *) usage;;
  esac
done
case $os in ol8|ol9|ol10|ol9-aarch64|ol10-aarch64|ubuntu) ;; *) usage;; esac
[ "$os" = ubuntu ] || [ -d "$world/repos/$os" ] || [ ! -f "$world/aarch64.missing" ] || { echo "mkroot: the world has no $os: $(cat "$world/aarch64.missing")" >&2; exit 1; }
# ol9-aarch64: release ol9, arch aarch64
rel=${os%-aarch64}
arch=x86_64; [ "$rel" != "$os" ] && arch=aarch64
[ -f "$world/home/.rpmmacros" ] || { echo "mkroot: $world is not a built world" >&2; exit 1; }
export HOME=$world/home
mkdir -p "$root"
root=$(cd "$root" && pwd)
if [ -n "$(ls -A "$root")" ]; then echo "mkroot: $root is not empty" >&2; exit 1; fi

mkdir -p "$root/etc" "$root/var/lib" "$root/var/log" "$root/var/cache" "$root/var/tmp" "$root/tmp" "$root/run"
if [ "$rel" = ol10 ]; then
  # EL10 keeps the rpm database in /usr/lib/sysimage/rpm; /var/lib/rpm is a link to it (as on
  # RHEL 10 and Fedora).
  mkdir -p "$root/usr/lib/sysimage/rpm"
  ln -s ../../usr/lib/sysimage/rpm "$root/var/lib/rpm"
else
  mkdir -p "$root/var/lib/rpm"
fi
rpm --root "$root" --initdb
# Image builders bind-mount /dev into the root; scriptlets and DKMS need at least /dev/null.
# DKMS (a bash script) also wants /proc (mounted by whoever runs it: `unshare --mount-proc`) and
# /dev/fd for its process substitutions.
mkdir -p "$root/dev" "$root/proc" && mknod -m 666 "$root/dev/null" c 1 3 && ln -s /proc/self/fd "$root/dev/fd"

if [ "$os" = ubuntu ]; then
  cat > "$root/etc/os-release" <<'OSR'
PRETTY_NAME="Ubuntu 24.04.1 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.1 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
UBUNTU_CODENAME=noble
OSR
  exit 0
fi

major=${rel#ol}
rdir=$world/repos/$os
# version-release of a kernel release (UEK 64k: <ver>-<rel>.el9uek.aarch64.64k)
strip() { local k=${1%.64k}; k=${k%.$arch}; echo "$k"; }
uname_r() { case $1 in *.64k) echo "$(strip "$1").$arch.64k";; *) echo "$(strip "$1").$arch";; esac; }
pkg_of() { case $1 in *uek*.64k) echo kernel-uek64k;; *uek*) echo kernel-uek;; *) echo kernel;; esac; }
find_rpm() { # NAME-VER-REL file name (without .arch.rpm) or package name; prints a path
  local n=$1 f
  for f in "$rdir"/*/Packages/"$n".$arch.rpm "$rdir"/*/Packages/"$n".noarch.rpm \
           "$world"/rpms/extra/"$n".$arch.rpm "$world"/rpms/extra/"$n"-[0-9]*.$arch.rpm \
           "$world"/rpms/cuda-local/"$n" "$world"/rpms/cuda-local/"$n"-[0-9]*.$arch.rpm; do
    [ -f "$f" ] && { echo "$f"; return 0; }
  done
  echo "mkroot: no RPM for $n in $world" >&2; return 1
}

# shellcheck disable=SC2206
files=($rdir/*/Packages/oraclelinux-release-*.rpm)
for k in "${kernels[@]}"; do
  files+=("$(find_rpm "$(pkg_of "$k")-$(strip "$k")")")
  # UEK8 splits the kernel: kernel-uek (meta), -core (vmlinuz), -modules-core, -modules.
  for sub in core modules-core modules; do
    f=$(find_rpm "$(pkg_of "$k")-$sub-$(strip "$k")" 2>/dev/null) && files+=("$f")
  done
done
for e in "${extras[@]}"; do files+=("$(find_rpm "$e")"); done
ignorearch=(); [ $arch = x86_64 ] || ignorearch=(--ignorearch)
rpm --root "$root" -i --nodeps --force-debian --noscripts --nosignature ${ignorearch[@]+"${ignorearch[@]}"} "${files[@]}"

# repos
if [ $repos = 1 ]; then
  mkdir -p "$root/srv/repos" "$root/etc/yum.repos.d" "$root/etc/dnf"
  # The repos are put *inside* the root (hard links: cheap, same file system; else a copy):
  # gpuhost resolves every path of a root inside it, as if the root were /, so a symlink to the
  # world outside the root would lead nowhere.
  for d in "$rdir"/*/; do d=${d%/}; cp -al "$d" "$root/srv/repos/" 2>/dev/null || cp -a "$d" "$root/srv/repos/"; done
  repo() { # file id name
    printf '[%s]\nname=%s\nbaseurl=file:///srv/repos/%s\ngpgcheck=0\nenabled=1\n\n' "$2" "$3" "$2" >> "$root/etc/yum.repos.d/$1"
  }
  repo oracle-linux-$rel.repo ${rel}_baseos_latest "Oracle Linux $major BaseOS Latest (\$basearch)"
  repo oracle-linux-$rel.repo ${rel}_appstream "Oracle Linux $major Application Stream (\$basearch)"
  [ "$major" != 10 ] && repo uek-$rel.repo ${rel}_UEKR7 "Latest Unbreakable Enterprise Kernel Release 7 for Oracle Linux $major (\$basearch)"
  [ "$major" != 8 ] && repo uek-$rel.repo ${rel}_UEKR8 "Latest Unbreakable Enterprise Kernel Release 8 for Oracle Linux $major (\$basearch)"
  repo oracle-epel-$rel.repo ${rel}_developer_EPEL "Oracle Linux $major EPEL Packages for Development (\$basearch)"
  repo docker-ce.repo docker-ce-stable "Docker CE Stable - \$basearch"
  repo nvidia-container-toolkit.repo nvidia-container-toolkit "nvidia-container-toolkit"
  repo cuda-rhel$major.repo cuda-rhel$major-network "cuda-rhel$major-$( [ $arch = aarch64 ] && echo sbsa || echo x86_64)"
fi
mkdir -p "$root/etc/dnf"
printf '[main]\ngpgcheck=0\ninstallonly_limit=3\nclean_requirements_on_remove=True\nbest=True\nskip_if_unavailable=False\n' > "$root/etc/dnf/dnf.conf"

# boot configuration
mid=$(printf '%s' "$root" | md5sum | cut -c1-32)
echo "$mid" > "$root/etc/machine-id"
mkdir -p "$root/etc/sysconfig" "$root/boot/loader/entries" "$root/boot/grub2"
newest=""
for k in "${kernels[@]}"; do
  u=$(uname_r "$k")
  newest=$( { [ -n "$newest" ] && echo "$newest"; echo "$u"; } | sort -V | tail -n 1)
done
defk=""
[ -n "$default" ] && defk=$(uname_r "$default")
[ -z "$defk" ] && defk=$newest
if [ -n "$defk" ]; then
  dpkg=$(pkg_of "$defk")
else
  dpkg=kernel-uek; [ "$major" = 9 ] && dpkg=kernel
fi
printf '# UPDATEDEFAULT specifies if kernel-install should make\n# new kernels the default\nUPDATEDEFAULT=yes\n\n# DEFAULTKERNEL specifies the default kernel package type\nDEFAULTKERNEL=%s\n' "$dpkg" > "$root/etc/sysconfig/kernel"
for k in "${kernels[@]}"; do
  u=$(uname_r "$k")
  cat > "$root/boot/loader/entries/$mid-$u.conf" <<BLS
title Oracle Linux Server ($u) $( . "$root/etc/os-release"; echo "$VERSION_ID")
version $u
linux /vmlinuz-$u
initrd /initramfs-$u.img \$tuned_initrd
options \$kernelopts \$tuned_params
id ol-20240612000000-$u
grub_users \$grub_users
grub_arg --unrestricted
grub_class kernel
BLS
  echo "synthetic initramfs $u" > "$root/boot/initramfs-$u.img"
done
env="# GRUB Environment Block
"
[ -n "$defk" ] && env+="saved_entry=$mid-$defk
"
env+="kernelopts=root=/dev/mapper/ocivolume-root ro crashkernel=auto LANG=en_US.UTF-8 console=ttyS0
boot_success=0
"
pad=$((1024 - ${#env}))
{ printf '%s' "$env"; printf '%*s' "$pad" '' | tr ' ' '#'; } > "$root/boot/grub2/grubenv"
