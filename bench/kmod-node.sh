#!/usr/bin/env bash
# Benchmark (issue 41, item 6, node and fleet): what a node pays for NVIDIA's kernel module with
# the build host's kmods (`driver.kmod_repo`) against DKMS, on the test world, with the real
# rpm, dnf, dkms and make:
# 1. per kernel: a kernel update's trigger (`gpuhost kernel-added KVER`, the kernel-module work
#    for one new kernel) — prebuilt: install that kernel's kmod; DKMS: headers, then DKMS
#    builds the module (the world's kbuild compiles a stub, so the DKMS column is a floor: the
#    real compile of kernel-open is bench/kmod-build.sh's);
# 2. per kernel at real size: installing one kmod RPM holding NVIDIA's real open modules
#    (bench/kmod-build.sh's build, KO_DIR), signed, into a node root, with depmod — what the
#    prebuilt column costs once the modules are 25 MB, not stubs;
# 3. fleet: a fresh root's first converge, prebuilt against DKMS, and what the node no longer
#    installs; the same from a bundle (`bundle --kmod-repo` against a DKMS bundle), its size.
# Wall and CPU seconds (user + system of gpuhost and every child) of each run; medians of N.
# Usage: bench/kmod-node.sh [N] [KO_DIR]   (KO_DIR: a folder with nvidia*.ko; default
#        /var/tmp/kmod-bench/b-tree, bench/kmod-build.sh's make tree)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
n=${1:-3}
ko_dir=${2:-/var/tmp/kmod-bench/b-tree}
"$here/scripts/deps.sh" >/dev/null
cargo build --quiet --release -p gpuhost
bin=$here/target/release/gpuhost
world=$here/target/testworld
"$here/tests/world/build-world.sh" "$world" >/dev/null
export HOME=$world/home
tmp=$(mktemp -d /var/tmp/gpuhost-kmod-node.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
python3 - "$bin" "$world" "$here" "$tmp" "$n" "$ko_dir" <<'PY'
import glob, json, os, resource, statistics, subprocess, sys, time
bin_, world, here, tmp, n, ko_dir = sys.argv[1:7]
n = int(n)
uek, uek8 = "5.15.0-206.153.7.el9uek.x86_64", "6.12.0-100.28.2.2.el9uek.x86_64"
local = f"{world}/rpms/cuda-local/nvidia-driver-local-repo-rhel9-570.124.06-1.0-1.x86_64.rpm"
profile = f"{here}/tests/world/profiles/ol9-uek.toml"

def sh(*argv, **kw):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

def timed(argv, ok=(0,)):
    """Wall and CPU seconds (the process and its children) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in ok:
        sys.exit(f"{argv[:3]} exited {p.returncode}: {p.stderr[-2000:]}\n{p.stdout[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.stdout

def root(name, os_="ol9", kernels=(uek,)):
    r = f"{tmp}/{name}"
    subprocess.run(["rm", "-rf", r], check=True)
    args = ["bash", f"{here}/tests/world/mkroot.sh", world, r, "--os", os_]
    for k in kernels:
        args += ["--kernel", k]
    sh(*args)
    return r

def dnf(r, *args):
    sh("bash", f"{here}/tests/world/dnf.sh", world, r, *args)

def apply(r, kmods, cmd="apply"):
    args = [bin_, cmd, "--format", "json", "--profile", profile, "--set", f"driver.local_repo_rpm={local}", "--root", r]
    if kmods:
        args += ["--set", f"driver.kmod_repo={kmods}"]
    return args

# The build host: a build root with both kernels and their headers, the fleet key, the repo.
b = root("build", kernels=(uek, uek8))
dnf(b, "-y", "install", "bash", "gcc", "gcc-c++", "make", "openssl-libs", "gcc-toolset-14-gcc",
    "kernel-uek-devel-5.15.0-206.153.7.el9uek", "kernel-uek-devel-6.12.0-100.28.2.2.el9uek")
key, cert = f"{tmp}/fleet.priv", f"{tmp}/fleet.der"
sh("openssl", "req", "-new", "-x509", "-nodes", "-days", "3650", "-subj", "/CN=bench fleet key",
   "-newkey", "rsa:2048", "-keyout", key, "-outform", "DER", "-out", cert)
repo = f"{tmp}/kmods"
sh(bin_, "kmod", "build", "--root", b, "--local-repo-rpm", local, "--kernel-release", uek,
   "--kernel-release", uek8, "--key", key, "--cert", cert, "--out", repo)

rows = []
def median_row(label, runs):
    w = statistics.median(r[0] for r in runs)
    c = statistics.median(r[1] for r in runs)
    rows.append((label, w, c, len(runs)))

# 1. A kernel update's trigger, per kernel.
for kind in ("prebuilt", "dkms"):
    runs = []
    for i in range(n):
        r = root(f"node-{kind}-{i}")
        subprocess.run(apply(r, repo if kind == "prebuilt" else None), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dnf(r, "-y", "install", "kernel-uek-6.12.0-100.28.2.2.el9uek")
        # kernel-install's scriptlets: the new kernel's boot entry, made the default.
        mid = open(f"{r}/etc/machine-id").read().strip()
        with open(f"{r}/boot/loader/entries/{mid}-{uek8}.conf", "w") as f:
            f.write(f"title new\nversion {uek8}\nlinux /vmlinuz-{uek8}\n")
        env = open(f"{r}/boot/grub2/grubenv").read().splitlines()
        env = [f"saved_entry={mid}-{uek8}" if l.startswith("saved_entry=") else l for l in env if not l.startswith("#")]
        text = "\n".join(env) + "\n"
        open(f"{r}/boot/grub2/grubenv", "w").write(text + "#" * (1024 - len(text)))
        runs.append(timed([bin_, "kernel-added", uek8, "--root", r, "--format", "json"])[:2])
        subprocess.run(["rm", "-rf", r])
    median_row(f"kernel update, one new kernel ({kind}, test world)", runs)

# 2. One kmod RPM of NVIDIA's real open modules, installed into a node root, with depmod.
kos = sorted(glob.glob(f"{ko_dir}/**/nvidia*.ko", recursive=True))
if kos:
    sign_file = next(iter(glob.glob("/usr/lib/linux-kbuild-*/scripts/sign-file")))
    real = f"{tmp}/real"
    os.makedirs(f"{real}/ko", exist_ok=True)
    for k in kos:
        dst = f"{real}/ko/{os.path.basename(k)}"
        sh("cp", k, dst)
        sh(sign_file, "sha256", key, cert, dst)
    size = sum(os.path.getsize(f"{real}/ko/{os.path.basename(k)}") for k in kos)
    spec = f"""Name: kmod-nvidia-open-{uek}
Version: 570.124.06
Release: 1
Epoch: 3
Summary: bench
License: MIT or GPLv2
AutoReqProv: no
%define _build_id_links none
%global debug_package %{{nil}}
%global __os_install_post %{{nil}}
%description
bench
%install
mkdir -p %{{buildroot}}/lib/modules/{uek}/extra
install -m 0644 {real}/ko/*.ko %{{buildroot}}/lib/modules/{uek}/extra/
%post
depmod -a {uek} || :
%files
/lib/modules/{uek}/extra/*.ko
"""
    open(f"{real}/k.spec", "w").write(spec)
    sh("rpmbuild", "-bb", "--quiet", "--define", f"_topdir {real}/top", f"{real}/k.spec")
    rpm = glob.glob(f"{real}/top/RPMS/x86_64/*.rpm")[0]
    runs = []
    for i in range(n):
        r = root(f"real-{i}")
        dnf(r, "-y", "install", "kmod", "bash")
        runs.append(timed(["rpm", "--root", r, "-i", "--nodeps", "--force-debian", rpm])[:2])
        subprocess.run(["rm", "-rf", r])
    median_row(f"one kmod RPM of the real open modules ({size / 2**20:.1f} MiB, {len(kos)} .ko), rpm -i + depmod", runs)
else:
    rows.append((f"(no real modules in {ko_dir}: run bench/kmod-build.sh first)", 0, 0, 0))

# 3. Fleet: a fresh root's first converge.
gone = ["gcc", "gcc-c++", "make", "dkms", "kernel-uek-devel", "elfutils-libelf-devel", "gcc-toolset-14-gcc", "kmod-nvidia-open-dkms"]
for kind in ("prebuilt", "dkms"):
    runs, had = [], set()
    for i in range(n):
        r = root(f"fresh-{kind}-{i}")
        runs.append(timed(apply(r, repo if kind == "prebuilt" else None))[:2])
        q = subprocess.run(["rpm", "--root", r, "-q", *gone], stdout=subprocess.PIPE, text=True)
        had |= {l for l in q.stdout.splitlines() if "not installed" not in l}
        subprocess.run(["rm", "-rf", r])
    median_row(f"first converge of a fresh root ({kind}, test world)", runs)
    rows.append((f"  build packages installed ({kind}): {', '.join(sorted(had)) or 'none'}", 0, 0, 0))

# 4. Fleet, offline: a bundle of the same profile (what `apply --bundle` installs with nothing
#    else reachable), with the kmod repo (`bundle --kmod-repo`) and without (DKMS), its size,
#    and a fresh root's first converge from it.
def du(path):
    return int(sh("du", "-sb", path).stdout.split()[0])
src = root("bundle-src")
for kind in ("prebuilt", "dkms"):
    out = f"{tmp}/bundle-{kind}"
    args = [bin_, "bundle", "--profile", profile, "--set", f"driver.local_repo_rpm={local}", "--root", src, "--out", out]
    if kind == "prebuilt":
        args += ["--kmod-repo", repo]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    runs, had = [], set()
    for i in range(n):
        r = root(f"bundled-{kind}-{i}")
        runs.append(timed([bin_, "apply", "--bundle", out, "--root", r, "--format", "json"])[:2])
        q = subprocess.run(["rpm", "--root", r, "-q", *gone], stdout=subprocess.PIPE, text=True)
        had |= {l.rsplit("-", 2)[0] for l in q.stdout.splitlines() if "not installed" not in l}
        subprocess.run(["rm", "-rf", r])
    median_row(f"first converge from a bundle ({kind}, test world; bundle {du(out) / 2**20:.1f} MiB)", runs)
    rows.append((f"  build packages installed from the {kind} bundle: {', '.join(sorted(had)) or 'none'}", 0, 0, 0))

print("| run | wall (s) | CPU (s) | runs |")
print("|---|---|---|---|")
for label, w, c, k in rows:
    if k:
        print(f"| {label} | {w:.2f} | {c:.2f} | {k} |")
    else:
        print(f"| {label} | | | |")
PY
