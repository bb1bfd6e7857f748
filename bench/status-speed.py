#!/usr/bin/env python3
"""Time commands side by side, interleaved, with their peak RSS (bench/RESULTS-status.md).

Usage: bench/status-speed.py RUNS OUT.json NAME=COMMAND [NAME=COMMAND ...]   (SPAWN_RSS=launcher)

Each round runs every command once, in the order given (so all see the same machine state),
after one warm-up run of each. A command is started with posix_spawn (stdout and stderr to
/dev/null) and reaped with wait4: its wall time comes from a monotonic clock around the two
calls, its peak RSS from wait4's ru_maxrss, which covers the command and every child it
waited for (gpuhost status's NVML probe child among them). With SPAWN_RSS=bench/spawn-rss (built
from bench/spawn-rss.c) that launcher forks, execs, times and reads ru_maxrss instead: python's
own RSS is then not the floor of every figure. COMMAND is split on spaces; a
NAME starting with "cold:" has GPUHOST_RUN_DIR/boot-cache.json removed before each run (not
timed). Writes every wall time (ms), every peak RSS (KiB), exit codes, and the medians, and
prints a table.
"""
import json
import os
import shutil
import statistics
import sys
import time


def run(argv, env):
    launcher = env.get("SPAWN_RSS")
    if launcher:
        # bench/spawn-rss.c: a small static launcher times the command and reads its peak RSS
        # (python's own 14-16 MB would be the floor of every ru_maxrss below: a spawned child
        # starts as a copy of its parent).
        r, w = os.pipe()
        fa = [(os.POSIX_SPAWN_DUP2, w, 1), (os.POSIX_SPAWN_CLOSE, r)]
        pid = os.posix_spawn(launcher, [launcher] + argv, env, file_actions=fa)
        os.close(w)
        out = b""
        while chunk := os.read(r, 4096):
            out += chunk
        os.close(r)
        os.waitpid(pid, 0)
        ms, rss, rc = out.split()
        return float(ms), int(rss), int(rc)
    path = shutil.which(argv[0]) or argv[0]
    fa = [
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
    ]
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(path, argv, env, file_actions=fa)
    _, status, ru = os.wait4(pid, 0)
    t1 = time.perf_counter_ns()
    return (t1 - t0) / 1e6, ru.ru_maxrss, os.waitstatus_to_exitcode(status)


def main():
    runs, out, specs = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    cmds = []
    for s in specs:
        name, cmd = s.split("=", 1)
        cmds.append((name, cmd.split()))
    env = dict(os.environ)
    cache = os.path.join(env.get("GPUHOST_RUN_DIR", "/nonexistent"), "boot-cache.json")

    def one(name, argv):
        if name.startswith("cold:"):
            try:
                os.remove(cache)
            except FileNotFoundError:
                pass
        return run(argv, env)

    for name, argv in cmds:
        one(name, argv)
    res = {name: {"cmd": " ".join(argv), "ms": [], "rss_kib": [], "rc": []} for name, argv in cmds}
    for _ in range(runs):
        for name, argv in cmds:
            ms, rss, rc = one(name, argv)
            r = res[name]
            r["ms"].append(round(ms, 3))
            r["rss_kib"].append(rss)
            r["rc"].append(rc)
    for r in res.values():
        r["median_ms"] = round(statistics.median(r["ms"]), 2)
        r["min_ms"] = min(r["ms"])
        r["max_ms"] = max(r["ms"])
        r["median_rss_kib"] = statistics.median(r["rss_kib"])
        r["max_rss_kib"] = max(r["rss_kib"])
    with open(out, "w") as f:
        json.dump({"runs": runs, "results": res}, f, indent=1)
    ref = {k: res[k]["median_ms"] for k in res if k.startswith("nvidia-smi")}
    print(f"{'command':<28} {'median ms':>10} {'min':>8} {'max':>8} {'RSS MiB (med/max)':>18}  rc  " + "  ".join(f"x {k}" for k in ref))
    for name, r in res.items():
        ratios = "  ".join(f"{r['median_ms'] / v:>6.3f}" for v in ref.values())
        rcs = ",".join(sorted({str(c) for c in r["rc"]}))
        print(
            f"{name:<28} {r['median_ms']:>10.2f} {r['min_ms']:>8.2f} {r['max_ms']:>8.2f} "
            f"{r['median_rss_kib'] / 1024:>8.1f}/{r['max_rss_kib'] / 1024:<8.1f}  {rcs:>3}  {ratios}"
        )


if __name__ == "__main__":
    main()
