#!/usr/bin/env python3
"""Summarize a bench/heap/run.sh report directory into report.md (stdout) and results.json.

    summarize.py DIR [--meta key=value ...]

Reads DIR/runs.jsonl (one line per process run.sh started) and the JSON lines each process
printed (DIR/raw/NAME.out). Per cell and library (pmemobj, kavach = Kavach in undo mode,
kavach-redo = Kavach in redo mode): the median over rounds (and min, max) of ns/op and ops/s;
the ratio "speedup = pmemobj ns/op / Kavach ns/op" of the medians for each Kavach library
(above 1: Kavach is faster), and the range of the same ratio computed round by round (each
round runs the libraries back to back). Lines with an "error" field (a transaction a library
refused, e.g. as too large for its log) are listed, not averaged.
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
                # The library as run.sh named it: the harness only knows its backend
                # (kavach for every redundancy mode).
                m["backend"] = run["backend"]
                run["lines"].append(m)
                if run["round"] > 0 and run["rc"] == 0:
                    meas.append(m)
    return runs, meas


KAVACHS = ("kavach", "kavach-redo")
# Kavach in undo mode on pools with redundancy (run.sh --redundancy), in the order tabled.
REDUNDANT = ("kavach-lazy", "kavach-eager", "kavach-txb-object", "kavach-txb-page")
BACKENDS = ("kavach", "kavach-redo", "pmemobj") + REDUNDANT


def key_of(m):
    if m["bench"] == "tx":
        return ("tx", m["op"], m["size"], 1)
    if m["bench"] == "list":
        return ("list", m["op"], m["elements"], m["payload"])
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
    errors = [m for m in meas if "error" in m]
    meas = [m for m in meas if "error" not in m]

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
        elif k[0] == "list":
            row.update(op=k[1], elements=k[2], payload=k[3])
        else:
            row.update(map=k[1], op=k[2], threads=k[3])
        for be in BACKENDS:
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
            if k[0] == "list" and all("ns_per_element" in m for m in ms):
                d["ns_per_element_median"] = statistics.median(m["ns_per_element"] for m in ms)
            row[be] = d
        # "speedup" / "speedup_per_round": kavach (undo); "speedup_redo" / ...: kavach-redo.
        for be, sfx in (("kavach", ""), ("kavach-redo", "_redo")):
            kv, pm = row.get(be), row.get("pmemobj")
            if kv and pm:
                row["speedup" + sfx] = pm["ns_per_op_median"] / kv["ns_per_op_median"]
                per = []
                for r, kns in kv["per_round_ns_per_op"].items():
                    pns = pm["per_round_ns_per_op"].get(r)
                    if pns:
                        per.append(pns / kns)
                row["speedup_per_round" + sfx] = per
            else:
                row["speedup" + sfx] = None
                row["speedup_per_round" + sfx] = []
        summary.append(row)

    def cell_of(row):
        if row["bench"] == "tx":
            grp = "allocfree" if row["op"] in ("alloc", "free", "realloc") else row["op"]
            return f"tx-{grp}-{row['size']}"
        if row["bench"] == "list":
            return f"list-{row['elements']}"
        return f"map-{row['map']}-t{row['threads']}"

    busy_runs = [r for r in runs if r["round"] > 0 and (r.get("busy_before") or r.get("busy_after"))]
    busy_cells = {r["cell"] for r in busy_runs}
    for row in summary:
        row["disturbed"] = cell_of(row) in busy_cells

    failed = [r for r in runs if r["rc"] != 0]
    checks = [r for r in runs if r["round"] == 0]

    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": dict(meta), "summary": summary, "measurements": meas, "errors": errors,
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
    w("round (each round runs the libraries back to back, rotating which goes first). Kavach runs")
    w("as two libraries: \"undo\" (kavach: the same calls as libpmemobj) and \"redo\" (kavach-redo:")
    w("kv_tx_begin_mode(KV_TX_REDO), kv_tx_write, kv_tx_read).")
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

    def rounds_str(row, sfx=""):
        p = row["speedup_per_round" + sfx]
        return "-" if not p else f"{min(p):.2f}–{max(p):.2f}"

    def ns_of(row, be, field="ns_per_op_median"):
        d = row.get(be)
        return fmt_ns(d and d.get(field))

    def err_of(kind, op, x, be):
        for e in errors:
            if e["bench"] == kind and e["op"] == op and e.get("elements", e.get("size")) == x \
                    and e["backend"] == be:
                return "refused‡"
        return None

    three = ("| pmemobj ns | Kavach undo ns | Kavach redo ns | undo speedup | redo speedup | "
             "undo per-round | redo per-round |")

    tx = [r for r in summary if r["bench"] == "tx"]
    if any(r["op"] != "words" for r in tx):
        w("## Transactions (one thread)\n")
        w("ns per transaction (mean over the loop, median over rounds); speedup = pmemobj ÷ Kavach.\n")
        w("| op | size B " + three)
        w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        for op in ("overwrite", "alloc", "free", "realloc", "pair"):
            for r in sorted((r for r in tx if r["op"] == op), key=lambda r: r["size"]):
                w(f"| {op}{mark(r)} | {r['size']} | {ns_of(r, 'pmemobj')} | {ns_of(r, 'kavach')} | "
                  f"{ns_of(r, 'kavach-redo')} | {fmt_ratio(r['speedup'])} | "
                  f"{fmt_ratio(r['speedup_redo'])} | {rounds_str(r)} | {rounds_str(r, '_redo')} |")
        w("")
        w("overwrite: write the whole object + commit. alloc: alloc + write a 16-byte slot (the link) +")
        w("commit. free: read the slot + write it null + free + commit (random order). realloc: the same allocations again after all were freed (memory touched before;")
        w("alloc on a fresh pool includes the kernel's first-touch page faults of the pool's pages).")
        w("pair: one alloc transaction and one free transaction; time per pair. Undo builds store with")
        w("add_range + memcpy; the redo build with kv_tx_write (pm.h).")
        w("")
    words = sorted((r for r in tx if r["op"] == "words"), key=lambda r: r["size"])
    if words:
        w("## Transaction-size sweep (one thread)\n")
        w("One transaction writes W 8-byte words, each in its own cache line of one object (W")
        w("pm_writes: snapshot + store on the undo builds, kv_tx_write on the redo build).\n")
        w("| words per tx " + three)
        w("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        for r in words:
            w(f"| {r['size']}{mark(r)} | {ns_of(r, 'pmemobj')} | {ns_of(r, 'kavach')} | "
              f"{ns_of(r, 'kavach-redo')} | {fmt_ratio(r['speedup'])} | "
              f"{fmt_ratio(r['speedup_redo'])} | {rounds_str(r)} | {rounds_str(r, '_redo')} |")
        w("")
    lists = [r for r in summary if r["bench"] == "list"]
    if lists or any(e["bench"] == "list" for e in errors):
        w("## Doubly-linked list (DNV Memory's microbenchmark, one thread)\n")
        w("A circular doubly-linked list of nodes with a 128-byte payload (unless the payload column")
        w("says otherwise). push_back: allocate, fill and link at the tail, one transaction; pop_front:")
        w("unlink the head and free it, one transaction; iterate_read / iterate_write: one transaction")
        w("walks the whole list and reads / writes 8 bytes of every element. ns per transaction;")
        w("speedup = pmemobj ÷ Kavach. \"refused‡\": the library refused the transaction (its log")
        w("cannot hold it; see the list below).\n")
        w("| op | elements | payload B " + three)
        w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
        keys = sorted({(r["op"], r["elements"], r["payload"]) for r in lists}
                      | {(e["op"], e["elements"], e["payload"]) for e in errors if e["bench"] == "list"},
                      key=lambda k: (["push_back", "pop_front", "iterate_read", "iterate_write"].index(k[0])
                                     if k[0] in ("push_back", "pop_front", "iterate_read", "iterate_write")
                                     else 9, k[1], k[2]))
        for op, n, pl in keys:
            r = next((r for r in lists if (r["op"], r["elements"], r["payload"]) == (op, n, pl)), None)
            if r is None:
                r = {"speedup": None, "speedup_redo": None, "speedup_per_round": [],
                     "speedup_per_round_redo": []}
            cells = []
            for be in ("pmemobj", "kavach", "kavach-redo"):
                cells.append(err_of("list", op, n, be) or ns_of(r, be))
            w(f"| {op}{mark(r) if 'bench' in r else ''} | {n} | {pl} | {cells[0]} | {cells[1]} | {cells[2]} | "
              f"{fmt_ratio(r['speedup'])} | {fmt_ratio(r['speedup_redo'])} | {rounds_str(r)} | "
              f"{rounds_str(r, '_redo')} |")
        w("")
        if errors:
            w("Refused transactions (one line per run):\n")
            for e in errors:
                w(f"- {e['backend']} {e['op']} ({e.get('elements', e.get('size'))}): {e['error']}")
            w("")
    mp = [r for r in summary if r["bench"] == "map"]
    if mp:
        w("## Maps (one transaction per operation)\n")
        w("(pmemobj and Kavach's undo mode only: the maps' code stores directly.)\n")
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
    red = [be for be in REDUNDANT if any(r.get(be) for r in summary)]
    if red:
        w("## Redundancy (Kavach, undo mode)\n")
        w("Kavach's heap on pools created with each redundancy mode (kv_pool_create_flags), beside")
        w("redundancy off (\"kavach\") and libpmemobj (which has none). ns/op (maps: wall time per")
        w("key); in brackets the change against off, median over rounds. lazy: write tracking and")
        w("a background pass every second; eager: each commit's diff updates line and page checksums")
        w("and parity, the heap's own stores (logs, allocator words) keep theirs as they happen;")
        w("txb-object: each commit recomputes a CRC-32C of every object it changed (a side table;")
        w("no parity, detection only); txb-page: each commit recomputes the pages it and the heap")
        w("touched, with their parity.\n")
        head = "| cell | pmemobj | off | " + " | ".join(be[len("kavach-"):] for be in red) + " |"
        w(head)
        w("| --- | ---: | ---: | " + " | ".join("---:" for _ in red) + " |")
        for r in summary:
            if r["bench"] == "map":
                name = f"{r['map']} {r['op']} T={r['threads']}"
            elif r["bench"] == "tx":
                name = (f"tx words {r['size']} per tx" if r["op"] == "words"
                        else f"tx {r['op']} {r['size']} B")
            else:
                name = f"list {r['op']} N={r['elements']}"
            off = r.get("kavach")
            cells = []
            for be in red:
                d = r.get(be)
                if not d:
                    cells.append("-")
                elif off:
                    pct = 100.0 * (d["ns_per_op_median"] / off["ns_per_op_median"] - 1.0)
                    cells.append(f"{fmt_ns(d['ns_per_op_median'])} ({pct:+.0f}%)")
                else:
                    cells.append(fmt_ns(d["ns_per_op_median"]))
            pm = r.get("pmemobj")
            w(f"| {name}{mark(r)} | {fmt_ns(pm and pm['ns_per_op_median'])} | "
              f"{fmt_ns(off and off['ns_per_op_median'])} | " + " | ".join(cells) + " |")
        w("")
    w("## Every round\n")
    w("ns/op of every round (maps: wall time / keys, so with 2 threads half a thread's latency).\n")
    w("| cell | library | ns/op by round |")
    w("| --- | --- | --- |")
    for r in summary:
        name = (f"tx words {r['size']} per tx" if r["bench"] == "tx" and r["op"] == "words"
                else f"tx {r['op']} {r['size']} B" if r["bench"] == "tx"
                else f"list {r['op']} N={r['elements']}" if r["bench"] == "list"
                else f"{r['map']} {r['op']} T={r['threads']}")
        for be in BACKENDS:
            d = r.get(be)
            if d:
                vals = ", ".join(f"r{k}: {fmt_ns(v)}" for k, v in sorted(d["per_round_ns_per_op"].items(),
                                                                        key=lambda kv: int(kv[0])))
                w(f"| {name} | {be} | {vals} |")
    w("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
