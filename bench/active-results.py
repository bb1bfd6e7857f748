#!/usr/bin/env python3
"""Prints bench/RESULTS-active.md's tables from what bench/active-gpu-run.sh wrote
(`tar -xzf active-run.tgz`; give the active-out folder). Figures only as measured."""
import glob
import json
import os
import statistics
import sys

d = sys.argv[1]
ref = {0x2330: (3350, 67, 34, "H100 80GB HBM3 (SXM5)"), 0x2335: (4800, 67, 34, "H200 (SXM)")}


def load(name):
    with open(os.path.join(d, name)) as f:
        return json.load(f)


def rss(name):
    for line in open(os.path.join(d, name)):
        if "Maximum resident" in line:
            return int(line.split()[-1])
    return None


runs = [load(f"probe-{i}.json") for i in (1, 2, 3)]
g0 = runs[0]["gpus"][0]
peak_hbm, p32, p64, model = ref.get(g0["pci_device_id"], (None, None, None, g0["name"]))
print(f"GPU: {g0['name']} (PCI device {g0['pci_device_id']:#06x}), driver {runs[0]['driver_version']}, "
      f"CUDA driver API {runs[0]['cuda_driver_version']}, {g0['sms']} SMs, link Gen{g0['setting']['pcie_gen_max']} x{g0['setting']['pcie_width_max']}, "
      f"power limit {g0['setting']['power_limit_mw'] // 1000} W, ECC {'on' if g0['setting']['ecc_enabled'] else 'off'}\n")
print("| run | copy kernel GB/s | cuMemcpyDtoD GB/s | kernel/DtoD | /peak | integrity (tested, GB/s, errors) | H2D / D2H GB/s | FP32 TFLOPS | FP64 TFLOPS | child wall s | peak RSS KiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for i, r in enumerate(runs, 1):
    g = r["gpus"][0]
    h, it, p = g["hbm"], g["integrity"], g["pcie"]
    c = {x["kernel"]: x for x in g["compute"]}
    print(f"| {i} | {h['kernel_gbps']:.0f} | {h['dtod_gbps']:.0f} | {h['kernel_gbps']/h['dtod_gbps']:.3f} | "
          f"{h['kernel_gbps']/peak_hbm:.2f} | {it['tested_bytes']/2**30:.1f} GiB ({it['tested_bytes']/it['free_bytes']:.0%} of free), {it['gbps']:.0f}, {it['errors']} | "
          f"{p['h2d_gbps']:.1f} / {p['d2h_gbps']:.1f} | {c['fma32']['tflops']} ({c['fma32']['tflops']/p32:.2f}×) | {c['fma64']['tflops']} ({c['fma64']['tflops']/p64:.2f}×) | "
          f"{r['wall_ms']/1e3:.2f} | {rss(f'probe-{i}.time')} |")
print()
print("Time per check (run 1, ms, GPU's own thread): " + ", ".join(
    f"{k} {v}" for k, v in [("HBM bandwidth", g0["hbm"]["ms"]), ("integrity", g0["integrity"]["ms"]), ("PCIe", g0["pcie"]["ms"])]
    + [(c["kernel"], c["ms"]) for c in g0["compute"]]))
print()
print("Faults injected on the real GPU:")
for f in ("hbm", "fp32", "fp64", "mix32", "mix64"):
    r = load(f"fault-{f}.json")
    g = r["gpus"][0]
    if f == "hbm":
        what = f"integrity errors {g['integrity']['errors']}, first at {g['integrity']['first_bad_address']:#x}"
    else:
        bad = [c for c in g["compute"] if c["mismatches"]]
        what = ", ".join(f"{c['kernel']}: {c['mismatches']} of {c['results']} wrong ({c['first_mismatch']['expected']} → {c['first_mismatch']['got']})" for c in bad)
    print(f"- {f}: {what}")
for name in ("sigterm.json", "limit1.json"):
    r = load(name)
    print(f"- {name}: stopped={r['stopped']}, live_at_exit={r['live_at_exit']}, wall {r['wall_ms']:.0f} ms")
p2p = load("p2p-self.json")["p2p"]
print(f"- p2p to itself: {p2p}")
print()
print("Variants (3 runs each):")
for line in open(os.path.join(d, "log.txt")):
    if line.split() and line.split()[0] in ("base", "noimm", "copy2", "copy8"):
        print("    " + line.rstrip())
print()
for f in ("torch.txt", "settings.diff"):
    p = os.path.join(d, f)
    if os.path.exists(p):
        print(f"{f}:")
        print("".join("    " + l for l in open(p)) or "    (empty)")
