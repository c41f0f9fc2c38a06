#!/usr/bin/env python3
"""Instruction counts per persist call from callgrind output (stdlib only).

Used by bench/persist/callgrind.sh. Each harness ran twice per size under
`valgrind --tool=callgrind --compress-strings=no --compress-pos=no`, with
--iters N and --iters 2N (--rounds 1). Everything that does not scale with
iters (process start, mapping, the 64 MiB prefault, the fixed 1000-iteration
warm-ups, clock reads) is identical in both runs, so

    (Ir(2N) - Ir(N)) / N

is exactly the instruction cost of one iteration of the persist loop plus
one iteration of the store-only loop ("Ir/iter" below): no drift, no noise.

To isolate the persist call itself, the same difference is taken per callee:
for every function F, callgrind records calls to F and the inclusive Ir of
those calls. Functions whose call count grows by exactly N between the two
runs are called once per persist-loop iteration; the persist call is the one
among them whose name matches the side's regex (default: "persist", case
insensitive) with the largest inclusive cost, and its Ir/call is
(incl(2N) - incl(N)) / N. If Kavach's persist is inlined into the loop there
is no such function; then the report falls back to an estimate:

    kavach persist ~= kavach Ir/iter - (libpmem Ir/iter - pmem_persist Ir/call)

i.e. it assumes both harness loops cost the same around the call (they are
specified identically: one 8-byte volatile store and a strided offset).

Usage:
    callgrind_report.py --iters N [--fn-regex LABEL=REGEX]... \
        LABEL:SIZE:OUT_N:OUT_2N ...
"""

import argparse
import re
import sys


def parse_callgrind(path):
    """Return (total_ir, {callee_name: [calls, inclusive_ir]})."""
    total = None
    callees = {}
    pending = None  # callee name whose calls= line awaits its cost line
    cfn = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if pending is not None:
                # cost line of a call: "<position> <inclusive Ir>"
                parts = line.split()
                incl = int(parts[1]) if len(parts) > 1 else 0
                pending[1] += incl
                pending = None
                continue
            if line.startswith("cfn="):
                cfn = line[4:]
            elif line.startswith("calls="):
                count = int(line[6:].split()[0])
                entry = callees.setdefault(cfn, [0, 0])
                entry[0] += count
                pending = entry
            elif line.startswith("fn="):
                cfn = None
            elif line.startswith("totals:") or (
                    line.startswith("summary:") and total is None):
                total = int(line.split(":", 1)[1].split()[0])
    if total is None:
        raise ValueError(f"{path}: no summary/totals line (incomplete run?)")
    return total, callees


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, required=True,
                    help="N: iterations of the smaller run (other is 2N)")
    ap.add_argument("--fn-regex", action="append", default=[],
                    metavar="LABEL=REGEX",
                    help="regex naming LABEL's persist function")
    ap.add_argument("runs", nargs="+", metavar="LABEL:SIZE:OUT_N:OUT_2N")
    args = ap.parse_args(argv)
    n = args.iters
    if n <= 0:
        ap.error("--iters must be positive")

    regexes = {}
    for item in args.fn_regex:
        label, sep, rx = item.partition("=")
        if not sep:
            ap.error(f"--fn-regex expects LABEL=REGEX, got {item!r}")
        regexes[label] = re.compile(rx, re.IGNORECASE)

    results = []  # (label, size, ir_per_iter, per_iter_callees, persist)
    for spec in args.runs:
        try:
            label, size, f1, f2 = spec.split(":", 3)
            size = int(size)
        except ValueError:
            ap.error(f"bad run spec {spec!r}")
        t1, c1 = parse_callgrind(f1)
        t2, c2 = parse_callgrind(f2)
        per_iter = (t2 - t1) / n
        once = []  # callees called exactly once more per extra iteration
        for name, (calls2, incl2) in c2.items():
            calls1, incl1 = c1.get(name, [0, 0])
            if calls2 - calls1 == n:
                once.append((name, (incl2 - incl1) / n))
        once.sort(key=lambda x: -x[1])
        rx = regexes.get(label, re.compile("persist", re.IGNORECASE))
        persist = next(((nm, ir) for nm, ir in once if rx.search(nm)), None)
        results.append((label, size, per_iter, once, persist))

    # loop overhead around the call, measured on the libpmem side per size
    overhead = {}
    for label, size, per_iter, _, persist in results:
        if label == "libpmem" and persist is not None:
            overhead[size] = per_iter - persist[1]

    print(f"Instructions (callgrind Ir), differential between --iters {n} "
          f"and --iters {2 * n}:")
    print()
    print("| side | size | Ir/iter (persist loop + store-only loop) "
          "| persist Ir/call | persist function |")
    print("|---|---:|---:|---:|---|")
    by_size = {}
    for label, size, per_iter, once, persist in results:
        if per_iter <= 0:
            cost, how = "n/a", ("nothing scaled with --iters: not the "
                                "harness itself (a wrapper script? "
                                "valgrind does not follow children)")
        elif persist is not None:
            cost, how = f"{persist[1]:.2f}", persist[0]
        elif size in overhead:
            cost = f"~{per_iter - overhead[size]:.2f}"
            how = ("not found (inlined?): estimated from libpmem "
                   "loop overhead")
        else:
            cost, how = "n/a", "not found"
        by_size.setdefault(size, {})[label] = (per_iter, persist)
        print(f"| {label} | {size} | {per_iter:.2f} | {cost} | {how} |")
    print()
    for size, sides in sorted(by_size.items()):
        if "libpmem" in sides and "kavach" in sides:
            d = round(sides["kavach"][0] - sides["libpmem"][0], 2) + 0.0
            print(f"size {size}: kavach - libpmem = {d:+.2f} Ir per "
                  f"iteration")
    print()
    print("Callees called exactly once per iteration (inclusive Ir/call):")
    for label, size, _, once, _ in results:
        shown = ", ".join(f"{nm} {ir:.2f}" for nm, ir in once[:6]) or "none"
        print(f"- {label} size {size}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
