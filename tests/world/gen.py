#!/usr/bin/env python3
"""Generates and builds the synthetic Oracle Linux package universe (the "test world").

Called by build-world.sh (which handles caching); do not call directly unless you know why:
    gen.py OUT BUSYBOX
Everything is built with the real rpmbuild / createrepo_c / modifyrepo_c. Packages are tiny and
(except `bash`, `kmod-nvidia-*-dkms`) scriptlet-free. See README.md for what exists and why.
"""
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

OUT = os.path.abspath(sys.argv[1])
# The upstream DKMS the world ships (from the host's /usr/sbin/dkms; build-world.sh checks it).
DKMS_VERSION = subprocess.run(["/usr/sbin/dkms", "--version"], stdout=subprocess.PIPE,
                              text=True).stdout.strip().removeprefix("dkms-") or "0"
BUSYBOX = sys.argv[2]
WORK = os.path.join(OUT, ".work")
# Debian's arm64 userspace, unpacked from its .debs by build-world.sh (busybox-static, bash,
# make, kmod, xz-utils, binutils-aarch64-linux-gnu, openssl, linux-kbuild-6.1 and their
# libraries): the real aarch64 binaries of the OL9/OL10 aarch64 roots, run through
# qemu-user-static. Unset: the world has no aarch64 releases.
ARM64 = os.environ.get("GPUHOST_WORLD_ARM64_ROOT") or None


# --------------------------------------------------------------------------------------------
# package model
# --------------------------------------------------------------------------------------------
class Pkg:
    def __init__(self, name, version, release, epoch=None, arch="x86_64", files=None,
                 links=None, trees=None, requires=(), provides=(), obsoletes=(), conflicts=(),
                 scripts=None, summary=None, modes=None, copies=None, recommends=(), ghosts=()):
        self.name, self.version, self.release, self.epoch = name, version, release, epoch
        self.arch = arch
        self.files = dict(files or {})      # path -> str/bytes content
        self.links = dict(links or {})      # path -> symlink target
        self.copies = dict(copies or {})    # path -> host file to copy
        self.trees = list(trees or [])      # (path, host dir) shipped recursively
        self.modes = dict(modes or {})      # path -> mode
        self.requires, self.provides = list(requires), list(provides)
        self.obsoletes, self.conflicts = list(obsoletes), list(conflicts)
        self.recommends = list(recommends)  # weak deps: dnf installs them (install_weak_deps=True)
        self.ghosts = list(ghosts)          # %ghost paths: owned, not shipped (made by a scriptlet)
        self.scripts = dict(scripts or {})  # posttrans/preun/... -> body (/bin/sh)
        self.summary = summary or f"Synthetic {name} for the gpuhost test world"

    def evr(self):
        e = f"{self.epoch}:" if self.epoch is not None else ""
        return f"{e}{self.version}-{self.release}"

    def nevra(self):
        return f"{self.name}-{self.epoch or 0}:{self.version}-{self.release}.{self.arch}"

    def filename(self):
        return f"{self.name}-{self.version}-{self.release}.{self.arch}.rpm"

    def paths(self):
        return (set(self.files) | set(self.links) | set(self.copies) | {t[0] for t in self.trees}
                | set(self.ghosts))


def esc(s):
    return s.replace("%", "%%")


def build_batch(specdir, batch_id, pkgs, rpmdir, target=None):
    """Writes one spec holding `pkgs` as subpackages (names and paths are unique within it)."""
    stage = os.path.join(specdir, f"{batch_id}.root")
    os.makedirs(stage, exist_ok=True)
    for p in pkgs:
        for path, content in p.files.items():
            dst = stage + path
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "wb") as f:
                f.write(content.encode() if isinstance(content, str) else content)
            mode = p.modes.get(path)
            if mode is None:
                mode = 0o755 if "/bin/" in path or "/sbin/" in path else 0o644
            os.chmod(dst, mode)
        for path, src in p.copies.items():
            dst = stage + path
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
            if path in p.modes:
                os.chmod(dst, p.modes[path])
        for path, target_ in p.links.items():
            dst = stage + path
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.symlink(target_, dst)
        for path, src in p.trees:
            dst = stage + path
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copytree(src, dst, symlinks=True)
    lines = [
        f"%global _rpmdir {rpmdir}",
        f"Name: worldbatch-{batch_id}", "Version: 1", "Release: 1",
        "Summary: gpuhost test world batch", "License: MIT", "AutoReqProv: no",
        "%description", "batch", "",
    ]
    for p in pkgs:
        lines += [f"%package -n {p.name}"]
        if p.epoch is not None:
            lines += [f"Epoch: {p.epoch}"]
        lines += [f"Version: {p.version}", f"Release: {p.release}", f"Summary: {p.summary}",
                  "AutoReqProv: no"]
        if p.arch == "noarch":
            lines += ["BuildArch: noarch"]
        for tag, vals in (("Requires", p.requires), ("Provides", p.provides),
                          ("Obsoletes", p.obsoletes), ("Conflicts", p.conflicts),
                          ("Recommends", p.recommends)):
            for v in vals:
                lines += [f"{tag}: {v}"]
        if p.scripts:
            lines += ["Requires(post): /bin/sh", "Requires(posttrans): /bin/sh",
                      "Requires(preun): /bin/sh"]
        lines += [f"%description -n {p.name}", p.summary, ""]
    lines += ["%install", f"cp -a {stage}/. %{{buildroot}}/", ""]
    for p in pkgs:
        lines += [f"%files -n {p.name}", "%defattr(-,root,root,-)"]
        lines += sorted(f'"{x}"' for x in p.paths() - set(p.ghosts))
        lines += sorted(f'%ghost %attr(0644,root,root) "{x}"' for x in p.ghosts)
        lines += [""]
        for kind, body in p.scripts.items():
            lines += [f"%{kind} -n {p.name}", esc(body), ""]
    spec = os.path.join(specdir, f"{batch_id}.spec")
    with open(spec, "w") as f:
        f.write("\n".join(lines) + "\n")
    return spec, target


def batches_of(pkgs):
    """Splits packages into groups in which no name and no path repeats."""
    groups = []
    for p in pkgs:
        for g in groups:
            if p.arch == g[0].arch and all(q.name != p.name and not (q.paths() & p.paths()) for q in g):
                g.append(p)
                break
        else:
            groups.append([p])
    return groups


COUNTER = [0]


def build_all(jobs, payload="w.ufdio"):
    """jobs: list of (pkgs, rpmdir, target). Builds every package, two rpmbuild processes, with
    rpm's `_binary_payload` `payload` (uncompressed unless told: the world builds fast)."""
    specdir = os.path.join(WORK, "specs")
    os.makedirs(specdir, exist_ok=True)
    by_target = {}
    for pkgs, rpmdir, target in jobs:
        os.makedirs(rpmdir, exist_ok=True)
        for g in batches_of(pkgs):
            COUNTER[0] += 1
            spec, _ = build_batch(specdir, f"b{COUNTER[0]}", g, rpmdir)
            by_target.setdefault(target, []).append(spec)
    cmds = []
    for ti, (target, specs) in enumerate(by_target.items()):
        half = [specs[0::2], specs[1::2]]
        for hi, h in enumerate(half):
            if not h:
                continue
            top = f"{WORK}/top{COUNTER[0]}-{ti}-{hi}"
            for sub in ("BUILD", "BUILDROOT", "RPMS", "SOURCES", "SPECS", "SRPMS"):
                os.makedirs(f"{top}/{sub}", exist_ok=True)
            cmd = ["rpmbuild", "--quiet", "-bb",
                   "--define", f"_topdir {top}",
                   "--define", "debug_package %{nil}",
                   "--define", "__os_install_post %{nil}",
                   "--define", "_build_id_links none",
                   "--define", f"_binary_payload {payload}",
                   "--define", "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
                   "--define", "source_date_epoch_from_changelog 0",
                   "--define", "_buildhost gpuhost-testworld"]
            if target:
                cmd += ["--target", target]
            cmds.append(cmd + h)

    def run(cmd):
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout)
            raise SystemExit(f"rpmbuild failed: {' '.join(cmd[-3:])}")
    with ThreadPoolExecutor(2) as ex:
        list(ex.map(run, cmds))


def createrepo(d, modules_yaml=None):
    subprocess.run(["createrepo_c", "-q", "--no-database", "--simple-md-filenames", d], check=True)
    if modules_yaml:
        y = os.path.join(WORK, f"modules-{hashlib.sha1(d.encode()).hexdigest()[:8]}.yaml")
        with open(y, "w") as f:
            f.write(modules_yaml)
        subprocess.run(["modifyrepo_c", "--mdtype=modules", "--simple-md-filenames",
                        y, os.path.join(d, "repodata")], check=True, stdout=subprocess.DEVNULL)


# --------------------------------------------------------------------------------------------
# Oracle Linux content
# --------------------------------------------------------------------------------------------
OSES = {
    "ol8": dict(major="8", minor="10", dist="el8", codename="", sysgcc="8.5.0",
                sysgcc_rel="22.0.1.el8_10", sysgcc_text="gcc (GCC) 8.5.0 20210514 (Red Hat 8.5.0-22.0.1)"),
    "ol9": dict(major="9", minor="4", dist="el9", codename="", sysgcc="11.4.1",
                sysgcc_rel="3.0.1.el9", sysgcc_text="gcc (GCC) 11.4.1 20231218 (Red Hat 11.4.1-3.0.1)"),
    # Oracle Linux 10: the system compiler is gcc 14 (RHEL 10.0 ships gcc 14.2.1-7.el10), and
    # UEK8 on OL10 is built with it (no gcc-toolset: FIDELITY.md).
    "ol10": dict(major="10", minor="0", dist="el10", codename="", sysgcc="14.2.1",
                 sysgcc_rel="7.0.1.el10", sysgcc_text="gcc (GCC) 14.2.1 20250110 (Red Hat 14.2.1-7.0.1)"),
}

# The world's releases: an Oracle Linux major, and with `-aarch64` its aarch64 (Grace) build:
# the same repo ids (Oracle's yum server keys them by $basearch), packages built for aarch64.
WORLD_OSES = ["ol8", "ol9", "ol10"] + (["ol9-aarch64", "ol10-aarch64"] if ARM64 else [])


def base_of(os_):
    """`ol9` of `ol9-aarch64`: the release (repo ids, dist tag, versions)."""
    return os_.split("-")[0]


def arch_of(os_):
    return "aarch64" if os_.endswith("-aarch64") else "x86_64"


def retarget(pkgs, arch):
    """Packages of an aarch64 release are built for it (noarch ones stay noarch)."""
    for p in pkgs:
        if p.arch != "noarch":
            p.arch = arch
    return pkgs


# kernel releases: (package, version, release, gcc text of the compiler that built it)
UEK8_GCC = "gcc (GCC) 11.2.1 20220127 (Red Hat 11.2.1-9.0.1)"
UEK9_GCC = "gcc (GCC) 11.4.1 20231218 (Red Hat 11.4.1-3.0.1)"
# UEK8 (6.12) is built with gcc-toolset-14: NVIDIA Driver Installation Guide, Oracle Linux page
# (its example kernel and CONFIG_CC_VERSION_TEXT).
UEKR8_GCC = "gcc (GCC) 14.2.1 20250110 (Red Hat 14.2.1-7)"
# Oracle's RHCK builds carry Oracle's `.0.1` before the dist tag (RHEL's 4.18.0-553.16.1.el8_10
# is Oracle's 4.18.0-553.16.1.0.1.el8_10; FIDELITY.md); NVIDIA's precompiled kmods below stay
# named and built for RHEL's kernel (`rhel_release`).
KERNELS = {
    "ol8": [
        ("kernel-uek", "5.15.0", "200.131.27.el8uek", UEK8_GCC, "ol8_UEKR7", True),
        ("kernel-uek", "5.15.0", "204.147.6.2.el8uek", UEK8_GCC, "ol8_UEKR7", True),
        ("kernel-uek", "5.15.0", "206.153.7.el8uek", UEK8_GCC, "extra", False),
        ("kernel", "4.18.0", "513.5.1.0.1.el8_9", OSES["ol8"]["sysgcc_text"], "ol8_baseos_latest", True),
        ("kernel", "4.18.0", "553.16.1.0.1.el8_10", OSES["ol8"]["sysgcc_text"], "ol8_baseos_latest", True),
    ],
    "ol9": [
        ("kernel-uek", "5.15.0", "206.153.7.el9uek", UEK9_GCC, "ol9_UEKR7", True),
        ("kernel-uek", "6.12.0", "100.28.2.2.el9uek", UEKR8_GCC, "ol9_UEKR8", True),
        ("kernel", "5.14.0", "427.13.1.0.1.el9_4", OSES["ol9"]["sysgcc_text"], "ol9_baseos_latest", True),
    ],
    # OL10: UEK8 only (ol10_UEKR8), and RHCK 6.12.0-55 (ol10_baseos_latest); an older UEK8
    # too, for the kernel-added and guard cases.
    "ol10": [
        ("kernel-uek", "6.12.0", "100.28.2.2.el10uek", OSES["ol10"]["sysgcc_text"], "ol10_UEKR8", True),
        ("kernel-uek", "6.12.0", "103.40.4.3.el10uek", OSES["ol10"]["sysgcc_text"], "ol10_UEKR8", True),
        # OL 10.1's UEK8, only in rpms/extra/ and without headers anywhere (the kernel guard).
        ("kernel-uek", "6.12.0", "105.51.5.el10uek", OSES["ol10"]["sysgcc_text"], "extra", False),
        ("kernel", "6.12.0", "55.9.1.0.1.el10_0", OSES["ol10"]["sysgcc_text"], "ol10_baseos_latest", True),
    ],
    # aarch64: the UEK only (Oracle ships no RHCK for aarch64), in its 4k build and its 64k-page
    # build kernel-uek64k (`uname -r` `<ver>-<rel>.el9uek.aarch64.64k`; OL9 from UEK R7U3, OL10's
    # UEK8): FIDELITY.md. UEK R7U3 on OL9 is built with the system gcc 11.
    "ol9-aarch64": [
        ("kernel-uek", "5.15.0", "306.177.4.1.el9uek", UEK9_GCC, "ol9_UEKR7", True),
        ("kernel-uek64k", "5.15.0", "306.177.4.1.el9uek", UEK9_GCC, "ol9_UEKR7", True),
    ],
    "ol10-aarch64": [
        ("kernel-uek", "6.12.0", "103.40.4.3.el10uek", OSES["ol10"]["sysgcc_text"], "ol10_UEKR8", True),
        ("kernel-uek64k", "6.12.0", "103.40.4.3.el10uek", OSES["ol10"]["sysgcc_text"], "ol10_UEKR8", True),
    ],
}


def rhel_release(rel):
    """RHEL's kernel release of an Oracle RHCK release: Oracle's `.0.<n>` before the dist tag
    removed (553.16.1.0.1.el8_10 -> 553.16.1.el8_10)."""
    head, dist = rel.rsplit(".el", 1)
    parts = head.split(".")
    if len(parts) > 3 and parts[-2] == "0":
        parts = parts[:-2]
    return ".".join(parts) + ".el" + dist


def gcc_version_num(text):
    v = text.split()[2]
    a, b, c = (int(x) for x in v.split("."))
    return a * 10000 + b * 100 + c


# Flags the kernel's build passes to the compiler, by the GCC major that built the kernel, and
# what the synthetic gcc knows of them: Red Hat's GCC 11 carries -ftrivial-auto-var-init
# (UEK7 and RHEL 9 kernels use it; gcc 8.5 fails on it: openzfs #13625, dkms #299), GCC 14 adds
# -fmin-function-alignment (6.12 kernels built with gcc 14 pass it).
KERNEL_FLAGS = [("-ftrivial-auto-var-init=zero", 11), ("-fmin-function-alignment=16", 14)]


def kbuild_makefile(uname, gcc_major):
    flags = " ".join(f for f, m in KERNEL_FLAGS if gcc_major >= m)
    return (f"# Synthetic kbuild of the gpuhost test world for {uname}.\n"
            "# `make -C <this dir> M=<module dir> modules` compiles each obj-m of M/Kbuild with $(CC)\n"
            "# and the flags of the compiler that built this kernel, then links it from the module's\n"
            "# shipped object (M/<name>.o_binary, like NVIDIA's nv-kernel.o_binary).\n"
            f"KERNELRELEASE = {uname}\n"
            "CC = gcc\n"
            f"KBUILD_CFLAGS = -O2 {flags}\n"
            "modules:\n"
            "\t@test -n \"$(M)\" || { echo \"synthetic kbuild: M= is missing\" >&2; exit 2; }\n"
            "\t@set -e; for o in $$(sed -n 's/^obj-m[ :+]*= *//p' $(M)/Kbuild); do m=$${o%.o}; \\\n"
            "\t  echo \"  CC [M]  $(M)/$$m.o\"; $(CC) $(KBUILD_CFLAGS) -c $(M)/$$m.c -o $(M)/$$m.o; \\\n"
            "\t  echo \"  LD [M]  $(M)/$$m.ko\"; cp $(M)/$$m.o_binary $(M)/$$m.ko; done\n")


def module_sig_hash(name, rel):
    """CONFIG_MODULE_SIG_HASH of the real kernels (FIDELITY.md: /boot/config-* of OL 8.6
    4.18.0-372.9.1.el8, Rocky 8.10 4.18.0-553.el8_10 = sha256; RHEL 9.2 5.14.0-284.11.1.el9_2,
    AlmaLinux 9.3 = sha512; OL 8.7/8.8 UEK7 5.15.0-*.el8uek = sha512; oracle/linux-uek
    uek-rpm/ol9/config-x86_64 (5.15 and 6.12) = CONFIG_MODULE_SIG_SHA512). DKMS signs with it."""
    if name.startswith("kernel-uek"):
        return "sha512"
    return "sha256" if ".el8" in rel else "sha512"


def module_sig_config(hash_):
    lines = ["CONFIG_MODULE_SIG=y", "# CONFIG_MODULE_SIG_FORCE is not set", "CONFIG_MODULE_SIG_ALL=y"]
    for h in ("sha1", "sha224", "sha256", "sha384", "sha512"):
        opt = f"CONFIG_MODULE_SIG_{h.upper()}"
        lines.append(f"{opt}=y" if h == hash_ else f"# {opt} is not set")
    lines.append(f'CONFIG_MODULE_SIG_HASH="{hash_}"')
    return "\n".join(lines) + "\n"


# The kernel's sign-file (scripts/sign-file in kernel-devel, what RHEL's "Signing kernel modules
# for Secure Boot", NVIDIA's dnf-kmod-nvidia.spec and DKMS use): the real binary of the build
# host's Debian linux-kbuild package (its libcrypto goes into openssl-libs via host_libs()).
# Debian's openssl reads OPENSSLDIR/openssl.cnf (`openssl version -d`).
OPENSSLDIR = (subprocess.run(["openssl", "version", "-d"], stdout=subprocess.PIPE, text=True).stdout
              .split('"')[1:2] or ["/usr/lib/ssl"])[0]
OPENSSL_CNF = os.path.realpath(os.path.join(OPENSSLDIR, "openssl.cnf"))
SIGN_FILE = next((f for f in ["/usr/lib/linux-kbuild-6.1/scripts/sign-file",
                              *sorted(glob.glob("/usr/lib/linux-kbuild-*/scripts/sign-file")),
                              *sorted(glob.glob("/usr/src/kernels/*/scripts/sign-file"))]
                  if os.access(f, os.X_OK)), None)


def kernel_pkgs(os_, name, ver, rel, gcc_text, with_devel):
    arch = arch_of(os_)
    # UEK 64k (kernel-uek.spec: KernelVer=%{version}-%{release}.%{_target_cpu}.64k)
    page64k = name.endswith("64k")
    uname = f"{ver}-{rel}.{arch}" + (".64k" if page64k else "")
    evr_ = f"{ver}-{rel}"
    split = ver.startswith("6.12")   # UEK8: modules in kernel-uek-modules-* (UEK8 release notes)
    gmaj = gcc_version_num(gcc_text) // 10000
    pages = ""
    if arch == "aarch64":
        pages = "CONFIG_ARM64_64K_PAGES=y\n" if page64k else "CONFIG_ARM64_4K_PAGES=y\n"
    cfg = (f"# Automatically generated file; DO NOT EDIT.\n"
           f"# Linux/{'arm64' if arch == 'aarch64' else arch} {uname} Kernel Configuration\n"
           f'CONFIG_CC_VERSION_TEXT="{gcc_text}"\n'
           f"CONFIG_CC_IS_GCC=y\nCONFIG_GCC_VERSION={gcc_version_num(gcc_text)}\n"
           f"CONFIG_MODULES=y\n" + pages + module_sig_config(module_sig_hash(name, rel)) +
           "CONFIG_MODULE_COMPRESS_XZ=y\n")
    # Like the real kernel packages (kernel.spec / kernel-uek.spec %files), the kernel itself
    # ships its configuration as /boot/config-<kver>, so the compiler that built it is known
    # before its headers are installed.
    core_files = {f"/lib/modules/{uname}/vmlinuz": f"synthetic kernel {uname}\n",
                  f"/lib/modules/{uname}/modules.dep": "kernel/drivers/dummy.ko.xz:\n",
                  f"/lib/modules/{uname}/modules.order": "",
                  f"/lib/modules/{uname}/modules.builtin": "",
                  f"/boot/vmlinuz-{uname}": f"synthetic kernel {uname}\n",
                  f"/boot/System.map-{uname}": "ffffffff81000000 T _text\n",
                  f"/boot/config-{uname}": cfg}
    core_links = {f"/lib/modules/{uname}/build": f"/usr/src/kernels/{uname}"}
    provides = [f"kernel-uname-r = {uname}", "installonlypkg(kernel)",
                f"kernel-core = {evr_}", f"kernel-modules = {evr_}"]
    if arch == "aarch64":
        # kernel-uek.spec %kernel_reqprovconf: on aarch64 the UEK also provides the RHCK names.
        provides.append(f"kernel = {evr_}")
    out = []
    if split:
        core_files[f"/lib/modules/{uname}/modules.packages"] = (
            "kernel/drivers/net/wireless/ti/wl1251/wl1251_sdio.ko.xz kernel-uek-modules-wireless\n")
        out.append(Pkg(f"{name}-core", ver, rel, files=core_files, links=core_links,
                       provides=provides))
        out.append(Pkg(f"{name}-modules-core", ver, rel,
                       files={f"/lib/modules/{uname}/kernel/drivers/dummy.ko.xz": "synthetic\n"},
                       requires=[f"{name}-core = {evr_}"], provides=["installonlypkg(kernel)"]))
        out.append(Pkg(f"{name}-modules", ver, rel,
                       files={f"/lib/modules/{uname}/kernel/drivers/dummy2.ko.xz": "synthetic\n"},
                       requires=[f"{name}-modules-core = {evr_}"], provides=["installonlypkg(kernel)"]))
        # kernel-uek itself is a meta package without files
        out.append(Pkg(name, ver, rel, requires=[f"{name}-core = {evr_}", f"{name}-modules-core = {evr_}",
                                                 f"{name}-modules = {evr_}"],
                       provides=["installonlypkg(kernel)"]))
    else:
        out.append(Pkg(name, ver, rel, files=core_files, links=core_links, provides=provides))
    if with_devel:
        req = []
        if split and name == "kernel-uek" and gcc_text != OSES[base_of(os_)]["sysgcc_text"]:
            req = [f"gcc-toolset-{gmaj}-gcc"]   # kernel-uek-devel pulls the toolset in (NVIDIA's OL page)
        dprov = [f"kernel-devel-uname-r = {uname}", "installonlypkg(kernel)"]
        if arch == "aarch64":
            # kernel-uek.spec %kernel_devel_package: kernel%{?variant}-devel-uname-r = %{KVERREL}
            # %{?1:.%{1}} (the 64k build's too: kernel-uek-devel-uname-r = ….aarch64.64k), and on
            # aarch64 the RHCK name kernel-devel.
            dprov += [f"kernel-uek-devel-uname-r = {uname}", f"kernel-devel = {evr_}"]
        out.append(Pkg(f"{name}-devel", ver, rel,
                       files={f"/usr/src/kernels/{uname}/Makefile": kbuild_makefile(uname, gmaj),
                              f"/usr/src/kernels/{uname}/.config": cfg,
                              f"/usr/src/kernels/{uname}/include/generated/utsrelease.h":
                              f'#define UTS_RELEASE "{uname}"\n'},
                       copies={f"/usr/src/kernels/{uname}/scripts/sign-file": tool_path(arch, "sign-file")},
                       modes={f"/usr/src/kernels/{uname}/scripts/sign-file": 0o755},
                       requires=req,  # like kernel.spec: AutoReqProv: no (sign-file's libcrypto is not required)
                       provides=dprov))
    return out


def gcc_script(text, prog="gcc"):
    """A synthetic compiler: prints its version like gcc, refuses the kernel flags it is too old
    for with gcc's own error, and "compiles" (writes an empty object) otherwise."""
    v = text.split()[2]
    major = int(v.split(".")[0])
    spelled = "command-line" if major >= 10 else "command line"
    checks = "".join(
        f"    {flag.split('=')[0]}=*) [ {major} -ge {m} ] || {{ echo \"{prog}: error: unrecognized {spelled} option '$a'\" >&2; exit 1; }} ;;\n"
        for flag, m in KERNEL_FLAGS)
    return (f"#!/bin/sh\n# synthetic compiler of the gpuhost test world\n# version={v}\n"
            f"case \"$1\" in --version) echo '{text}'; exit 0;; -dumpversion) echo {major}; exit 0;; esac\n"
            "out=''; prev=''\n"
            "for a in \"$@\"; do\n  case \"$a\" in\n" + checks + "  esac\n"
            "  [ \"$prev\" = -o ] && out=$a\n  prev=$a\ndone\n"
            "[ -n \"$out\" ] && : > \"$out\"\nexit 0\n")


def os_release_files(os_):
    o = OSES[os_]
    v = f"{o['major']}.{o['minor']}"
    osr = (f'NAME="Oracle Linux Server"\nVERSION="{v}"\nID="ol"\nID_LIKE="fedora"\n'
           f'VARIANT="Server"\nVARIANT_ID="server"\nVERSION_ID="{v}"\n'
           f'PLATFORM_ID="platform:el{o["major"]}"\nPRETTY_NAME="Oracle Linux Server {v}"\n'
           f'ANSI_COLOR="0;31"\nCPE_NAME="cpe:/o:oracle:linux:{o["major"]}:{o["minor"]}:server"\n'
           f'HOME_URL="https://linux.oracle.com/"\nBUG_REPORT_URL="https://github.com/oracle/oracle-linux"\n\n'
           f'ORACLE_BUGZILLA_PRODUCT="Oracle Linux {o["major"]}"\n'
           f'ORACLE_BUGZILLA_PRODUCT_VERSION={v}\nORACLE_SUPPORT_PRODUCT="Oracle Linux"\n'
           f'ORACLE_SUPPORT_PRODUCT_VERSION={v}\n')
    rh = "Ootpa" if o["major"] == "8" else "Plow"
    return dict(files={
        "/etc/os-release": osr,
        "/etc/oracle-release": f"Oracle Linux Server release {v}\n",
        "/etc/redhat-release": f"Red Hat Enterprise Linux release {v} ({rh})\n",
        "/etc/system-release-cpe": f"cpe:/o:oracle:linux:{o['major']}:{o['minor']}:server\n",
    }, links={"/etc/system-release": "oracle-release"},
        provides=[f"system-release = {v}", f"redhat-release = {v}",
                  f"system-release(releasever) = {o['major']}"])


def unit(desc, exe, after="network-online.target"):
    return (f"[Unit]\nDescription={desc}\nAfter={after}\n\n[Service]\nType=simple\n"
            f"ExecStart={exe}\n\n[Install]\nWantedBy=multi-user.target\n")


def docker_pkgs(dist):
    pk = []
    for v in ("26.1.3", "27.3.1"):
        pk.append(Pkg("docker-ce", v, f"1.{dist}", epoch=3,
                      files={"/usr/bin/dockerd": f"#!/bin/sh\necho dockerd {v}\n",
                             "/usr/lib/systemd/system/docker.service":
                             unit("Docker Application Container Engine", "/usr/bin/dockerd -H fd://",
                                  "network-online.target containerd.service")},
                      requires=["containerd.io >= 1.6.24", "docker-ce-cli"]))
        pk.append(Pkg("docker-ce-cli", v, f"1.{dist}", epoch=1,
                      files={"/usr/bin/docker": f"#!/bin/sh\necho Docker version {v}\n"}))
    for v in ("1.6.32", "1.7.22"):
        pk.append(Pkg("containerd.io", v, f"3.1.{dist}",
                      files={"/usr/bin/containerd": f"#!/bin/sh\necho containerd {v}\n",
                             "/usr/bin/runc": "#!/bin/sh\necho runc 1.1.14\n",
                             "/usr/lib/systemd/system/containerd.service":
                             unit("containerd container runtime", "/usr/bin/containerd")},
                      provides=["containerd", "runc"], obsoletes=["containerd", "runc"]))
    pk.append(Pkg("docker-buildx-plugin", "0.17.1", f"1.{dist}",
                  files={"/usr/libexec/docker/cli-plugins/docker-buildx": "#!/bin/sh\n"}))
    pk.append(Pkg("docker-compose-plugin", "2.29.7", f"1.{dist}",
                  files={"/usr/libexec/docker/cli-plugins/docker-compose": "#!/bin/sh\n"}))
    return pk


def nct_pkgs():
    pk = []
    for v in ("1.17.7", "1.17.8", "1.18.0"):
        pk += [
            Pkg("libnvidia-container1", v, "1",
                files={"/usr/lib64/libnvidia-container.so.1": f"libnvidia-container {v}\n"}),
            Pkg("libnvidia-container-tools", v, "1",
                files={"/usr/bin/nvidia-container-cli": f"#!/bin/sh\necho cli-version: {v}\n"},
                requires=[f"libnvidia-container1 = {v}-1"]),
            Pkg("nvidia-container-toolkit-base", v, "1",
                files={"/usr/bin/nvidia-ctk": f"#!/bin/sh\necho NVIDIA Container Toolkit CLI version {v}\n",
                       "/usr/bin/nvidia-container-runtime": "#!/bin/sh\n"}),
            Pkg("nvidia-container-toolkit", v, "1",
                files={"/usr/bin/nvidia-container-runtime-hook": "#!/bin/sh\n"}
                | ({"/usr/bin/nvidia-cdi-refresh": "#!/bin/sh\n"} if v >= "1.18" else {}),
                requires=[f"nvidia-container-toolkit-base = {v}-1",
                          f"libnvidia-container-tools = {v}-1"]),
        ]
    return pk


def cuda_network_pkgs(dist):
    pk = [
        Pkg("libnccl", "2.21.5", "1+cuda12.4",
            files={"/usr/lib64/libnccl.so.2.21.5": "synthetic libnccl 2.21.5\n"},
            links={"/usr/lib64/libnccl.so.2": "libnccl.so.2.21.5"}),
        Pkg("libnccl-devel", "2.21.5", "1+cuda12.4",
            files={"/usr/include/nccl.h": "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n",
                   "/usr/include/nccl_net.h": "/* synthetic */\n",
                   "/usr/lib64/libnccl_static.a": "!<arch>\n"},
            links={"/usr/lib64/libnccl.so": "libnccl.so.2"},
            requires=["libnccl = 2.21.5-1+cuda12.4"]),
        Pkg("libcudnn8", "8.9.7.29", "1.cuda12.2",
            files={"/usr/lib64/libcudnn.so.8.9.7": "synthetic libcudnn 8.9.7\n"},
            links={"/usr/lib64/libcudnn.so.8": "libcudnn.so.8.9.7"}),
        Pkg("libcudnn8-devel", "8.9.7.29", "1.cuda12.2",
            files={"/usr/include/cudnn.h": "#include \"cudnn_version.h\"\n",
                   "/usr/include/cudnn_version.h": "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 9\n#define CUDNN_PATCHLEVEL 7\n",
                   "/usr/lib64/libcudnn_static.a": "!<arch>\n"},
            links={"/usr/lib64/libcudnn.so": "libcudnn.so.8"},
            requires=["libcudnn8 = 8.9.7.29-1.cuda12.2"]),
    ]
    for v in ("535.104.05", "550.54.15", "550.90.07"):
        pk.append(fm_pkg(v, dist))
    return pk


def fm_pkg(v, dist, name="nvidia-fabric-manager"):
    return Pkg(name, v, "1",
               files={"/usr/bin/nv-fabricmanager": f"#!/bin/sh\necho Fabric Manager version is : {v}\n",
                      "/usr/share/nvidia/nvswitch/fabricmanager.cfg": "LOG_LEVEL=4\n",
                      "/usr/lib/systemd/system/nvidia-fabricmanager.service":
                      unit("NVIDIA fabric manager service", "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg")})


# A mirror that goes away inside the rpm transaction (an NFS export unmounted, a sync that swaps
# the directory), injected by tests/transaction.rs: while /etc/gpuhost-world/lose-mirror exists,
# bash's %post (early in a fresh root's transaction) and nvidia-kmod-common's %pre (in a driver
# swap) move the root's mirrors (/srv/repos) and its folder of driver packages (/srv/drivers)
# away; rpm then opens the packages it installs later from where they no longer are.
LOSE_MIRROR = ("[ ! -e /etc/gpuhost-world/lose-mirror ] || for d in /srv/repos /srv/drivers; do "
               "[ ! -d $d ] || mv $d $d.lost; done\n")


# /bin/<applet> -> busybox. In a chroot busybox cannot re-exec itself via /proc/self/exe, so
# the applets the scriptlets use in $(...) must exist as real commands on PATH.
BUSYBOX_APPLETS = ["sh", "sed", "head", "tail", "cat", "cp", "mv", "rm", "mkdir", "rmdir", "ls",
                   "ln", "grep", "cut", "tr", "sort", "touch", "chmod", "basename", "dirname",
                   "find", "echo", "test", "true", "false", "env", "uname", "mktemp", "readlink",
                   "awk", "wc", "date", "id", "xargs", "stat", "diff", "cmp", "realpath", "expr",
                   "tee", "printf", "sleep", "od", "tar", "cpio", "patch", "uniq", "nproc", "which"]

# Real Debian binaries the world ships so that the real upstream DKMS runs inside roots (it is
# a bash script that needs make, kmod's depmod/modinfo, strip and xz): (package, version, path in
# the root, host path). Their shared libraries go into the packages Oracle Linux keeps them in
# (LIB_PACKAGES), under /lib/x86_64-linux-gnu where Debian's loader looks for them.
HOST_TOOLS = {
    "make": [("/usr/bin/make", "/usr/bin/make")],
    "kmod": [("/usr/bin/kmod", "/usr/bin/kmod")],
    "xz": [("/usr/bin/xz", "/usr/bin/xz")],
    "cpio": [("/usr/bin/cpio", "/usr/bin/cpio")],
    "binutils": [("/usr/bin/strip", "/usr/bin/strip")],
    "bash": [("/bin/bash", "/bin/bash")],
    # DKMS 3.x makes its MOK key pair with `openssl req` when none is configured
    "openssl": [("/usr/bin/openssl", "/usr/bin/openssl")],
    # not a package of its own: kernel-devel ships it (kernel_pkgs); listed for its libraries
    "kernel-devel": [("/usr/src/kernels/<kver>/scripts/sign-file", SIGN_FILE)],
}
LIB_PACKAGES = [("libc.so", "glibc"), ("ld-linux", "glibc"), ("libdl.so", "glibc"), ("libm.so", "glibc"),
                ("libtinfo", "ncurses-libs"), ("liblzma", "xz-libs"), ("libzstd", "libzstd"),
                ("libcrypto", "openssl-libs"), ("libssl", "openssl-libs"), ("libz.so", "zlib"),
                ("libbfd", "binutils"),
                ("libsframe", "binutils")]


# The same tools in Debian's arm64 userspace (ARM64, unpacked .debs): (path there) per tool.
ARM64_TOOLS = {"/usr/bin/make": "/usr/bin/make", "/usr/bin/kmod": "/bin/kmod", "/usr/bin/xz": "/usr/bin/xz",
               "/usr/bin/strip": "/usr/bin/aarch64-linux-gnu-strip", "/bin/bash": "/bin/bash",
               "/usr/bin/openssl": "/usr/bin/openssl", "/usr/bin/cpio": "/bin/cpio",
               "sign-file": "/usr/lib/linux-kbuild-6.1/scripts/sign-file", "busybox": "/bin/busybox"}


def tool_path(arch, tool):
    """The file a root of `arch` gets for `tool` (a path in the root, or sign-file, busybox)."""
    if arch == "x86_64":
        return {"sign-file": SIGN_FILE, "busybox": BUSYBOX}.get(tool, os.path.realpath(tool))
    return os.path.realpath(ARM64 + ARM64_TOOLS[tool])


def lib_dest(arch, name):
    if name.startswith("ld-linux"):
        return ("/lib64/" if arch == "x86_64" else "/lib/") + name
    return f"/lib/{arch}-linux-gnu/{name}"


def needed_arm64(path, seen):
    """The shared libraries an aarch64 ELF file needs, found in ARM64 (readelf's NEEDED,
    recursively; no aarch64 loader runs at world build)."""
    r = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE, text=True, check=True)
    for line in r.stdout.splitlines():
        if "(NEEDED)" not in line:
            continue
        name = line.split("[", 1)[1].rstrip("]")
        if name in seen:
            continue
        for d in ("/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib"):
            f = ARM64 + d + "/" + name
            if os.path.exists(f):
                seen[name] = os.path.realpath(f)
                needed_arm64(seen[name], seen)
                break
        else:
            raise SystemExit(f"gen.py: {name} (needed by {path}) is not in {ARM64}")
    return seen


def host_libs(arch="x86_64"):
    """{package: {root path: host path}} for the libraries HOST_TOOLS need (x86_64: from ldd;
    aarch64: from readelf in Debian's arm64 userspace)."""
    out = {}
    found = {}
    for tools in HOST_TOOLS.values():
        for root_path, host in tools:
            if arch != "x86_64":
                key = "sign-file" if root_path.endswith("/sign-file") else root_path
                needed_arm64(tool_path(arch, key), found)
                continue
            r = subprocess.run(["ldd", os.path.realpath(host)], stdout=subprocess.PIPE, text=True, check=True)
            for line in r.stdout.splitlines():
                parts = line.split()
                if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
                    name, path = parts[0], parts[2]
                elif parts and parts[0].startswith("/"):
                    name, path = os.path.basename(parts[0]), parts[0]
                else:
                    continue
                found[name] = os.path.realpath(path)
    for name, path in found.items():
        pkg = next((p for pre, p in LIB_PACKAGES if name.startswith(pre)), "glibc")
        out.setdefault(pkg, {})[lib_dest(arch, name)] = path
    return out


def base_pkgs(os_):
    """The release's repos (by repo id). `os_` is a world release (`ol9`, `ol9-aarch64`)."""
    arch = arch_of(os_)
    oid = base_of(os_)
    o = OSES[oid]
    d = o["dist"]
    m = o["major"]
    relmap = {"ol8": ("8.10", "1.0.6.el8"), "ol9": ("9.4", "1.0.2.el9"), "ol10": ("10.0", "1.0.2.el10")}
    rv, rr = relmap[oid]
    repos = {f"{oid}_baseos_latest": [], f"{oid}_appstream": [],
             f"{oid}_developer_EPEL": [], "extra": []}
    if m != "10":
        repos[f"{oid}_UEKR7"] = []
    if m != "8":
        repos[f"{oid}_UEKR8"] = []
    base, app = repos[f"{oid}_baseos_latest"], repos[f"{oid}_appstream"]
    base.append(Pkg("oraclelinux-release", rv, rr, **os_release_files(oid)))
    libs = host_libs(arch)
    tool = lambda t: tool_path(arch, t)
    lib_pkgs = {"glibc": ("2.28" if m == "8" else "2.34", f"251.0.1.{d}" if m == "8" else f"100.0.1.{d}"),
                "ncurses-libs": ("6.1", f"10.20180224.{d}" if m == "8" else f"10.20210508.{d}"),
                "xz-libs": ("5.2.4" if m == "8" else "5.2.5", f"4.{d}" if m == "8" else f"8.{d}"),
                "libzstd": ("1.4.4" if m == "8" else "1.5.1", f"1.{d}" if m == "8" else f"2.{d}"),
                "openssl-libs": ("1.1.1k" if m == "8" else "3.0.7", f"12.{d}_9" if m == "8" else f"27.0.1.{d}"),
                "zlib": ("1.2.11", f"25.{d}" if m == "8" else f"40.{d}")}
    if m == "10":
        # RHEL/OL 10.0's versions.
        lib_pkgs.update({"glibc": ("2.39", f"37.0.1.{d}"), "ncurses-libs": ("6.4", f"14.20240127.{d}"),
                         "xz-libs": ("5.6.2", f"3.{d}"), "libzstd": ("1.5.5", f"9.{d}"),
                         "openssl-libs": ("3.2.2", f"16.0.1.{d}"), "zlib-ng-compat": ("2.2.3", f"1.{d}")})
        del lib_pkgs["zlib"]
    for pkg, (v, r) in lib_pkgs.items():
        extra = {"/etc/ld.so.conf": "include ld.so.conf.d/*.conf\n"} if pkg == "glibc" else {}
        links = {}
        if pkg == "openssl-libs":
            # OL's openssl-libs ships /etc/pki/tls/openssl.cnf; Debian's binaries read it from
            # their OPENSSLDIR (/usr/lib/ssl), linked to the OL path.
            extra = {"/etc/pki/tls/openssl.cnf": open(OPENSSL_CNF).read()}
            links = {f"{OPENSSLDIR}/openssl.cnf": "/etc/pki/tls/openssl.cnf"}
        base.append(Pkg(pkg, v, r, epoch=1 if pkg == "openssl-libs" else None,
                        copies=libs.get("zlib" if pkg == "zlib-ng-compat" else pkg, {}), files=extra,
                        links=links, modes={p: 0o755 for p in libs.get("zlib" if pkg == "zlib-ng-compat" else pkg, {})},
                        provides=["zlib"] if pkg == "zlib-ng-compat" else [],
                        requires=[] if pkg == "glibc" else ["glibc"]))
    # openssl (BaseOS): the real openssl binary (DKMS 3.x runs `openssl req` to make its MOK key
    # pair; NVIDIA's precompiled-kmod spec BuildRequires it).
    ov, orel = lib_pkgs["openssl-libs"]
    base.append(Pkg("openssl", ov, orel, epoch=1, copies={"/usr/bin/openssl": tool("/usr/bin/openssl")},
                    requires=[f"openssl-libs = 1:{ov}-{orel}", "glibc"]))
    # bash: the real (Debian) bash, and a static busybox for /bin/sh and the small tools.
    base.append(Pkg("bash", {"8": "4.4.20", "9": "5.1.8", "10": "5.2.26"}[m], {"8": f"5.{d}", "9": f"9.{d}", "10": f"6.{d}"}[m],
                    copies={"/bin/busybox": tool("busybox"), "/bin/bash": tool("/bin/bash")},
                    links={f"/bin/{a}": "busybox" for a in BUSYBOX_APPLETS},
                    provides=["/bin/sh", "/bin/bash"], requires=["glibc", "ncurses-libs"],
                    # The first scriptlet a fresh root's transaction can run (every other one
                    # needs /bin/sh): the mirror lost early in a first converge.
                    scripts={"post": LOSE_MIRROR}))
    # systemd: the targets every unit hangs off (systemd-analyze verify --root needs them).
    base.append(Pkg("systemd", {"8": "239", "9": "252", "10": "257"}[m], {"8": f"82.0.1.{d}", "9": f"32.0.1.{d}", "10": f"9.0.1.{d}"}[m],
                    files={f"/usr/lib/systemd/system/{t}.target": f"[Unit]\nDescription={t} (synthetic)\n"
                           for t in ("sysinit", "basic", "multi-user", "timers", "network-online",
                                     "shutdown", "default")}))
    base.append(Pkg("make", {"8": "4.2.1", "9": "4.3", "10": "4.4.1"}[m], {"8": f"11.{d}", "9": f"8.{d}", "10": f"9.{d}"}[m], epoch=1,
                    copies={"/usr/bin/make": tool("/usr/bin/make")}, requires=["glibc"]))
    base.append(Pkg("kmod", {"8": "25", "9": "28", "10": "31"}[m], {"8": f"20.{d}", "9": f"9.{d}", "10": f"8.{d}"}[m],
                    copies={"/usr/bin/kmod": tool("/usr/bin/kmod")},
                    links={f"/usr/sbin/{t}": "../bin/kmod" for t in ("depmod", "modinfo", "modprobe", "insmod",
                                                                     "rmmod", "lsmod")},
                    requires=["glibc", "xz-libs", "libzstd", "openssl-libs"]))
    base.append(Pkg("xz", "5.2.4" if m == "8" else "5.2.5", f"4.{d}" if m == "8" else f"8.{d}",
                    copies={"/usr/bin/xz": tool("/usr/bin/xz")}, requires=["xz-libs"]))
    # cpio (BaseOS), as Oracle Linux's BaseOS has it.
    base.append(Pkg("cpio", {"8": "2.12", "9": "2.13", "10": "2.15"}[m], {"8": f"11.{d}", "9": f"16.{d}", "10": f"3.{d}"}[m],
                    copies={"/usr/bin/cpio": tool("/usr/bin/cpio")}, requires=["glibc"]))
    (base if m == "8" else app).append(
        Pkg("binutils", {"8": "2.30", "9": "2.35.2", "10": "2.41"}[m], {"8": f"123.0.1.{d}", "9": f"43.0.1.{d}", "10": f"53.0.1.{d}"}[m],
            copies={"/usr/bin/strip": tool("/usr/bin/strip"), **libs.get("binutils", {})},
            modes={p: 0o755 for p in libs.get("binutils", {})}, requires=["glibc", "zlib", "libzstd"]))
    base.append(Pkg("infiniband-diags", "48.0" if m == "8" else "51.0", f"1.{d}",
                    files={"/usr/sbin/ibstat": "#!/bin/sh\necho 'CA mlx5_0'\n"}))
    elf = Pkg("elfutils-libelf-devel", "0.190", f"2.{d}" if m == "8" else f"2.{d}",
              files={"/usr/include/libelf.h": "/* synthetic */\n"})
    (base if m == "8" else app).append(elf)
    gv, gr = o["sysgcc"], o["sysgcc_rel"]
    app.append(Pkg("gcc", gv, gr, files={"/usr/bin/gcc": gcc_script(o["sysgcc_text"])},
                   requires=["binutils"]))
    app.append(Pkg("gcc-c++", gv, gr, files={"/usr/bin/g++": gcc_script(o["sysgcc_text"], "g++")},
                   requires=[f"gcc = {gv}-{gr}"]))
    toolsets = ((("11", "11.2.1", "9.1.0.2.el8", "gcc (GCC) 11.2.1 20220127 (Red Hat 11.2.1-9.1.0.2)"),
                 ("13", "13.2.1", "6.0.1.el8", "gcc (GCC) 13.2.1 20231205 (Red Hat 13.2.1-6.0.1)")) if m == "8"
                else (("14", "14.2.1", "7.el9", UEKR8_GCC),) if m == "9" else ())
    for n, v, r, txt in toolsets:
        # gcc-toolset-N-runtime ships the `enable` script that puts the toolset first on PATH.
        app.append(Pkg(f"gcc-toolset-{n}-runtime", n, f"1.{d}",
                       files={f"/opt/rh/gcc-toolset-{n}/enable":
                              f"# General environment variables\nexport PATH=/opt/rh/gcc-toolset-{n}/root/usr/bin${{PATH:+:${{PATH}}}}\n"}))
        app.append(Pkg(f"gcc-toolset-{n}-gcc", v, r,
                       files={f"/opt/rh/gcc-toolset-{n}/root/usr/bin/gcc": gcc_script(txt)},
                       requires=[f"gcc-toolset-{n}-runtime", "binutils"]))
    # kernels, headers
    newest_rhck = None
    for (name, ver, rel, gtxt, repo, devel) in KERNELS[os_]:
        pk = kernel_pkgs(os_, name, ver, rel, gtxt, devel)
        repos[repo] += pk
        if name == "kernel":
            newest_rhck = (ver, rel)
            if m != "8":
                repos[repo].append(Pkg("kernel-devel-matched", ver, rel,
                                       requires=[f"kernel-devel = {ver}-{rel}", f"kernel-core = {ver}-{rel}"]))
    # kernel-headers (the userspace API headers) come from RHCK's source; aarch64 has no RHCK:
    # the world's aarch64 releases have none (nothing of gpuhost's installs it there).
    if newest_rhck:
        hv, hr = newest_rhck
        base.append(Pkg("kernel-headers", hv, hr,
                        files={"/usr/include/linux/version.h": "#define LINUX_VERSION_CODE 1\n",
                               "/usr/include/linux/types.h": "/* synthetic */\n"},
                        provides=[f"glibc-kernheaders = 3:{hv}-{hr}"]))
    # dkms (EPEL): the real upstream script (Debian's dkms package, version DKMS_VERSION), so
    # version and release say what it is.
    repos[f"{oid}_developer_EPEL"].append(
        Pkg("dkms", DKMS_VERSION, f"1.{d}", arch="noarch",
            copies={"/usr/sbin/dkms": "/usr/sbin/dkms"},
            files={"/etc/dkms/framework.conf": "# DKMS framework configuration (all defaults)\n",
                   "/etc/dkms/framework.conf.d/.keep": ""},
            modes={"/usr/sbin/dkms": 0o755},
            requires=["bash", "/bin/sh", "gcc", "make", "kmod", "xz", "binutils", "kernel-devel-uname-r"],
            # Fedora/EPEL dkms.spec since 3.0.10-2: "Recommend OpenSSL for MOK key management."
            recommends=["openssl"]))
    if m == "10":
        # dnf-plugins-core's versionlock plugin (BaseOS): NVIDIA's EL10 instructions hold a branch
        # with it. Its lock list is gpuhost's to write (the real package also ships an empty
        # %config(noreplace) versionlock.list; the world's builder has no %config).
        base.append(Pkg("python3-dnf-plugin-versionlock", "4.7.0", f"8.{d}", arch="noarch",
                        files={"/etc/dnf/plugins/versionlock.conf":
                               "[main]\nenabled = 1\nlocklist = /etc/dnf/plugins/versionlock.list\n"}))
    # container tools
    ct = []
    if m == "8":
        mr = "module+el8.10.0+90370+a83d1e6b"
        ct = [Pkg("podman", "4.9.4", f"12.0.1.{mr}", epoch=4,
                  files={"/usr/bin/podman": "#!/bin/sh\necho podman version 4.9.4\n"},
                  requires=["runc", "containers-common"]),
              Pkg("buildah", "1.33.8", f"4.{mr}", epoch=2,
                  files={"/usr/bin/buildah": "#!/bin/sh\n"}, requires=["runc", "containers-common"]),
              Pkg("runc", "1.1.12", f"4.{mr}", epoch=1,
                  files={"/usr/bin/runc": "#!/bin/sh\necho runc version 1.1.12\n"}),
              Pkg("containers-common", "1", f"82.0.1.{mr}", epoch=2,
                  files={"/etc/containers/policy.json": "{}\n"})]
    else:
        ct = [Pkg("podman", "4.9.4", f"10.0.1.{d}_4", epoch=4,
                  files={"/usr/bin/podman": "#!/bin/sh\necho podman version 4.9.4\n"},
                  requires=["runc", "containers-common"]),
              Pkg("buildah", "1.33.7", f"3.{d}_4", epoch=2,
                  files={"/usr/bin/buildah": "#!/bin/sh\n"}, requires=["runc", "containers-common"]),
              Pkg("runc", "1.1.12", f"4.{d}", epoch=4,
                  files={"/usr/bin/runc": "#!/bin/sh\necho runc version 1.1.12\n"}),
              Pkg("containers-common", "1", f"91.0.1.{d}_4", epoch=2,
                  files={"/etc/containers/policy.json": "{}\n"})]
    app += ct
    return repos, ct


def modules_container_tools(ct):
    arts = "\n".join(f"      - {p.nevra()}" for p in ct)
    return f"""---
document: modulemd
version: 2
data:
  name: container-tools
  stream: "ol8"
  version: 8100020240612095210
  context: d7b6f4b7
  arch: x86_64
  summary: Most recent (rolling) versions of podman, buildah, skopeo, runc, conmon, CRIU, Udica, etc
  description: >-
    Synthetic container-tools module of the gpuhost test world.
  license:
    module:
    - MIT
  dependencies:
  - buildrequires:
      platform: [el8.10.0]
    requires:
      platform: [el8]
  profiles:
    common:
      rpms:
      - buildah
      - containers-common
      - podman
      - runc
  api:
    rpms:
    - buildah
    - containers-common
    - podman
    - runc
  artifacts:
    rpms:
{arts}
...
---
document: modulemd-defaults
version: 1
data:
  module: container-tools
  stream: "ol8"
  profiles:
    ol8: [common]
...
"""


# --------------------------------------------------------------------------------------------
# NVIDIA driver (inner repos of the CUDA local repo packages)
# --------------------------------------------------------------------------------------------
# The NVIDIA packaging below follows NVIDIA's spec files (see FIDELITY.md for each element):
# NVIDIA/yum-packaging-dkms-nvidia (rhel8/rhel9: dkms-nvidia.spec, dkms-open-nvidia.spec,
# dkms-nvidia.conf), NVIDIA/yum-packaging-precompiled-kmod, NVIDIA/yum-packaging-nvidia-driver,
# NVIDIA/yum-packaging-nvidia-kmod-common, NVIDIA/gpu-driver-container (rhel8|9/install.sh).
NV_MODULES = ["nvidia", "nvidia-modeset", "nvidia-drm", "nvidia-uvm", "nvidia-peermem"]
KO_CACHE = {}


def ko_object(module, drv, flavour, arch="x86_64"):
    """A real ELF relocatable object whose .modinfo carries version=<drv>, built with the host's
    gcc (aarch64: assembled with binutils-aarch64-linux-gnu's as): the module "linked" by the
    world's kbuild (modinfo and depmod read it for real)."""
    key = (module, drv, flavour, arch)
    if key in KO_CACHE:
        return KO_CACHE[key]
    d = os.path.join(WORK, "ko", arch, flavour, drv)
    os.makedirs(d, exist_ok=True)
    lic = "Dual MIT/GPL" if flavour == "open" else "NVIDIA"
    info = f"version={drv}\\0license={lic}\\0description=NVIDIA {module} kernel module (gpuhost test world)\\0name={module.replace('-', '_')}\\0"
    obj = os.path.join(d, f"{module}.o")
    if arch == "aarch64":
        src = os.path.join(d, f"{module}.s")
        with open(src, "w") as f:
            f.write(f'\t.section .modinfo,"a"\n\t.ascii "{info}"\n\t.text\n'
                    "\t.globl init_module\ninit_module:\n\tmov w0, #0\n\tret\n"
                    "\t.globl cleanup_module\ncleanup_module:\n\tret\n")
        subprocess.run(["aarch64-linux-gnu-as", "-g", "-o", obj, src], check=True)
    else:
        src = os.path.join(d, f"{module}.c")
        with open(src, "w") as f:
            f.write(f'static const char modinfo[] __attribute__((section(".modinfo"), used, aligned(1))) = "{info}";\n'
                    f"int init_module(void) {{ return 0; }}\nvoid cleanup_module(void) {{ }}\n")
        subprocess.run(["gcc", "-c", "-O0", "-g", "-o", obj, src], check=True)
    KO_CACHE[key] = obj
    return obj


# The key pair standing in for NVIDIA's precompiled-kmod signing key (NVIDIA2019-public_key.der):
# made at world build with openssl (OUT/keys/), used with the kernel's sign-file like
# dnf-kmod-nvidia.spec's Source1 private_key.priv / Source2 public_key.der.
NV_KEY_CN = "NVIDIA test precompiled-kmod key (gpuhost world)"
NV_KEY_DER = os.path.join(OUT, "keys", "NVIDIA-test-public_key.der")
NV_KEY_PRIV = os.path.join(OUT, "keys", "NVIDIA-test-private_key.priv")
SIG_CACHE = {}


def nvidia_test_key():
    os.makedirs(os.path.dirname(NV_KEY_DER), exist_ok=True)
    subprocess.run(["openssl", "req", "-new", "-x509", "-nodes", "-days", "36500", "-subj", f"/CN={NV_KEY_CN}",
                    "-newkey", "rsa:2048", "-keyout", NV_KEY_PRIV, "-outform", "DER", "-out", NV_KEY_DER],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def precompiled_sig(module, drv):
    """The detached signature of a precompiled module, as dnf-kmod-nvidia.spec makes it:
    `sign-file sha256 key der <m>.ko <m>.ko.signed`, then the bytes after the module's size."""
    key = (module, drv)
    if key in SIG_CACHE:
        return SIG_CACHE[key]
    ko = ko_object(module, drv, "proprietary")
    d = os.path.join(WORK, "sig", drv)
    os.makedirs(d, exist_ok=True)
    signed = os.path.join(d, f"{module}.ko.signed")
    subprocess.run([SIGN_FILE, "sha256", NV_KEY_PRIV, NV_KEY_DER, ko, signed], check=True)
    sig = os.path.join(d, f"{module}.sig")
    with open(signed, "rb") as f, open(sig, "wb") as out:
        out.write(f.read()[os.path.getsize(ko):])
    SIG_CACHE[key] = sig
    return sig


def dkms_conf(drv):
    # The fields of NVIDIA's dkms-nvidia.conf, used by both flavours (the open spec copies it too).
    lines = ['PACKAGE_NAME="nvidia"', f'PACKAGE_VERSION="{drv}"', 'AUTOINSTALL="yes"', "",
             "MAKE[0]=\"'make' -j2 module SYSSRC=${kernel_source_dir} IGNORE_XEN_PRESENCE=1 "
             "IGNORE_PREEMPT_RT_PRESENCE=1 IGNORE_CC_MISMATCH=1\"", ""]
    for i, m in enumerate(NV_MODULES):
        lines += [f'BUILT_MODULE_NAME[{i}]="{m}"', f'DEST_MODULE_LOCATION[{i}]="/extra"', ""]
    return "\n".join(lines)


def nv_source_makefile(flavour):
    need_cxx = ("\t@command -v g++ >/dev/null 2>&1 || { echo '/bin/sh: g++: command not found'; exit 127; }\n"
                if flavour == "open" else "")
    return ("# NVIDIA kernel module source (gpuhost test world): dkms.conf runs\n"
            "# `make module SYSSRC=<kernel build dir>`, which builds through the kernel's kbuild.\n"
            "module modules:\n" + need_cxx +
            "\t$(MAKE) -C $(SYSSRC) M=$(CURDIR) modules\n"
            "clean:\n\trm -f *.o *.ko\n")


def dkms_pkg(drv, rel, flavour, E, arch="x86_64"):
    """kmod-nvidia-latest-dkms (DKMS name `nvidia`) or kmod-nvidia-open-dkms (`nvidia-open`)."""
    dname = "nvidia-open" if flavour == "open" else "nvidia"
    src = f"/usr/src/{dname}-{drv}"
    files = {f"{src}/dkms.conf": dkms_conf(drv), f"{src}/Makefile": nv_source_makefile(flavour),
             f"{src}/Kbuild": "".join(f"obj-m += {m}.o\n" for m in NV_MODULES)}
    copies = {}
    for m in NV_MODULES:
        files[f"{src}/{m}.c"] = f"/* {m}: kernel interface (gpuhost test world) */\n"
        copies[f"{src}/{m}.o_binary"] = ko_object(m, drv, flavour, arch)
    other = "kmod-nvidia-latest-dkms" if flavour == "open" else "kmod-nvidia-open-dkms"
    post = (f"dkms add -m {dname} -v {drv} -q || :\n"
            "# Rebuild and make available for the currently running kernel\n"
            f"dkms build -m {dname} -v {drv} -q || :\n"
            f"dkms install -m {dname} -v {drv} -q --force || :\n")
    preun = ("# Remove all versions from DKMS registry\n"
             f"dkms remove -m {dname} -v {drv} -q --all || :\n")
    return Pkg("kmod-nvidia-open-dkms" if flavour == "open" else "kmod-nvidia-latest-dkms", drv, rel, epoch=E,
               files=files, copies=copies,
               requires=["dkms", f"nvidia-kmod-common = {E}:{drv}"],
               # dkms-open-nvidia.spec: `Conflicts: kmod-nvidia-latest-dkms`; dkms-nvidia.spec
               # declares no conflict of its own.
               provides=[f"nvidia-kmod = {E}:{drv}"], conflicts=[other] if flavour == "open" else [],
               scripts={"post": post, "preun": preun})


def nvidia_inner(os_, drv):
    """Packages + modules.yaml of one local repo (driver version drv), by NVIDIA's packaging of
    that branch, built for the release's arch."""
    arch = arch_of(os_)
    d = OSES[base_of(os_)]["dist"]
    branch = int(drv.split(".")[0])
    rel = f"1.{d}"
    E = 3
    nvml = "libnvidia-ml" if branch >= 560 else "nvidia-driver-NVML"
    kmod_common_req = [f"nvidia-kmod = {E}:{drv}"] + ([f"nvidia-driver = {E}:{drv}"] if branch < 560 else []) \
        + (["nvidia-modprobe"] if branch >= 560 else [])
    fm_name = "nvidia-fabricmanager" if branch >= 580 else "nvidia-fabric-manager"
    common = [
        Pkg("nvidia-driver", drv, rel, epoch=E,
            files={f"/usr/lib64/nvidia/driver-{drv}": "synthetic\n"},
            requires=[f"nvidia-driver-libs = {E}:{drv}-{rel}", f"nvidia-kmod-common = {E}:{drv}"]),
        Pkg("nvidia-driver-libs", drv, rel, epoch=E,
            files={f"/usr/lib64/libnvidia-glcore.so.{drv}": "synthetic\n"},
            requires=[f"{nvml} = {E}:{drv}-{rel}"]),
        Pkg("nvidia-driver-cuda", drv, rel, epoch=E,
            files={"/usr/bin/nvidia-smi": f"#!/bin/sh\necho NVIDIA-SMI {drv}\n"},
            requires=[f"nvidia-driver-cuda-libs = {E}:{drv}-{rel}", f"nvidia-persistenced = {E}:{drv}-{rel}"]
            + ([f"nvidia-kmod-common = {E}:{drv}"] if branch >= 560 else [])),
        Pkg("nvidia-driver-cuda-libs", drv, rel, epoch=E,
            files={f"/usr/lib64/libcuda.so.{drv}": "synthetic\n"},
            links={"/usr/lib64/libcuda.so.1": f"libcuda.so.{drv}"},
            requires=[f"{nvml} = {E}:{drv}-{rel}"]),
        Pkg(nvml, drv, rel, epoch=E,
            files={f"/usr/lib64/libnvidia-ml.so.{drv}": "synthetic\n"},
            links={"/usr/lib64/libnvidia-ml.so.1": f"libnvidia-ml.so.{drv}"}),
        Pkg("nvidia-kmod-common", drv, rel, epoch=E, arch="noarch",
            files={"/usr/lib/modprobe.d/nvidia.conf":
                   "blacklist nouveau\n\nsoftdep nvidia post: nvidia-uvm nvidia-drm\n",
                   "/usr/lib/dracut/dracut.conf.d/99-nvidia.conf":
                   'omit_drivers+=" nvidia nvidia-drm nvidia-modeset nvidia-uvm nvidia-peermem "\n'},
            scripts={"pre": LOSE_MIRROR},
            requires=kmod_common_req),
        Pkg("nvidia-modprobe", drv, rel, epoch=E, files={"/usr/bin/nvidia-modprobe": "#!/bin/sh\n"}),
        # %pre fails while /etc/gpuhost-world/fail-pre exists: a transaction that stops
        # part-way (rpm installs the rest), injected by tests/upgrade.rs.
        Pkg("nvidia-persistenced", drv, rel, epoch=E,
            scripts={"pre": "[ ! -e /etc/gpuhost-world/fail-pre ] || { echo 'world: %pre of nvidia-persistenced fails (test)' >&2; exit 1; }\n"},
            files={"/usr/bin/nvidia-persistenced": "#!/bin/sh\n",
                   "/usr/lib/systemd/system/nvidia-persistenced.service":
                   unit("NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced --verbose", "syslog.target")}),
        Pkg("nvidia-settings", drv, rel, epoch=E, files={"/usr/bin/nvidia-settings": "#!/bin/sh\n"}),
        fm_pkg(drv, d, fm_name),
        Pkg("libnvidia-nscq" if branch >= 580 else f"libnvidia-nscq-{branch}", drv, "1",
            files={f"/usr/lib64/libnvidia-nscq.so.{drv}": "synthetic\n"}),
    ]
    if branch >= 550:
        common.append(Pkg("nvidia-imex" if branch >= 580 else f"nvidia-imex-{branch}", drv, "1",
                          files={"/usr/bin/nvidia-imex": "#!/bin/sh\n",
                                 "/etc/nvidia-imex/config.cfg": "NETWORK_INTERFACE=\n",
                                 "/usr/lib/systemd/system/nvidia-imex.service":
                                 unit("NVIDIA IMEX service", "/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg")}))
        common.append(Pkg("nvlsm", "2025.06.5", "1",
                          files={"/opt/nvidia/nvlsm/sbin/nvlsm": "#!/bin/sh\n",
                                 "/usr/share/nvidia/nvlsm/nvlsm.conf": "# nvlsm\n"},
                          requires=["infiniband-diags"]))
    dkms = dkms_pkg(drv, rel, "proprietary", E, arch)
    opend = dkms_pkg(drv, rel, "open", E, arch)
    pre = []
    modular = base_of(os_) != "ol10"   # EL10: NVIDIA's packages are not modular (FIDELITY.md)
    for (name, kv, okr, _g, _repo, _dev) in KERNELS[os_]:
        if name != "kernel" or not modular:
            continue
        # NVIDIA builds for RHEL's kernel of the same version, never for Oracle's rebuild: the
        # kmod names and requires RHEL's release (553.16.1.el8_10, not 553.16.1.0.1.el8_10), so
        # dnf finds none for an Oracle kernel, as on a real Oracle Linux host (FIDELITY.md).
        kr = rhel_release(okr)
        kshort = kr.rsplit(".", 1)[0]  # 553.16.1
        uname = f"{kv}-{kr}.x86_64"
        # dnf-kmod-nvidia.spec: the package ships the module objects and each module's detached
        # signature (<m>.sig, made at build with the kernel's sign-file, sha256, NVIDIA's key)
        # under %{kmod_o_dir}; %post links the modules into extra/drivers/video/nvidia/ (%ghost
        # files), appends the signatures (`cat <m>.sig >> <m>.ko`) and runs depmod. World: the
        # "linked" module is shipped whole under kmod_o_dir and %post copies it instead of ld.gold.
        kkver = f"{kv}-{kr}"   # %{kmod_kernel_version}
        o_dir = f"/usr/lib64/nvidia/x86_64-linux/{drv}/{kkver}"
        mod_dir = f"/lib/modules/{uname}/extra/drivers/video/nvidia"
        copies = {}
        for m in NV_MODULES:
            copies[f"{o_dir}/{m}.ko"] = ko_object(m, drv, "proprietary")
            copies[f"{o_dir}/{m}.sig"] = precompiled_sig(m, drv)
        mods = " ".join(NV_MODULES)
        post = (f"cd {o_dir}\nmkdir -p {mod_dir}\n"
                "# link the modules (NVIDIA: ld.gold from the shipped objects; world: a copy)\n"
                f"for m in {mods}; do\n\tcp {o_dir}/${{m}}.ko {mod_dir}/${{m}}.ko\ndone\n"
                "# Sign all the linked .ko files by just appending the signature made at build\n"
                f"for m in {mods}; do\n\tcat {o_dir}/${{m}}.sig >> {mod_dir}/${{m}}.ko\ndone\n"
                f"depmod -a {uname}\n")
        pre.append(Pkg(f"kmod-nvidia-{drv}-{kv}-{kshort}", drv, f"3.{kr.rsplit('.', 1)[1]}", epoch=E,
                       copies=copies, modes={p: 0o644 for p in copies},
                       ghosts=[f"{mod_dir}/{m}.ko" for m in NV_MODULES],
                       # dnf-kmod-nvidia.spec (a66bc12): `Requires: (kernel = <kver> if kernel)`,
                       # `Provides: kernel-modules = <kver>.<arch>` and `nvidia-kmod`,
                       # `Conflicts: kmod-nvidia-latest-dkms` (and a `Supplements:` the world's
                       # builder does not write); `kmod` for the world's depmod in %post.
                       requires=[f"(kernel = {kkver} if kernel)", "kmod"],
                       provides=[f"kernel-modules = {uname}", f"nvidia-kmod = {E}:{drv}"],
                       conflicts=["kmod-nvidia-latest-dkms"],
                       scripts={"post": post, "postun": f"depmod -a {uname}\n"}))
    cuda_drivers = Pkg("cuda-drivers", drv, "1",
                       requires=[f"nvidia-driver = {E}:{drv}", f"nvidia-driver-cuda = {E}:{drv}",
                                 f"nvidia-settings = {E}:{drv}"])
    metas = [cuda_drivers]
    if branch >= 560:
        # NVIDIA's meta package for the open flavour: `dnf install nvidia-open` (Kernel Modules chapter).
        # (EL10: epoch 3 and the dist tag, as NVIDIA's version-locking page lists it:
        # "nvidia-open-3:575.51-1.fc41.*".)
        el10 = base_of(os_) == "ol10"
        metas.append(Pkg("nvidia-open", drv, rel if el10 else "1", epoch=E if el10 else None,
                         requires=[f"nvidia-driver = {E}:{drv}", f"nvidia-driver-cuda = {E}:{drv}",
                                   f"nvidia-settings = {E}:{drv}", f"kmod-nvidia-open-dkms = {E}:{drv}"]))
    # nvidia-kmod-headers (the proprietary DKMS source, for the precompiled streams' `src`
    # profile) and nvidia-kmod-source (the open source tree): subpackages of NVIDIA's
    # dkms-nvidia.spec and dkms-open-nvidia.spec, each `Conflicts: kmod-nvidia-latest-dkms`.
    srcs = [Pkg("nvidia-kmod-headers", drv, rel, epoch=E,
                files={f"/usr/src/nvidia-{drv}/nv-p2p.h": "/* NVIDIA header (gpuhost test world) */\n"},
                conflicts=["kmod-nvidia-latest-dkms"]),
            Pkg("nvidia-kmod-source", drv, rel, epoch=E,
                files={f"/usr/src/nvidia-open-{drv}/src/README": "NVIDIA kernel module source (gpuhost test world)\n"},
                conflicts=["kmod-nvidia-latest-dkms"])]
    pkgs = common + [dkms, opend] + srcs + pre + metas
    retarget(pkgs, arch)
    return pkgs, (genmodules(pkgs) if modular else None)


# --------------------------------------------------------------------------------------------
# NVIDIA's module metadata, by the rules of NVIDIA/cuda-repo-management genmodules.py
# (2944b7a42b479a10390340d14dd3857c155a813a, what NVIDIA's yum-packaging-precompiled-kmod
# README and build.sh run to make a repo's modules.yaml). Our own code; tests/world/FIDELITY.md
# lists each rule and where the world departs, and tests/world_selfcheck.rs checks every local
# repo's metadata against the rules through dnf.
# --------------------------------------------------------------------------------------------
# The branch's packages, the driver first (genmodules.py BRANCH_PKGS).
GM_BRANCH_PKGS = ["nvidia-driver", "nvidia-driver-libs", "nvidia-driver-devel", "nvidia-driver-NVML",
                  "nvidia-driver-NvFBCOpenGL", "nvidia-driver-cuda", "nvidia-driver-cuda-libs",
                  "nvidia-persistenced", "nvidia-modprobe", "nvidia-settings", "nvidia-libXNVCtrl",
                  "nvidia-libXNVCtrl-devel", "nvidia-xconfig", "nvidia-kmod-common", "cuda-drivers"]
# Add-ons listed as artifacts when present (OPTIONAL_PKGS), and the package every stream lists at
# its newest version (LATEST_PKGS).
GM_OPTIONAL_PKGS = ["nvidia-kmod-headers", "nvidia-kmod-source", "nvidia-fabric-manager"]
GM_LATEST_PKGS = ["dnf-plugin-nvidia"]
# One timestamp for every stream of a run (genmodules.py: datetime.now(), once); fixed here so
# that the world is the same at every build.
GM_TIMESTAMP = "20250301000000"


def genmodules(pkgs):
    """modules.yaml for the packages of one repo, as genmodules.py writes it (see above)."""
    def named(name, major):
        # genmodules.py rpm_is_pkgname: the file name starts with the name, holds the major
        # version and has exactly two more '-'-separated parts (version, release).
        return sorted((p for p in pkgs if p.name == name and major in p.filename()),
                      key=lambda p: p.filename())
    drivers = [p for p in pkgs if p.name == "nvidia-driver"]
    if not drivers:
        raise SystemExit("genmodules: no nvidia-driver package")
    d = drivers[0]
    major = d.version.split(".")[0]
    version = d.version
    arch = d.arch
    distro = d.filename().split(".")[-3]   # distro_from_rpm_filename: el8, el9
    # Branches: per major <major>, <major>-dkms, <major>-open (majors above 510), then latest,
    # latest-dkms and open-dkms at the newest major, inserted first.
    branches = ["latest", "latest-dkms"] + (["open-dkms"] if int(major) > 510 else []) \
        + [major, f"{major}-dkms"] + ([f"{major}-open"] if int(major) > 510 else [])
    docs = []
    for name in branches:
        is_open, is_dkms = "open" in name, "dkms" in name
        context = hashlib.md5(f"nvidia-driver{name}{GM_TIMESTAMP}{distro}".encode()).hexdigest()[:10]
        arts, existing = [], []
        for b in GM_BRANCH_PKGS:
            found = named(b, major)
            if found:
                existing.append(b)
            arts += [p.nevra() for p in found]
        for o in GM_OPTIONAL_PKGS:
            if (o == "nvidia-kmod-headers" and is_open) or (o == "nvidia-kmod-source" and not is_open):
                continue
            arts += [p.nevra() for p in named(o, major)]
        for l in GM_LATEST_PKGS:
            found = [p for p in pkgs if p.name == l]
            arts += [p.nevra() for p in found[-1:]]
        # The stream's kmod: the open DKMS package (open streams), the proprietary one (dkms
        # streams); precompiled streams would list the kmods of the branch, but genmodules.py's
        # rpm_is_kmod() is `startswith(prefix) and not "dkms" and ...`, always false, so they
        # list none (FIDELITY.md).
        kmod = "kmod-nvidia-open-dkms" if is_open else ("kmod-nvidia-latest-dkms" if is_dkms else None)
        if kmod:
            arts += [p.nevra() for p in pkgs if p.name == kmod and p.version == version]
        existing.sort()
        kmods = [kmod] if kmod else []
        profiles = {"default": ("Default installation", existing + kmods)}
        if is_open:
            profiles["src"] = ("Source files for compiling open kernel modules", ["nvidia-kmod-source"])
        elif not is_dkms:
            profiles["src"] = ("Source headers for compilation", ["nvidia-kmod-headers"])
        fm = fm_profile(name, major, arch)
        if fm is not None:
            profiles["fm"] = ("FabricManager installation", existing + kmods + fm)
        profiles["ks"] = ("Installation via kickstart", [p for p in existing if "cuda-drivers" not in p] + kmods)
        prof = "".join(f"    {k}:\n      description: {desc}\n      rpms:\n"
                       + "".join(f"      - {r}\n" for r in rpms) for k, (desc, rpms) in profiles.items())
        art = "".join(f"      - {a}\n" for a in arts)
        docs.append(f"""---
document: modulemd
version: 2
data:
  name: nvidia-driver
  stream: "{name}"
  version: {GM_TIMESTAMP}
  context: "{context}"
  arch: {arch}
  summary: Nvidia driver for {name} branch
  description: >-
    This package provides the most recent NVIDIA display driver which allows for
    hardware accelerated rendering with recent NVIDIA chipsets.

    For the full product support list, please consult the release notes for
    driver version {version}.
  license:
    module:
    - MIT
  artifacts:
    rpms:
{art}  profiles:
{prof}...
""")
    # The default stream: genmodules.py (2944b7a) writes latest-dkms; NVIDIA's repos default to
    # open-dkms from R560 (Driver Installation Guide, "Kernel Modules"), which the world follows.
    default_stream = "open-dkms" if int(major) >= 560 else "latest-dkms"
    prof = "".join(f"    {b}: [default]\n" for b in branches)
    docs.append(f"""---
document: modulemd-defaults
version: 1
data:
  module: nvidia-driver
  stream: {default_stream}
  profiles:
{prof}...
""")
    return "".join(docs)


def fm_profile(stream, major, arch):
    """The `fm` profile's Fabric Manager packages (added to the branch's packages and the kmod),
    as genmodules.py writes them: on x86_64 Fabric Manager and NSCQ; on aarch64 (branches above
    470) Fabric Manager alone; none elsewhere. genmodules.py (2944b7a) predates R580, which renamed
    both packages (nvidia-fabricmanager, libnvidia-nscq: NVIDIA/gpu-driver-container install.sh):
    the world names each branch's own packages (FIDELITY.md)."""
    b = int(major)
    fm = "nvidia-fabricmanager" if b >= 580 else "nvidia-fabric-manager"
    nscq = "libnvidia-nscq" if b >= 580 else f"libnvidia-nscq-{major}"
    if arch == "x86_64":
        if b < 460 and "latest" not in stream:
            return [f"nvidia-fabricmanager-{major}", f"libnvidia-nscq-{major}"]
        return [fm, nscq]
    if arch == "aarch64" and b > 470:
        return [fm]
    return None


# NVIDIA's local repo packages: (os, kind, rhel, name part, cuda version, driver).
LOCAL_REPOS = [("ol8", "cuda", "rhel8", "12-2", "12.2.2", "535.104.05"),
               ("ol8", "cuda", "rhel8", "12-4", "12.4.1", "550.54.15"),
               ("ol8", "cuda", "rhel8", "12-6", "12.6.3", "560.35.05"),
               ("ol9", "cuda", "rhel9", "12-2", "12.2.2", "535.104.05"),
               ("ol9", "cuda", "rhel9", "13-0", "13.0.1", "580.82.07"),
               ("ol9", "driver", "rhel9", None, None, "570.124.06"),
               ("ol8", "driver", "rhel8", None, None, "580.82.07"),
               # day 2 (issue 23): the branch chain 535 → 550 → 570 → 580 on both releases
               ("ol9", "cuda", "rhel9", "12-4", "12.4.1", "550.54.15"),
               ("ol8", "driver", "rhel8", None, None, "570.124.06"),
               # Oracle Linux 10 (issue 32): NVIDIA's EL10 driver-only local repos, not modular;
               # 580.126.09 is the download page's example, 590.48.01 R590's first GA release.
               ("ol10", "driver", "rhel10", None, None, "580.126.09"),
               ("ol10", "driver", "rhel10", None, None, "590.48.01")]
# aarch64 (Grace, issue 32): NVIDIA's aarch64 local repo packages keep `uname -m` in the file
# name (nvidia-driver-local-repo-rhel9-<ver>-1.0-1.aarch64.rpm; CUDA's sbsa local repo
# cuda-repo-rhel9-13-0-local-13.0.1_580.82.07-1.aarch64.rpm), their inner packages built for
# aarch64. R580: GB200 (from 570.123.01) and GB300 (from 580.82.07) are driven by it.
if ARM64:
    LOCAL_REPOS += [("ol9-aarch64", "driver", "rhel9", None, None, "580.82.07"),
                    ("ol9-aarch64", "cuda", "rhel9", "13-0", "13.0.1", "580.82.07"),
                    ("ol10-aarch64", "driver", "rhel10", None, None, "580.126.09")]


def toolkit_pkgs(mm, cuda, arch):
    """NVIDIA's CUDA toolkit packages of a CUDA local repo, two of them: the runtime library
    (cuda-cudart-12-2, /usr/local/cuda-12.2/targets/<arch>-linux/lib/libcudart.so.12) and the
    meta package cuda-toolkit-12-2 that requires it."""
    major, minor = cuda.split(".")[:2]
    tdir = "x86_64-linux" if arch == "x86_64" else "sbsa-linux"
    lib = f"/usr/local/cuda-{major}.{minor}/targets/{tdir}/lib/libcudart.so.{major}"
    return [Pkg(f"cuda-cudart-{mm}", cuda, "1", arch=arch, files={lib: f"cudart {cuda}\n"}),
            Pkg(f"cuda-toolkit-{mm}", cuda, "1", arch=arch,
                requires=[f"cuda-cudart-{mm} = {cuda}-1"])]


def local_repo_names(kind, rh, mm, cuda, drv):
    """(package, version, release, repo dir, repo id) as NVIDIA names them."""
    if kind == "cuda":
        pkg = f"cuda-repo-{rh}-{mm}-local"
        return pkg, f"{cuda}_{drv}", "1", f"/var/{pkg}", f"cuda-{rh}-{mm}-local"
    pkg = f"nvidia-driver-local-repo-{rh}-{drv}"
    return pkg, "1.0", "1", f"/var/{pkg}", f"nvidia-driver-local-{rh}-{drv}"


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    if SIGN_FILE is None:
        raise SystemExit("gen.py: no sign-file (apt-get install -y linux-kbuild-6.1)")
    nvidia_test_key()
    jobs = []
    repo_dirs = {}   # dir -> modules yaml or None
    for os_ in WORLD_OSES:
        arch = arch_of(os_)
        repos, ct = base_pkgs(os_)
        d = OSES[base_of(os_)]["dist"]
        repos["docker-ce-stable"] = docker_pkgs(d)
        repos["nvidia-container-toolkit"] = nct_pkgs()
        repos[f"cuda-rhel{OSES[base_of(os_)]['major']}-network"] = cuda_network_pkgs(d)
        for rid, pkgs in repos.items():
            retarget(pkgs, arch)
            if rid == "extra":
                if arch != "x86_64":
                    continue
                # A site package that ships its own copy of R580's NSCQ library: beside an R570
                # driver it conflicts with nothing; with the R580 NSCQ package's file it does
                # (tests/upgrade.rs injects a file conflict with it).
                if os_ == "ol9":
                    pkgs.append(Pkg("site-nscq-copy", "1.0", "1",
                                    files={"/usr/lib64/libnvidia-nscq.so.580.82.07": "a site copy\n"}))
                jobs.append((pkgs, f"{OUT}/rpms/extra", None))
                continue
            rd = f"{OUT}/repos/{os_}/{rid}"
            jobs.append((pkgs, f"{rd}/Packages", None if arch == "x86_64" else arch))
            repo_dirs[rd] = modules_container_tools(ct) if rid == "ol8_appstream" else None
    inner = []
    built = {}   # (os, driver) -> the inner repo's packages dir, built once
    for (os_, kind, rh, mm, cuda, drv) in LOCAL_REPOS:
        pkgs, yaml = nvidia_inner(os_, drv)
        pkg, _v, _r, rdir, _rid = local_repo_names(kind, rh, mm, cuda, drv)
        idir = f"{WORK}/inner/{os_}/{pkg}{rdir}"
        same = built.setdefault((os_, drv), idir)
        if same == idir:
            arch = arch_of(os_)
            jobs.append((pkgs, idir, None if arch == "x86_64" else arch))
        inner.append((os_, kind, rh, mm, cuda, drv, idir, yaml, same))
    # The CUDA toolkit's packages in a CUDA local repo (never in a driver-only one): NVIDIA's
    # ship cuda-toolkit-X-Y (a meta package) and its parts beside the driver set; a container
    # host installs none of them (issue 42, driver.keep_local_repo).
    toolkits = {}
    for (os_, kind, rh, mm, cuda, drv, idir, yaml, same) in inner:
        if kind == "cuda" and (os_, mm) not in toolkits:
            toolkits[(os_, mm)] = f"{WORK}/toolkit/{os_}/{mm}"
            arch = arch_of(os_)
            jobs.append((toolkit_pkgs(mm, cuda, arch), toolkits[(os_, mm)],
                         None if arch == "x86_64" else arch))
    build_all(jobs)
    for rd, y in repo_dirs.items():
        createrepo(rd, y)
    # the local repo packages: the inner repo shipped as files, and its .repo file
    jobs2 = []
    compressed = []
    for (os_, kind, rh, mm, cuda, drv, idir, yaml, same) in inner:
        if same != idir:
            shutil.copytree(same, idir, ignore=shutil.ignore_patterns("repodata", "cuda-cudart-*",
                                                                      "cuda-toolkit-*"))
        if kind == "cuda":
            for root, _dirs, files in os.walk(toolkits[(os_, mm)]):
                for f in files:
                    shutil.copy(os.path.join(root, f), idir)
        # rpmbuild puts rpms in <idir>/<arch>/: fine for createrepo (it recurses)
        createrepo(idir, yaml)
        pkg, ver, rel, rdir, rid = local_repo_names(kind, rh, mm, cuda, drv)
        repo_file = f"[{rid}]\nname={rid}\nbaseurl=file://{rdir}\nenabled=1\ngpgcheck=0\n"
        mk = lambda: Pkg(pkg, ver, rel, trees=[(rdir, idir)],
                         files={f"/etc/yum.repos.d/{rid}.repo": repo_file})
        if arch_of(os_) != "x86_64":
            jobs2.append((retarget([mk()], arch_of(os_)), f"{WORK}/aarch64", "aarch64"))
            continue
        jobs2.append(([mk()], f"{OUT}/rpms/cuda-local", None))
        if (pkg, kind) == ("cuda-repo-rhel8-12-2-local", "cuda"):
            # the wrong-arch package: an aarch64 package holding the x86_64 inner repo
            jobs2.append((retarget([mk()], "aarch64"), f"{WORK}/aarch64", "aarch64"))
            # The same package with a compressed payload (rpm's gzip default, xz, zstd), in
            # rpms/cuda-local/<compressor>/: gpuhost's reader decompresses and digests it whole.
            for comp, flags in (("gzip", "w9.gzdio"), ("xz", "w2.xzdio"), ("zstd", "w19.zstdio")):
                compressed.append((flags, [([mk()], f"{OUT}/rpms/cuda-local/{comp}", None)]))
    build_all(jobs2)
    for flags, job in compressed:
        build_all(job, flags)
    cl = f"{OUT}/rpms/cuda-local"
    for root, _dirs, files in os.walk(f"{WORK}/aarch64"):
        for f in files:
            shutil.move(os.path.join(root, f), cl)
    # NVIDIA's download page hands the EL10 driver-only local repos out without the package's
    # version-release in the file name (nvidia-driver-local-repo-rhel10-580.126.09.x86_64.rpm).
    for (os_, kind, rh, mm, cuda, drv) in LOCAL_REPOS:
        if os_ == "ol10":
            pkg, ver, rel, _d, _i = local_repo_names(kind, rh, mm, cuda, drv)
            shutil.copy(f"{cl}/{pkg}-{ver}-{rel}.x86_64.rpm", f"{cl}/{pkg}.x86_64.rpm")
    good = f"cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm"
    os.makedirs(f"{cl}/tampered")
    os.makedirs(f"{cl}/not-an-rpm")
    data = bytearray(open(f"{cl}/{good}", "rb").read())
    pos = len(data) - 300   # inside the (uncompressed) payload, far from the header
    data[pos] ^= 0x55
    open(f"{cl}/tampered/{good}", "wb").write(data)
    open(f"{cl}/not-an-rpm/{good}", "w").write("<html><body>404 Not Found</body></html>\n")
    with open(f"{cl}/SHA256SUMS", "w") as f:
        for n in sorted(os.listdir(cl)):
            p = os.path.join(cl, n)
            if os.path.isfile(p) and n.endswith(".rpm"):
                f.write(f"{hashlib.sha256(open(p, 'rb').read()).hexdigest()}  {n}\n")
    shutil.rmtree(WORK)


if __name__ == "__main__":
    main()
