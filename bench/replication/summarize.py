#!/usr/bin/env python3
"""Summarize a bench/replication/run.sh directory: DIR/results.jsonl (one object per cell, from
repl_bench --json) and DIR/runs.jsonl (one per harness process) -> a markdown report on stdout.

Ratios: every cell is divided by the 0-backup anchor cell (`order` "none") of the same round,
group (process) and size, run next to it; the report gives the median of those per-round ratios
(and the min-max over rounds when there are several). Latency and throughput figures are
medians over rounds (anchor rows: over rounds and groups).

A cell is marked † when other processes used more than 0.25 of a CPU during it (`other_cpu`,
measured by the harness from /proc/stat), ‡ when its rounds differ by more than 20% (max/min of
the median latency or of ops/s). With --undisturbed, cells marked † are left out altogether (a
ratio needs its cell and its anchor undisturbed); the cell counts say how many rounds remain.
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

DISTURBED_CPU = 0.25
SPREAD = 1.20


def load(path):
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def fmt_us(ns):
    us = ns / 1e3
    if us != us:
        return "—"
    return f"{us:.2f}" if us < 10 else f"{us:.1f}"


def fmt_x(x):
    if x != x:
        return "—"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_r(x):
    """A ratio, with more digits when it is small."""
    return fmt_x(x) if x != x or x >= 0.1 else f"{x:.4f}"


def fmt_rate(x):
    if x != x:
        return "—"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    return f"{x / 1e3:.1f} k"


def size_name(s):
    s = int(s)
    return f"{s // 1024} KiB" if s >= 1024 and s % 1024 == 0 else f"{s} B"


def spread_of(xs):
    xs = [x for x in xs if x == x and x > 0]
    return max(xs) / min(xs) if len(xs) > 1 else 1.0


def marks(cells):
    m = ""
    if any(c.get("other_cpu", 0) > DISTURBED_CPU for c in cells):
        m += "†"
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--meta", action="append", default=[], help="KEY=VALUE for the header")
    ap.add_argument("--undisturbed", action="store_true",
                    help=f"leave out cells during which other processes used > {DISTURBED_CPU} CPU")
    a = ap.parse_args()
    res = load(a.dir / "results.jsonl")
    left_out = []
    if a.undisturbed:
        left_out = [r for r in res if r.get("other_cpu", 0) > DISTURBED_CPU]
        res = [r for r in res if r.get("other_cpu", 0) <= DISTURBED_CPU]
    runs = load(a.dir / "runs.jsonl")
    out = []
    p = out.append

    p("# Replication benchmark (issue 7): Kavach log with 0-3 backups over loopback TCP\n")
    if a.undisturbed:
        p(f"**Undisturbed cells only:** {len(left_out)} cell(s) during which other processes used "
          f"more than {DISTURBED_CPU} CPU are left out; the cell counts say how many rounds "
          "remain.\n")
    for kv in a.meta:
        k, _, v = kv.partition("=")
        p(f"- **{k}:** {v}")
    metas = [r for r in res if r["kind"] == "meta"]
    if metas:
        m = metas[0]
        clocks = [x["clock_read_ns"] for x in metas]
        p(
            f"- **harness:** {m['seconds']} s per measurement (cap {m['ops_cap']} appends), "
            f"{m['warmup_s']} s warm-up per cell, {m['pool_mib']} MiB log regions, recovery "
            f"log {m['recov_mib']} MiB, backup answer timeout {m['timeout_ms']} ms; one clock "
            f"read costs {min(clocks):.0f}-{max(clocks):.0f} ns (each per-append latency "
            f"includes one)"
        )
    p("")

    # --- floor ---------------------------------------------------------------------------------
    floor = [r for r in res if r["kind"] == "floor"]
    if floor:
        p("## Loopback TCP round trip, no protocol (µs)\n")
        p("A request of the record's size + 32 bytes, a 16-byte answer, blocking sockets, "
          "`TCP_NODELAY`; median over rounds of each round's median and p99.\n")
        p("| size | median | p99 | rounds |")
        p("| ---: | ---: | ---: | ---: |")
        by = defaultdict(list)
        for r in floor:
            by[r["size"]].append(r)
        for s in sorted(by):
            c = by[s]
            p(f"| {size_name(s)} | {fmt_us(med([x['median_ns'] for x in c]))} | "
              f"{fmt_us(med([x['p99_ns'] for x in c]))} | {len(c)}{marks(c)} |")
        p("")

    # --- lat -----------------------------------------------------------------------------------
    lat = [r for r in res if r["kind"] == "lat"]
    if lat:
        anchor = {}
        for r in lat:
            if r["order"] == "none":
                anchor[(r["round"], r["group"], r["size"])] = r
        cells = defaultdict(list)
        for r in lat:
            cells[(r["size"], r["backups"], r["order"])].append(r)
        order_rank = {"none": 0, "mirror0": 1, "replicate-first": 2, "parallel": 3,
                      "flush-first": 4}
        sizes = sorted({r["size"] for r in lat})
        keys = sorted(cells, key=lambda k: (k[0], k[1], order_rank.get(k[2], 9), k[2]))

        def ratios(c, field):
            xs = []
            for r in c:
                an = anchor.get((r["round"], r["group"], r["size"]))
                if an and an[field]:
                    xs.append(r[field] / an[field])
            return xs

        def summary(k):
            c = cells[k]
            lm = med([x["median_ns"] for x in c])
            lp = med([x["p99_ns"] for x in c])
            l10 = med([x.get("p10_ns") for x in c])
            t = med([x["ops_per_s"] for x in c])
            mb = med([x["mb_per_s"] for x in c])
            rl = ratios(c, "median_ns")
            rp = ratios(c, "p99_ns")
            rt = ratios(c, "ops_per_s")
            mk = marks(c)
            if (spread_of([x["median_ns"] for x in c]) > SPREAD
                    or spread_of([x["ops_per_s"] for x in c]) > SPREAD):
                mk += "‡"
            return dict(lm=lm, lp=lp, l10=l10, t=t, mb=mb, rl=med(rl), rp=med(rp), rt=med(rt),
                        rl_rng=(min(rl), max(rl)) if rl else None, n=len(c), mk=mk,
                        cpu=med([x["self_cpu"] for x in c]),
                        other=max(x["other_cpu"] for x in c))

        S = {k: summary(k) for k in keys}
        repl_cols = sorted({(k[1], k[2]) for k in keys if k[1] > 0},
                           key=lambda c: (c[0], order_rank.get(c[1], 9)))
        short = {"replicate-first": "RF", "parallel": "par", "flush-first": "FF"}

        p("## Single-thread append + force (`append(payload, Sync)`) latency\n")
        p("Median latency in µs (× = ratio to the 0-backup anchor of the same round, group and "
          "size, median over rounds). RF = replicate-first, par = parallel, FF = flush-first.\n")
        head = "| size | 0 backups | 0 + Replicator |" + "".join(
            f" {b} × {short.get(o, o)} |" for b, o in repl_cols)
        p(head)
        p("| ---: " * (3 + len(repl_cols)) + "|")
        for s in sizes:
            row = f"| {size_name(s)} |"
            for k in [(s, 0, "none"), (s, 0, "mirror0")] + [(s, b, o) for b, o in repl_cols]:
                if k not in S:
                    row += " — |"
                    continue
                x = S[k]
                if k[2] == "none":
                    row += f" {fmt_us(x['lm'])}{x['mk']} |"
                else:
                    row += f" {fmt_us(x['lm'])} ({fmt_x(x['rl'])}×){x['mk']} |"
            p(row)
        p("")
        p("## Single-thread append + force p99 latency\n")
        p("p99 of the per-append times in µs (× = ratio to the anchor's p99, as above).\n")
        p(head)
        p("| ---: " * (3 + len(repl_cols)) + "|")
        for s in sizes:
            row = f"| {size_name(s)} |"
            for k in [(s, 0, "none"), (s, 0, "mirror0")] + [(s, b, o) for b, o in repl_cols]:
                if k not in S:
                    row += " — |"
                    continue
                x = S[k]
                if k[2] == "none":
                    row += f" {fmt_us(x['lp'])}{x['mk']} |"
                else:
                    row += f" {fmt_us(x['lp'])} ({fmt_x(x['rp'])}×){x['mk']} |"
            p(row)
        p("")
        p("## Single-thread append + force throughput\n")
        p("Appends per second (one thread, `Sync`, timed in batches of 64), × = ratio to the "
          "anchor as above; MB/s of payload in the full table below.\n")
        p(head)
        p("| ---: " * (3 + len(repl_cols)) + "|")
        for s in sizes:
            row = f"| {size_name(s)} |"
            for k in [(s, 0, "none"), (s, 0, "mirror0")] + [(s, b, o) for b, o in repl_cols]:
                if k not in S:
                    row += " — |"
                    continue
                x = S[k]
                if k[2] == "none":
                    row += f" {fmt_rate(x['t'])}{x['mk']} |"
                else:
                    row += f" {fmt_rate(x['t'])} ({fmt_r(x['rt'])}×){x['mk']} |"
            p(row)
        p("")
        p("## Every latency cell\n")
        p("| size | backups | order | p10 µs | median µs | × | × range | p99 µs | × p99 | ops/s "
          "| × ops/s | MB/s | cells | cpu | others max |")
        p("| ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: |")
        for k in keys:
            x = S[k]
            rng = (f"{fmt_x(x['rl_rng'][0])}–{fmt_x(x['rl_rng'][1])}"
                   if x["rl_rng"] and x["n"] > 1 and k[2] != "none" else "")
            p(f"| {size_name(k[0])} | {k[1]} | {k[2]} | {fmt_us(x['l10'])} | {fmt_us(x['lm'])} | "
              f"{fmt_x(x['rl'])} | "
              f"{rng} | {fmt_us(x['lp'])} | {fmt_x(x['rp'])} | {x['t']:.0f} | "
              f"{fmt_r(x['rt'])} | {x['mb']:.1f} | "
              f"{x['n']}{x['mk']} | {x['cpu']:.2f} | {x['other']:.2f} |")
        p("")
        # Anchor stability: the anchor ran once per group and round.
        p("Anchor (0 backups) median latency over its runs (one per group and round): " + "; ".join(
            f"{size_name(s)} {fmt_us(min(r['median_ns'] for r in cells[(s, 0, 'none')]))}–"
            f"{fmt_us(max(r['median_ns'] for r in cells[(s, 0, 'none')]))} µs"
            for s in sizes if (s, 0, "none") in cells) + ".\n")

    # --- mt ------------------------------------------------------------------------------------
    mt = [r for r in res if r["kind"] == "mt"]
    if mt:
        anchor = {}
        for r in mt:
            if r["order"] == "none":
                anchor[(r["round"], r["group"], r["size"], r["mode"])] = r
        cells = defaultdict(list)
        for r in mt:
            cells[(r["size"], r["mode"], r["threads"], r["backups"], r["order"])].append(r)
        p("## Multi-thread throughput\n")
        p("Appends per second, all writers together; × = ratio to the anchor of the same round, "
          "group, size and policy (median over rounds).\n")
        p("| size | policy | threads | backups | order | ops/s | × | cells | cpu | others max |")
        p("| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for k in sorted(cells, key=lambda k: (k[0], k[1], k[2], k[3], k[4])):
            c = cells[k]
            xs = []
            for r in c:
                an = anchor.get((r["round"], r["group"], r["size"], r["mode"]))
                if an:
                    xs.append(r["ops_per_s"] / an["ops_per_s"])
            mk = marks(c) + ("‡" if spread_of([x["ops_per_s"] for x in c]) > SPREAD else "")
            rt = med(xs)
            p(f"| {size_name(k[0])} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | "
              f"{med([x['ops_per_s'] for x in c]):.0f} | "
              f"{fmt_r(rt)} | {len(c)}{mk} | "
              f"{med([x['self_cpu'] for x in c]):.2f} | {max(x['other_cpu'] for x in c):.2f} |")
        p("")

    # --- recov ---------------------------------------------------------------------------------
    rec = [r for r in res if r["kind"] == "recov"]
    if rec:
        cells = defaultdict(list)
        for r in rec:
            cells[(r["backups"], r["size"], r["case"])].append(r)
        p(f"## Recovery of a full {rec[0]['region_mib']} MiB log (ms)\n")
        p("intact: the primary reopens its own pool file (`Pool::open`, `Copy::new`) and runs "
          "`recover()`; lost: its pool file is deleted, an empty copy file of the same size is "
          "created (`create_copy_file`) and `recover()` rebuilds it from a backup. iterate: "
          "`records()` over every record. Medians over reps and rounds (max in brackets). "
          "one walk: a read-only `Log::open` of the same copy. new conn: a 64-byte read from a "
          "backup on a new connection (then on the same connection).\n")
        p("| backups | record | case | records | open / create | recover | iterate | "
          "recover + iterate | all | vs 500 ms | one walk | new conn | fetched MiB | n |")
        p("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: "
          "| ---: | ---: |")
        for k in sorted(cells, key=lambda k: (k[0], -k[1], k[2])):
            c = cells[k]

            def mm(f):
                return f"{med([x[f] for x in c]):.1f} ({max(x[f] for x in c):.1f})"

            ri = [x["recover_ms"] + x["walk_ms"] for x in c]
            worst = max(x["total_ms"] for x in c)
            p(f"| {k[0]} | {size_name(k[1])} | {k[2]} | {c[0]['records']:,} | {mm('open_ms')} | "
              f"{mm('recover_ms')} | {mm('walk_ms')} | {med(ri):.1f} ({max(ri):.1f}) | "
              f"{mm('total_ms')} | {'met' if worst < 500 else 'not met'} (worst {worst:.0f}) | "
              f"{med([x['one_walk_ms'] for x in c]):.1f} | "
              f"{med([x['new_conn_read_ms'] for x in c]):.1f} / "
              f"{med([x['read_ms'] for x in c]):.2f} | "
              f"{med([x['fetched_bytes'] for x in c]) / 2**20:.1f} | {len(c)}{marks(c)} |")
        fills = defaultdict(list)
        for r in rec:
            fills[(r["backups"], r["size"])].append(r["fill_s"])
        p("")
        p("Filling the log through replication (forced about every MiB): " + "; ".join(
            f"{b} backup{'s' if b > 1 else ''}, {size_name(s)}: {med(v):.2f} s"
            for (b, s), v in sorted(fills.items())) + ".\n")

    # --- disturbance ---------------------------------------------------------------------------
    p("## Other work on the machine\n")
    busy = [r for r in runs if r.get("busy_before") or r.get("busy_after")]
    disturbed = [r for r in res if r.get("other_cpu", 0) > DISTURBED_CPU]
    if not busy and not disturbed:
        p("- none seen: no process above 20% CPU before or after any harness process, and no "
          f"cell with other processes above {DISTURBED_CPU} CPU.")
    for r in busy:
        p(f"- {r['name']}: busy before: {r.get('busy_before') or '—'}; after: "
          f"{r.get('busy_after') or '—'}")
    if disturbed:
        p(f"- {len(disturbed)} cell(s) with other processes above {DISTURBED_CPU} CPU (†): " +
          "; ".join(
              f"{r['kind']} r{r['round']} B={r.get('backups')} {r.get('order', r.get('case', ''))} "
              f"{size_name(r['size']) if 'size' in r else ''} ({r['other_cpu']:.2f})"
              for r in disturbed[:40]) + ("; ..." if len(disturbed) > 40 else ""))
    for r in runs:
        if r.get("rc"):
            p(f"- **FAILED:** {r['name']} exit {r['rc']} (see raw/{r['name']}.err)")
    p("")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
