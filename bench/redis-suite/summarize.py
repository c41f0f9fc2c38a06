#!/usr/bin/env python3
"""Turns the runtest logs that bench/redis-suite/run.sh wrote into a report: passed, failed and
skipped tests per test file, for Kavach and for Redis 7 side by side, the failing tests with
their error lines, and the tests skipped by tag listed apart. Writes OUT/report.md and
OUT/report.json; with --update-doc FILE, also replaces the Markdown between the markers
<!-- redis-suite:begin --> and <!-- redis-suite:end --> of FILE."""

import argparse
import datetime
import json
import os
import re
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STATUS = re.compile(r"^\[(ok|err|skip|ignore|exception|TIMEOUT|\d+/\d+ done)\]: ?(.*)$")
OK = re.compile(r"^(.*) \(\d+ ms\)$")
# The reasons runtest gives when tags refuse a test or a whole group (support/server.tcl).
TAG_REASON = re.compile(
    r"^(Tag: .* denied|Tag: none of the tags allowed|Not supported on external server"
    r"|Not supported on singledb|Not supported in cluster mode|Not supported in tls mode"
    r"|large memory flag not provided)$"
)
TEST_TAG_REASON = re.compile(r"^(.*): (" + TAG_REASON.pattern[2:-2] + r")$")
IN_FILE = re.compile(r"^(.*) in tests/\S+\.tcl$")
GROUP_ERROR = "(a test group's setup or code, outside any test: the rest of the group did not run)"
# A failure that comes from Redis internals its tags do not mark: OBJECT or DEBUG refused, or
# an encoding assertion (assert_encoding: "Expected 'listpack' to match ...").
INTERNALS = re.compile(
    r"unknown command '(object|debug)'|^ERR DEBUG|"
    r"^Expected '\*?(listpack|ziplist|intset|quicklist|hashtable|skiplist|embstr|int|raw)\*?' "
    r"to (equal or )?match",
    re.IGNORECASE,
)
SIDES = ("kavach", "redis")
SIDE_NAMES = {"kavach": "Kavach", "redis": "Redis 7"}
def markers(modes):
    """The section of the document a report goes to: plain runs to `redis-suite`, runs with
    options that change the suite to `redis-suite-<options>`."""
    used = sorted({m for ms in modes.values() for m in ms if m != "strict"})
    tag = "redis-suite" if not used else "redis-suite-" + "-".join(used).replace("+", "-")
    return f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
ERROR_CHARS_MAX = 300


def error_line(details):
    """The line that says why a test failed. runtest's --durable mode cuts the first ten
    characters of a non-assertion error (meant for "assertion:") and appends the error's
    stack, whose first line is the whole message: prefer that one."""
    lines = [d.strip() for d in details if d.strip()]
    if not lines:
        return ""
    first = lines[0]
    if len(lines) > 1 and lines[1].endswith(first) and len(lines[1]) > len(first):
        first = lines[1]
    # Assertions append where they were made; the test name already says that.
    first = re.sub(r" \(context: .*$", "", first)
    return first[:ERROR_CHARS_MAX]


def parse_log(path):
    """Per-test outcomes of one runtest log, in order."""
    passed, failures, skipped, exception, done, timeout = [], [], [], None, False, False
    last = None  # the last test that reported, for a file that was killed
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [ANSI.sub("", line.rstrip("\n")) for line in f]
    except OSError:
        lines = []
    i = 0
    while i < len(lines):
        line = lines[i]
        # The closing summary repeats the failures: they were counted already.
        if line.startswith("!!! WARNING The following tests failed"):
            break
        m = STATUS.match(line)
        i += 1
        if not m:
            continue
        status, data = m.group(1), m.group(2)
        # Detail lines follow an err or an exception up to the next status line.
        details = []
        while i < len(lines) and not STATUS.match(lines[i]) \
                and not lines[i].startswith("!!! WARNING") \
                and not lines[i].startswith("Testing unit/"):
            details.append(lines[i])
            i += 1
        if status == "ok":
            ok = OK.match(data)
            passed.append(ok.group(1) if ok else data)
            last = passed[-1]
        elif status == "err":
            m = IN_FILE.match(data)
            if m:
                failures.append({"test": m.group(1), "error": error_line(details)})
                last = m.group(1)
            else:
                # An error in a test group's own code (outside any test): runtest's --durable
                # counts it as a failure and skips the rest of the group.
                failures.append({"test": GROUP_ERROR, "error": error_line([data] + details)})
        elif status in ("skip", "ignore"):
            if TAG_REASON.match(data):
                skipped.append({"test": None, "reason": data})
            else:
                m = TEST_TAG_REASON.match(data)
                name, reason = (m.group(1), m.group(2)) if m else (data, "skipped")
                skipped.append({"test": name, "reason": reason})
        elif status == "exception":
            exception = "\n".join([data] + details[:6]).strip()[:1000]
        elif status == "TIMEOUT":
            timeout = True
        elif status.endswith("done"):
            done = True
    return passed, failures, skipped, exception, done, timeout, last


def outcome(run):
    passed, failures, skipped, exception, done, timeout, last = parse_log(run["log"])
    code = run["exit"]
    if code in (124, 137) or timeout:
        result = "timeout"
    elif exception is not None:
        result = "aborted"
    elif done and code == 0 and not failures:
        result = "ok"
    elif done:
        result = "failures"
    else:
        result = f"exit {code}"
    if not run["alive"]:
        result += ", server died"
    return {
        "result": result,
        "exit": code,
        "seconds": run["seconds"],
        "server_alive": run["alive"],
        "mode": run["mode"],
        "passed": len(passed),
        "failed": len(failures),
        "skipped": len(skipped),
        "failures": [
            dict(f, internals=bool(INTERNALS.search(f["error"])))
            for f in failures
        ],
        "skipped_tests": skipped,
        "exception": exception,
        "last_test": last,
        "log": run["log"],
    }


def read_runs(path):
    runs = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 7:
                continue
            side, unit, code, seconds, alive, mode, log = parts
            runs[(side, unit)] = {
                "exit": int(code),
                "seconds": int(seconds),
                "alive": alive == "1",
                "mode": mode,
                "log": log,
            }
    return runs


def unit_order(units):
    preferred = [
        "unit/type/string", "unit/type/incr", "unit/type/hash", "unit/type/list",
        "unit/type/set", "unit/type/zset", "unit/expire", "unit/keyspace", "unit/multi",
        "unit/scan", "unit/pubsub", "unit/protocol",
    ]
    return sorted(units, key=lambda u: (preferred.index(u) if u in preferred else 99, u))


def cell(o, field):
    return "-" if o is None else str(o[field])


def markdown(report):
    out = []
    w = out.append
    w(f"Redis {report['suite_version']} test suite (Debian's source package), external mode, "
      f"`./runtest --host 127.0.0.1 --port P --single <file> --durable` with "
      f"{' '.join('`--tags -' + t + '`' for t in report['deny_tags'])}; "
      f"a fresh server per file, {report['timeout_s']} s per file. "
      f"Made by `bench/redis-suite/run.sh` on {report['date']}.")
    if report.get("kavach_binary"):
        w("")
        w(f"Kavach: `{report['kavach_binary']}`.")
    modes = {s: m for s, m in report["modes"].items() if m and m != ["strict"]}
    if modes:
        w("")
        w("Not the plain suite: " + "; ".join(
            f"{SIDE_NAMES[s]} ran with "
            + ", ".join("`" + " ".join("--" + o for o in x.split("+")) + "`" for x in m)
            for s, m in modes.items())
          + " (`--lenient-setup`: errors from `FUNCTION FLUSH` and from `CONFIG GET/SET` of a test "
          "group's settings in runtest's setup ignored; "
          "`--singledb`: runtest's option, no `SELECT 9`, tests tagged singledb:skip skipped).")
    w("")
    w("| test file | Kavach passed | failed | skipped | result "
      "| Redis 7 passed | failed | skipped | result |")
    w("|---|--:|--:|--:|---|--:|--:|--:|---|")
    for f in report["files"]:
        k, r = f["servers"].get("kavach"), f["servers"].get("redis")
        w(f"| {f['unit']} | {cell(k, 'passed')} | {cell(k, 'failed')} | {cell(k, 'skipped')} "
          f"| {cell(k, 'result')} | {cell(r, 'passed')} | {cell(r, 'failed')} "
          f"| {cell(r, 'skipped')} | {cell(r, 'result')} |")
    t = report["totals"]
    k, r = t.get("kavach"), t.get("redis")
    w(f"| **total** | {cell(k, 'passed')} | {cell(k, 'failed')} | {cell(k, 'skipped')} | "
      f"| {cell(r, 'passed')} | {cell(r, 'failed')} | {cell(r, 'skipped')} | |")
    w("")
    w("\"skipped\" counts tests refused by tag (a whole refused group counts once); "
      "\"aborted\" means runtest stopped the file at an error outside any test, so the tests "
      "after it did not run; \"timeout\" means the file was killed after the time limit.")
    for side in SIDES:
        files = [f for f in report["files"] if side in f["servers"]]
        if not files:
            continue
        bad = [f for f in files
               if f["servers"][side]["failures"] or f["servers"][side]["exception"]
               or f["servers"][side]["result"] not in ("ok", "failures")]
        w("")
        w(f"### Failing tests on {SIDE_NAMES[side]}")
        if not bad:
            w("")
            w("None.")
            continue
        for f in bad:
            o = f["servers"][side]
            w("")
            w(f"**{f['unit']}** ({o['result']}, {o['failed']} failed)")
            w("")
            for internals in (False, True):
                shown = [x for x in o["failures"] if x["internals"] == internals]
                if internals and shown:
                    w("")
                    w("Of which tests of Redis internals (encodings, OBJECT, DEBUG), not tagged:")
                    w("")
                for x in shown:
                    err = x["error"].replace("|", "\\|").replace("`", "'")
                    w(f"- {x['test']}: `{err}`")
            if o["exception"]:
                first = o["exception"].splitlines()[0].replace("`", "'")
                w(f"- the file stopped here: `{first[:ERROR_CHARS_MAX]}`")
            elif o["result"].startswith("timeout"):
                after = f" in the test after \"{o['last_test']}\"" if o["last_test"] else ""
                w(f"- the file was killed after {report['timeout_s']} s{after} "
                  f"(it waited for something that did not come)")
    w("")
    w("### Skipped by tag (tests of Redis internals or of a server of the suite's own)")
    w("")
    w("The same tags are refused on both servers; listed from the Redis 7 run where there is "
      "one.")
    for f in report["files"]:
        o = f["servers"].get("redis") or f["servers"].get("kavach")
        if not o or not o["skipped_tests"]:
            continue
        w("")
        w(f"**{f['unit']}**: " + "; ".join(
            (f"{s['test']} ({s['reason']})" if s["test"] else f"a whole group ({s['reason']})")
            for s in o["skipped_tests"]))
    return "\n".join(out) + "\n"


def update_doc(path, text, modes):
    begin, end_marker = markers(modes)
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    start, end = doc.find(begin), doc.find(end_marker)
    if start < 0 or end < start:
        sys.exit(f"summarize.py: {path} has no {begin} ... {end_marker} section")
    doc = doc[:start + len(begin)] + "\n" + text + doc[end:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)


def read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--deny-tags", default="")
    ap.add_argument("--timeout", type=int, default=0)
    ap.add_argument("--update-doc")
    a = ap.parse_args()
    runs = read_runs(a.runs)
    units = unit_order({u for (_, u) in runs})
    files = []
    totals = {}
    for unit in units:
        servers = {}
        for side in SIDES:
            if (side, unit) in runs:
                o = outcome(runs[(side, unit)])
                servers[side] = o
                t = totals.setdefault(side, {"passed": 0, "failed": 0, "skipped": 0})
                for k in t:
                    t[k] += o[k]
        files.append({"unit": unit, "servers": servers})
    report = {
        "suite_version": "7.0.15",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "deny_tags": a.deny_tags.split(),
        "timeout_s": a.timeout,
        "modes": {
            side: sorted({runs[k]["mode"] for k in runs if k[0] == side}) for side in SIDES
        },
        "kavach_binary": read_text(os.path.join(a.out, "kavach-binary")),
        "files": files,
        "totals": totals,
    }
    text = markdown(report)
    with open(os.path.join(a.out, "report.md"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(a.out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    if a.update_doc:
        update_doc(a.update_doc, text, report["modes"])


if __name__ == "__main__":
    main()
