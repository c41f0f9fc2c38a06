#!/usr/bin/env python3
"""Tables of bench/cr/run.sh's results.csv as Markdown, with ratios Kavach / anchor.

Usage: summarize.py OUT_DIR   (reads OUT_DIR/results.csv, machine.txt and cov.md)
Bandwidth is the bytes of all processes over the time from the barrier before the first
open to the barrier after the last close (write includes fsync); MiB/s.
"""
import csv
import sys
from collections import defaultdict

out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
MiB = 1 << 20


def bw(r, key):
    t = float(r[key]) if r[key] else 0.0
    return int(r["np"]) * int(r["bytes_per_proc"]) / MiB / t if t > 0 else float("nan")


def fmt(x):
    return "n/a" if x != x else f"{x:,.0f}"


def ratio(a, b):
    return "n/a" if a != a or b != b or b == 0 else f"{a / b:.2f}"


def size(b):
    b = int(b)
    return f"{b // MiB} MiB" if b >= MiB else f"{b // 1024} KiB"


print("# Checkpoint/restart benchmark (bench/cr/run.sh)\n")
print("```")
print(open(f"{out}/machine.txt").read().rstrip())
print("```\n")

idx = defaultdict(dict)
for r in rows:
    idx[(r["section"], r["np"], r["bytes_per_proc"], r["hugeblock"], r["opts"])][r["variant"]] = r

# 1. Bandwidth.
for kind, key in (("write (+fsync)", "write_s"), ("read", "read_s")):
    print(f"## Checkpoint {kind} bandwidth, MiB/s (all processes)\n")
    print("| procs | per process | kernel tmpfs | shim, device on /dev/shm | ratio | kernel ext4 (loop) | shim, device file on ext4 | ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    keys = sorted({(int(k[1]), int(k[2])) for k in idx if k[0] == "bw"})
    for np_, b in keys:
        v = idx[("bw", str(np_), str(b), "-", "-")]
        g = lambda name: bw(v[name], key) if name in v else float("nan")
        a, s, e, se = g("kernel-tmpfs"), g("shim-shm"), g("kernel-ext4"), g("shim-ext4")
        print(f"| {np_} | {size(b)} | {fmt(a)} | {fmt(s)} | {ratio(s, a)} | {fmt(e)} | {fmt(se)} | {ratio(se, e)} |")
    print()

# 1b. Where the CPU time of the writers went.
kt = [r for r in rows if r["section"] == "bw" and r.get("sys_s")]
if kt:
    sizes = {int(r["bytes_per_proc"]) for r in kt}
    big = 256 * MiB if 256 * MiB in sizes else max(sizes)
    print(f"## CPU time of the writing processes, {size(big)} per process: kernel (system) share of user + system\n")
    print("| procs | kernel tmpfs | shim, /dev/shm | kernel ext4 | shim, ext4 |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for np_ in sorted({int(r["np"]) for r in kt if int(r["bytes_per_proc"]) == big}):
        v = idx[("bw", str(np_), str(big), "-", "-")]
        cells = []
        for name in ("kernel-tmpfs", "shim-shm", "kernel-ext4", "shim-ext4"):
            r = v.get(name)
            if r and r["sys_s"] and r["user_s"]:
                u, k = float(r["user_s"]), float(r["sys_s"])
                cells.append(f"{100 * k / (u + k):.0f}% of {u + k:.2f} s" if u + k > 0 else "n/a")
            else:
                cells.append("n/a")
        print(f"| {np_} | " + " | ".join(cells) + " |")
    print()

# 2. Hugeblock sweep.
sw = [r for r in rows if r["section"] == "sweep"]
if sw:
    b = sw[0]["bytes_per_proc"]
    print(f"## Hugeblock size sweep: 2 processes, {size(b)} each, 1 MiB writes\n")
    print("Time is the checkpoint write time (open, writes, fsync, close of every process); relative to 32 KiB.\n")
    print("| hugeblock | /dev/shm write s | rel. | read s | ext4 file write s | rel. | read s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    by = defaultdict(dict)
    for r in sw:
        by[int(r["hugeblock"])][r["variant"]] = r
    ref = by.get(32768, {})
    for hb in sorted(by):
        cells = []
        for v in ("shim-shm", "shim-ext4"):
            r = by[hb].get(v)
            if r and r["write_s"]:
                w = float(r["write_s"])
                base = float(ref[v]["write_s"]) if v in ref and ref[v]["write_s"] else float("nan")
                cells += [f"{w:.3f}", ratio(w, base), f"{float(r['read_s']):.3f}"]
            else:
                cells += ["n/a", "n/a", "n/a"]
        print(f"| {hb // 1024} KiB | " + " | ".join(cells) + " |")
    print()

# 3. Drilldown.
dr = [r for r in rows if r["section"] == "drill"]
if dr:
    b = dr[0]["bytes_per_proc"]
    print(f"## Drilldown: {size(b)} per process in 64 KiB writes; write time per checkpoint, ms (ratio to the kernel FS of the same medium)\n")
    opts = ["none", "coalesce", "hugeblock", "all"]
    print("| medium | procs | kernel FS | 4 KiB blocks, no coalescing | + coalescing only | + 32 KiB hugeblocks only | both |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    by = defaultdict(dict)
    for r in dr:
        by[(r["variant"], int(r["np"]))][r["opts"]] = r
    for medium, kv, sv in (("tmpfs / shm", "kernel-tmpfs", "shim-shm"), ("ext4 (loop)", "kernel-ext4", "shim-ext4")):
        for np_ in sorted({k[1] for k in by}):
            k = by.get((kv, np_), {}).get("kernel")
            kt = float(k["write_s"]) if k and k["write_s"] else float("nan")
            cells = [f"{kt * 1000:.1f}"]
            for o in opts:
                r = by.get((sv, np_), {}).get(o)
                t = float(r["write_s"]) if r and r["write_s"] else float("nan")
                cells.append(f"{t * 1000:.1f} ({ratio(t, kt)})")
            print(f"| {medium} | {np_} | " + " | ".join(cells) + " |")
    print()

# 4. Creates.
cr = [r for r in rows if r["section"] == "create"]
if cr:
    print("## File creates per second (open O_CREAT|O_EXCL + close; all processes)\n")
    print("| procs | kernel tmpfs, one shared directory | kernel ext4, one shared directory | kernel tmpfs, a directory per process | shim, private namespaces | shim / tmpfs shared | shim / ext4 shared |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    by = defaultdict(dict)
    for r in cr:
        if r["creates_s"]:
            by[int(r["np"])][r["variant"]] = int(r["files"]) / float(r["creates_s"])
    for np_ in sorted(by):
        g = lambda v: by[np_].get(v, float("nan"))
        a, e, p, s = g("kernel-tmpfs-shared"), g("kernel-ext4-shared"), g("kernel-tmpfs-private"), g("shim-shm")
        print(f"| {np_} | {fmt(a)} | {fmt(e)} | {fmt(p)} | {fmt(s)} | {ratio(s, a)} | {ratio(s, e)} |")
    print()

# 5. Remote.
rm = [r for r in rows if r["section"] == "remote"]
if rm:
    print("## Local against remote: device file on /dev/shm against a target process on loopback (storing on /dev/shm), MiB/s\n")
    print("| procs | per process | local write | remote write | remote / local | local read | remote read | remote / local |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    keys = sorted({(int(k[1]), int(k[2])) for k in idx if k[0] == "remote"})
    for np_, b in keys:
        v = idx[("remote", str(np_), str(b), "-", "-")]
        g = lambda name, key: bw(v[name], key) if name in v else float("nan")
        lw, rw, lr, rr = g("shim-shm", "write_s"), g("shim-remote", "write_s"), g("shim-shm", "read_s"), g("shim-remote", "read_s")
        print(f"| {np_} | {size(b)} | {fmt(lw)} | {fmt(rw)} | {ratio(rw, lw)} | {fmt(lr)} | {fmt(rr)} | {ratio(rr, lr)} |")
    print()

try:
    print("## Load imbalance: coefficient of variation of bytes per device (8 devices, 10 checkpoints of 512 MiB per process)\n")
    print(open(f"{out}/cov.md").read())
except FileNotFoundError:
    pass
