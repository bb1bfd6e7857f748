#!/usr/bin/env bash
# Benchmark (issue 34, item 1): what it costs that every package of a transaction is on the
# root's disk and checked before the first write, against the hand-typed floor.
#
# Each run makes two fresh Oracle Linux 8 UEK roots of the test world:
# - A: `gpuhost apply` of tests/world/profiles/ol8-uek.toml (the whole registry), timed whole;
# - B: the floor — what a person types for the same node: the same dnf transactions (module
#   enable/disable, installs, a swap's one transaction), `dkms install` for the image's kernel
#   and the `systemctl enable`s, replayed from A's report with dnf's defaults (file:// mirrors
#   read in place, NVIDIA's local repo package installed from where it lies, no download ahead,
#   no copy, no check); the repo and DKMS files gpuhost writes are copied from A first
#   (untimed). Timed: only those commands.
# The ratio is A's wall over B's. Target: <= 1.10 on the test world.
#
# --big: the same, and a driver swap, with NVIDIA local repo packages of real size: the world's
# CUDA 12.2 and 12.4 local repo packages repacked with SIZE_GB (default 4) of incompressible
# payload beside their repo (bench/big-local-repo.py); prints wall times and the peak of the
# root filesystem's used space for gpuhost and for the floor. The two swaps alternate: gpuhost's
# first in even runs, the floor's first in odd ones (its commands the first run's), so that
# neither always follows the other's 4 GiB of writes; and runs 2-3 (6-7, …) cross the roots:
# gpuhost swaps the root the floor converged and the floor gpuhost's. Use N = 4.
#
# --one-file: the filler is one file of SIZE_GB (over 4 GiB: rpm's stripped cpio entries, which
# rpm2cpio refuses).
#
# With --big, each run also: a third root converged and swapped with driver.keep_local_repo =
# false (against the same run's floor), and a bundle made from the big package (its size
# against the packages a node installs from it).
#
# Usage: bench/transaction-floor.sh [N] [--big [SIZE_GB] [--one-file]]
#        (GPUHOST_BENCH_BIG=DIR: the big packages are made there once and kept)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
n=${1:-5}
big=0; size_gb=4
one=""
if [ "${2:-}" = --big ]; then big=1; size_gb=${3:-4}; one=${4:-}; fi

"$here/scripts/deps.sh" >/dev/null
cargo build --quiet --release -p gpuhost
gpuhost=$here/target/release/gpuhost
world=$here/target/testworld
"$here/tests/world/build-world.sh" "$world" >/dev/null
export HOME=$world/home
kver=5.15.0-204.147.6.2.el8uek.x86_64
profile=$here/tests/world/profiles/ol8-uek.toml
rpm_a=$world/rpms/cuda-local/cuda-repo-rhel8-12-2-local-12.2.2_535.104.05-1.x86_64.rpm
rpm_b=$world/rpms/cuda-local/cuda-repo-rhel8-12-4-local-12.4.1_550.54.15-1.x86_64.rpm
tmp=$(mktemp -d /var/tmp/gpuhost-floor.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ $big = 1 ]; then
  # GPUHOST_BENCH_BIG=DIR keeps the big packages there between runs (made once per size).
  big_dir=${GPUHOST_BENCH_BIG:-$tmp/big}/${size_gb}g${one:+-one}
  python3 "$here/bench/big-local-repo.py" "$rpm_a" "$big_dir" "$size_gb" $one
  python3 "$here/bench/big-local-repo.py" "$rpm_b" "$big_dir" "$size_gb" $one
  rpm_a=$big_dir/$(basename "$rpm_a"); rpm_b=$big_dir/$(basename "$rpm_b")
fi

python3 - "$gpuhost" "$n" "$tmp" "$here/tests/world/mkroot.sh" "$world" "$kver" "$profile" \
  "$rpm_a" "$rpm_b" "$big" <<'PY'
import json, os, re, shutil, statistics, subprocess, sys, threading, time
gpuhost, n, tmp, mkroot, world, kver, profile, rpm_a, rpm_b, big = sys.argv[1:11]
n, big = int(n), big == "1"
QUERIES = {"repoquery", "makecache", "list", "info", "check-update"}

def fresh(name):
    root = f"{tmp}/{name}"
    subprocess.run(["rm", "-rf", root], check=True)
    subprocess.run([mkroot, world, root, "--os", "ol8", "--kernel", kver], check=True,
                   stdout=subprocess.DEVNULL)
    return root

class Peak:
    """The peak of used space on the filesystem of `path`, sampled every 50 ms."""
    def __init__(self, path):
        self.path, self.peak, self.stop = path, 0, False
        s = os.statvfs(path); self.base = (s.f_blocks - s.f_bfree) * s.f_frsize
        self.t = threading.Thread(target=self.run, daemon=True); self.t.start()
    def run(self):
        while not self.stop:
            s = os.statvfs(self.path)
            self.peak = max(self.peak, (s.f_blocks - s.f_bfree) * s.f_frsize - self.base)
            time.sleep(0.05)
    def end(self):
        self.stop = True; self.t.join(); return self.peak

def warm(rpm):
    """The package read once into the page cache (untimed) before a timed run that installs it:
    gpuhost and the floor both start with it there, whichever of them ran first (a node has the
    file it just downloaded or copied in its page cache as well)."""
    with open(rpm, "rb") as f:
        while f.read(1 << 24):
            pass

def settle(rpm):
    """Every timed run, gpuhost's and the floor's, starts from the same state (untimed): what
    earlier runs wrote on the disk (sync: no run is charged for the writeback of the one before
    it), the filesystem's free space trimmed (fstrim: the space each run writes into is in
    the same state, whatever the run before freed), and the package in the page cache (warm).
    None of the three removed the one fast cell of the swap (the second swap of a run, on
    root B: 34-37 s, whoever swaps; the others 40-48 s): the order alternation and the crossed
    roots below share it out."""
    os.sync()
    if shutil.which("fstrim"):
        subprocess.run(["fstrim", tmp], capture_output=True)
    warm(rpm)

def gpuhost_apply(root, rpm, keep=True):
    args = [gpuhost, "apply", "--profile", profile, "--root", root, "--set",
            f"driver.local_repo_rpm={rpm}", "--set", "driver.replace_local_repo=true",
            "--set", f"driver.keep_local_repo={'true' if keep else 'false'}",
            "--format", "json"]
    settle(rpm)
    peak = Peak(root)
    t0 = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    used = peak.end()
    if p.returncode != 0:
        sys.exit(f"apply failed ({p.returncode}): {p.stdout[-3000:]}{p.stderr[-2000:]}")
    rep = json.loads(p.stdout)
    # What the merged transaction installs, as its progress line lists it.
    rep["_dnf_line"] = next((l for l in p.stderr.splitlines() if l.startswith("gpuhost: [dnf] ")), "")
    return wall, used, rep

def split(rep):
    """Where gpuhost's wall time went: its dnf commands, its other commands, and its own work
    between them (reading the package, checking, writing state)."""
    cmds = [c for s in rep["steps"] for c in s["commands"]]
    dnf = sum(c.get("duration_ms", 0) for c in cmds if c["argv"][0] == "dnf") / 1000
    other = sum(c.get("duration_ms", 0) for c in cmds if c["argv"][0] != "dnf") / 1000
    slow = ", ".join(f"{s.get('id', '?')} {s.get('duration_ms', 0) / 1000:.2f} s"
                     for s in rep["steps"] if s.get("duration_ms", 0) >= 500)
    return f"gpuhost's dnf commands {dnf:.2f} s, its other commands {other:.2f} s; steps {slow}"

def typed(rep, a, b, rpm):
    """The commands a person types, from A's report, for root B."""
    seen, out = set(), []
    for s in rep["steps"]:
        for c in s["commands"]:
            key = json.dumps(c["argv"])
            if key in seen:
                continue
            seen.add(key)
            argv = c["argv"]
            prog = argv[0]
            if prog == "dnf":
                verb = next((x for x in argv[1:] if not x.startswith("-")), "")
                # gpuhost's one `dnf shell` transaction is typed below as a person would.
                if verb in QUERIES or verb in ("shell", "install") or "--downloadonly" in argv:
                    continue
            elif prog == "unshare" and "dkms" in argv:
                pass
            elif prog == "systemctl" and any(x in ("enable", "disable") for x in argv):
                pass
            else:
                continue
            new = []
            for x in argv:
                if re.match(r"--setopt=[^=]+\.(mirrorlist=.*|baseurl=)$", x):
                    continue
                new.append(x.replace(a, b))
            out.append(new)
    # The package work, as a person types it: the local repo package, the stream enabled,
    # then one `dnf install` of the rest, from the transaction's progress line
    # (`[dnf] a + b: install X; dnf install @m Y; dnf module enable m, then install Z`).
    base = next(c["argv"] for s in rep["steps"] for c in s["commands"] if c["argv"][0] == "dnf")
    verb = next(i for i, x in enumerate(base) if i > 0 and not x.startswith("-"))
    base = [x.replace(a, b) for x in base[:verb]
            if not re.match(r"--setopt=[^=]+\.(mirrorlist=.*|baseurl=.*|gpgcheck=.*)$", x)
            and not x.startswith("--repofrompath")]
    line = rep.get("_dnf_line", "")
    line = line.removeprefix("gpuhost: [dnf] ")
    works = line.split(": ", 1)[1].split("; ") if ": " in line else []
    first, enable, rest, erasing = [], [], [], False
    for w in works:
        w = w.strip()
        if w.endswith(" --allowerasing"):
            erasing, w = True, w[: -len(" --allowerasing")]
        m = re.match(r"dnf module enable (\S+), then install (.*)", w)
        if m:
            enable.append(m.group(1)); rest += m.group(2).split(); continue
        words = w.split()[2:] if w.startswith("dnf install ") else w.split()[1:]
        for x in words:
            (first if x.endswith(".rpm") else rest).append(x)
    if first:
        out.append(base + ["install"] + first)
    for e in enable:
        out.append(base + ["module", "enable", e])
    if rest:
        out.append(base + ["install"] + (["--allowerasing"] if erasing else []) + rest)
    # In the order a person types them: the local repo package, dnf's module state, the rest,
    # DKMS, the units.
    def rank(argv):
        if argv[0] == "dnf":
            if any(x.endswith(".rpm") for x in argv):
                return 0
            return 1 if "module" in argv else 2
        return 3 if argv[0] == "unshare" else 4
    return sorted(out, key=rank)

def repos(b):
    """dnf's defaults: the root's file:// mirrors read in place (its repo files' baseurls,
    rewritten into the root as gpuhost does), as the root has them now."""
    out = []
    for f in sorted(os.listdir(f"{b}/etc/yum.repos.d")):
        sec = None
        for line in open(f"{b}/etc/yum.repos.d/{f}"):
            line = line.strip()
            if line.startswith("["):
                sec = line.strip("[]")
            elif line.startswith("baseurl=file://") and sec:
                out.append(f"--setopt={sec}.baseurl=file://{b}{line[len('baseurl=file://'):]}")
    return out

def run_typed(cmds, b, rpm):
    total = 0.0
    for argv in cmds:
        if argv[0] == "dnf":
            argv = [x for x in argv if not re.match(r"--setopt=[^=]+\.baseurl=file://", x)]
            argv = argv[:1] + repos(b) + argv[1:]
            # The local repo package from where it lies, not from gpuhost's copy.
            argv = [rpm if "/var/cache/gpuhost/packages/" in x else x for x in argv]
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, text=True)
        total += time.perf_counter() - t0
        if p.returncode != 0:
            sys.exit(f"floor command failed: {argv}\n{p.stdout[-1000:]}{p.stderr[-2000:]}")
    return total

def floor(rep, a, rpm):
    b = fresh("B")
    # What gpuhost's prepare phase wrote (repo files, DKMS's compiler override), untimed.
    for f in ["etc/yum.repos.d/docker-ce.repo", "etc/yum.repos.d/nvidia-container-toolkit.repo"]:
        if os.path.isfile(f"{a}/{f}"):
            shutil.copy2(f"{a}/{f}", f"{b}/{f}")
    if os.path.isdir(f"{a}/etc/dkms"):
        subprocess.run(["cp", "-a", f"{a}/etc/dkms/.", f"{b}/etc/dkms/"], check=True)
    cmds = typed(rep, a, b, rpm)
    settle(rpm)
    peak = Peak(b)
    total = run_typed(cmds, b, rpm)
    used = peak.end()
    return total, used, len(cmds), b

def bundle_row(rpm):
    """A bundle of the profile made from `rpm` (issue 42, item 3): its wall time, its bytes,
    and the bytes of the packages a node installs from it (its repo's packages)."""
    src = fresh("S")
    out = f"{tmp}/bundle"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    p = subprocess.run([gpuhost, "bundle", "--profile", profile, "--set",
                        f"driver.local_repo_rpm={rpm}", "--root", src, "--out", out,
                        "--format", "json"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"bundle failed ({p.returncode}): {p.stdout[-2000:]}{p.stderr[-2000:]}")
    made = json.loads(p.stdout)
    pk = f"{out}/repo/Packages"
    installs = sum(os.path.getsize(f"{pk}/{f}") for f in os.listdir(pk))
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    return wall, made["bytes"], installs, os.path.getsize(rpm)

def floor_swap(cmds, b):
    """The floor's swap on root `b`: its wall time and peak extra disk."""
    settle(rpm_b)
    peak = Peak(b)
    took = run_typed(cmds, b, rpm_b)
    return took, peak.end()

def for_root(typed, root):
    """The floor's swap commands `typed` (commands, the root they were made for) for `root`."""
    cmds, made_for = typed
    return [[x.replace(made_for, root) for x in c] for c in cmds]

typed_swap = None
results = {"converge": [], "swap": [], "converge, keep_local_repo = false": [],
           "swap, keep_local_repo = false": []}
bundles = []
for i in range(n):
    a = fresh("A")
    w, used, rep = gpuhost_apply(a, rpm_a)
    f, fused, k, b = floor(rep, a, rpm_a)
    results["converge"].append((w, f, used, fused, k))
    print(f"run {i}: converge gpuhost {w:.2f} s, floor {f:.2f} s, peak extra disk "
          f"{used / 2**20:.0f} / {fused / 2**20:.0f} MiB", flush=True)
    if big:
        # Who swaps first alternates between runs (from the second on, the floor's commands
        # are the first run's): neither side always follows the other's writes.
        floor_first = i % 2 == 1 and typed_swap is not None
        # And whose root each swaps: from the third run on, every other pair of runs crosses
        # them (gpuhost swaps the floor's root, the floor gpuhost's), so that neither root's
        # place on the disk always goes to one side.
        crossed = i % 4 >= 2
        g_root, f_root = (b, a) if crossed else (a, b)
        if floor_first:
            f2, fused2 = floor_swap(for_root(typed_swap, f_root), f_root)
        w2, used2, rep2 = gpuhost_apply(g_root, rpm_b)
        # The floor's swap, as a person types it (three transactions, not one): the new local
        # repo package, the new set (erasing what conflicts), the old names away; and the
        # module stream switched when gpuhost switched it.
        text = json.dumps(rep2)
        m = re.search(r"one dnf transaction: remove ([^;]*); install (\S+) ([^;\"(]*)", text)
        if not m:
            sys.exit(f"no swap in the report: {text[:3000]}")
        removes, specs = m.group(1).split(), m.group(3).split()
        base = next(c["argv"] for s in rep2["steps"] for c in s["commands"]
                    if c["argv"][0] == "dnf")
        verb = next(i for i, x in enumerate(base) if i > 0 and not x.startswith("-"))
        base = [x.replace(g_root, f_root) for x in base[:verb]
                if not re.match(r"--setopt=[^=]+\.(mirrorlist=.*|baseurl=.*)$", x)
                and not x.startswith("--repofrompath") and "gpuhost-next" not in x
                and x != "--assumeno"]
        cmds = [base + ["install", rpm_b], base + ["install", "--allowerasing"] + specs,
                base + ["remove"] + removes]
        sw = re.search(r"then dnf module switch-to (\S+)", text)
        if sw:
            cmds.append(base + ["module", "switch-to", sw.group(1).rstrip('";)')])
        typed_swap = typed_swap or (cmds, f_root)
        if not floor_first:
            f2, fused2 = floor_swap(cmds, f_root)
        results["swap"].append((w2, f2, used2, fused2, len(cmds)))
        how = ", ".join(x for x, on in (("the floor first", floor_first),
                                          ("the roots crossed", crossed)) if on)
        print(f"run {i}: swap gpuhost {w2:.2f} s, floor {f2:.2f} s"
              f"{f' ({how})' if how else ''}, peak extra disk "
              f"{used2 / 2**20:.0f} / {fused2 / 2**20:.0f} MiB; {split(rep2)}", flush=True)
        # keep_local_repo = false (issue 42, item 2) on a third root, against this run's floor.
        c = fresh("C")
        w3, used3, _ = gpuhost_apply(c, rpm_a, keep=False)
        results["converge, keep_local_repo = false"].append(
            (w3, results["converge"][-1][1], used3, results["converge"][-1][3], 0))
        w4, used4, _ = gpuhost_apply(c, rpm_b, keep=False)
        results["swap, keep_local_repo = false"].append((w4, f2, used4, fused2, 0))
        print(f"run {i}: keep_local_repo = false: converge {w3:.2f} s, {used3 / 2**20:.0f} MiB; "
              f"swap {w4:.2f} s, {used4 / 2**20:.0f} MiB", flush=True)
        shutil.rmtree(c, ignore_errors=True)
        bw, bb, bi, pkg = bundle_row(rpm_a)
        bundles.append((bw, bb, bi, pkg))
        print(f"run {i}: bundle {bw:.2f} s, {bb / 2**20:.0f} MiB; the packages a node installs "
              f"{bi / 2**20:.0f} MiB; the local repo package {pkg / 2**20:.0f} MiB", flush=True)
    for r in (a, b):
        shutil.rmtree(r, ignore_errors=True)

for what, r in results.items():
    if not r:
        continue
    g = statistics.median(x[0] for x in r); f = statistics.median(x[1] for x in r)
    gu = max(x[2] for x in r) / 2**20; fu = max(x[3] for x in r) / 2**20
    print(f"{what}: {len(r)} runs; gpuhost median {g:.2f} s (min {min(x[0] for x in r):.2f}), "
          f"hand-typed floor median {f:.2f} s (min {min(x[1] for x in r):.2f}, {r[0][4]} commands); "
          f"ratio {g/f:.2f}; peak extra disk gpuhost {gu:.0f} MiB, floor {fu:.0f} MiB")
if bundles:
    bw = statistics.median(x[0] for x in bundles); bb = statistics.median(x[1] for x in bundles)
    bi = statistics.median(x[2] for x in bundles)
    print(f"bundle: {len(bundles)} builds; median {bw:.2f} s; {bb / 2**20:.1f} MiB against "
          f"{bi / 2**20:.1f} MiB of packages a node installs: ratio {bb / bi:.3f} "
          f"(the local repo package: {bundles[0][3] / 2**20:.0f} MiB, not carried)")
print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
      f"({os.cpu_count()} CPUs)")
PY
