#!/usr/bin/env python3
"""Where a decode step / a DFlash round's GPU time goes, from an ncu CSV of every kernel of a bench run.

Run on the GPU machine (graphs off, so every kernel is launched and profiled on its own; ncu times each kernel in
isolation, so the sum has no launch gaps: graph replay time minus this sum is what the gaps and tails cost):
  ncu --csv --print-units base --metrics gpu__time_duration.sum --cache-control none --clock-control none \
      .dev/build/flashdelta bench ... --route graphs=off > k.csv
  python3 tools/ncu_step.py k.csv
The kernel list is cut into segments at every argmax / sampling kernel (a decode step, a draft forward and a
verify forward each end in one); the last few segments are listed, then the kernels of the longest recent segment
of each distinct length, grouped by kernel name.
"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"\(.*$", "", name)  # drop the parameter list
    return name[:90]


def main(path, top=18):
    rows = []
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) / 1e3, r.get("Grid Size", "")))
    if not rows:
        sys.exit("no gpu__time_duration rows in " + path)
    segs, cur = [], []
    for k in rows:
        cur.append(k)
        if re.search(r"argmax|sample|k_topk", k[0]):
            segs.append(cur)
            cur = []
    print(f"{len(rows)} kernels, {len(segs)} segments ending in argmax/sampling")
    print("last segments: kernels, sum of kernel us")
    for s in segs[-8:]:
        print(f"  {len(s):5d} kernels  {sum(t for _, t, _ in s):9.1f} us")
    seen = set()
    for s in reversed(segs[-8:]):
        if len(s) in seen:
            continue
        seen.add(len(s))
        total = sum(t for _, t, _ in s)
        agg = defaultdict(lambda: [0, 0.0])
        for name, t, _ in s:
            a = agg[short(name)]
            a[0] += 1
            a[1] += t
        print(f"\nsegment of {len(s)} kernels, {total:.1f} us (mean {total / len(s):.2f} us a kernel)")
        for name, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"  {t:9.1f} us {100 * t / total:5.1f} %  x{c:4d}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
