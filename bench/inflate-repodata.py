#!/usr/bin/env python3
"""Make a repo's metadata realistically large without building packages.

Usage: inflate-repodata.py REPO_DIR COUNT [FILES_PER_PACKAGE]

Appends COUNT synthetic package entries to REPO_DIR/repodata's primary, filelists and other
metadata (gzip XML, createrepo_c's layout) and rewrites repomd.xml with their new checksums and
sizes; every other metadata type (modules) is kept as it is. The entries describe packages that
do not exist as files: dnf loads, parses and caches them like any other (that is the cost a
real host pays for its large BaseOS/AppStream/EPEL repos), but nothing installs them.

Each entry looks like a real one: a name, version, release, arch, summary, description, a
shared-library provide, requires on other entries' libraries (so that libsolv has a dependency
graph to index), a few files in primary (binaries, /etc) and FILES_PER_PACKAGE (default 30)
files in filelists.
"""
import gzip
import hashlib
import os
import re
import sys
import time


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def entries(repo, count, files_per_pkg):
    tag = re.sub(r"[^a-z0-9]", "", os.path.basename(repo.rstrip("/")).lower())
    now = int(time.time())
    prim, fl, oth = [], [], []
    for i in range(count):
        name = f"{tag}-filler-{i:05d}"
        ver = f"{1 + i % 7}.{i % 13}.{i % 5}"
        rel = f"{1 + i % 3}.el8"
        pkgid = sha256(f"{tag}/{i}".encode())
        lib = f"lib{tag}{i:05d}.so.{1 + i % 3}()(64bit)"
        reqs = [f"lib{tag}{(i * 7 + k) % count:05d}.so.{1 + ((i * 7 + k) % count) % 3}()(64bit)"
                for k in (1, 2)]
        files = [f"/usr/lib64/lib{tag}{i:05d}.so.{1 + i % 3}"]
        files += [f"/usr/share/{name}/data-{j:03d}.dat" for j in range(max(0, files_per_pkg - 3))]
        files += [f"/usr/bin/{name}", f"/etc/{name}.conf"]
        primary_files = [f for f in files if f.startswith(("/usr/bin/", "/etc/"))]
        req_xml = "".join(f'      <rpm:entry name="{r}"/>\n' for r in reqs)
        prim.append(
            f'<package type="rpm">\n'
            f"  <name>{name}</name>\n  <arch>x86_64</arch>\n"
            f'  <version epoch="0" ver="{ver}" rel="{rel}"/>\n'
            f'  <checksum type="sha256" pkgid="YES">{pkgid}</checksum>\n'
            f"  <summary>Synthetic {name} (metadata only)</summary>\n"
            f"  <description>Filler entry {i} of {tag}: repo metadata as large as a real "
            f"Oracle Linux repo's, for benchmarks.</description>\n"
            f"  <packager></packager>\n  <url></url>\n"
            f'  <time file="{now}" build="{now}"/>\n'
            f'  <size package="{20000 + i}" installed="{60000 + i}" archive="{61000 + i}"/>\n'
            f'  <location href="Packages/{name}-{ver}-{rel}.x86_64.rpm"/>\n'
            f"  <format>\n    <rpm:license>MIT</rpm:license>\n    <rpm:vendor></rpm:vendor>\n"
            f"    <rpm:group>Unspecified</rpm:group>\n    <rpm:buildhost>bench</rpm:buildhost>\n"
            f"    <rpm:sourcerpm>{name}-{ver}-{rel}.src.rpm</rpm:sourcerpm>\n"
            f'    <rpm:header-range start="4504" end="8017"/>\n'
            f"    <rpm:provides>\n"
            f'      <rpm:entry name="{name}" flags="EQ" epoch="0" ver="{ver}" rel="{rel}"/>\n'
            f'      <rpm:entry name="{name}(x86-64)" flags="EQ" epoch="0" ver="{ver}" rel="{rel}"/>\n'
            f'      <rpm:entry name="{lib}"/>\n'
            f"    </rpm:provides>\n    <rpm:requires>\n{req_xml}    </rpm:requires>\n"
            + "".join(f"    <file>{f}</file>\n" for f in primary_files)
            + "  </format>\n</package>\n"
        )
        fl.append(
            f'<package pkgid="{pkgid}" name="{name}" arch="x86_64">\n'
            f'  <version epoch="0" ver="{ver}" rel="{rel}"/>\n'
            + "".join(f"  <file>{f}</file>\n" for f in files)
            + "</package>\n"
        )
        oth.append(
            f'<package pkgid="{pkgid}" name="{name}" arch="x86_64">\n'
            f'  <version epoch="0" ver="{ver}" rel="{rel}"/>\n'
            f'  <changelog author="bench" date="{now}">- synthetic</changelog>\n'
            f"</package>\n"
        )
    return prim, fl, oth


def inflate(xml, extra, close_tag):
    m = re.search(r'packages="(\d+)"', xml)
    if not m:
        raise SystemExit("no packages= count in metadata")
    total = int(m.group(1)) + len(extra)
    xml = xml[: m.start()] + f'packages="{total}"' + xml[m.end():]
    at = xml.rindex(close_tag)
    return xml[:at] + "".join(extra) + xml[at:], total


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    repo, count = sys.argv[1], int(sys.argv[2])
    files_per_pkg = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    md = os.path.join(repo, "repodata")
    repomd_path = os.path.join(md, "repomd.xml")
    repomd = open(repomd_path).read()
    prim, fl, oth = entries(repo, count, files_per_pkg)
    extra = {"primary": (prim, "</metadata>"), "filelists": (fl, "</filelists>"),
             "other": (oth, "</otherdata>")}
    total = 0
    for kind, (items, close) in extra.items():
        block = re.search(r'<data type="%s">.*?</data>' % kind, repomd, re.S)
        if not block:
            raise SystemExit(f"{repomd_path}: no {kind} entry")
        href = re.search(r'<location href="([^"]+)"', block.group(0)).group(1)
        path = os.path.join(repo, href)
        xml = gzip.decompress(open(path, "rb").read()).decode()
        xml, total = inflate(xml, items, close)
        raw = xml.encode()
        packed = gzip.compress(raw, compresslevel=6, mtime=0)
        open(path, "wb").write(packed)
        new = block.group(0)
        new = re.sub(r'(<checksum type="sha256">)[0-9a-f]+', r"\g<1>" + sha256(packed), new)
        new = re.sub(r'(<open-checksum type="sha256">)[0-9a-f]+', r"\g<1>" + sha256(raw), new)
        new = re.sub(r"<size>\d+</size>", f"<size>{len(packed)}</size>", new)
        new = re.sub(r"<open-size>\d+</open-size>", f"<open-size>{len(raw)}</open-size>", new)
        repomd = repomd.replace(block.group(0), new)
    repomd = re.sub(r"<revision>\d+</revision>", f"<revision>{int(time.time())}</revision>", repomd)
    open(repomd_path, "w").write(repomd)
    print(f"{os.path.basename(repo.rstrip('/'))}: {total} package entries")


if __name__ == "__main__":
    main()
