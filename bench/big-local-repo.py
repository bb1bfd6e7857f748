#!/usr/bin/env python3
"""A test-world NVIDIA local repo package of real size, for bench/transaction-floor.sh --big.

Usage: big-local-repo.py SRC.rpm OUTDIR SIZE_GB [--one-file]

Repacks SRC (a world `cuda-repo-…-local` package) with the same name, version, release, arch
and files, plus SIZE_GB of incompressible data beside its repo
(`<repo dir>/cuda-toolkit-filler-N-…rpm`, 1 GiB each, named as the CUDA toolkit's packages are,
not in the repo's metadata: dnf never reads them), stored without payload compression, as
NVIDIA's 4 GB CUDA local repo packages hold about that much of already-compressed toolkit RPMs.
With --one-file the filler is one file of SIZE_GB (over 4 GiB: rpm then writes its payload in
its stripped cpio form, which rpm2cpio refuses). The filler is made once per OUTDIR and shared
by every package made there.
"""
import os
import subprocess
import sys
import tempfile


def q(rpm, tag):
    return subprocess.run(["rpm", "-qp", "--qf", f"%{{{tag}}}", rpm], check=True,
                          capture_output=True, text=True).stdout


def main():
    src, out, size_gb = sys.argv[1], sys.argv[2], float(sys.argv[3])
    one = sys.argv[4:5] == ["--one-file"]
    os.makedirs(out, exist_ok=True)
    dest = os.path.join(out, os.path.basename(src))
    if os.path.exists(dest):
        return
    gib = 2**30
    parts = []
    left = int(size_gb * gib)
    while left > 0:
        n = left if one else min(left, gib)
        part = os.path.join(out, f"cuda-toolkit-filler-{len(parts)}-{size_gb:g}-1.x86_64.rpm")
        if not os.path.exists(part) or os.path.getsize(part) != n:
            with open("/dev/urandom", "rb") as r, open(part + ".part", "wb") as w:
                todo = n
                while todo:
                    chunk = r.read(min(todo, 1 << 24))
                    w.write(chunk)
                    todo -= len(chunk)
            os.rename(part + ".part", part)
        parts.append(part)
        left -= n
    name, version, release, arch = (q(src, t) for t in ("NAME", "VERSION", "RELEASE", "ARCH"))
    files = subprocess.run(["rpm", "-qlp", src], check=True, capture_output=True,
                           text=True).stdout.split()
    repo_dir = next(f for f in files if f.startswith("/var/") and f.count("/") == 2)
    with tempfile.TemporaryDirectory(dir=out) as work:
        root = os.path.join(work, "root")
        os.makedirs(root)
        p1 = subprocess.Popen(["rpm2cpio", src], stdout=subprocess.PIPE)
        subprocess.run(["cpio", "-idm", "--quiet"], stdin=p1.stdout, cwd=root, check=True)
        p1.wait()
        for part in parts:
            os.link(part, os.path.join(root, repo_dir.lstrip("/"), os.path.basename(part)))
        spec = os.path.join(work, "big.spec")
        with open(spec, "w") as f:
            f.write(f"""Name: {name}
Version: {version}
Release: {release}
Summary: {name} with {size_gb:g} GiB of payload (gpuhost bench)
License: NVIDIA
AutoReqProv: no
%define _binary_payload w0.ufdio
%define __os_install_post %{{nil}}
%define _build_id_links none
%description
bench/big-local-repo.py
%install
cp -a {root}/. %{{buildroot}}/
%files
{os.linesep.join(f'"{p}"' for p in files if p != repo_dir and not p.startswith(repo_dir + "/repodata"))}
{repo_dir}/repodata
{os.linesep.join(f"{repo_dir}/{os.path.basename(p)}" for p in parts)}
""")
        subprocess.run(["rpmbuild", "-bb", "--target", arch, "--define", f"_topdir {work}",
                        "--define", f"_rpmdir {work}/out", spec], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        built = os.path.join(work, "out", arch, os.path.basename(src))
        os.rename(built, dest)
    print(f"{dest}: {os.path.getsize(dest) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
