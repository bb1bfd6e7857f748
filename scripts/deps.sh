#!/usr/bin/env bash
# Installs what the demo and the tests need, when it is missing: the real rpm, dnf,
# createrepo_c and rpmbuild (the test world is built with them), python3 (the world's
# generator), strace (tests prove that a converged apply starts no dnf), systemctl (offline
# unit enabling in install roots), a static busybox (the /bin/sh of synthetic roots),
# cloud-init (validates generated user-data), promtool (from prometheus: checks gpuhost serve's
# /metrics), a one-node Slurm (munged, slurmctld, slurmd, scontrol: status --slurm drains and
# resumes a real node), umoci, skopeo and docker.io (build the OCI layouts, docker save tarballs
# and the private dockerd that gpuhost compat reads), the real upstream dkms with what it runs
# (kmod, make, xz, strip, gcc: the test world ships them into roots, where DKMS builds the NVIDIA
# modules; unshare mounts /proc for it), the kernel's sign-file (Debian's linux-kbuild-6.1:
# kernel-devel ships it in roots, the world signs NVIDIA's precompiled modules with it), openssl
# (test keys; the roots' openssl), mokutil and sbsigntool (Secure Boot tests) and pci.ids (the
# GPU table is checked against it), ansible-core (+ python3-venv, python3-pip: ansible-test sanity)
# for the gpuhost.node collection, mmdebstrap and systemd-nspawn (a container booting systemd runs
# the shipped units), monitoring-plugins' negate (runs `gpuhost status` as Nagios runs a plugin)
# and, on Debian, vagrant (validates the Vagrantfile).
# Debian/Ubuntu via apt-get, Oracle Linux/RHEL via dnf. Idempotent; needs root to install.
#   --check   only say what is missing (exit 1 if anything is), install nothing.
set -euo pipefail
check_only=0
[ "${1:-}" = "--check" ] && check_only=1

need=()
for tool in rpm dnf createrepo_c modifyrepo_c rpmbuild python3 strace systemctl cloud-init promtool munged slurmctld slurmd scontrol umoci skopeo dockerd dkms modinfo depmod make xz strip gcc unshare openssl mokutil sbverify ansible-playbook ansible-test mmdebstrap systemd-nspawn; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
# The world copies it into roots as their /bin/sh: it must be *static* (Debian's busybox-static;
# the busybox package's is dynamic and cannot run inside a root without its libc).
# GPUHOST_BUSYBOX names another one to check (tests).
busybox=${GPUHOST_BUSYBOX:-/bin/busybox}
if [ ! -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then need+=(busybox-static); fi
[ -f /usr/share/misc/pci.ids ] || need+=(pci.ids)
[ -x /usr/lib/nagios/plugins/negate ] || [ -x /usr/lib64/nagios/plugins/negate ] || need+=(negate)
# dnf's versionlock plugin (dnf-plugins-core): the OL10 branch lock is checked against it.
[ -f /usr/lib/python3/dist-packages/dnf-plugins/versionlock.py ] || [ -f /usr/lib/python3.*/site-packages/dnf-plugins/versionlock.py ] || need+=(dnf-plugins-core)
# the kernel's sign-file: Debian's linux-kbuild-6.1 (on Oracle Linux: kernel-devel)
sign_file=0
for f in /usr/lib/linux-kbuild-6.1/scripts/sign-file /usr/lib/linux-kbuild-*/scripts/sign-file /usr/src/kernels/*/scripts/sign-file; do
  [ -x "$f" ] && sign_file=1
done
[ $sign_file = 1 ] || need+=(sign-file)
if command -v apt-get >/dev/null 2>&1 && ! command -v vagrant >/dev/null 2>&1; then need+=(vagrant); fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ $check_only = 1 ]; then echo "deps.sh: missing: ${need[*]}"; exit 1; fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "deps.sh: missing ${need[*]}; run as root to install them" >&2; exit 1; }
  sudo=(sudo)
fi
echo "deps.sh: installing what is missing: ${need[*]}" >&2
if command -v apt-get >/dev/null 2>&1; then
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    rpm dnf createrepo-c python3 strace systemd busybox-static cloud-init vagrant prometheus \
    munge slurmctld slurmd slurm-client umoci skopeo docker.io \
    dkms kmod make xz-utils binutils gcc util-linux pci.ids \
    linux-kbuild-6.1 mokutil openssl sbsigntool \
    ansible-core python3-venv python3-pip mmdebstrap systemd-container \
    monitoring-plugins-basic dnf-plugins-core >/dev/null
elif command -v dnf >/dev/null 2>&1; then
  # (vagrant is not in Oracle Linux's repos: its test is skipped there unless installed)
  # (promtool is not in Oracle Linux's repos either: install Prometheus's release by hand;
  # Slurm and munge come from EPEL there; umoci is not packaged: the gpuhost compat image tests
  # skip without it)
  "${sudo[@]}" dnf install -y -q rpm-build createrepo_c python3 strace systemd busybox cloud-init skopeo \
    kmod make xz binutils gcc util-linux hwdata openssl mokutil kernel-devel ansible-core systemd-container \
    python3-dnf-plugin-versionlock
  # (dkms and sbsigntools come from EPEL there; kernel-devel brings scripts/sign-file; negate
  # is EPEL's nagios-plugins-negate)
else
  echo "deps.sh: no apt-get or dnf here; install ${need[*]} by hand" >&2
  exit 1
fi
