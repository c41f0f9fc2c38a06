#!/usr/bin/env python3
"""Save-time trials of `kavach wsp`: one JSON line per trial on stdout.

Called by savetime.sh (which builds the programs and the binary and records the machine); it
can also be run alone:

    savetime.py --kavach target/release/kavach --bin DIR --shm /dev/shm/wsp-bench \
        --experiment latency|writeback|hibernate|window [--quick]

A trial starts `kavach wsp run --json` in its own session on a workload, waits until the
workload has written its whole buffer once (its first `round 1/` progress line), sends SIGPWR to
the runner and then either

- lets the runner return by itself (`--after-save kill`), reading the save report (marker_ns,
  stop_ns, context_ns, ...) from its result line: the latency experiments; or
- kills the whole process group when the window is over, as the power would, and asks
  `kavach wsp info` whether the valid marker was set: the success-rate experiment. Here the
  window is timed from the moment the harness sent SIGPWR, so signal delivery and scheduling
  delays under load count against the save.
"""

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time


def reader(stream, q):
    for line in iter(stream.readline, b""):
        q.put(line.decode("utf-8", "replace"))
    q.put(None)


def workload(bindir, threads, mib, rounds=0):
    if threads == 1:
        return [os.path.join(bindir, "hashchain"), "-p", "-m", str(mib), "-r", str(rounds)]
    return [os.path.join(bindir, "hashchain_mt"), "-p", "-t", str(threads), "-m", str(mib),
            "-r", str(rounds)]


def trial(a, prog, mode="image", wb="none", window_ms=1000.0, external=False, size="2GiB"):
    pool = os.path.join(a.shm, "trial.wsp")
    out = os.path.join(a.shm, "out.txt")
    for f in (pool, out):
        if os.path.exists(f):
            os.remove(f)
    cmd = [a.kavach, "wsp", "run", "--json", "--pool", pool, "--size", size,
           "--window-ms", str(window_ms), "--save", mode, "--write-back", wb,
           "--after-save", "hold" if external else "kill", "--"] + prog + [out]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    eq, oq = queue.Queue(), queue.Queue()
    threading.Thread(target=reader, args=(p.stderr, eq), daemon=True).start()
    threading.Thread(target=reader, args=(p.stdout, oq), daemon=True).start()
    rec = {"mode": mode, "write_back": wb, "window_ms": window_ms, "external": external,
           "program": os.path.basename(prog[0]), "args": prog[1:]}
    err_lines = []
    deadline = time.monotonic() + 120
    ready = False
    while time.monotonic() < deadline:
        try:
            line = eq.get(timeout=0.5)
        except queue.Empty:
            if p.poll() is not None:
                break
            continue
        if line is None:
            break
        err_lines.append(line)
        if "round 1/" in line:
            ready = True
            break
    if not ready:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rc = p.wait()
        what = "kavach exited %d before the workload's first pass" % rc if rc >= 0 \
            else "no progress line"
        rec["error"] = what + ": " + "".join(err_lines).strip()[-600:]
        return rec
    t0 = time.monotonic()
    os.kill(p.pid, signal.SIGPWR)
    # Watch stderr for the runner's save report: the time from our SIGPWR to reading it is the
    # save as an outsider sees it (signal delivery, scheduling, the save, the report's write).
    until = t0 + (window_ms / 1000.0 if external else 120.0)
    while True:
        left = until - time.monotonic()
        if left <= 0:
            break
        try:
            line = eq.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        err_lines.append(line)
        if line.startswith("{") and ('"event":"saved"' in line or '"event":"missed"' in line):
            rec["observed_ms"] = (time.monotonic() - t0) * 1000.0
            break
    if external:
        left = until - time.monotonic()
        if left > 0:
            time.sleep(left)
        rec["late_ms"] = (time.monotonic() - t0) * 1000.0 - window_ms
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        info = subprocess.run([a.kavach, "wsp", "info", "--json", "--pool", pool],
                              capture_output=True, text=True)
        try:
            v = json.loads(info.stdout)
            rec["marker_valid"] = bool(v.get("marker_valid"))
            rec["state"] = v.get("state")
        except ValueError:
            rec["marker_valid"] = False
            rec["state"] = "info exit %d: %s" % (info.returncode, info.stderr.strip()[-300:])
    else:
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rec["error"] = "the runner did not return after the save"
            return rec
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rec["exit"] = p.returncode
    # Drain what the runner printed.
    time.sleep(0.05)
    for q, sink in ((eq, err_lines), (oq, None)):
        while True:
            try:
                line = q.get_nowait()
            except queue.Empty:
                break
            if line is None:
                break
            if sink is not None:
                sink.append(line)
            elif line.startswith("{"):
                try:
                    rec["result"] = json.loads(line)
                except ValueError:
                    pass
    for line in err_lines:
        if line.startswith("{"):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") in ("saved", "missed"):
                rec["save"] = e
    if "save" not in rec and "result" not in rec and not external:
        rec["error"] = "no save report: " + "".join(err_lines)[-600:]
    if os.path.exists(pool):
        os.remove(pool)
    return rec


def start(cmd):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    eq, oq = queue.Queue(), queue.Queue()
    threading.Thread(target=reader, args=(p.stderr, eq), daemon=True).start()
    threading.Thread(target=reader, args=(p.stdout, oq), daemon=True).start()
    return p, eq, oq


def wait_lines(q, needle, count, timeout=120):
    """Wait until `count` stderr lines holding `needle` came; False on EOF or timeout."""
    end = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < end:
        try:
            line = q.get(timeout=0.5)
        except queue.Empty:
            continue
        if line is None:
            return False
        if needle in line:
            seen += 1
            if seen >= count:
                return True
    return False


def pwr_and_result(p, oq):
    """SIGPWR to a runner started with --after-save kill; its result line's report."""
    os.kill(p.pid, signal.SIGPWR)
    p.wait(timeout=120)
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        line = oq.get(timeout=5)
        if line is None:
            return None
        if line.startswith("{"):
            return json.loads(line).get("report")


def second_save(a, mib, work, wb):
    """Save 1 after the fill (everything dirty), resume, let the program make passes over its
    working set only, then save 2: the dirty set since save 1 is the working set."""
    pool = os.path.join(a.shm, "trial.wsp")
    out = os.path.join(a.shm, "out.txt")
    for f in (pool, out):
        if os.path.exists(f):
            os.remove(f)
    rec = {"mode": "image", "write_back": wb, "window_ms": 1000.0, "external": False,
           "program": "hashchain", "args": ["-m", str(mib), "-w", str(work)]}
    common = ["--json", "--pool", pool, "--window-ms", "1000", "--write-back", wb,
              "--after-save", "kill"]
    p, eq, oq = start([a.kavach, "wsp", "run", "--size", "2GiB"] + common +
                      ["--", os.path.join(a.bin, "hashchain"), "-p", "-m", str(mib),
                       "-w", str(work), "-r", "0", out])
    if not wait_lines(eq, "round 1/", 1):
        p.kill()
        rec["error"] = "no first pass"
        return rec
    rec["first"] = pwr_and_result(p, oq)
    p, eq, oq = start([a.kavach, "wsp", "resume"] + common)
    if not wait_lines(eq, '"event":"resumed"', 1) or not wait_lines(eq, "round ", 3):
        p.kill()
        rec["error"] = "no passes after the resume"
        return rec
    rec["save"] = pwr_and_result(p, oq)
    if os.path.exists(pool):
        os.remove(pool)
    return rec


def emit(rec, **extra):
    rec.update(extra)
    print(json.dumps(rec), flush=True)
    s = rec.get("save") or {}
    print("  %-10s %-9s wb=%-7s T=%s mib=%-5s w=%6.1fms -> %s" % (
        rec.get("experiment"), rec["mode"], rec["write_back"], rec.get("threads"),
        rec.get("mib"), rec["window_ms"],
        rec.get("error") or ("marker %.1f us, in_window %s%s" % (
            s.get("marker_ns", float("nan")) / 1e3, s.get("in_window"),
            (", marker_valid %s" % rec.get("marker_valid")) if rec["external"] else ""))),
        file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kavach", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--shm", required=True)
    ap.add_argument("--experiment", required=True,
                    choices=["latency", "writeback", "hibernate", "window", "tracked"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20)
    a = ap.parse_args()
    os.makedirs(a.shm, exist_ok=True)
    sizes = [16, 64, 256] if a.quick else [16, 64, 256, 1024]
    if a.experiment == "latency":
        for mib in sizes:
            for t in (1, 2, 4, 8):
                for r in range(a.reps):
                    emit(trial(a, workload(a.bin, t, mib)), experiment="latency", threads=t,
                         mib=mib, rep=r)
    elif a.experiment == "writeback":
        for mib in sizes:
            for wb in ("none", "all", "tracked"):
                for r in range(a.reps):
                    emit(trial(a, workload(a.bin, 1, mib), wb=wb), experiment="writeback",
                         threads=1, mib=mib, rep=r)
    elif a.experiment == "hibernate":
        for mib in sizes:
            for r in range(a.reps):
                emit(trial(a, workload(a.bin, 1, mib), mode="hibernate"),
                     experiment="hibernate", threads=1, mib=mib, rep=r)
    elif a.experiment == "tracked":
        for mib in ([256] if a.quick else [256, 1024]):
            for wb in ("none", "all", "tracked"):
                for r in range(a.reps):
                    emit(second_save(a, mib, 16, wb), experiment="tracked", threads=1,
                         mib=mib, rep=r)
    elif a.experiment == "window":
        # A CPU hog on the side for the whole experiment (the machine has two CPUs).
        hog = subprocess.Popen([os.path.join(a.bin, "hashchain"), "-m", "8", "-r", "0",
                                os.path.join(a.shm, "hog.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for mode, wb, mib in (("image", "none", 64), ("image", "all", 64),
                                  ("image", "tracked", 64), ("hibernate", "none", 64)):
                for w in (1, 5, 10, 33, 100):
                    for r in range(a.trials):
                        emit(trial(a, workload(a.bin, 2, mib), mode=mode, wb=wb, window_ms=w,
                                   external=True),
                             experiment="window", threads=2, mib=mib, rep=r, hog=True)
        finally:
            hog.kill()
            hog.wait()


if __name__ == "__main__":
    main()
