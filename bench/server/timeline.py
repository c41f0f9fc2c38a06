#!/usr/bin/env python3
"""Analyse and plot bench/server/timeline.sh runs.

Usage:
    timeline.py DIR [--no-plot]

Reads DIR/runs.jsonl (one line per system: YCSB status file, controller events file, t0) and
DIR/meta.json; writes DIR/buckets.jsonl (one JSON line per 1-second bucket, per event and per
system summary), DIR/timeline.png (unless --no-plot or matplotlib is missing) and prints a
markdown report.

Buckets: YCSB prints a status line every second (-s -p status.interval=1) with the
cumulative operation count and, per operation type, percentiles of that interval's
HdrHistogram. Bucket i spans the time between status lines i-1 and i; its throughput is the
difference of the cumulative counts over the difference of the time stamps. The buckets of the
warm-up (those starting before t0, the end of the warm-up; runs without one: the first bucket,
JVM and connection warm-up) and a last one shorter than 0.5 s are dropped; the report gives the
warm-up's worst bucket apart.

Busy spans (rewrite / checkpoint in progress): from the controller's log, SAVE sent ..
answered (SAVE blocks until the checkpoint is done; BGSAVE answers at once), every span in which an *_in_progress
field of INFO persistence read 1 (Redis aof_rewrite_in_progress), and, for a finished-counter
change with no span around it (a checkpoint too short to see in a 0.1 s poll), the poll
interval before it. A bucket is busy when it overlaps a busy span. BGREWRITEAOF is answered at
once, so for Redis the span comes from the poll.

Ratios: worst/median throughput (lowest bucket over the median bucket: 1 is flat, lower is a
dip) and worst/median p99.9 (highest bucket's p99.9 over the median bucket's: 1 is flat,
higher is a spike), per operation type; busy/other: median p99.9 and median throughput in
busy buckets over the same in the others.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import sys

STATUS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}) (\d+) sec: (\d+) operations;(.*)$")
SECTION = re.compile(r"\[([A-Z][A-Z_\-]*): ([^\]]*)\]")
COLORS = {"redis-always": "tab:red", "redis-everysec": "tab:orange", "redis-none": "tab:gray",
          "kavach-always": "tab:blue", "kavach-f64": "tab:cyan"}


def parse_status(path):
    """[(epoch_s, cumulative_ops, {OP: {Count, Max, ..., '99.9': ...}})]"""
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            m = STATUS.match(line.strip())
            if not m:
                continue
            ts = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S:%f") \
                .replace(tzinfo=datetime.timezone.utc).timestamp()
            ops = {}
            for sm in SECTION.finditer(m.group(4)):
                d = {}
                for kv in sm.group(2).split(","):
                    k, sep, v = kv.strip().partition("=")
                    if sep:
                        try:
                            d[k] = float(v)
                        except ValueError:
                            pass
                ops[sm.group(1)] = d
            rows.append((ts, int(m.group(3)), ops))
    return rows


def parse_events(path):
    evs = []
    if not os.path.exists(path):
        return evs
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    evs.append(json.loads(line))
                except ValueError:
                    pass
    return evs


def busy_spans(evs, t_end):
    """[(start, end, why)] in seconds since t0; plus trigger times."""
    spans, triggers = [], []
    open_flags = {}
    last_poll = 0.0
    for e in evs:
        kind = e.get("event")
        if kind == "command":
            triggers.append(e["sent"])
            if e.get("command", "").upper() == "SAVE":
                spans.append((e["sent"], e["answered"], "SAVE"))
        elif kind == "flag":
            if e["value"] == "1":
                open_flags[e["field"]] = e["t"]
            elif e["field"] in open_flags:
                spans.append((open_flags.pop(e["field"]), e["t"], e["field"]))
        elif kind == "counter":
            t = e["t"]
            covered = any(s <= t + 0.15 and t - 0.15 <= en for s, en, _ in spans) or \
                any(s <= t for s in open_flags.values())
            if not covered:
                spans.append((max(0.0, t - 0.1), t, e["field"]))
        if "t" in e:
            last_poll = max(last_poll, e["t"])
    for field, s in open_flags.items():
        spans.append((s, max(t_end, last_poll), field + " (still on at the end)"))
    return sorted(spans), sorted(triggers)


PHASES = (("swap", "swap_us"), ("replay", "replay_us"), ("write", "write_us"),
          ("root", "root_us"), ("empty", "empty_us"))


def checkpoint_phases(evs, t0):
    """Kavach's finished checkpoints, from the last_checkpoint_* fields the controller read at
    each counter change: [{number, start, end, phases: [(name, start, end)], cpu_s, ...}] in
    seconds since t0. The phases follow each other: log swap (under the gate's write lock),
    replay of the archived log, write-out, root switch, emptying of the archived log."""
    out, seen = [], set()
    for e in evs:
        last = e.get("last") if e.get("event") == "counter" else None
        if not last or "last_checkpoint_started_unix_ms" not in last:
            continue
        try:
            v = {k[len("last_checkpoint_"):]: int(x) for k, x in last.items()
                 if k.startswith("last_checkpoint_") and re.fullmatch(r"-?\d+", x or "")}
        except ValueError:
            continue
        if not v.get("started_unix_ms") or v["started_unix_ms"] in seen:
            continue
        seen.add(v["started_unix_ms"])
        t = v["started_unix_ms"] / 1000 - t0
        start, phases = t, []
        for name, key in PHASES:
            d = v.get(key, 0) / 1e6
            phases.append((name, t, t + d))
            t += d
        span = max(t - start, 1e-6)
        out.append({"start": start, "end": t, "phases": phases, "cpu_s": v.get("cpu_us", 0) / 1e6,
                    "cpu_share": v.get("cpu_us", 0) / 1e6 / span,
                    "replay_cpu_s": v.get("replay_cpu_us", 0) / 1e6,
                    "write_cpu_s": v.get("write_cpu_us", 0) / 1e6, "pages": v.get("pages"),
                    "bytes": v.get("bytes"), "records": v.get("records"),
                    "planned_ms": v.get("planned_ms"), "paced_ms": v.get("paced_ms"),
                    "total_ms": v.get("ms")})
    return out


def bucket_phases(b, cks):
    """{phase: seconds of the bucket it covers} for the checkpoints `cks`."""
    cover = {}
    for ck in cks:
        for name, s, e in ck["phases"]:
            o = min(e, b["t_end"]) - max(s, b["t_start"])
            if o > 0:
                cover[name] = cover.get(name, 0.0) + o
    return cover


def parse_cpu(path):
    """cpusample.py's lines: [(epoch_s, {counter: cumulative value})], counters flattened:
    machine jiffies (sys.*), per server thread group CPU ns / faults / switches
    (server.<name>.cpu_ns, .minflt, .vcsw, .ivcsw), client CPU ns and faults."""
    rows = []
    if not path or not os.path.exists(path):
        return rows
    with open(path, errors="replace") as fh:
        for line in fh:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            c = {f"sys.{k}": v for k, v in r.get("sys", {}).items()}
            for name, v in r.get("server", {}).items():
                for k, x in zip(("cpu_ns", "minflt", "vcsw", "ivcsw"), v):
                    c[f"server.{name}.{k}"] = x
            cl = r.get("client") or [0, 0]
            c["client.cpu_ns"], c["client.minflt"] = cl[0], cl[1]
            rows.append((r["t"], c, r.get("probe_ns")))
    return rows


def cpu_in(rows, t0, a, b):
    """Counter increments within bucket times a..b (seconds after t0): the increments between
    consecutive samples (a counter missing from either sample, a thread that started or
    exited, counts 0 in that step), each step weighted by its overlap with the bucket; None
    unless samples cover the bucket. CPU counters become CPUs (ns per second of the bucket),
    jiffies become shares of the machine, the rest rates per second."""
    if not rows or rows[0][0] - t0 > a or rows[-1][0] - t0 < b:
        return None
    d = {}
    probes = [p for t, _, p in rows if p and a <= t - t0 <= b]
    for (ta, ca, _), (tb, cb, _) in zip(rows, rows[1:]):
        lo, hi = max(ta - t0, a), min(tb - t0, b)
        if hi <= lo or tb <= ta:
            continue
        w = (hi - lo) / (tb - ta)
        for k, v in cb.items():
            if k in ca:
                d[k] = d.get(k, 0.0) + max(0, v - ca[k]) * w
    span = b - a
    if span <= 0:
        return None
    jiffies = sum(v for k, v in d.items() if k.startswith("sys."))
    out = {"span_s": span, "probe_us": statistics.median(probes) / 1e3 if probes else None}
    for k, v in d.items():
        if k.startswith("sys."):
            out[k] = v / jiffies if jiffies else None
        elif k.endswith("cpu_ns"):
            out[k] = v / 1e9 / span
        else:
            out[k] = v / span
    return out


def cpu_groups(c):
    """{group: CPUs} of one bucket: the checkpoint's threads, the workers, the rest of the
    server, the client, and the machine's idle and steal (in CPUs of nproc)."""
    if c is None:
        return None
    g = {"checkpoint": 0.0, "workers": 0.0, "server other": 0.0}
    for k, v in c.items():
        if not (k.startswith("server.") and k.endswith(".cpu_ns")):
            continue
        name = k[len("server."):-len(".cpu_ns")]
        if name.startswith("dipper-") or name.startswith("kavach-bgsave"):
            g["checkpoint"] += v
        elif name.startswith("kavach-worker"):
            g["workers"] += v
        else:
            g["server other"] += v
    g["client"] = c.get("client.cpu_ns", 0.0)
    n = os.cpu_count() or 1
    g["idle"] = (c.get("sys.idle") or 0.0) * n + (c.get("sys.iowait") or 0.0) * n
    g["steal"] = (c.get("sys.steal") or 0.0) * n
    g["checkpoint faults/s"] = sum(v for k, v in c.items()
                                   if k.startswith("server.dipper-") and k.endswith(".minflt"))
    g["worker faults/s"] = sum(v for k, v in c.items()
                               if k.startswith("server.kavach-worker") and k.endswith(".minflt"))
    g["worker invol. switches/s"] = sum(v for k, v in c.items()
                                        if k.startswith("server.kavach-worker")
                                        and k.endswith(".ivcsw"))
    g["probe µs"] = c.get("probe_us")
    return g


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rat(a, b):
    return None if a is None or b is None or b == 0 else a / b


def f(x, digits=0, suffix=""):
    return "–" if x is None else f"{x:,.{digits}f}{suffix}"


def analyse(run):
    rows = parse_status(run["status"])
    t0 = run["t0"]
    buckets = []
    for (ta, ca, _), (tb, cb, ops) in zip(rows, rows[1:]):
        buckets.append({"t_start": round(ta - t0, 3), "t_end": round(tb - t0, 3),
                        "ops_per_s": (cb - ca) / (tb - ta) if tb > ta else None,
                        "read_p99_us": ops.get("READ", {}).get("99"),
                        "read_p999_us": ops.get("READ", {}).get("99.9"),
                        "update_p99_us": ops.get("UPDATE", {}).get("99"),
                        "update_p999_us": ops.get("UPDATE", {}).get("99.9"),
                        "read_max_us": ops.get("READ", {}).get("Max"),
                        "update_max_us": ops.get("UPDATE", {}).get("Max")})
    # YCSB prints a status line as it starts, so bucket 0 is the first second: JVM and
    # connection warm-up, dropped. A last bucket shorter than 0.5 s (the final status line
    # printed when the run ends) is dropped too.
    usable = [b for b in buckets if b["t_end"] - b["t_start"] >= 0.5 and b["ops_per_s"] is not None]
    if run.get("warmup"):
        warm = [b for b in usable if b["t_start"] < 0]
        buckets = [b for b in usable if b["t_start"] >= 0]
    else:
        warm, buckets = usable[:1], usable[1:]
    run["warm_buckets"] = warm
    evs = parse_events(run["events"])
    t_end = buckets[-1]["t_end"] if buckets else run["seconds"]
    spans, triggers = busy_spans(evs, t_end)
    cks = checkpoint_phases(evs, t0)
    samples = parse_cpu(run.get("cpu"))
    for b in buckets:
        b["busy"] = any(s < b["t_end"] and e > b["t_start"] for s, e, _ in spans)
        b["phases"] = {k: round(v, 3) for k, v in bucket_phases(b, cks).items()}
        g = cpu_groups(cpu_in(samples, t0, b["t_start"], b["t_end"]))
        if g is not None:
            b["cpu"] = {k: (None if v is None else round(v, 3)) for k, v in g.items()}
    return buckets, spans, triggers, evs, cks


def summarise(buckets):
    s = {"buckets": len(buckets), "busy_buckets": sum(b["busy"] for b in buckets)}
    ops = [b["ops_per_s"] for b in buckets]
    s["ops_median"], s["ops_min"] = med(ops), (min(ops) if ops else None)
    s["ops_worst_over_median"] = rat(s["ops_min"], s["ops_median"])
    for op in ("update", "read"):
        xs = [b[f"{op}_p999_us"] for b in buckets if b[f"{op}_p999_us"] is not None]
        s[f"{op}_p999_median"] = med(xs)
        s[f"{op}_p999_max"] = max(xs) if xs else None
        s[f"{op}_p999_worst_over_median"] = rat(s[f"{op}_p999_max"], s[f"{op}_p999_median"])
        busy = med([b[f"{op}_p999_us"] for b in buckets if b["busy"]])
        calm = med([b[f"{op}_p999_us"] for b in buckets if not b["busy"]])
        s[f"{op}_p999_busy"], s[f"{op}_p999_other"] = busy, calm
        s[f"{op}_p999_busy_over_other"] = rat(busy, calm)
    busy = med([b["ops_per_s"] for b in buckets if b["busy"]])
    calm = med([b["ops_per_s"] for b in buckets if not b["busy"]])
    s["ops_busy"], s["ops_other"], s["ops_busy_over_other"] = busy, calm, rat(busy, calm)
    return s


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def plot(path, results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    from matplotlib.ticker import ScalarFormatter
    fig, axes = plt.subplots(3, 1, figsize=(11, 9.5), sharex=True)
    for sysname, (run, buckets, spans, triggers, _) in results.items():
        c = COLORS.get(sysname, None)
        edges = [buckets[0]["t_start"]] + [b["t_end"] for b in buckets]
        nan = float("nan")
        axes[0].stairs([b["ops_per_s"] / 1000 for b in buckets], edges, color=c, label=sysname,
                       linewidth=1.5, baseline=None)
        axes[1].stairs([(b["update_p999_us"] or nan) / 1000 for b in buckets], edges, color=c,
                       linewidth=1.5, baseline=None)
        axes[2].stairs([(b["read_p999_us"] or nan) / 1000 for b in buckets], edges, color=c,
                       linewidth=1.5, baseline=None)
        what = "checkpoint" if sysname.startswith("kavach") else "AOF rewrite"
        for i, (s, e, _) in enumerate(spans):
            for ax in axes:
                ax.axvspan(s, max(e, s + 0.05), color=c, alpha=0.13, linewidth=0,
                           label=f"{sysname}: {what} in progress" if (i == 0 and ax is axes[0]) else None)
        for i, t in enumerate(triggers):
            for ax in axes:
                ax.axvline(t, color=c, linestyle=":", linewidth=1.2,
                           label=f"{sysname}: {run['trigger']} sent" if (i == 0 and ax is axes[0]) else None)
    axes[0].set_ylabel("throughput, k ops/s\n(1 s buckets)")
    axes[1].set_ylabel("update p99.9 (ms)")
    axes[2].set_ylabel("read p99.9 (ms)")
    for ax in axes[1:]:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=7)
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylim(bottom=0)
    axes[2].set_xlabel("seconds since the start of the load")
    any_run = next(iter(results.values()))[0]
    fig.suptitle(f"YCSB workload {any_run['workload']} ({any_run['records']:,} records, "
                 f"{any_run['threads']} threads), data on /dev/shm (tmpfs): "
                 f"Kavach checkpoints vs Redis AOF rewrites", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


CPU_COLS = ["checkpoint", "workers", "server other", "client", "idle", "steal",
            "checkpoint faults/s", "worker faults/s", "worker invol. switches/s", "probe µs"]


def cpu_table(buckets, worst, medv):
    """Markdown: where the CPUs went in the worst buckets, beside the median of the buckets
    without a checkpoint and of those in one (from cpusample.py; empty without samples)."""
    have = [b for b in buckets if b.get("cpu")]
    if not have:
        return []

    def row(label, bs):
        ops = med([b["ops_per_s"] for b in bs])
        cells = [label, len(bs), f(rat(ops, medv), 3)]
        for k in CPU_COLS:
            v = med([b["cpu"].get(k) for b in bs])
            cells.append(f(v, 0 if "/s" in k or "µs" in k else 2))
        return cells

    rows = []
    for b in worst:
        if b.get("cpu"):
            rows.append(row(f"{b['t_start']:.1f}-{b['t_end']:.1f}", [b]))
    calm = [b for b in have if not b["phases"]]
    for p, _ in PHASES:
        bs = [b for b in have if b["phases"].get(p, 0) >= 0.5]
        if bs:
            rows.append(row(f"median, at least half in {p}", bs))
    if calm:
        rows.append(row("median, no checkpoint", calm))
    return [table(["buckets", "n", "ops / median"] + [k if "/s" in k or "µs" in k else f"{k} (CPUs)"
                                                      for k in CPU_COLS], rows),
            "", f"CPUs: CPU-seconds per second of the bucket, of {os.cpu_count()} "
            "(server threads from /proc/PID/task/*/schedstat, the YCSB JVM summed over its "
            "threads, idle and steal from /proc/stat); faults: minor page faults per second; "
            "probe: the sampler's CPU time for a fixed loop, median in the bucket (higher: the "
            "CPU ran slower then, for the server and the client alike).", ""]


def worst_seconds(results, summaries, phases, n=3):
    """Markdown: per system, its n worst buckets with what overlapped them, and per Kavach
    checkpoint its phases and CPU time."""
    out = ["### The worst seconds", ""]
    for name, (run, buckets, spans, _, _) in results.items():
        medv = summaries[name]["ops_median"]
        worst = sorted(buckets, key=lambda b: b["ops_per_s"])[:n]
        rows = []
        for b in worst:
            ph = ", ".join(f"{k} {v:.2f} s" for k, v in b["phases"].items()) or "–"
            busy = [why for s, e, why in spans if s < b["t_end"] and e > b["t_start"]]
            rows.append([f"{b['t_start']:.1f}-{b['t_end']:.1f}", f(b["ops_per_s"]),
                         f(rat(b["ops_per_s"], medv), 3), ph, ", ".join(sorted(set(busy))) or "–"])
        out.append(f"{name}:\n")
        out.append(table(["bucket (s)", "ops/s", "/ median", "checkpoint phases in it",
                          "busy spans"], rows) + "\n")
        out.extend(cpu_table(buckets, worst, medv))
        cks = phases.get(name) or []
        if cks:
            rows = []
            for ck in cks:
                d = {p: (e - s) * 1000 for p, s, e in ck["phases"]}
                span = ck["end"] - ck["start"]
                inb = [b for b in buckets if b["t_start"] < ck["end"] and b["t_end"] > ck["start"]]
                low = min((b["ops_per_s"] for b in inb), default=None)
                rows.append([f"{ck['start']:.2f}", f(d["swap"], 1), f(d["replay"]), f(d["write"]),
                             f(d["root"], 1), f(d["empty"], 1), f(span * 1000),
                             f(ck["cpu_s"] * 1000),
                             f"{ck['replay_cpu_s'] * 1000:,.0f} / {ck['write_cpu_s'] * 1000:,.0f}",
                             f(ck["cpu_share"], 2),
                             f(ck["records"]), f(ck["pages"]),
                             f((ck["bytes"] or 0) / 2**20, 1), f(rat(low, medv), 3)])
            out.append(table(["start (s)", "swap ms", "replay ms", "write ms", "root ms",
                              "empty ms", "span ms", "CPU ms", "of it replay / write", "CPU / span", "records",
                              "pages", "MiB written", "worst bucket in it / median"], rows) + "\n")
            # Median throughput of the buckets a phase covers for most of its length.
            rows = []
            for p, _ in PHASES:
                xs = [b["ops_per_s"] for b in buckets if b["phases"].get(p, 0) >= 0.5]
                if xs:
                    rows.append([p, len(xs), f(med(xs)), f(rat(med(xs), medv), 3),
                                 f(rat(min(xs), medv), 3)])
            xs = [b["ops_per_s"] for b in buckets if not b["phases"]]
            if xs:
                rows.append(["no checkpoint", len(xs), f(med(xs)), f(rat(med(xs), medv), 3),
                             f(rat(min(xs), medv), 3)])
            out.append(table(["buckets at least half in", "buckets", "median ops/s",
                              "/ median", "worst / median"], rows) + "\n")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args()
    runs = []
    with open(os.path.join(a.dir, "runs.jsonl")) as fh:
        runs = [json.loads(line) for line in fh if line.strip()]
    meta = {}
    if os.path.exists(os.path.join(a.dir, "meta.json")):
        with open(os.path.join(a.dir, "meta.json")) as fh:
            meta = json.load(fh)
    results = {}
    phases = {}
    out = []
    if meta:
        out.append(f"# {meta.get('title', 'Timeline')}\n")
        for k in ("command", "date", "cpu", "nproc", "memory", "kernel", "load_average",
                  "redis", "kavach", "domain"):
            if k in meta:
                out.append(f"- **{k}:** {meta[k]}")
        out.append("")
    with open(os.path.join(a.dir, "buckets.jsonl"), "w") as jl:
        if meta:
            jl.write(json.dumps(meta) + "\n")
        summaries = {}
        for run in runs:
            buckets, spans, triggers, evs, cks = analyse(run)
            if not buckets:
                sys.exit(f"{run['system']}: no usable status lines in {run['status']}")
            results[run["system"]] = (run, buckets, spans, triggers, evs)
            phases[run["system"]] = cks
            for ck in cks:
                jl.write(json.dumps({"kind": "checkpoint", "system": run["system"], **ck}) + "\n")
            for b in buckets:
                jl.write(json.dumps({"kind": "bucket", "system": run["system"], **b}) + "\n")
            for s, e, why in spans:
                jl.write(json.dumps({"kind": "busy", "system": run["system"], "start": s,
                                     "end": e, "why": why}) + "\n")
            for e in evs:
                jl.write(json.dumps({"kind": "event", "system": run["system"], **e}) + "\n")
            summaries[run["system"]] = summarise(buckets)
            jl.write(json.dumps({"kind": "summary", "system": run["system"],
                                 **summaries[run["system"]]}) + "\n")
    first = runs[0]
    out.append(f"{first['seconds']} s of YCSB workload {first['workload']} per system "
               f"({first['records']:,} records, {first['threads']} threads, zipfian), "
               f"1-second buckets; a "
               f"{next((r.get('trigger') for r in runs if r['system'].startswith('kavach')), 'SAVE')}"
               f" (Kavach) or BGREWRITEAOF (Redis) every "
               f"{first['every']} s. Latencies in ms, per-bucket p99.9 from YCSB's interval "
               f"HdrHistograms. \"busy\": buckets overlapping a checkpoint / AOF rewrite.\n")
    rows = []
    for name, s in summaries.items():
        run = results[name][0]
        spans = results[name][2]
        ms = lambda us: None if us is None else us / 1000
        rows.append([name, f"{s['buckets']} ({s['busy_buckets']} busy, {len(spans)} spans)",
                     f(s["ops_median"]), f(s["ops_min"]), f(s["ops_worst_over_median"], 3),
                     f(ms(s["update_p999_median"]), 2), f(ms(s["update_p999_max"]), 2),
                     f(s["update_p999_worst_over_median"], 2),
                     f(ms(s["update_p999_busy"]), 2), f(ms(s["update_p999_other"]), 2),
                     f(s["update_p999_busy_over_other"], 2),
                     f(ms(s["read_p999_busy"]), 2), f(ms(s["read_p999_other"]), 2),
                     f(s["ops_busy_over_other"], 3)])
    out.append(table(["system", "buckets", "median ops/s", "worst ops/s", "worst/median",
                      "upd p99.9 median", "upd p99.9 worst", "worst/median",
                      "upd p99.9 busy", "upd p99.9 other", "busy/other",
                      "read p99.9 busy", "read p99.9 other", "ops busy/other"], rows) + "\n")
    for name, (run, buckets, spans, triggers, evs) in results.items():
        errs = [e for e in evs if e.get("event") == "command" and "error" in e]
        dur = [round(e - s, 2) for s, e, _ in spans]
        out.append(f"- {name}: {len(triggers)} x {run['trigger']}"
                   f"{' (' + str(len(errs)) + ' answered with an error: ' + errs[0]['error'] + ')' if errs else ''}"
                   f"; busy spans (s): {dur if dur else 'none seen'}"
                   f"{'; aof_rewrites at the end: ' + run['aof_rewrites'] if run.get('aof_rewrites') else ''}"
                   f"; dataset {run.get('used_memory') or '?'} used memory")
        warm = run.get("warm_buckets") or []
        if warm:
            lo = min(b["ops_per_s"] for b in warm)
            out.append(f"  - warm-up ({run.get('warmup', 1)} s, not in the figures above): "
                       f"{len(warm)} buckets, the worst {f(lo)} ops/s = "
                       f"{f(rat(lo, summaries[name]['ops_median']), 3)} of the measured median")
        pb, pa = run.get("persistence_before") or {}, run.get("persistence_after") or {}
        for key in ("checkpoints", "aof_rewrites"):
            if key in pb or key in pa:
                extra = ""
                if key == "checkpoints":
                    extra = (f" (last: {pa.get('last_checkpoint_ms', '?')} ms, swap "
                             f"{pa.get('last_checkpoint_swap_us', '?')} µs, "
                             f"{pa.get('last_checkpoint_pages', '?')} pages, "
                             f"{pa.get('last_checkpoint_records', '?')} records)")
                out.append(f"  - INFO persistence {key}: {pb.get(key, '?')} before the measured "
                           f"load, {pa.get(key, '?')} after{extra}")
        if run.get("pool_domain"):
            out.append(f"  - pool domain (`kavach pool info`): {run['pool_domain']}")
    out.append("")
    out.extend(worst_seconds(results, summaries, phases))
    kv = [n for n in summaries if n.startswith("kavach")]
    rd = [n for n in summaries if n.startswith("redis")]
    if kv and rd:
        k, r = summaries[kv[0]], summaries[rd[0]]
        out.append("")
        out.append(f"Kavach / Redis ({kv[0]} / {rd[0]}): median throughput "
                   f"{f(rat(k['ops_median'], r['ops_median']), 3)}, worst bucket throughput "
                   f"{f(rat(k['ops_min'], r['ops_min']), 3)}, update p99.9 in busy buckets "
                   f"{f(rat(k['update_p999_busy'], r['update_p999_busy']), 3)}, worst update p99.9 "
                   f"{f(rat(k['update_p999_max'], r['update_p999_max']), 3)}.")
    if not a.no_plot:
        png = os.path.join(a.dir, "timeline.png")
        err = plot(png, results)
        out.append("")
        out.append(f"Plot: {png}" if err is None else f"No plot: {err}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
