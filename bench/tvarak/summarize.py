#!/usr/bin/env python3
"""Markdown tables from a bench/tvarak/run.sh output directory: python3 summarize.py OUT_DIR"""
import json
import sys
from pathlib import Path

TRACES = ["fio-seq-read", "fio-seq-write", "fio-rand-read", "fio-rand-write", "stream-copy",
          "stream-scale", "stream-add", "stream-triad", "log-sync", "heap-insert",
          "heap-balanced", "kv-ycsb-a", "server-ycsb-a",
          "server-ycsb-real"]


def load(p):
    return json.loads(Path(p).read_text())


def pct(x):
    return "n/a" if x is None else f"{x:+.1f}%"


def main(out):
    out = Path(out)
    print((out / "machine.txt").read_text())
    present = [t for t in TRACES if (out / f"run-{t}.json").exists()]

    print("## Traces\n")
    print("| trace | events | loads | stores | flushes | fences | tx commits | work cycles per "
          "access | cores |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for t in present:
        i = load(out / f"info-{t}.json")
        acc = max(1, i['loads'] + i['stores'])
        print(f"| {t} | {i['events']} | {i['loads']} | {i['stores']} | {i['flushes']} | "
              f"{i['fences']} | {i['tx_commits']} | {i.get('work_cycles', 0) / acc:.0f} | "
              f"{i['cores']} |")

    designs = ["tvarak", "txb-object", "txb-page", "vilamb:10000"]
    for metric, key in [("runtime", "runtime_pct"), ("NVM accesses", "nvm_accesses_pct"),
                        ("energy", "energy_pct")]:
        print(f"\n## Overhead against Baseline: {metric} (Fig. 8)\n")
        print("| trace | " + " | ".join(designs) + " |")
        print("| --- |" + " --- |" * len(designs))
        for t in present:
            rows = {d["design"]: d for d in load(out / f"run-{t}.json")["designs"]}
            cells = [pct(rows[d]["vs_baseline"][key]) if d in rows else "-" for d in designs]
            print(f"| {t} | " + " | ".join(cells) + " |")

    print("\n## NVM accesses by kind (64 B lines): data R / data W / redundancy R / redundancy W\n")
    print("| trace | baseline | tvarak | txb-object | txb-page |")
    print("| --- | --- | --- | --- | --- |")
    for t in present:
        rows = {d["design"]: d for d in load(out / f"run-{t}.json")["designs"]}
        def kinds(d):
            c = rows[d]["counters"]
            return (f"{c['nvm_data_reads']} / {c['nvm_data_writes']} / "
                    f"{c['nvm_red_reads']} / {c['nvm_red_writes']}")
        print(f"| {t} | " + " | ".join(kinds(d) for d in
                                      ["baseline", "tvarak", "txb-object", "txb-page"]) + " |")

    print("\n## Ablation (Fig. 9): read amplification (NVM reads per data line filled) and "
          "runtime overhead\n")
    steps = ["naive", "cl", "cl-cache", "tvarak"]
    print("| trace | " + " | ".join(steps) + " |")
    print("| --- |" + " --- |" * len(steps))
    for t in present:
        p = out / f"ablation-{t}.json"
        if not p.exists():
            continue
        rows = {d["design"]: d for d in load(p)["steps"]}
        cells = [f"{rows[s]['read_amplification']:.2f}x, {pct(rows[s]['vs_baseline']['runtime_pct'])}"
                 for s in steps]
        print(f"| {t} | " + " | ".join(cells) + " |")

    for kind, title in [("red", "redundancy-partition ways"), ("diff", "diff-partition ways"),
                        ("ctl", "controller cache, KiB")]:
        files = sorted(out.glob(f"sweep-{kind}-*.json"))
        if not files:
            continue
        print(f"\n## Sensitivity (Fig. 10): {title}; TVARAK's runtime overhead "
              "(NVM-access overhead)\n")
        first = load(files[0])
        values = [p["value"] for p in first["points"]]
        print("| trace | " + " | ".join(str(v) for v in values) + " |")
        print("| --- |" + " --- |" * len(values))
        for f in files:
            j = load(f)
            cells = [f"{pct(p['runtime_pct'])} ({pct(p['nvm_accesses_pct'])})"
                     for p in j["points"]]
            print(f"| {j['trace']['name']} | " + " | ".join(cells) + " |")

    fp = out / "faults.json"
    if fp.exists():
        m = load(fp)
        print(f"\n## Fault coverage ({m['trials']} trials per cell)\n")
        print("| fault | design | found on first read | wrong bytes returned | found by scrub | "
              "found after the period | corrected |")
        print("| --- | --- | --- | --- | --- | --- | --- |")

        def cell(t):
            n = t["all"] + t["some"] + t["none"]
            if t["all"] == n:
                return "yes"
            if t["all"] == 0 and t["some"] == 0:
                return "no"
            return f"{t['all']}/{t['some']}/{t['none']}"
        for c in m["cells"]:
            print(f"| {c['fault']} | {c['design']} | {cell(c['on_first_read'])} | "
                  f"{cell(c['wrong_bytes_returned'])} | {cell(c['by_scrub'])} | "
                  f"{cell(c['by_scrub_after_period'])} | {cell(c['corrected'])} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
