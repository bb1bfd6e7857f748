#!/usr/bin/env bash
# Benchmark (issue 41, item 6, build host): NVIDIA's real open kernel modules built for one real
# kernel, by `dkms build` as a node does it (NVIDIA's dkms.conf, `make -j2`) and by
# `gpuhost kmod build` on a build host (`make -j<every CPU>`, each .ko signed, one RPM, a repo).
#
# The source is NVIDIA/open-gpu-kernel-modules at a release tag, laid out as NVIDIA's
# kmod-nvidia-open-dkms lays it out in /usr/src/nvidia-open-<version>: kernel-open/ with the
# OS-agnostic objects nv-kernel.o_binary and nv-modeset-kernel.o_binary already built (NVIDIA
# ships them built; here they are built once from src/, before any timing, and cached). The
# kernel is this machine's newest with headers (Debian's linux-headers; `/lib/modules/<kver>/
# build`, which is where DKMS and gpuhost both find it). gpuhost reads the source the way it
# reads it from a real local repo package: a kmod-nvidia-open-dkms RPM of that tree, inside a
# local repo package made here with rpmbuild and createrepo_c.
#
# Both runs use this machine's CPUs; `nproc` is printed with the table. On a 2-core machine
# NVIDIA's -j2 is every CPU, so the two builds compile alike: the difference is what each node
# no longer pays, not the build's speed.
#
# Wall and CPU seconds (user + system of the command and every child); medians of N.
# The .ko files of the first DKMS build are kept in $WORK/b-tree for bench/kmod-node.sh.
# Usage: bench/kmod-build.sh [N] [SRC]
#   SRC: a checkout of NVIDIA/open-gpu-kernel-modules at a release tag (default: cloned
#        into $WORK/src at $TAG); WORK defaults to /var/tmp/kmod-bench, TAG to 595.45.04.
# Touches the machine it runs on: /usr/src/nvidia-open-<version> and DKMS's tree for it (both
# removed after each run), /var/cache/gpuhost/kmod-build (gpuhost's scratch, removed by it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
n=${1:-3}
work=${WORK:-/var/tmp/kmod-bench}
tag=${TAG:-595.45.04}
src=${2:-$work/src}
mkdir -p "$work"
if [ ! -d "$src/kernel-open" ]; then
  git clone --quiet --depth 1 --branch "$tag" https://github.com/NVIDIA/open-gpu-kernel-modules "$src"
fi
ver=$(sed -n 's/^NVIDIA_VERSION = //p' "$src/version.mk" 2>/dev/null || true)
ver=${ver:-$tag}
for t in dkms rpmbuild createrepo_c make gcc openssl; do
  command -v "$t" >/dev/null || { echo "kmod-build.sh: $t is missing (scripts/deps.sh installs it)" >&2; exit 2; }
done
deb_kver=$(for d in /lib/modules/*/build; do [ -f "$d/Makefile" ] && basename "$(dirname "$d")"; done | grep -v '\.x86_64$' | sort -V | tail -1)
[ -n "$deb_kver" ] || { echo "kmod-build.sh: no kernel headers (apt-get install linux-headers-amd64)" >&2; exit 2; }
# Debian's release (6.1.0-57-amd64) has two '-', which no RPM version may have (an Oracle Linux
# kernel's has one: 5.15.0-206.153.7.el9uek.x86_64), so the kernel is named in that form for both
# builds: /lib/modules/6.1.0-57.amd64.x86_64/{build,source} link to Debian's headers (removed at
# the end). The modules are the same; their vermagic is the headers' own.
kver="${deb_kver%-*}.${deb_kver##*-}.x86_64"
mkdir -p "/lib/modules/$kver"
ln -sfn "$(readlink -f "/lib/modules/$deb_kver/build")" "/lib/modules/$kver/build"
ln -sfn "$(readlink -f "/lib/modules/$deb_kver/source")" "/lib/modules/$kver/source"
trap 'rm -rf "/lib/modules/$kver"' EXIT

# The OS-agnostic objects, built once (NVIDIA ships them built in the DKMS package).
bin_dir=$work/binaries-$ver
if [ ! -f "$bin_dir/nv-kernel.o_binary" ]; then
  echo "building the OS-agnostic objects of $ver once (not timed) ..." >&2
  make -s -C "$src/src/nvidia" -j"$(nproc)" >/dev/null
  make -s -C "$src/src/nvidia-modeset" -j"$(nproc)" >/dev/null
  mkdir -p "$bin_dir"
  cp "$src"/src/nvidia/_out/Linux_*/nv-kernel.o "$bin_dir/nv-kernel.o_binary"
  cp "$src"/src/nvidia-modeset/_out/Linux_*/nv-modeset-kernel.o "$bin_dir/nv-modeset-kernel.o_binary"
fi

# The tree as kmod-nvidia-open-dkms installs it, with NVIDIA's dkms.conf fields
# (tests/world/FIDELITY.md) but one: Debian splits a kernel's headers in two (build/, the
# configured output, and source/, the rest), where Oracle's kernel-devel is one tree; NVIDIA's
# `SYSSRC=${kernel_source_dir}` (build/) would make its conftests miss the headers under
# source/, so the line names both (SYSSRC=source/, SYSOUT=build/), as NVIDIA's Makefile does
# itself when run without SYSSRC. The compile is the same.
tree=$work/nvidia-open-$ver
rm -rf "$tree"
cp -a "$src/kernel-open" "$tree"
rm -f "$tree/nvidia/nv-kernel.o_binary" "$tree/nvidia-modeset/nv-modeset-kernel.o_binary"
cp "$bin_dir/nv-kernel.o_binary" "$tree/nvidia/"
cp "$bin_dir/nv-modeset-kernel.o_binary" "$tree/nvidia-modeset/"
{
  echo 'PACKAGE_NAME="nvidia-open"'
  echo "PACKAGE_VERSION=\"$ver\""
  echo 'AUTOINSTALL="yes"'
  echo "MAKE[0]=\"'make' -j2 module SYSSRC=/lib/modules/\${kernelver}/source SYSOUT=\${kernel_source_dir} IGNORE_XEN_PRESENCE=1 IGNORE_PREEMPT_RT_PRESENCE=1 IGNORE_CC_MISMATCH=1\""
  i=0
  for m in nvidia nvidia-modeset nvidia-drm nvidia-uvm nvidia-peermem; do
    echo "BUILT_MODULE_NAME[$i]=\"$m\""
    echo "DEST_MODULE_LOCATION[$i]=\"/extra\""
    i=$((i + 1))
  done
} >"$tree/dkms.conf"

# rpmbuild of a spec into a top folder, as is: no build-id links, debuginfo or brp scripts.
rpmb() {
  rpmbuild -bb --quiet --define "_topdir $2" --define "_build_id_links none" \
    --define "debug_package %{nil}" --define "__os_install_post %{nil}" "$1" >/dev/null
}

# The local repo package carrying it: kmod-nvidia-open-dkms in NVIDIA's repo layout.
pkg=$work/pkg
rm -rf "$pkg"
mkdir -p "$pkg"
dist=el9
repo_name=nvidia-driver-local-repo-rhel9-$ver
cat >"$pkg/dkms.spec" <<EOF
Name: kmod-nvidia-open-dkms
Version: $ver
Release: 1.$dist
Epoch: 3
Summary: NVIDIA's open kernel module source for DKMS (bench)
License: MIT or GPLv2
BuildArch: noarch
AutoReqProv: no
Requires: dkms
Provides: nvidia-kmod = 3:$ver
%description
bench
%install
mkdir -p %{buildroot}/usr/src
cp -a $tree %{buildroot}/usr/src/nvidia-open-$ver
%files
/usr/src/nvidia-open-$ver
EOF
rpmb "$pkg/dkms.spec" "$pkg/top"
mkdir -p "$pkg/inner"
cp "$pkg"/top/RPMS/noarch/*.rpm "$pkg/inner/"
createrepo_c --quiet "$pkg/inner"
cat >"$pkg/local.spec" <<EOF
Name: $repo_name
Version: 1.0
Release: 1
Summary: NVIDIA driver local repository (bench)
License: NVIDIA
AutoReqProv: no
%description
bench
%install
mkdir -p %{buildroot}/var/$repo_name %{buildroot}/etc/yum.repos.d
cp -a $pkg/inner/. %{buildroot}/var/$repo_name/
printf '[$repo_name]\nname=$repo_name\nbaseurl=file:///var/$repo_name\nenabled=1\ngpgcheck=0\n' >%{buildroot}/etc/yum.repos.d/$repo_name.repo
%files
/var/$repo_name
/etc/yum.repos.d/$repo_name.repo
EOF
rpmb "$pkg/local.spec" "$pkg/top2"
local_rpm=$(ls "$pkg"/top2/RPMS/*/"$repo_name"-1.0-1.*.rpm)

# The fleet's key pair (a throwaway one).
openssl req -new -x509 -nodes -days 3650 -subj "/CN=bench fleet key" -newkey rsa:2048 \
  -keyout "$work/fleet.priv" -outform DER -out "$work/fleet.der" 2>/dev/null

cargo build --quiet --release -p gpuhost --manifest-path "$here/Cargo.toml"
bin=$here/target/release/gpuhost

python3 - "$bin" "$work" "$tree" "$ver" "$kver" "$local_rpm" "$n" <<'PY'
import glob, json, os, resource, shutil, statistics, subprocess, sys, time
bin_, work, tree, ver, kver, local_rpm, n = sys.argv[1:8]
n = int(n)

def timed(argv):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv[:4])} exited {p.returncode}:\n{p.stderr[-3000:]}\n{p.stdout[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p.stdout

def quiet(*argv):
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

usr_src = f"/usr/src/nvidia-open-{ver}"
def dkms_clean():
    quiet("dkms", "remove", "-m", "nvidia-open", "-v", ver, "--all")
    shutil.rmtree(usr_src, ignore_errors=True)
    shutil.rmtree(f"/var/lib/dkms/nvidia-open/{ver}", ignore_errors=True)

dkms_runs, gpuhost_runs, kept, sizes = [], [], False, {}
for i in range(n):
    # DKMS, as the node's kmod-nvidia-open-dkms %post does it.
    dkms_clean()
    shutil.copytree(tree, usr_src, symlinks=True)
    subprocess.run(["dkms", "add", "-m", "nvidia-open", "-v", ver], check=True, stdout=subprocess.DEVNULL)
    dkms_runs.append(timed(["dkms", "build", "-m", "nvidia-open", "-v", ver, "-k", kver])[:2])
    if not kept:
        kos = glob.glob(f"/var/lib/dkms/nvidia-open/{ver}/{kver}/*/module/nvidia*.ko*")
        dst = f"{work}/b-tree"
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        for k in kos:
            shutil.copy(k, dst)
        kept = len(kos)
    dkms_clean()
    # gpuhost on the build host.
    out = f"{work}/kmods-{i}"
    shutil.rmtree(out, ignore_errors=True)
    wall, cpu, stdout = timed([bin_, "kmod", "build", "--root", "/", "--local-repo-rpm", local_rpm,
                               "--kernel-release", kver, "--key", f"{work}/fleet.priv",
                               "--cert", f"{work}/fleet.der", "--out", out, "--format", "json"])
    report = json.loads(stdout)
    k = report["kmods"][0]
    gpuhost_runs.append((wall, cpu, k["build_seconds"], k["cpu_seconds"]))
    rpms = glob.glob(f"{out}/**/*.rpm", recursive=True)
    sizes = {os.path.basename(r): os.path.getsize(r) for r in rpms}

med = lambda runs, k: statistics.median(r[k] for r in runs)
jobs = report.get("jobs")
print(f"kernel {kver}, NVIDIA open modules {ver}, {os.cpu_count()} CPUs, gpuhost make -j{jobs}; medians of {n}")
print("| build | wall (s) | CPU (s) |")
print("|---|---|---|")
print(f"| `dkms build` (NVIDIA's dkms.conf, make -j2): what each node pays per kernel | {med(dkms_runs, 0):.1f} | {med(dkms_runs, 1):.1f} |")
print(f"| `gpuhost kmod build` (make -j{jobs}, strip, sign, RPM, repo): once per kernel for the fleet | {med(gpuhost_runs, 0):.1f} | {med(gpuhost_runs, 1):.1f} |")
print(f"| of which make (gpuhost's report) | {med(gpuhost_runs, 2):.1f} | {med(gpuhost_runs, 3):.1f} |")
for name, size in sorted(sizes.items()):
    print(f"| kmod RPM {name} | {size / 2**20:.1f} MiB | |")
print(f"(kept {kept} .ko of the DKMS build in {work}/b-tree for bench/kmod-node.sh)")
print("runs (wall, CPU):", "dkms", [(round(w, 1), round(c, 1)) for w, c in dkms_runs],
      "gpuhost", [tuple(round(x, 1) for x in r) for r in gpuhost_runs])
PY
