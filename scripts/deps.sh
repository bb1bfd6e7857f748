#!/usr/bin/env bash
# Installs what the demo or the tests need, when it is missing.
#
# The demo set (./demo.sh): the real rpm, dnf, createrepo_c and rpmbuild (the test world is
# built with them), python3 (the world's generator), systemctl (offline unit enabling in install
# roots), a static busybox (the /bin/sh of synthetic roots), the real upstream dkms with what it
# runs (kmod, make, xz, strip, gcc: the test world ships them into roots, where DKMS builds the
# NVIDIA modules; unshare mounts /proc for it), the kernel's sign-file (Debian's linux-kbuild-6.1:
# kernel-devel ships it in roots, the world signs NVIDIA's precompiled modules with it) and
# openssl (test keys; the roots' openssl), and the C library's headers and start files (libc6-dev:
# cargo links gpuhost with gcc, which only recommends them), and cpio (tests unpack packages with
# rpm2cpio and cpio; Debian's minbase has no cpio). No server
# among them.
#
# The test set (./scripts/test.sh): the demo set, and strace (tests prove that a converged apply
# starts no dnf), bubblewrap (bwrap: `gpuhost kmod build` compiles as an unprivileged user in
# namespaces of its own, confined to its build folder; the build host needs it), cloud-init (validates generated user-data), promtool (from prometheus: checks
# gpuhost serve's /metrics and tests the shipped alert rules), a one-node Slurm (munged,
# slurmctld, slurmd, scontrol: status --slurm drains and resumes a real node), umoci, skopeo and
# docker.io (build the OCI layouts, docker save tarballs and the private dockerd that gpuhost
# compat reads), mokutil and sbsigntool (Secure Boot tests), pci.ids (the GPU table is checked
# against it), ansible-core and ansible (its collections bring the json stdout callback the
# tests read playbook results with; ansible-core only recommends it) (+ python3-venv,
# python3-pip, git: ansible-test sanity) for the gpuhost.node
# collection and ansible-lint (PyPI, with pip into target/ansible-lint: the collection is
# linted with its production profile), NVIDIA's ptxas (PyPI's nvidia-cuda-nvcc-cu12, with pip into
# target/ptxas: the active checks' PTX is assembled for sm_80, sm_90 and sm_100), mmdebstrap and systemd-nspawn (a container booting systemd runs the
# shipped units), monitoring-plugins' negate (runs `gpuhost status` as Nagios runs a plugin) and,
# on Debian, vagrant with its libvirt provider (vagrant validate wants a usable provider), curl
# and jq (docs/status-and-serve.md's commands are run as shown), and dnf's versionlock plugin (dnf-plugins-core:
# the OL10 branch lock is checked against the real plugin), qemu-user-static and
# binutils-aarch64-linux-gnu (the test world's aarch64 roots: their programs run through qemu,
# their NVIDIA module objects are assembled with aarch64 `as`) and, on Debian, the arm64 .debs
# of tests/world/arm64-debs.txt, downloaded (not installed: `dpkg --add-architecture arm64`,
# `apt-get download`) into /var/cache/gpuhost-world/arm64, whose binaries those roots ship.
#
# Servers stay off: the tests start their own munged, slurmctld, slurmd and dockerd, on their
# own sockets and ports, and stop them. On Debian both sets are installed with
# --no-install-recommends, under a policy-rc.d that forbids starting a service (exit 101), and
# the daemons' units the install enabled are disabled afterwards (a unit enabled before is left
# as it was). While apt-get works, one line per package says where it is.
#
# Debian/Ubuntu via apt-get, Oracle Linux/RHEL via dnf. Idempotent; needs root to install.
# Usage: scripts/deps.sh [demo|test] [--check]
#   demo      the demo set           test   the test set (the default)
#   --check   only say what is missing (exit 1 if anything is), install nothing.
# Environment (tests): GPUHOST_BUSYBOX names another busybox to check; GPUHOST_POLICY_RC_D
# another policy-rc.d path (default /usr/sbin/policy-rc.d).
set -euo pipefail
check_only=0
set_name=test
for arg in "$@"; do
  case $arg in
    --check) check_only=1 ;;
    demo | test) set_name=$arg ;;
    *) echo "usage: $0 [demo|test] [--check]" >&2; exit 2 ;;
  esac
done

demo_tools=(rpm dnf createrepo_c modifyrepo_c rpmbuild python3 systemctl dkms modinfo depmod make xz strip gcc unshare openssl cpio)
test_tools=(git curl jq strace bwrap cloud-init promtool munged slurmctld slurmd scontrol umoci skopeo dockerd mokutil sbverify ansible-playbook ansible-test mmdebstrap systemd-nspawn qemu-aarch64-static aarch64-linux-gnu-as)
# Debian's packages of each set.
demo_debs=(rpm dnf createrepo-c python3 systemd busybox-static dkms kmod make xz-utils binutils gcc libc6-dev util-linux linux-kbuild-6.1 openssl cpio)
test_debs=(git strace bubblewrap cloud-init vagrant vagrant-libvirt curl jq prometheus munge slurmctld slurmd slurm-client umoci skopeo docker.io
  pci.ids mokutil sbsigntool ansible-core ansible python3-venv python3-pip mmdebstrap systemd-container monitoring-plugins-basic
  dnf-plugins-core qemu-user-static binutils-aarch64-linux-gnu)
# The units of the servers those packages bring: left disabled.
daemon_units=(munge.service slurmctld.service slurmd.service docker.service docker.socket containerd.service prometheus.service libvirtd.service libvirtd.socket
  cloud-init.service cloud-init-local.service cloud-config.service cloud-final.service cloud-init.target cloud-init-main.service cloud-init-network.service
  cloud-init-hotplugd.socket)

tools=("${demo_tools[@]}")
[ "$set_name" = test ] && tools+=("${test_tools[@]}")
need=()
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
# The world copies it into roots as their /bin/sh: it must be *static* (Debian's busybox-static;
# the busybox package's is dynamic and cannot run inside a root without its libc).
busybox=${GPUHOST_BUSYBOX:-/bin/busybox}
if [ ! -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then need+=(busybox-static); fi
# the kernel's sign-file: Debian's linux-kbuild-6.1 (on Oracle Linux: kernel-devel)
sign_file=0
for f in /usr/lib/linux-kbuild-6.1/scripts/sign-file /usr/lib/linux-kbuild-*/scripts/sign-file /usr/src/kernels/*/scripts/sign-file; do
  [ -x "$f" ] && sign_file=1
done
[ $sign_file = 1 ] || need+=(sign-file)
# gcc finds the C start files only with libc6-dev (Debian's gcc merely recommends it).
[ -e "$(gcc -print-file-name=Scrt1.o 2>/dev/null)" ] || need+=(libc6-dev)
# (the checkout: no dirname, which a bare machine may lack)
case ${BASH_SOURCE[0]} in */*) here=${BASH_SOURCE[0]%/*}/.. ;; *) here=.. ;; esac
here=$(cd "$here" && pwd)
lint_venv=$here/target/ansible-lint
ptxas_venv=$here/target/ptxas
arm64_dir=${GPUHOST_WORLD_ARM64_DEBS:-/var/cache/gpuhost-world/arm64}
mapfile -t arm64_debs < <(grep -v '^#' "$here/tests/world/arm64-debs.txt")
need_lint=0
need_ptxas=0
if [ "$set_name" = test ]; then
  command -v ansible-lint >/dev/null 2>&1 || [ -x "$lint_venv/bin/ansible-lint" ] || need_lint=1
  compgen -G "$ptxas_venv/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas" >/dev/null || need_ptxas=1
  [ -f /usr/share/misc/pci.ids ] || need+=(pci.ids)
  [ -x /usr/lib/nagios/plugins/negate ] || [ -x /usr/lib64/nagios/plugins/negate ] || need+=(negate)
  # dnf's versionlock plugin (dnf-plugins-core): the OL10 branch lock is checked against it.
  vl=0
  for f in /usr/lib/python3/dist-packages/dnf-plugins/versionlock.py /usr/lib/python3*/site-packages/dnf-plugins/versionlock.py; do
    [ -f "$f" ] && vl=1
  done
  [ $vl = 1 ] || need+=(dnf-plugins-core)
  # ansible's json stdout callback (the ansible.posix collection of Debian's ansible package)
  if command -v apt-get >/dev/null 2>&1 && [ ! -f /usr/lib/python3/dist-packages/ansible_collections/ansible/posix/plugins/callback/json.py ]; then need+=(ansible); fi
  if command -v apt-get >/dev/null 2>&1 && ! command -v vagrant >/dev/null 2>&1; then need+=(vagrant); fi
  # Debian's arm64 userspace for the world's aarch64 roots (.debs, not installed)
  if command -v apt-get >/dev/null 2>&1; then
    for p in "${arm64_debs[@]}"; do
      compgen -G "$arm64_dir/${p}_*_arm64.deb" >/dev/null || { need+=(arm64-debs); break; }
    done
  fi
fi
if [ $check_only = 1 ]; then
  [ $need_lint = 1 ] && need+=(ansible-lint)
  [ $need_ptxas = 1 ] && need+=(ptxas)
  [ ${#need[@]} -eq 0 ] && exit 0
  echo "deps.sh: missing ($set_name set): ${need[*]}"
  exit 1
fi

# ansible-lint is not in Debian 12 (nor Oracle Linux): PyPI's, in a venv of the checkout's own.
install_lint() {
  [ $need_lint = 1 ] || return 0
  echo "deps.sh: installing ansible-lint (pip install ansible-lint, into $lint_venv)" >&2
  python3 -m venv "$lint_venv" && "$lint_venv/bin/pip" install --quiet --no-cache-dir ansible-lint \
    || echo "deps.sh: ansible-lint could not be installed; its test is skipped (failed in CI)" >&2
}
# NVIDIA's ptxas (PyPI's nvidia-cuda-nvcc-cu12 wheel, in a venv of the checkout's own): CI
# assembles the active checks' embedded PTX for sm_80, sm_90 and sm_100 with it (tests/active.rs).
install_ptxas() {
  [ $need_ptxas = 1 ] || return 0
  echo "deps.sh: installing NVIDIA's ptxas (pip install nvidia-cuda-nvcc-cu12, into $ptxas_venv)" >&2
  python3 -m venv "$ptxas_venv" && "$ptxas_venv/bin/pip" install --quiet --no-cache-dir nvidia-cuda-nvcc-cu12 \
    || echo "deps.sh: ptxas could not be installed; its test is skipped (failed in CI)" >&2
}
# The arm64 .debs of the world's aarch64 roots: downloaded, not installed (their binaries
# would replace this machine's).
download_arm64() {
  [ "$set_name" = test ] && command -v apt-get >/dev/null 2>&1 || return 0
  local p missing=()
  for p in "${arm64_debs[@]}"; do
    compgen -G "$arm64_dir/${p}_*_arm64.deb" >/dev/null || missing+=("$p:arm64")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "deps.sh: downloading ${#missing[@]} arm64 .deb(s) into $arm64_dir (the test world's aarch64 roots; not installed)" >&2
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${sudo[@]}" dpkg --add-architecture arm64
    "${sudo[@]}" apt-get update -qq
  fi
  "${sudo[@]}" mkdir -p "$arm64_dir"
  (cd "$arm64_dir" && "${sudo[@]}" apt-get download -q "${missing[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2) || true
}
if [ ${#need[@]} -eq 0 ]; then install_lint; install_ptxas; exit 0; fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "deps.sh: missing ${need[*]}; run as root to install them" >&2; exit 1; }
  sudo=(sudo)
fi

# apt-get's output as one line per package: what it fetches, then what it sets up.
progress() {
  awk -v total="$1" '
    /^Get:/ { got++; printf "deps.sh: [%d/%d] downloaded %s\n", got, total, $5; fflush(); next }
    /^Setting up / { done++; printf "deps.sh: [%d/%d] set up %s\n", done, total, $3; fflush(); next }
    /^(E|W):/ { print; fflush() }'
}

# Installs the Debian packages $@ with no recommended ones and no service started, then disables
# the daemons' units it enabled.
policy=${GPUHOST_POLICY_RC_D:-/usr/sbin/policy-rc.d}
saved=""
restore_policy() {
  if [ -n "$saved" ]; then "${sudo[@]}" cp -p "$saved" "$policy"; rm -f "$saved"; else "${sudo[@]}" rm -f "$policy"; fi
}
apt_install() {
  local unit before=()
  for unit in "${daemon_units[@]}"; do
    if systemctl is-enabled --quiet "$unit" 2>/dev/null; then before+=("$unit"); fi
  done
  if [ -e "$policy" ]; then saved=$(mktemp); "${sudo[@]}" cp -p "$policy" "$saved"; fi
  trap restore_policy EXIT
  printf '#!/bin/sh\n# scripts/deps.sh: no service starts while it installs\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod 0755 "$policy"
  "${sudo[@]}" apt-get update -qq
  local total
  total=$(DEBIAN_FRONTEND=noninteractive apt-get install -s --no-install-recommends "$@" 2>/dev/null | grep -c '^Inst ' || true)
  echo "deps.sh: installing $total Debian package(s) of the $set_name set (no recommended ones; no service is started)" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "$@" | progress "$total" >&2
  restore_policy
  trap - EXIT
  for unit in "${daemon_units[@]}"; do
    if [[ " ${before[*]} " == *" $unit "* ]]; then continue; fi
    if systemctl is-enabled --quiet "$unit" 2>/dev/null; then
      "${sudo[@]}" systemctl disable --quiet "$unit" 2>/dev/null || "${sudo[@]}" systemctl disable --no-reload --quiet "$unit"
      echo "deps.sh: left $unit disabled (the tests start their own)" >&2
    fi
  done
}

echo "deps.sh: installing what the $set_name set is missing: ${need[*]}" >&2
if command -v apt-get >/dev/null 2>&1; then
  debs=("${demo_debs[@]}")
  [ "$set_name" = test ] && debs+=("${test_debs[@]}")
  apt_install "${debs[@]}"
  download_arm64
elif command -v dnf >/dev/null 2>&1; then
  # (vagrant is not in Oracle Linux's repos: its test is skipped there unless installed)
  # (promtool is not in Oracle Linux's repos either: install Prometheus's release by hand;
  # Slurm and munge come from EPEL there; umoci is not packaged: the gpuhost compat image tests
  # skip without it)
  rpms=(rpm-build createrepo_c python3 systemd busybox kmod make xz binutils gcc util-linux openssl kernel-devel cpio)
  [ "$set_name" = test ] && rpms+=(strace bubblewrap cloud-init skopeo hwdata mokutil ansible-core systemd-container python3-dnf-plugin-versionlock)
  "${sudo[@]}" dnf install -y -q --setopt=install_weak_deps=False "${rpms[@]}"
  # (dkms and sbsigntools come from EPEL there; kernel-devel brings scripts/sign-file; negate
  # is EPEL's nagios-plugins-negate)
else
  echo "deps.sh: no apt-get or dnf here; install ${need[*]} by hand" >&2
  exit 1
fi
install_lint
install_ptxas
