#!/usr/bin/env python3
"""Summarize bench/server/run.sh results (JSON lines) into markdown tables.

Usage:
    summarize.py RESULTS.jsonl [MORE.jsonl...] [--json OUT.json]

Lines (one JSON object each, "kind" says which):
    meta     the run's command, date, machine, versions, persistence domain (printed first)
    rb       one redis-benchmark cell: system, round, test (SET/GET), size, pipeline, clients,
             n, rps, avg/min/p50/p95/p99/max_latency_ms, server_cpu_s
    restart  one restart: system, round, state (log/compacted), how (clean/kill9), keys,
             value_size, load_s, compact_s, shutdown_s, data_bytes, accept/pong/ready_ms

Per configuration the report takes the median over rounds. Ratios are always Kavach / Redis:
for throughput above 1 means Kavach is faster; for latencies and restart times below 1 means
Kavach is faster. The ratio columns pair kavach-always with redis-always (equal durability:
every acknowledged write is persistent) and with redis-everysec, and kavach-f64 with
redis-everysec (both may lose a bounded window of acknowledged writes). Stdlib only.
"""

import argparse
import json
import statistics
import sys

ORDER = ["redis-always", "redis-everysec", "redis-none", "kavach-always", "kavach-f64"]
PAIRS = [("kavach-always", "redis-always"), ("kavach-always", "redis-everysec"),
         ("kavach-f64", "redis-everysec")]
SHORT = {"redis-always": "R-always", "redis-everysec": "R-everysec", "redis-none": "R-none",
         "kavach-always": "K-always", "kavach-f64": "K-f64"}


def load(paths):
    recs = []
    for path in paths:
        f = sys.stdin if path == "-" else open(path)
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except ValueError as e:
                sys.exit(f"{path}:{i}: bad JSON: {e}")
    return recs


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=0):
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.3f}"


def systems_in(recs):
    seen = {r["system"] for r in recs}
    return [s for s in ORDER if s in seen] + sorted(seen - set(ORDER))


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def rb_report(rb, summary):
    systems = systems_in(rb)
    pairs = [p for p in PAIRS if p[0] in systems and p[1] in systems]
    cells = {}
    for r in rb:
        key = (r["test"], r["size"], r["pipeline"])
        cells.setdefault(key, {}).setdefault(r["system"], []).append(r)
    keys = sorted(cells, key=lambda k: (k[0] != "SET", k[1], k[2]))
    rounds = max(r["round"] for r in rb)
    clients = sorted({r["clients"] for r in rb})
    out = []

    def metric(name, getter, digits, title, note):
        rows = []
        for k in keys:
            vals = {s: med([getter(r) for r in cells[k].get(s, [])]) for s in systems}
            row = [f"{k[0]} {k[1]} B P{k[2]}"] + [fmt(vals[s], digits) for s in systems]
            row += [ratio(vals[a], vals[b]) for a, b in pairs]
            rows.append(row)
            for s in systems:
                summary.setdefault("rb", {}).setdefault(f"{k[0]} {k[1]} P{k[2]}", {}) \
                    .setdefault(s, {})[name] = vals[s]
        head = ["cell"] + [SHORT.get(s, s) for s in systems] + \
               [f"{SHORT[a]}/{SHORT[b]}" for a, b in pairs]
        out.append(f"### {title}\n\n{note}\n\n" + table(head, rows) + "\n")

    out.append(f"## redis-benchmark: SET and GET, {', '.join(map(str, clients))} clients, "
               f"median of {rounds} round(s)\n")
    metric("rps", lambda r: r["rps"], 0, "Throughput (requests/s)",
           "Ratio above 1: Kavach serves more requests per second.")
    metric("p50_ms", lambda r: r["p50_latency_ms"], 3, "Median latency (ms)",
           "Ratio below 1: Kavach answers sooner.")
    metric("p99_ms", lambda r: r["p99_latency_ms"], 3, "p99 latency (ms)",
           "Ratio below 1: Kavach answers sooner.")
    metric("cpu_us_per_op", lambda r: r["server_cpu_s"] * 1e6 / r["n"] if r.get("server_cpu_s") else None,
           2, "Server CPU time per request (µs, user + system, from /proc)",
           "Ratio below 1: Kavach spends less CPU per request (both share the 2 cores with "
           "redis-benchmark).")
    short = [f"{r['system']} {r['test']} {r['size']} B P{r['pipeline']} round {r['round']}: "
             f"{r['n'] / r['rps']:.1f} s" for r in rb if r["n"] / r["rps"] < 5]
    if short:
        out.append(f"{len(short)} of {len(rb)} cells ran shorter than 5 s (quick mode, or the "
                   f"rate rose after the probe), e.g. " + "; ".join(short[:3]) + "\n")
    return "\n".join(out)


def restart_report(rs, summary):
    systems = systems_in(rs)
    groups = {}
    for r in rs:
        groups.setdefault((r["state"], r["how"]), {}).setdefault(r["system"], []).append(r)
    keys = sorted(groups, key=lambda k: (k[0] != "log", k[1] != "clean"))
    nkeys = sorted({r["keys"] for r in rs})
    vsize = sorted({r["value_size"] for r in rs})
    rounds = max(r["round"] for r in rs)
    kav = [s for s in systems if s.startswith("kavach")]
    red = [s for s in systems if s.startswith("redis")]
    pairs = [(k, r) for k in kav for r in red]
    out = [f"## Restart: {', '.join(f'{n:,}' for n in nkeys)} keys of "
           f"{', '.join(map(str, vsize))} B, median of {rounds} round(s)\n",
           "Time from the exec of the server to DBSIZE answering the full count (accepting "
           "connections and PONG come first; Redis answers -LOADING meanwhile). "
           "\"log\": Redis's AOF holds every SET (auto-rewrite off), Kavach as it left itself; "
           "\"compacted\": after BGREWRITEAOF / SAVE. \"clean\": SHUTDOWN; \"kill9\": SIGKILL. "
           "Ratio below 1: Kavach is back sooner.\n"]
    rows = []
    for k in keys:
        g = groups[k]
        vals = {s: med([r["ready_ms"] for r in g.get(s, [])]) for s in systems}
        pong = {s: med([r["pong_ms"] for r in g.get(s, [])]) for s in systems}
        size = {s: med([r["data_bytes"] / 1048576 for r in g.get(s, [])]) for s in systems}
        row = [f"{k[0]}, {k[1]}"]
        for s in systems:
            row += [fmt(vals[s], 1), fmt(pong[s], 1), fmt(size[s], 1)]
        row += [ratio(vals[a], vals[b]) for a, b in pairs]
        rows.append(row)
        for s in systems:
            summary.setdefault("restart", {}).setdefault(f"{k[0]} {k[1]}", {})[s] = {
                "ready_ms": vals[s], "pong_ms": pong[s], "data_mib": size[s]}
    head = ["state, stop"]
    for s in systems:
        head += [f"{SHORT.get(s, s)} ready ms", "PONG ms", "data MiB"]
    head += [f"{SHORT[a]}/{SHORT[b]}" for a, b in pairs]
    out.append(table(head, rows) + "\n")
    load = {s: med([r["load_s"] for r in rs if r["system"] == s]) for s in systems}
    comp = {s: med([r["compact_s"] for r in rs if r["system"] == s]) for s in systems}
    stop = {s: med([r["shutdown_s"] for r in rs if r["system"] == s]) for s in systems}
    rows = [[s, fmt(load[s], 2), fmt(comp[s], 2), fmt(stop[s], 3)] for s in systems]
    out.append("Around the restarts (medians, seconds): loading the keys with one pipelined "
               "stream of SETs, BGREWRITEAOF / SAVE, clean SHUTDOWN until the process exited.\n")
    out.append(table(["system", "load s", "compact s", "shutdown s"], rows) + "\n")
    bad = [r for r in rs if r.get("bad")]
    if bad:
        out.append(f"**{len(bad)} restart(s) returned wrong values** (see the results file).\n")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--json", help="also write the medians as JSON here")
    a = ap.parse_args()
    recs = load(a.files)
    metas = [r for r in recs if r.get("kind") == "meta"]
    rb = [r for r in recs if r.get("kind") == "rb"]
    rs = [r for r in recs if r.get("kind") == "restart"]
    summary = {"meta": metas}
    out = []
    for m in metas[:1]:
        out.append(f"# {m.get('title', 'Server benchmark')}\n")
        for k in ("command", "date", "cpu", "nproc", "memory", "kernel", "load_average",
                  "redis", "kavach", "domain"):
            if k in m:
                out.append(f"- **{k}:** {m[k]}")
        out.append("")
    if rb:
        out.append(rb_report(rb, summary))
    if rs:
        out.append(restart_report(rs, summary))
    if not rb and not rs:
        out.append("(no measurements)")
    print("\n".join(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
