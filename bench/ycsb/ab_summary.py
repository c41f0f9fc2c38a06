#!/usr/bin/env python3
"""Kavach/Redis ratios per run directory of bench/ycsb/ab.sh, and per binary (A, B) the median
and range over its runs. Each directory holds run.sh's results.jsonl; its name ends in -A or -B.

    bench/ycsb/ab_summary.py DIR...
"""
import json
import statistics
import sys


def metrics(path):
    """{(workload, metric): value} per system from one results.jsonl."""
    out = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") != "ycsb":
                continue
            sysm = out.setdefault(r["system"], {})
            wl = r["workload"]
            sysm.setdefault((wl, "ops/s"), []).append(r["throughput"])
            for op, v in r["ops"].items():
                if op not in ("READ", "UPDATE", "INSERT"):
                    continue
                for key, name in (("p99_us", "p99"), ("p999_us", "p99.9")):
                    if v.get(key) is not None:
                        sysm.setdefault((wl, f"{op.lower()} {name}"), []).append(v[key])
    return {s: {k: statistics.median(v) for k, v in m.items()} for s, m in out.items()}


def main(dirs):
    if not dirs:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    per = {"A": [], "B": []}
    keys = None
    print("| run | binary | ratios Kavach / Redis always |")
    print("| --- | --- | --- |")
    for d in dirs:
        which = d.rstrip("/")[-1]
        m = metrics(f"{d}/results.jsonl")
        k, r = m.get("kavach-always"), m.get("redis-always")
        if not k or not r:
            print(f"{d}: no kavach-always and redis-always results", file=sys.stderr)
            return 2
        ratios = {key: k[key] / r[key] for key in k if key in r and r[key]}
        keys = keys or sorted(ratios)
        per.setdefault(which, []).append(ratios)
        cells = ", ".join(f"{w} {n} {ratios[(w, n)]:.2f}" for (w, n) in keys if (w, n) in ratios)
        print(f"| {d} | {which} | {cells} |")
    print()
    print("| workload | metric | A median (range) | B median (range) |")
    print("| --- | --- | ---: | ---: |")
    for key in keys or []:
        row = []
        for which in ("A", "B"):
            vals = [x[key] for x in per.get(which, []) if key in x]
            row.append(
                f"{statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})" if vals else "-"
            )
        print(f"| {key[0]} | {key[1]} | {row[0]} | {row[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
