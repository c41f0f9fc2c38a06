#!/usr/bin/env python3
"""Markdown tables from bench/wsp/results-*/<experiment>.jsonl (written by savetime.sh).

    summarize.py bench/wsp/results-YYYYMMDD > summary.md

Latencies are medians (and min..max) over the repetitions of each configuration, in
microseconds, from the runner's save report: stop = warning -> every thread stopped,
context = -> every context written, marker = -> marker persisted (the handler latency).
"""

import json
import os
import statistics
import sys
from collections import defaultdict


def load(d, name):
    p = os.path.join(d, name + ".jsonl")
    if not os.path.exists(p):
        return []
    out = []
    with open(p) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def report(r):
    return r.get("save") or (r.get("result") or {}).get("report")


def us(v):
    return "%.0f" % (v / 1e3) if v >= 1e5 else "%.1f" % (v / 1e3)


def cell(values):
    if not values:
        return "-"
    m = statistics.median(values)
    if len(values) == 1:
        return us(m)
    return "%s (%s..%s)" % (us(m), us(min(values)), us(max(values)))


def latency_table(rows, key, keys_name, title, first="dirty MiB"):
    groups = defaultdict(list)
    errors = defaultdict(list)
    for r in rows:
        k = (r["mib"], r[key])
        s = report(r)
        if s is None:
            errors[k].append(r.get("error") or ("exit %s" % r.get("exit")))
        else:
            s = dict(s)
            s["observed_ns"] = r.get("observed_ms", float("nan")) * 1e6
            groups[k].append(s)
    mibs = sorted({k[0] for k in list(groups) + list(errors)})
    cols = sorted({k[1] for k in list(groups) + list(errors)}, key=str)
    print("### %s\n" % title)
    print("| %s | %s | n | stop us | context us | marker us | SIGPWR to report seen us "
          "| written back MiB | image MiB |" % (first, keys_name))
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in mibs:
        for c in cols:
            g = groups.get((m, c), [])
            if not g:
                if errors.get((m, c)):
                    e = errors[(m, c)][0]
                    if "not supported" in e:
                        e = "refused: " + e[e.index("not supported"):]
                    e = e[:110].replace("|", "/").replace("\n", " ")
                    print("| %s | %s | 0 | %s | | | | | |" % (m, c, e))
                continue
            print("| %s | %s | %d | %s | %s | %s | %s | %.0f | %.0f |" % (
                m, c, len(g),
                cell([s["stop_ns"] for s in g]),
                cell([s["context_ns"] for s in g]),
                cell([s["marker_ns"] for s in g]),
                cell([s["observed_ns"] for s in g if s["observed_ns"] == s["observed_ns"]]),
                statistics.median([s["written_back_bytes"] for s in g]) / 2**20,
                statistics.median([s["image_bytes"] for s in g]) / 2**20))
    print()


def window_table(rows):
    groups = defaultdict(list)
    for r in rows:
        groups[(r["mode"], r["write_back"], r["mib"], r["window_ms"])].append(r)
    print("### Success rate against the window (CPU hog running; 2 threads; SIGKILL of the "
          "group at the window's end, timed from the SIGPWR)\n")
    print("| mode | write-back | MiB | window ms | trials | marker valid | success | marker us "
          "(reports seen) | SIGPWR to report seen us | runner verdict in_window |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (mode, wb, mib, w) in sorted(groups):
        g = groups[(mode, wb, mib, w)]
        ok = sum(1 for r in g if r.get("marker_valid"))
        saves = [report(r) for r in g if report(r)]
        inw = sum(1 for s in saves if s.get("in_window"))
        seen = [r["observed_ms"] * 1e6 for r in g if "observed_ms" in r]
        print("| %s | %s | %s | %g | %d | %d | %.0f%% | %s (%d) | %s | %d of %d |" % (
            mode, wb, mib, w, len(g), ok, 100.0 * ok / len(g),
            cell([s["marker_ns"] for s in saves]), len(saves), cell(seen), inw, len(saves)))
    print()


def transparency_table(rows):
    print("### Transparency at a few hundred MiB (5 power failures each, 250 ms window)\n")
    print("| workload | args | failures | saves | stdout | output file | starts file | "
          "reference s | interrupted total s | resume us (median) |")
    print("| --- | --- | ---: | ---: | --- | --- | --- | ---: | ---: | ---: |")
    for r in rows:
        res = [x["ns"] for x in r.get("resumes", [])]
        ident = lambda k: "identical" if r.get(k) else "DIFFERS"
        print("| %s | `%s` | %d | %d | %s | %s | %s | %.2f | %.2f | %s |" % (
            r["workload"], " ".join(r["args"]), r["failures"], len(r["saves"]),
            ident("stdout_identical"), ident("output_identical"), ident("starts_identical"),
            r["reference_s"], r["total_s"], cell(res)))
    print()


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "machine.txt")) as f:
        print("```\n" + f.read().strip() + "\n```\n")
    lat = load(d, "latency")
    if lat:
        latency_table(lat, "threads", "threads",
                      "Handler latency against dirty bytes and threads (image mode, no write-back)")
    wb = load(d, "writeback")
    if wb:
        latency_table(wb, "write_back", "write-back",
                      "Write-back before the marker: none, all lines, tracked pages (1 thread)")
    hib = load(d, "hibernate")
    if hib:
        latency_table(hib, "mode", "mode", "Hibernate baseline (1 thread)")
    tr2 = load(d, "tracked")
    if tr2:
        latency_table(tr2, "write_back", "write-back",
                      "The second save: 16 MiB working set written since the first save, in a "
                      "buffer of the given size (1 thread)", first="buffer MiB")
    win = load(d, "window")
    if win:
        window_table(win)
    tr = load(d, "transparency")
    if tr:
        transparency_table(tr)


if __name__ == "__main__":
    main()
