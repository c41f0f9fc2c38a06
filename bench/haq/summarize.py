#!/usr/bin/env python3
"""Tables (Markdown) from a bench/haq/run.sh output directory: python3 summarize.py OUT_DIR"""
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def jsonl(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def main(out):
    out = Path(out)
    print((out / "machine.txt").read_text())

    # 1. Overhead: per round, the mean of the two runs of each setting (ABBA); the ratio
    #    drr/off per round; the median and range over rounds.
    rows = jsonl(out / "overhead.jsonl")
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        key = ("read" if r["read"] else "write", r["depth"])
        by[key][(r["round"], r["qos"])].append(r)
    print("## QoS overhead: `--qos drr` against `--qos off` (4 KiB, no emulation)\n")
    print("| load | depth | off MB/s | drr MB/s | drr/off bandwidth (range) | off p99 us | drr p99 us | drr/off p99 (range) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (rw, depth) in sorted(by):
        d = by[(rw, depth)]
        rounds = sorted({k[0] for k in d})
        bw = {q: [statistics.mean(x["bandwidth_bps"] for x in d[(r, q)]) for r in rounds] for q in ("off", "drr")}
        p99 = {q: [statistics.mean(x["latency_p99_us"] for x in d[(r, q)]) for r in rounds] for q in ("off", "drr")}
        rb = [a / b for a, b in zip(bw["drr"], bw["off"])]
        rp = [a / b for a, b in zip(p99["drr"], p99["off"])]
        print(f"| {rw} | {depth} | {statistics.median(bw['off'])/1e6:.1f} | {statistics.median(bw['drr'])/1e6:.1f} "
              f"| {statistics.median(rb):.2f} ({min(rb):.2f}-{max(rb):.2f}) "
              f"| {statistics.median(p99['off']):.0f} | {statistics.median(p99['drr']):.0f} "
              f"| {statistics.median(rp):.2f} ({min(rp):.2f}-{max(rp):.2f}) |")
    print()

    # 2. ionice through the target.
    print("## Three processes under ionice -c1/-c2/-c3 through the target (emulated device)\n")
    print("| policy | low class's size | c1 MB/s | c2 MB/s | c3 MB/s | c1:c3 | c2:c3 | expected (DRR) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in jsonl(out / "ionice.jsonl"):
        c1, c2, c3 = r["c1_bps"], r["c2_bps"], r["c3_bps"]
        print(f"| {r['policy']} | {r['low_size']} | {c1/1e6:.2f} | {c2/1e6:.2f} | {c3/1e6:.2f} "
              f"| {c1/c3:.3f} | {c2/c3:.3f} | 4 : 2 |")
    print()

    # 3. The flooding tenant.
    print("## A flooding tenant (48 connections) beside gold (high, 12) and silver (medium, 12)\n")
    print("| policy | gold share | silver share | flood share | expected with DRR |")
    print("| --- | --- | --- | --- | --- |")
    for r in jsonl(out / "flood.jsonl"):
        t = r["gold_bps"] + r["silver_bps"] + r["flood_bps"]
        print(f"| {r['policy']} | {r['gold_bps']/t:.4f} | {r['silver_bps']/t:.4f} | {r['flood_bps']/t:.4f} "
              f"| 0.6667 / 0.1667 / 0.1667 |")
    print()

    # 4. Scenarios.
    print("## Scenarios S1-S5 and the flooding tenant: A:B bytes\n")
    print("| scenario | engine | policy | measured | expected | WRR prediction | error vs expected |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for s in ("S1", "S2", "S3", "S4", "S5", "rogue"):
        for eng in ("sim", "live"):
            p = out / f"scenario-{s}-{eng}.json"
            if not p.exists():
                continue
            for r in json.load(open(p)):
                if s == "rogue":
                    shares = " / ".join(f"{x:.4f}" for x in r["shares"])
                    exp = " / ".join(f"{x:.4f}" for x in r["expected_shares"])
                    print(f"| {s} | {eng} | {r['policy']} | shares {shares} | {exp} | | |")
                    continue
                err = (r["ratio"] - r["expected_ratio"]) / r["expected_ratio"]
                print(f"| {s} | {eng} | {r['policy']} | {r['ratio']:.3f} | {r['expected_ratio']:.3f} "
                      f"| {r['wrr_prediction']:.3f} | {err*100:+.1f}% |")
    print()

    # 5. rho_l study.
    for eng in ("sim", "live"):
        p = out / f"rho-{eng}.json"
        if not p.exists():
            continue
        print(f"## rho_l study ({eng})\n")
        for r in json.load(open(p)):
            pts = r["points"]
            keys = list(pts[0].keys())
            print("| " + " | ".join(keys) + " |")
            print("| " + " | ".join("---" for _ in keys) + " |")
            for pt in pts:
                cells = []
                for k in keys:
                    v = pt[k]
                    cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
                print("| " + " | ".join(cells) + " |")
            print()


if __name__ == "__main__":
    main(sys.argv[1])
