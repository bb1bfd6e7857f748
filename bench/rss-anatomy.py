#!/usr/bin/env python3
"""Summarise /proc/PID/smaps files (bench/rss-anatomy-gpu-run.sh) by mapping: Rss, anonymous
and file-backed, KiB, largest first. Usage: bench/rss-anatomy.py FILE.smaps ..."""
import collections, re, sys

for path in sys.argv[1:]:
    rows = collections.defaultdict(lambda: collections.Counter())
    name = None
    for line in open(path):
        m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \d+\s*(.*)$", line)
        if m:
            perms, name = m.group(1), m.group(2).strip() or "[anon]"
            name = f"{name} {perms}"
            continue
        k, _, v = line.partition(":")
        if k in ("Rss", "Anonymous", "Private_Clean", "Shared_Clean", "Private_Dirty", "Shared_Dirty"):
            rows[name][k] += int(v.split()[0])
    total = collections.Counter()
    for c in rows.values():
        total.update(c)
    print(f"== {path}: Rss {total['Rss']} KiB, of which anonymous {total['Anonymous']}, file {total['Rss'] - total['Anonymous']}")
    for n, c in sorted(rows.items(), key=lambda kv: -kv[1]["Rss"]):
        if c["Rss"] >= 16:
            print(f"  {c['Rss']:7d}  anon {c['Anonymous']:6d}  {n}")
