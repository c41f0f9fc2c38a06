#!/usr/bin/env python3
"""Summarize log-benchmark lines (Kavach vs libpmemlog) into markdown and JSON.

Input: the lines both harnesses print (bench/log/run.sh collects them), any
order, blank lines ignored. Either space-separated, `KIND SIDE FIELDS...`, or
one JSON object per line with the same field names (the harnesses' --json):

    lat   SIDE size round ops batch median_ns p99_ns mean_ns
    floor SIDE what round iters ns
    tput  SIDE mode size threads round ops seconds ops_per_s
    vuln  SIDE mode size threads round samples p50 p90 p99 p999 max mean bound ops_per_s
    recov SIDE size round rep records bytes open_ms walk_ms
    recov1 SIDE size round rep records bytes open_ms walk_ms   (Kavach's one-pass
        recovery, `LogFile::open_replaying`; walk_ms is 0)

SIDE is `kavach` or `pmemlog`. Per configuration the report takes the median
over rounds (recovery: over every repetition of every round; window maxima:
the maximum). Every "speed-up" column reads >1 when Kavach is faster:
libpmemlog time / Kavach time, or Kavach ops/s / libpmemlog ops/s.

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

SIDES = ("kavach", "pmemlog")
SCHEMA = {
    "lat": ["size", "round", "ops", "batch", "median_ns", "p99_ns", "mean_ns"],
    "floor": ["what", "round", "iters", "ns"],
    "tput": ["mode", "size", "threads", "round", "ops", "seconds", "ops_per_s"],
    "vuln": ["mode", "size", "threads", "round", "samples", "p50", "p90", "p99",
             "p999", "max", "mean", "bound", "ops_per_s"],
    "recov": ["size", "round", "rep", "records", "bytes", "open_ms", "walk_ms"],
    "recov1": ["size", "round", "rep", "records", "bytes", "open_ms", "walk_ms"],
}
STRINGS = {"mode", "what"}
INTS = {"size", "round", "ops", "batch", "iters", "threads", "samples", "p50",
        "p90", "p99", "p999", "max", "bound", "rep", "records", "bytes"}


def convert(name, value, where):
    if name in STRINGS:
        return str(value)
    try:
        v = int(value) if name in INTS else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: field {name} is not a number: {value!r}") from None
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{where}: field {name} is not finite")
    return v


def parse_line(line, where):
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{where}: bad JSON: {e}") from None
        kind, side = obj.get("kind"), obj.get("side")
        values = None
    else:
        parts = line.split()
        if len(parts) < 2:
            raise ValueError(f"{where}: too few fields in {line!r}")
        kind, side, values = parts[0], parts[1], parts[2:]
    if kind not in SCHEMA:
        raise ValueError(f"{where}: unknown kind {kind!r}")
    if side not in SIDES:
        raise ValueError(f"{where}: unknown side {side!r}")
    names = SCHEMA[kind]
    if values is None:
        missing = [n for n in names if n not in obj]
        if missing:
            raise ValueError(f"{where}: missing fields {missing}")
        values = [obj[n] for n in names]
    elif len(values) != len(names):
        raise ValueError(f"{where}: {kind} wants {len(names)} fields after the side, "
                         f"got {len(values)}: {line!r}")
    row = {"kind": kind, "side": side}
    for n, v in zip(names, values):
        row[n] = convert(n, v, where)
    return row


def read_rows(names):
    rows = []
    for name in names:
        stream = sys.stdin if name == "-" else open(name, encoding="utf-8")
        try:
            for lineno, raw in enumerate(stream, 1):
                line = raw.strip()
                if line:
                    rows.append(parse_line(line, f"{name}:{lineno}"))
        finally:
            if stream is not sys.stdin:
                stream.close()
    return rows


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pick(rows, kind, side, **match):
    return [r for r in rows if r["kind"] == kind and r["side"] == side
            and all(r[k] == v for k, v in match.items())]


def ratio(num, den):
    if num is None or den is None or den <= 0:
        return None
    return num / den


def fmt(x, spec=".1f"):
    return "n/a" if x is None else format(x, spec)


def fmt_rate(x):
    return "n/a" if x is None else f"{x / 1e6:.3f}"


def rate_cell(m, xs):
    """Median (min–max over rounds), in millions per second."""
    if m is None:
        return "n/a"
    if len(xs) < 2:
        return fmt_rate(m)
    return f"{fmt_rate(m)} ({min(xs) / 1e6:.2f}–{max(xs) / 1e6:.2f})"


def size_name(n):
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


def per_round_ratios(a_rows, b_rows, field):
    """Ratios a/b of rounds present on both sides (min, max)."""
    a = {r["round"]: r[field] for r in a_rows}
    b = {r["round"]: r[field] for r in b_rows}
    rs = [a[k] / b[k] for k in a if k in b and b[k] > 0]
    return (min(rs), max(rs)) if rs else (None, None)


def latency(rows, out, doc):
    sizes = sorted({r["size"] for r in rows if r["kind"] == "lat"})
    if not sizes:
        return
    out += ["## Single-thread append + force latency", "",
            "Kavach `append(data, Sync)` vs `pmemlog_append`; ns per append from batches of "
            "`batch` appends (one clock read per batch), median and p99 over batches, then the "
            "median over rounds. Speed-up = libpmemlog / Kavach (>1: Kavach faster); the range "
            "is over rounds.", "",
            "| payload | libpmemlog median ns | Kavach median ns | speed-up | range "
            "| libpmemlog p99 ns | Kavach p99 ns |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    doc["latency"] = []
    for s in sizes:
        p, k = pick(rows, "lat", "pmemlog", size=s), pick(rows, "lat", "kavach", size=s)
        pm, km = med(r["median_ns"] for r in p), med(r["median_ns"] for r in k)
        pp, kp = med(r["p99_ns"] for r in p), med(r["p99_ns"] for r in k)
        lo, hi = per_round_ratios(p, k, "median_ns")
        sp = ratio(pm, km)
        out.append(f"| {size_name(s)} | {fmt(pm)} | {fmt(km)} | {fmt(sp, '.2f')} | "
                   f"{fmt(lo, '.2f')}–{fmt(hi, '.2f')} | {fmt(pp)} | {fmt(kp)} |")
        doc["latency"].append({"size": s, "pmemlog_median_ns": pm, "kavach_median_ns": km,
                               "speedup": sp, "speedup_min": lo, "speedup_max": hi,
                               "pmemlog_p99_ns": pp, "kavach_p99_ns": kp,
                               "rounds": [len(p), len(k)]})
    out.append("")


def floor(rows, out, doc):
    fl = [r for r in rows if r["kind"] == "floor"]
    if not fl:
        return

    def f(side, what):
        return med(r["ns"] for r in fl if r["side"] == side and r["what"] == what)

    sizes = sorted({r["size"] for r in rows if r["kind"] == "lat"})
    out += ["## Where the time goes (floor)", "",
            f"A bare 64 B persist (8-byte store, clwb, sfence): Kavach `Medium::persist` "
            f"{fmt(f('kavach', 'persist64'))} ns, libpmem `pmem_persist` "
            f"{fmt(f('pmemlog', 'persist64'))} ns.", "",
            "Per payload, on a plain mapping with no locks: *libpmemlog stores* = its "
            "append's persistence sequence (`pmem_memcpy_nodrain`, `pmem_drain`, 8-byte write "
            "offset stored and `pmem_persist`ed: two fences); *Kavach streamed* = what a "
            "Sync append stores when the tuning streams such records (`stream_sync`): every "
            "line of the record, the header's included, with non-temporal stores, one fence; "
            "*Kavach cache path* = the other way (below `nt_min`: header and payload stored "
            "normally, one flush of the record's lines, one fence; from `nt_min`: non-temporal "
            "payload, header line stored and flushed, one fence, as before the header's line "
            "was streamed); *Kavach streamed + CRC* = the streamed stores with the record CRC "
            "computed alongside (the fused copy), as a streamed append issues them; *CRC* = "
            "the record CRC alone (16 header bytes + payload). Medians over "
            "rounds, ns.", "",
            "| payload | libpmemlog stores | libpmemlog append | Kavach streamed "
            "| Kavach streamed + CRC | Kavach cache path | Kavach CRC | Kavach append |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    doc["floor"] = {"persist64": {"kavach": f("kavach", "persist64"),
                                  "pmemlog": f("pmemlog", "persist64")}, "sizes": []}
    for s in sizes:
        pa = med(r["median_ns"] for r in pick(rows, "lat", "pmemlog", size=s))
        ka = med(r["median_ns"] for r in pick(rows, "lat", "kavach", size=s))
        row = {"size": s, "pmemlog_stores": f("pmemlog", f"pmemlog_seq{s}"),
               "pmemlog_append": pa, "kavach_streamed": f("kavach", f"stream{s}"),
               "kavach_streamed_crc": f("kavach", f"fused{s}"),
               "kavach_cache_path": f("kavach", f"store{s}"),
               "kavach_crc": f("kavach", f"crc{s}"), "kavach_append": ka}
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} |".format(
            size_name(s), fmt(row["pmemlog_stores"]), fmt(pa), fmt(row["kavach_streamed"]),
            fmt(row["kavach_streamed_crc"]), fmt(row["kavach_cache_path"]),
            fmt(row["kavach_crc"]), fmt(ka)))
        doc["floor"]["sizes"].append(row)
    out.append("")


def throughput(rows, out, doc):
    tp = [r for r in rows if r["kind"] == "tput"]
    if not tp:
        return
    modes = []
    for r in tp:
        if r["side"] == "kavach" and r["mode"] not in modes:
            modes.append(r["mode"])
    out += ["## Throughput", "",
            "Appends per second (millions), all writer threads together; median over rounds "
            "(min–max over rounds in brackets). "
            "libpmemlog serializes appends with a lock; every append of both is durable except "
            "under Kavach's `frequency:F` and `group:G`. The ring is emptied between timed "
            "segments (clock stopped). Speed-up = Kavach / libpmemlog.", "",
            "| payload | threads | libpmemlog | " + " | ".join(
                f"Kavach {m} | speed-up" for m in modes) + " |",
            "|---:|---:|---:|" + "---:|---:|" * len(modes)]
    doc["throughput"] = []
    for s in sorted({r["size"] for r in tp}):
        for t in sorted({r["threads"] for r in tp if r["size"] == s}):
            pr = [r["ops_per_s"] for r in tp
                  if r["side"] == "pmemlog" and r["size"] == s and r["threads"] == t]
            p = med(pr)
            cells, entry = [], {"size": s, "threads": t, "pmemlog_ops_per_s": p,
                                "pmemlog_per_round": pr, "kavach": {}}
            for m in modes:
                kr = [r["ops_per_s"] for r in tp if r["side"] == "kavach"
                      and r["mode"] == m and r["size"] == s and r["threads"] == t]
                k = med(kr)
                cells.append(f"{rate_cell(k, kr)} | {fmt(ratio(k, p), '.2f')}")
                entry["kavach"][m] = {"ops_per_s": k, "speedup": ratio(k, p),
                                      "per_round": kr}
            out.append(f"| {size_name(s)} | {t} | {rate_cell(p, pr)} | "
                       + " | ".join(cells) + " |")
            doc["throughput"].append(entry)
    out.append("")


def vulnerability(rows, out, doc):
    vu = [r for r in rows if r["kind"] == "vuln"]
    if not vu:
        return
    out += ["## Vulnerability window", "",
            "After each append the writer samples `lsn - durable_lsn()`: records up to its "
            "own that were not yet durable at that moment (0 when its record was). Percentiles "
            "over every sample of a run, median over rounds; max is the largest in any round. "
            "The F×T bound applies to `frequency:F` with T threads; `group:G` has none "
            "(a shared counter).", "",
            "| policy | payload | threads | samples/round | p50 | p90 | p99 | p99.9 | max "
            "| mean | F×T bound |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    doc["vulnerability"] = []
    keys = []
    for r in vu:
        k = (r["mode"], r["size"], r["threads"])
        if k not in keys:
            keys.append(k)
    for mode, s, t in keys:
        rs = [r for r in vu if (r["mode"], r["size"], r["threads"]) == (mode, s, t)]
        e = {"mode": mode, "size": s, "threads": t, "rounds": len(rs)}
        for q in ("samples", "p50", "p90", "p99", "p999", "mean"):
            e[q] = med(r[q] for r in rs)
        e["max"] = max(r["max"] for r in rs)
        e["bound"] = rs[0]["bound"] or None
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            mode, size_name(s), t, fmt(e["samples"], ".0f"), fmt(e["p50"], "g"),
            fmt(e["p90"], "g"), fmt(e["p99"], "g"), fmt(e["p999"], "g"), e["max"],
            fmt(e["mean"], ".1f"), "—" if e["bound"] is None else e["bound"]))
        doc["vulnerability"].append(e)
    out.append("")


def recovery(rows, out, doc):
    rc = [r for r in rows if r["kind"] == "recov"]
    if not rc:
        return
    out += ["## Recovery of a full log", "",
            "A fresh pool filled with records of one size until full, closed, then timed: "
            "open (Kavach `LogFile::open`, which validates every record to find the tail; "
            "`pmemlog_open`) and iterate every record (Kavach `records()` with `next_ref`, "
            "which takes the records open validated as checked and lends each payload from "
            "one reused buffer; `pmemlog_walk` with chunksize = record "
            "size and a callback that copies the chunk; libpmemlog has no record headers and "
            "no checksums). \"Kavach, one pass\" is `LogFile::open_replaying`: the same open "
            "handing each record, payload borrowed, to a callback from the walk that checks it "
            "(its whole time is under open). Medians over every repetition of every round, ms. "
            "Speed-up = libpmemlog / Kavach.", "",
            "| record | side | records | open ms | iterate ms | total ms | ns per record "
            "| speed-up (total) |",
            "|---:|---|---:|---:|---:|---:|---:|---:|"]
    doc["recovery"] = []
    one = [r for r in rows if r["kind"] == "recov1"]
    for s in sorted({r["size"] for r in rc}, reverse=True):
        tot = {}
        for side in ("pmemlog", "kavach", "kavach1"):
            if side == "kavach1":
                rs = [r for r in one if r["side"] == "kavach" and r["size"] == s]
            else:
                rs = [r for r in rc if r["side"] == side and r["size"] == s]
            if not rs:
                continue
            o = med(r["open_ms"] for r in rs)
            w = med(r["walk_ms"] for r in rs)
            t = med(r["open_ms"] + r["walk_ms"] for r in rs)
            n = rs[0]["records"]
            tot[side] = t
            e = {"size": s, "side": side, "records": n, "bytes": rs[0]["bytes"],
                 "open_ms": o, "walk_ms": w, "total_ms": t, "samples": len(rs),
                 "ns_per_record": t * 1e6 / n if n else None}
            sp = ratio(tot.get("pmemlog"), t) if side != "pmemlog" else None
            e["speedup"] = sp
            label = {"pmemlog": "libpmemlog", "kavach": "Kavach",
                     "kavach1": "Kavach, one pass"}[side]
            out.append(f"| {size_name(s)} | {label} | {n} | {fmt(o, '.2f')} | {fmt(w, '.2f')} | "
                       f"{fmt(t, '.2f')} | {fmt(e['ns_per_record'])} | "
                       f"{'' if side == 'pmemlog' else fmt(sp, '.2f')} |")
            doc["recovery"].append(e)
    out.append("")
    sizes = sorted({r["size"] for r in rc}, reverse=True)
    if any(r["kind"] == "floor" and r["what"].startswith("walk") for r in rows):
        out += ["Floor of a walk (Kavach's harness, a plain mapping larger than the last-level "
                "cache, no log): per record, copying the payload out (what libpmemlog's walk "
                "does), and the CRC over header and payload where they lie (the least a checked "
                "walk does), without and with the walk's prefetch 4 KiB ahead. Medians over "
                "rounds, ns per record.", "",
                "| record | copy out | CRC in place | CRC in place, prefetch |",
                "|---:|---:|---:|---:|"]
        doc["recovery_floor"] = []
        for s in sizes:
            def g(what):
                vals = [r["ns"] for r in rows if r["kind"] == "floor" and r["side"] == "kavach"
                        and r["what"] == f"{what}{s}"]
                return med(vals) if vals else None
            e = {"size": s, "copy": g("walkcopy"), "crc": g("walkcrc"), "crc_prefetch": g("walkcrcpf")}
            doc["recovery_floor"].append(e)
            out.append(f"| {size_name(s)} | {fmt(e['copy'])} | {fmt(e['crc'])} | "
                       f"{fmt(e['crc_prefetch'])} |")
        out.append("")


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
    try:
        rows = read_rows(args.raw)
    except (OSError, ValueError) as e:
        print(f"summarize.py: {e}", file=sys.stderr)
        return 2
    if not rows:
        print("summarize.py: no result lines", file=sys.stderr)
        return 2

    out = ["# Log: Kavach vs libpmemlog", ""]
    out += [f"- {k}: {v}" for k, v in meta.items()]
    if meta:
        out.append("")
    doc = {"meta": meta}
    latency(rows, out, doc)
    floor(rows, out, doc)
    throughput(rows, out, doc)
    vulnerability(rows, out, doc)
    recovery(rows, out, doc)
    print("\n".join(out).rstrip())

    if args.json:
        doc["raw"] = rows
        try:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2)
                fh.write("\n")
        except OSError as e:
            print(f"summarize.py: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
