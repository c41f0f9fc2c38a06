#!/usr/bin/env python3
"""YCSB results: parse YCSB 0.17.0 output into JSON lines, and report them as markdown.

    summarize.py parse YCSB_STDOUT [KEY=VALUE...]
        One JSON line: the KEY=VALUE pairs (numbers converted) plus "kind": "ycsb",
        "throughput" (ops/s), "runtime_ms" and, per operation type (READ, UPDATE, INSERT,
        ...), its count, average, min, max, p99, p99.9 and p99.99 latency in microseconds and
        its "Return=" counts. Fails if the output has no [OVERALL] throughput. With
        cpu_file=PATH (bench/server/cpusample.py's samples over the invocation): "cpu", the
        server's and the client's CPU time per operation (µs; the server's split into user and
        system time) and the machine's idle and steal shares.

    summarize.py report RESULTS.jsonl [MORE.jsonl...] [--json OUT.json]
        Markdown tables, one per workload (load, a, b, c): per system the median over rounds of
        the throughput and of the p99 / p99.9 / p99.99 read and update latencies (insert for
        the load), then the ratios Kavach / Redis: for throughput above 1 means Kavach is
        faster, for latencies below 1 means Kavach answers sooner. kavach-always is paired
        with redis-always (equal durability) and redis-everysec, kavach-f64 with
        redis-everysec. Any return other than OK (NOT_FOUND, ERROR) is listed.

Stdlib only.
"""

import argparse
import json
import re
import statistics
import sys

ORDER = ["redis-always", "redis-everysec", "redis-none", "kavach-always", "kavach-f64"]
PAIRS = [("kavach-always", "redis-always"), ("kavach-always", "redis-everysec"),
         ("kavach-f64", "redis-everysec")]
SHORT = {"redis-always": "R-always", "redis-everysec": "R-everysec", "redis-none": "R-none",
         "kavach-always": "K-always", "kavach-f64": "K-f64"}
FIELDS = {
    "Operations": "count",
    "AverageLatency(us)": "avg_us",
    "MinLatency(us)": "min_us",
    "MaxLatency(us)": "max_us",
    "99thPercentileLatency(us)": "p99_us",
    "99.9PercentileLatency(us)": "p999_us",
    "99.99PercentileLatency(us)": "p9999_us",
}
WL_TITLE = {"load": "Load (inserts only)", "a": "Workload A (50% read, 50% update)",
            "b": "Workload B (95% read, 5% update)", "c": "Workload C (100% read)"}


def convert(v):
    for f in (int, float):
        try:
            return f(v)
        except ValueError:
            pass
    return v


def parse(path, pairs):
    rec = {"kind": "ycsb"}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep:
            sys.exit(f"parse: expected KEY=VALUE, got {kv!r}")
        rec[k] = convert(v)
    ops = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"\[([A-Z_\-]+)\], ([^,]+), (.+)$", line.strip())
            if not m:
                continue
            sect, name, val = m.group(1), m.group(2).strip(), m.group(3).strip()
            if sect == "OVERALL":
                if name == "Throughput(ops/sec)":
                    rec["throughput"] = float(val)
                elif name == "RunTime(ms)":
                    rec["runtime_ms"] = float(val)
            elif sect.startswith("TOTAL_GC"):
                if sect == "TOTAL_GC_TIME" and name == "Time(ms)":
                    rec["gc_ms"] = float(val)
            elif name.startswith("Return="):
                ops.setdefault(sect, {}).setdefault("returns", {})[name[7:]] = int(val)
            elif name in FIELDS:
                ops.setdefault(sect, {})[FIELDS[name]] = convert(val)
    if "throughput" not in rec:
        sys.exit(f"parse: {path} has no [OVERALL], Throughput(ops/sec) line")
    rec["ops"] = ops
    if "cpu_file" in rec:
        n = sum(d.get("count", 0) for k, d in ops.items()
                if k in ("READ", "UPDATE", "INSERT", "SCAN", "READ-MODIFY-WRITE"))
        rec["cpu"] = cpu_per_op(str(rec.pop("cpu_file")), n)
    print(json.dumps(rec))


def cpu_per_op(path, n):
    """CPU time per operation over the samples of cpusample.py (None without two samples)."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        return None
    if len(rows) < 2 or n <= 0:
        return None
    tot = {"server_ns": 0, "server_user": 0, "server_sys": 0, "client_ns": 0}
    # Sum the increments between consecutive samples (threads that come and go count while
    # they live); the client is summed over its processes.
    for a, b in zip(rows, rows[1:]):
        for name, v in b["server"].items():
            u = a["server"].get(name)
            if u:
                tot["server_ns"] += max(0, v[0] - u[0])
                if len(v) >= 6 and len(u) >= 6:
                    tot["server_user"] += max(0, v[4] - u[4])
                    tot["server_sys"] += max(0, v[5] - u[5])
        tot["client_ns"] += max(0, b["client"][0] - a["client"][0])
    js = {k: rows[-1]["sys"][k] - rows[0]["sys"][k] for k in rows[0]["sys"]}
    jt = sum(js.values()) or 1
    ticks = tot["server_user"] + tot["server_sys"]
    return {"server_us_per_op": tot["server_ns"] / 1e3 / n,
            "server_system_share": tot["server_sys"] / ticks if ticks else None,
            "client_us_per_op": tot["client_ns"] / 1e3 / n,
            "idle_share": (js.get("idle", 0) + js.get("iowait", 0)) / jt,
            "steal_share": js.get("steal", 0) / jt,
            "seconds": rows[-1]["t"] - rows[0]["t"]}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.3f}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def report(paths, json_out):
    recs = []
    for path in paths:
        with open(path) as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    try:
                        recs.append(json.loads(line))
                    except ValueError as e:
                        sys.exit(f"{path}:{i}: bad JSON: {e}")
    metas = [r for r in recs if r.get("kind") == "meta"]
    ys = [r for r in recs if r.get("kind") == "ycsb"]
    out = []
    for m in metas[:1]:
        out.append(f"# {m.get('title', 'YCSB')}\n")
        for k in ("command", "date", "cpu", "nproc", "memory", "kernel", "load_average",
                  "redis", "kavach", "domain"):
            if k in m:
                out.append(f"- **{k}:** {m[k]}")
        out.append("")
    if not ys:
        print("\n".join(out + ["(no measurements)"]))
        return
    seen = {r["system"] for r in ys}
    systems = [s for s in ORDER if s in seen] + sorted(seen - set(ORDER))
    pairs = [p for p in PAIRS if p[0] in seen and p[1] in seen]
    rounds = max(r["round"] for r in ys)
    first = ys[0]
    out.append(f"{first.get('records', '?'):,} records of 10 x 100 B fields, "
               f"{first.get('threads', '?')} client threads, "
               f"{first.get('distribution', '?')} requests, median of {rounds} round(s). "
               "Latencies in µs (YCSB HdrHistogram). Ratio rows: Kavach / Redis "
               "(throughput: above 1 = Kavach faster; latency: below 1 = Kavach sooner).\n")
    summary = {"meta": metas, "workloads": {}}
    problems = []
    order = ["load", "a", "b", "c"]
    wls = sorted({r["workload"] for r in ys}, key=lambda w: (order.index(w) if w in order else 9, w))
    for wl in wls:
        rs = [r for r in ys if r["workload"] == wl]
        optypes = ["INSERT"] if wl == "load" else [o for o in ("READ", "UPDATE")
                                                  if any(o in r["ops"] for r in rs)]
        cols = [("throughput", lambda r: r["throughput"], "ops/s")]
        for o in optypes:
            for key, label in (("p99_us", "p99"), ("p999_us", "p99.9"), ("p9999_us", "p99.99")):
                cols.append((f"{o}.{key}", (lambda o, key: lambda r: r["ops"].get(o, {}).get(key))(o, key),
                             f"{o.lower()} {label}"))
        if any(r.get("cpu") for r in rs):
            for key, label in (("server_us_per_op", "server CPU µs/op"),
                               ("client_us_per_op", "client CPU µs/op")):
                cols.append((f"cpu.{key}", (lambda key: lambda r: (r.get("cpu") or {}).get(key))(key),
                             label))
        vals = {}
        for s in systems:
            mine = [r for r in rs if r["system"] == s]
            vals[s] = {name: med([get(r) for r in mine]) for name, get, _ in cols}
            for r in mine:
                for o, d in r["ops"].items():
                    for ret, n in d.get("returns", {}).items():
                        if ret != "OK":
                            problems.append(f"{s} round {r['round']} {wl}: {o} Return={ret} x{n}")
        rows = [[s] + [fmt(vals[s][name], 1 if name.startswith("cpu.") else 0)
                       for name, _, _ in cols] for s in systems]
        for a, b in pairs:
            rows.append([f"**{SHORT[a]}/{SHORT[b]}**"] +
                        [ratio(vals[a][name], vals[b][name]) for name, _, _ in cols])
        out.append(f"### {WL_TITLE.get(wl, 'Workload ' + wl)}\n")
        out.append(table(["system"] + [label for _, _, label in cols], rows) + "\n")
        summary["workloads"][wl] = vals
    if problems:
        out.append("**Operations that did not return OK:** " + "; ".join(problems[:20]) + "\n")
    print("\n".join(out))
    if json_out:
        with open(json_out, "w") as f:
            json.dump(summary, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="sub", required=True)
    p = sub.add_parser("parse")
    p.add_argument("file")
    p.add_argument("pairs", nargs="*")
    r = sub.add_parser("report")
    r.add_argument("files", nargs="+")
    r.add_argument("--json")
    a = ap.parse_args()
    if a.sub == "parse":
        parse(a.file, a.pairs)
    else:
        report(a.files, a.json)


if __name__ == "__main__":
    main()
