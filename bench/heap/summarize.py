#!/usr/bin/env python3
"""Summarize a bench/heap/run.sh report directory into report.md (stdout) and results.json.

    summarize.py DIR [--meta key=value ...]

Reads DIR/runs.jsonl (one line per process run.sh started) and the JSON lines each process
printed (DIR/raw/NAME.out). Per cell and library: the median over rounds (and min, max) of
ns/op and ops/s; the ratio "speedup = pmemobj ns/op / Kavach ns/op" of the medians (above 1:
Kavach is faster), and the range of the same ratio computed round by round (each round runs the
two libraries back to back).
"""
import json
import os
import statistics
import sys


def load(outdir):
    runs = []
    with open(os.path.join(outdir, "runs.jsonl")) as f:
        for line in f:
            line = line.strip()
            if line:
                runs.append(json.loads(line))
    meas = []
    for run in runs:
        path = os.path.join(outdir, "raw", run["name"] + ".out")
        run["lines"] = []
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                m["round"] = run["round"]
                m["run"] = run["name"]
                run["lines"].append(m)
                if run["round"] > 0 and run["rc"] == 0:
                    meas.append(m)
    return runs, meas


def key_of(m):
    if m["bench"] == "tx":
        return ("tx", m["op"], m["size"], 1)
    return ("map", m["map"], m["op"], m["threads"])


def fmt_ns(x):
    return "-" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.1f}")


def fmt_rate(x):
    return "-" if x is None else f"{x:,.0f}"


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}"


def tail(path, n=6):
    try:
        with open(path) as f:
            return [l.rstrip("\n") for l in f.readlines()[-n:]]
    except OSError:
        return []


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    outdir = args[0]
    meta = []
    i = 1
    while i < len(args):
        if args[i] == "--meta" and i + 1 < len(args):
            k, _, v = args[i + 1].partition("=")
            meta.append((k, v))
            i += 2
        else:
            sys.exit(f"unknown argument {args[i]}")
    runs, meas = load(outdir)

    groups = {}
    order = []
    for m in meas:
        k = key_of(m)
        if k not in groups:
            groups[k] = {}
            order.append(k)
        groups[k].setdefault(m["backend"], []).append(m)

    summary = []
    for k in order:
        g = groups[k]
        row = {"bench": k[0]}
        if k[0] == "tx":
            row.update(op=k[1], size=k[2])
        else:
            row.update(map=k[1], op=k[2], threads=k[3])
        for be in ("kavach", "pmemobj"):
            ms = g.get(be, [])
            if not ms:
                row[be] = None
                continue
            ns = [m["ns_per_op"] for m in ms]
            ops = [m["ops_per_s"] for m in ms]
            d = {
                "rounds": len(ms),
                "ns_per_op_median": statistics.median(ns),
                "ns_per_op_min": min(ns),
                "ns_per_op_max": max(ns),
                "ops_per_s_median": statistics.median(ops),
                "per_round_ns_per_op": {str(m["round"]): m["ns_per_op"] for m in ms},
            }
            if k[0] == "map":
                d["total_s_median"] = statistics.median(m["total_s"] for m in ms)
                d["thread_ns_per_op_median"] = statistics.median(m["thread_ns_per_op"] for m in ms)
            row[be] = d
        if row.get("kavach") and row.get("pmemobj"):
            kv, pm = row["kavach"], row["pmemobj"]
            row["speedup"] = pm["ns_per_op_median"] / kv["ns_per_op_median"]
            per = []
            for r, kns in kv["per_round_ns_per_op"].items():
                pns = pm["per_round_ns_per_op"].get(r)
                if pns:
                    per.append(pns / kns)
            row["speedup_per_round"] = per
        else:
            row["speedup"] = None
            row["speedup_per_round"] = []
        summary.append(row)

    def cell_of(row):
        if row["bench"] == "tx":
            grp = "allocfree" if row["op"] in ("alloc", "free", "realloc") else row["op"]
            return f"tx-{grp}-{row['size']}"
        return f"map-{row['map']}-t{row['threads']}"

    busy_runs = [r for r in runs if r["round"] > 0 and (r.get("busy_before") or r.get("busy_after"))]
    busy_cells = {r["cell"] for r in busy_runs}
    for row in summary:
        row["disturbed"] = cell_of(row) in busy_cells

    failed = [r for r in runs if r["rc"] != 0]
    checks = [r for r in runs if r["round"] == 0]

    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": dict(meta), "summary": summary, "measurements": meas,
                   "runs": [{k: v for k, v in r.items() if k != "lines"} for r in runs]},
                  f, indent=1)

    out = []
    w = out.append
    w("# Persistent heap: Kavach (kavach.h) vs libpmemobj\n")
    for k, v in meta:
        w(f"- **{k}**: {v}")
    w("")
    w("**How to read:** times are means per operation (the whole loop's time / N), the median over")
    w("rounds. **speedup = pmemobj ns/op ÷ Kavach ns/op**: above 1 Kavach is faster, below 1")
    w("libpmemobj is. \"per-round\" is the smallest and largest of the same ratio computed round by")
    w("round (each round runs the two libraries back to back, alternating which goes first).")
    w("")
    if failed:
        w("## Failures\n")
        for r in failed:
            w(f"- `{r['name']}` ({r['backend']}, exit {r['rc']}): args `{r['args']}`")
            for l in tail(os.path.join(outdir, "raw", r["name"] + ".err")):
                w(f"    {l}")
        w("")
    if checks:
        w("## Correctness checks (untimed)\n")
        w("| check | library | result |")
        w("| --- | --- | --- |")
        for r in checks:
            w(f"| {r['cell']} | {r['backend']} | {'ok' if r['rc'] == 0 else 'FAILED (exit %d)' % r['rc']} |")
        w("")
        w("Every timed map run also verifies its maps after each phase (walk + count + every key);")
        w("every alloc run checks its blocks are distinct, non-overlapping and of a usable size.")
        w("")

    if busy_runs:
        w("## Disturbances\n")
        w("Other processes using more than 20% of a CPU (or cargo / rustc) just before or just after")
        w("these runs (pid:name:CPU%); their cells are marked † in the tables:\n")
        for r in busy_runs:
            w(f"- `{r['name']}`: before: {r.get('busy_before') or '-'}; after: {r.get('busy_after') or '-'}")
        w("")

    def mark(row):
        return " †" if row.get("disturbed") else ""

    def rounds_str(row):
        p = row["speedup_per_round"]
        return "-" if not p else f"{min(p):.2f}–{max(p):.2f}"

    tx = [r for r in summary if r["bench"] == "tx"]
    if tx:
        w("## Transactions (one thread)\n")
        w("| op | size B | Kavach ns/op | pmemobj ns/op | Kavach ops/s | pmemobj ops/s | speedup | per-round |")
        w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for op in ("overwrite", "alloc", "free", "realloc", "pair"):
            for r in sorted((r for r in tx if r["op"] == op), key=lambda r: r["size"]):
                kv, pm = r.get("kavach"), r.get("pmemobj")
                w(f"| {op}{mark(r)} | {r['size']} | {fmt_ns(kv and kv['ns_per_op_median'])} | "
                  f"{fmt_ns(pm and pm['ns_per_op_median'])} | {fmt_rate(kv and kv['ops_per_s_median'])} | "
                  f"{fmt_rate(pm and pm['ops_per_s_median'])} | {fmt_ratio(r['speedup'])} | {rounds_str(r)} |")
        w("")
        w("overwrite: add_range of the whole object + memset + commit. alloc: alloc + add_range of a")
        w("16-byte slot + link + commit. free: add_range of the slot + free + unlink + commit (random")
        w("order). realloc: the same allocations again after all were freed (memory touched before;")
        w("alloc on a fresh pool includes the kernel's first-touch page faults of the pool's pages).")
        w("pair: one alloc transaction and one free transaction; time per pair.")
        w("")
    mp = [r for r in summary if r["bench"] == "map"]
    if mp:
        w("## Maps (one transaction per operation)\n")
        w("| map | op | threads | Kavach s | pmemobj s | Kavach ops/s | pmemobj ops/s | Kavach ns/op | pmemobj ns/op | speedup | per-round |")
        w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for r in sorted(mp, key=lambda r: (["btree", "rbtree", "hash"].index(r["map"])
                                           if r["map"] in ("btree", "rbtree", "hash") else 9,
                                           r["op"] != "insert", r["threads"])):
            kv, pm = r.get("kavach"), r.get("pmemobj")
            w(f"| {r['map']}{mark(r)} | {r['op']} | {r['threads']} | "
              f"{'-' if not kv else '%.3f' % kv['total_s_median']} | "
              f"{'-' if not pm else '%.3f' % pm['total_s_median']} | "
              f"{fmt_rate(kv and kv['ops_per_s_median'])} | {fmt_rate(pm and pm['ops_per_s_median'])} | "
              f"{fmt_ns(kv and kv['thread_ns_per_op_median'])} | {fmt_ns(pm and pm['thread_ns_per_op_median'])} | "
              f"{fmt_ratio(r['speedup'])} | {rounds_str(r)} |")
        w("")
        w("s: wall time of the phase, from the first thread's start to the last thread's end (all")
        w("keys). ops/s: keys / wall time. ns/op: each")
        w("thread's time / its operations, averaged over threads (the latency of one operation; with")
        w("2 threads each thread has its own map and half the keys). speedup uses wall time per key.")
        w("")
    w("## Every round\n")
    w("ns/op of every round (maps: wall time / keys, so with 2 threads half a thread's latency).\n")
    w("| cell | library | ns/op by round |")
    w("| --- | --- | --- |")
    for r in summary:
        name = (f"tx {r['op']} {r['size']} B" if r["bench"] == "tx"
                else f"{r['map']} {r['op']} T={r['threads']}")
        for be in ("kavach", "pmemobj"):
            d = r.get(be)
            if d:
                vals = ", ".join(f"r{k}: {fmt_ns(v)}" for k, v in sorted(d["per_round_ns_per_op"].items(),
                                                                        key=lambda kv: int(kv[0])))
                w(f"| {name} | {be} | {vals} |")
    w("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
