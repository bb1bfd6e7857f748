#!/usr/bin/env python3
"""Time COUNT scrapes of http://127.0.0.1:PORT/PATH, one new connection each (HTTP/1.1,
Connection: close), and print each one's wall time in microseconds, one per line.

Used by bench/serve-gpu-run.sh beside bash's /dev/tcp client: bash's `read` takes a socket one
byte per system call (13,000 for a /metrics body), which costs milliseconds of its own; this
client reads the body in large chunks, so what it times is the server's answer.
Usage: scrape-timer.py PORT PATH COUNT"""
import http.client
import sys
import time

port, path, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for _ in range(count):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers={"Connection": "close"})
    r = c.getresponse()
    body = r.read()
    c.close()
    t1 = time.perf_counter()
    if r.status not in (200, 503) or not body:
        print(f"scrape failed: HTTP {r.status}, {len(body)} bytes", file=sys.stderr)
        sys.exit(1)
    print(round((t1 - t0) * 1e6))
