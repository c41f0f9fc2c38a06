#!/usr/bin/env python3
"""Summarize persist-benchmark lines into a markdown table and JSON.

Input lines (from bench/persist/run.sh, any order, blank lines ignored):

    LABEL SIZE ROUND NS_PER_OP STORE_ONLY_NS_PER_OP

with LABEL in {libpmem, kavach}. Per (label, size) it takes the median over
rounds of NS_PER_OP, and the median over rounds of the per-round net cost
(NS_PER_OP - STORE_ONLY_NS_PER_OP, both measured in the same process and
round, so the pair shares that round's conditions).

Usage:
    summarize.py RAW_FILE [RAW_FILE...] [--json OUT.json] [--meta KEY=VALUE]...

`-` reads stdin. The markdown report goes to stdout; --meta pairs are printed
at its top (in the order given) and stored under "meta" in the JSON.
Stdlib only.
"""

import argparse
import json
import math
import statistics
import sys

LABELS = ("libpmem", "kavach")


def parse_lines(stream, name, samples):
    for lineno, raw in enumerate(stream, 1):
        line = raw.strip()
        if not line:
            continue
        parts = line.split()
        where = f"{name}:{lineno}"
        if len(parts) != 5:
            raise ValueError(f"{where}: expected 5 fields, got {line!r}")
        label, size, rnd, ns, store = parts
        if label not in LABELS:
            raise ValueError(f"{where}: unknown label {label!r}")
        try:
            size_i, rnd_i = int(size), int(rnd)
            ns_f, store_f = float(ns), float(store)
        except ValueError:
            raise ValueError(f"{where}: bad number in {line!r}") from None
        if size_i <= 0 or not all(map(math.isfinite, (ns_f, store_f))):
            raise ValueError(f"{where}: bad values in {line!r}")
        samples.setdefault((label, size_i), []).append((rnd_i, ns_f, store_f))


def side_stats(rows):
    if not rows:
        return None
    ns = [r[1] for r in rows]
    store = [r[2] for r in rows]
    net = [r[1] - r[2] for r in rows]
    return {
        "rounds": len(rows),
        "median_ns": round(statistics.median(ns), 4),
        "min_ns": min(ns),
        "max_ns": max(ns),
        "store_only_median_ns": round(statistics.median(store), 4),
        "net_median_ns": round(statistics.median(net), 4),
        "per_round": [
            {"round": r[0], "ns_per_op": r[1], "store_only_ns_per_op": r[2]}
            for r in sorted(rows)
        ],
    }


def ratio(num, den):
    if num is None or den is None or den <= 0:
        return None
    return round(num / den, 6)


def fmt(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", nargs="+", help="raw result file(s), - for stdin")
    ap.add_argument("--json", help="write the summary as JSON here")
    ap.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                    help="report header item (repeatable)")
    args = ap.parse_args(argv)

    meta = {}
    for item in args.meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            ap.error(f"--meta expects KEY=VALUE, got {item!r}")
        meta[key] = value

    samples = {}
    try:
        for name in args.raw:
            if name == "-":
                parse_lines(sys.stdin, "<stdin>", samples)
            else:
                with open(name, encoding="utf-8") as f:
                    parse_lines(f, name, samples)
    except (OSError, ValueError) as e:
        print(f"summarize.py: {e}", file=sys.stderr)
        return 2
    if not samples:
        print("summarize.py: no result lines", file=sys.stderr)
        return 2

    rows = []
    for size in sorted({s for _, s in samples}):
        lp = side_stats(samples.get(("libpmem", size), []))
        kv = side_stats(samples.get(("kavach", size), []))
        rows.append({
            "size": size,
            "libpmem": lp,
            "kavach": kv,
            "ratio_kavach_over_libpmem": ratio(
                kv and kv["median_ns"], lp and lp["median_ns"]),
            "net_ratio_kavach_over_libpmem": ratio(
                kv and kv["net_median_ns"], lp and lp["net_median_ns"]),
        })

    out = []
    out.append("# Persist latency: Kavach vs libpmem")
    out.append("")
    for key, value in meta.items():
        out.append(f"- {key}: {value}")
    if meta:
        out.append("")
    out.append("ns per op = one 8-byte store + one persist of SIZE bytes; "
               "net = ns per op minus the same loop with the store only "
               "(per round, then median). Medians over rounds.")
    out.append("")
    out.append("| size | libpmem median ns | kavach median ns "
               "| ratio kavach/libpmem | libpmem net ns | kavach net ns "
               "| net ratio |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        lp, kv = row["libpmem"], row["kavach"]
        out.append("| {} | {} | {} | {} | {} | {} | {} |".format(
            row["size"],
            fmt(lp and lp["median_ns"]),
            fmt(kv and kv["median_ns"]),
            fmt(row["ratio_kavach_over_libpmem"], ".3f"),
            fmt(lp and lp["net_median_ns"]),
            fmt(kv and kv["net_median_ns"]),
            fmt(row["net_ratio_kavach_over_libpmem"], ".3f"),
        ))
    missing = [f"{label} size {row['size']}" for row in rows
               for label in LABELS if row[label] is None]
    if missing:
        out.append("")
        out.append("missing results: " + ", ".join(missing))
    print("\n".join(out))

    if args.json:
        doc = {"meta": meta, "results": rows}
        try:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
        except OSError as e:
            print(f"summarize.py: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
