#!/usr/bin/env python3
"""Summarise a bench/fof/run.sh directory: report.md on stdout, results.json beside it.

Reads DIR/runs.jsonl (one line per process: config, round, cell, exit code, the processes seen
busy before and after) and DIR/raw/NAME.out (the harness's JSON line). For every cell and
configuration: the median, minimum and maximum ns/op over the rounds; for every ratio: the ratio
of the medians and the range of the same ratio computed inside each round (the configurations
of a round ran back to back). A cell in which some process saw another busy process is marked
with a dagger.
"""
import json
import os
import statistics
import sys

BASE = ["pmemobj", "kavach-undo", "kavach-redo", "kavach-fof", "volatile", "wsp"]
FOC = ["pmemobj", "kavach-undo", "kavach-redo"]
WHAT = {
    "pmemobj": "FoC + undo log (libpmemobj)",
    "kavach-undo": "FoC + undo log (Kavach)",
    "kavach-redo": "FoC + redo log (Kavach)",
    "kavach-fof": "FoF + redo log (Kavach, on demand)",
    "volatile": "FoF, no transactions (DRAM)",
    "wsp": "FoF under the WSP wrapper",
}


def load(d):
    runs = []
    with open(os.path.join(d, "runs.jsonl")) as f:
        for line in f:
            line = line.strip()
            if line:
                runs.append(json.loads(line))
    for r in runs:
        r["result"] = None
        path = os.path.join(d, "raw", r["name"] + ".out")
        try:
            with open(path) as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        r["result"] = json.loads(line)
        except (OSError, ValueError) as e:
            r["load_error"] = str(e)
    return runs


def fmt(x, nd=0):
    if x is None:
        return "—"
    if nd == 0:
        return f"{x:,.0f}"
    return f"{x:,.{nd}f}"


def main():
    d = sys.argv[1]
    meta = []
    args = sys.argv[2:]
    while args:
        if args[0] == "--meta" and len(args) > 1:
            k, _, v = args[1].partition("=")
            meta.append((k, v))
            args = args[2:]
        else:
            sys.exit(f"summarize.py: unknown argument {args[0]}")
    runs = load(d)

    failures = []
    ok = []
    for r in runs:
        res = r["result"]
        if r["rc"] != 0 or res is None or not res.get("verified"):
            failures.append(r)
            continue
        ok.append(r)

    # Correctness across configurations: checksums and final counts agree per (cell, round).
    by_cr = {}
    for r in ok:
        by_cr.setdefault((r["cell"], r["round"]), []).append(r)
    mismatches = []
    for key, rs in sorted(by_cr.items()):
        sums = {(x["result"]["checksum"], x["result"]["final_count"]) for x in rs}
        if len(sums) > 1:
            mismatches.append((key, [(x["config"], x["result"]["checksum"]) for x in rs]))
    mode_problems = []
    for r in ok:
        res, base = r["result"], r["config"].split("+")[0]
        if base == "kavach-fof" and (res["on_demand"] != 1 or res["tx_sampled_not_redo"] != 0):
            mode_problems.append(f"{r['name']}: on_demand={res['on_demand']}, sampled transactions not in redo mode={res['tx_sampled_not_redo']}")
        if base in ("kavach-redo", "kavach-undo") and res["on_demand"] != 0:
            mode_problems.append(f"{r['name']}: on_demand={res['on_demand']} (expected 0)")

    # cell -> config -> round -> ns/op ; busy marks per (cell, round)
    vals = {}
    busy = {}
    for r in ok:
        vals.setdefault(r["cell"], {}).setdefault(r["config"], {})[r["round"]] = r["result"]["ns_per_op"]
    for r in runs:
        b = " ".join(x for x in (r.get("busy_before", ""), r.get("busy_after", "")) if x)
        if b:
            busy.setdefault(r["cell"], {}).setdefault(r["round"], set()).update(b.split())

    def stats(cell, cfg):
        v = vals.get(cell, {}).get(cfg, {})
        if not v:
            return None
        xs = list(v.values())
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs),
                "rounds": {str(k): x for k, x in sorted(v.items())}}

    def ratio(cell, a, b):
        sa, sb = stats(cell, a), stats(cell, b)
        if not sa or not sb:
            return None
        va, vb = vals[cell][a], vals[cell][b]
        per = [va[k] / vb[k] for k in va if k in vb and vb[k] > 0]
        return {"ratio": sa["median"] / sb["median"], "min": min(per) if per else None,
                "max": max(per) if per else None}

    def mark(cell):
        return " †" if busy.get(cell) else ""

    cells = sorted(vals, key=lambda c: (c.split("-")[0] != "hash", int(c.split("-")[1]) if c.startswith("hash-") else 0))
    hash_cells = [c for c in cells if c.startswith("hash-")]
    configs = [c for c in BASE if any(c in vals[x] for x in cells)]
    ltx = [c + "+ltx" for c in BASE if any(c + "+ltx" in vals[x] for x in cells)]

    out = []
    p = out.append
    p("# Flush-on-fail against flush-on-commit: hash table and AVL tree (`bench/fof`)")
    p("")
    for k, v in meta:
        p(f"- **{k}:** {v}")
    p("")
    p("Times are ns per operation, median over rounds [min–max]. Ratios: ratio of the medians "
      "(the range of the same ratio computed inside each round in brackets). † = some process "
      "of that cell ran while another process used more than 20% of a CPU (listed at the end).")
    p("")
    p("## Checks")
    p("")
    p(f"- processes: {len(runs)}, failed or unverified: {len(failures)}")
    p(f"- every verified run checked its structure after the timed phase and (persistent "
      f"configurations) again after a pool close + open")
    p(f"- checksum and final count equal across all configurations of a cell and round: "
      f"{'yes' if not mismatches else 'NO (' + str(len(mismatches)) + ' mismatches)'}")
    p(f"- kavach-fof ran with durability on demand and its sampled transactions in redo mode; "
      f"kavach-undo / kavach-redo flushed at commit: {'yes' if not mode_problems else 'NO'}")
    for m in mode_problems[:20]:
        p(f"  - {m}")
    for key, lst in mismatches[:20]:
        p(f"  - mismatch {key}: {lst}")
    p("")

    results = {"meta": dict(meta), "cells": {}, "ratios": {}, "failures": [r["name"] for r in failures]}
    for cell in cells:
        results["cells"][cell] = {c: stats(cell, c) for c in vals[cell]}

    if hash_cells:
        p("## Hash table, ns per operation (lookups outside transactions)")
        p("")
        p("| updates | " + " | ".join(configs) + " |")
        p("| ---: | " + " | ".join("---:" for _ in configs) + " |")
        for cell in hash_cells:
            row = []
            for c in configs:
                s = stats(cell, c)
                row.append(f"{fmt(s['median'], 1)} [{fmt(s['min'], 1)}–{fmt(s['max'], 1)}]" if s else "—")
            p(f"| {cell.split('-')[1]}%{mark(cell)} | " + " | ".join(row) + " |")
        p("")
        p("### Ratios (slowdown against flush-on-fail)")
        p("")
        pairs = [(a, b) for b in ("kavach-fof", "volatile") for a in FOC if a in configs and b in configs]
        if "kavach-fof" in configs and "volatile" in configs:
            pairs.append(("kavach-fof", "volatile"))
        if "wsp" in configs:
            pairs += [(a, "wsp") for a in FOC + ["kavach-fof"] if a in configs]
        p("| updates | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " |")
        p("| ---: | " + " | ".join("---:" for _ in pairs) + " |")
        for cell in hash_cells:
            row = []
            for a, b in pairs:
                q = ratio(cell, a, b)
                results["ratios"].setdefault(cell, {})[f"{a}/{b}"] = q
                row.append(f"{q['ratio']:.2f} ({q['min']:.2f}–{q['max']:.2f})" if q else "—")
            p(f"| {cell.split('-')[1]}%{mark(cell)} | " + " | ".join(row) + " |")
        p("")
        if ltx:
            p("## Hash table with a transaction around every lookup (the `+ltx` variants)")
            p("")
            p("The same cells; only the lookups differ (each begins and commits a transaction in "
              "the build's mode and reads through it). At 100% updates there are no lookups, so "
              "the variants were not run.")
            p("")
            p("| updates | " + " | ".join(ltx) + " |")
            p("| ---: | " + " | ".join("---:" for _ in ltx) + " |")
            for cell in hash_cells:
                row = []
                for c in ltx:
                    s = stats(cell, c)
                    row.append(f"{fmt(s['median'], 1)} [{fmt(s['min'], 1)}–{fmt(s['max'], 1)}]" if s else "—")
                p(f"| {cell.split('-')[1]}%{mark(cell)} | " + " | ".join(row) + " |")
            p("")
            lp = [(a + "+ltx", "kavach-fof+ltx") for a in FOC if a + "+ltx" in ltx and "kavach-fof+ltx" in ltx]
            lp += [(a + "+ltx", "volatile") for a in FOC + ["kavach-fof"] if a + "+ltx" in ltx and "volatile" in configs]
            p("| updates | " + " | ".join(f"{a} / {b}" for a, b in lp) + " |")
            p("| ---: | " + " | ".join("---:" for _ in lp) + " |")
            for cell in hash_cells:
                row = []
                for a, b in lp:
                    q = ratio(cell, a, b)
                    results["ratios"].setdefault(cell, {})[f"{a}/{b}"] = q
                    row.append(f"{q['ratio']:.2f} ({q['min']:.2f}–{q['max']:.2f})" if q else "—")
                p(f"| {cell.split('-')[1]}%{mark(cell)} | " + " | ".join(row) + " |")
            p("")

    if "avl" in vals:
        p("## AVL tree: random inserts into an empty tree, ns per insert")
        p("")
        p("| configuration | flushing | ns/insert | inserts/s | / kavach-fof | / volatile |")
        p("| --- | --- | ---: | ---: | ---: | ---: |")
        for c in configs:
            s = stats("avl", c)
            if not s:
                continue
            qf, qv = ratio("avl", c, "kavach-fof"), ratio("avl", c, "volatile")
            results["ratios"].setdefault("avl", {})[f"{c}/kavach-fof"] = qf
            results["ratios"].setdefault("avl", {})[f"{c}/volatile"] = qv
            p(f"| {c}{mark('avl')} | {WHAT[c]} | {fmt(s['median'], 1)} [{fmt(s['min'], 1)}–{fmt(s['max'], 1)}] | "
              f"{fmt(1e9 / s['median'])} | "
              + (f"{qf['ratio']:.2f} ({qf['min']:.2f}–{qf['max']:.2f})" if qf else "—") + " | "
              + (f"{qv['ratio']:.2f} ({qv['min']:.2f}–{qv['max']:.2f})" if qv else "—") + " |")
        p("")

    p("## Every round (ns/op)")
    p("")
    rounds = sorted({r["round"] for r in runs})
    p("| cell | configuration | " + " | ".join(f"r{k}" for k in rounds) + " |")
    p("| --- | --- | " + " | ".join("---:" for _ in rounds) + " |")
    for cell in cells:
        for c in configs + ltx:
            v = vals[cell].get(c)
            if not v:
                continue
            p(f"| {cell} | {c} | " + " | ".join(fmt(v.get(k), 1) + (" †" if k in busy.get(cell, {}) else "") for k in rounds) + " |")
    p("")
    if busy:
        p("## Busy cells")
        p("")
        for cell in sorted(busy):
            for rnd, who in sorted(busy[cell].items()):
                p(f"- {cell} round {rnd}: {' '.join(sorted(who))}")
        p("")
    if failures:
        p("## Failures")
        p("")
        for r in failures:
            p(f"- {r['name']}: exit {r['rc']} (see raw/{r['name']}.err)")
        p("")
    print("\n".join(out))
    results["busy"] = {c: {str(k): sorted(v) for k, v in rr.items()} for c, rr in busy.items()}
    results["runs"] = runs
    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
