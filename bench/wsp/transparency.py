#!/usr/bin/env python3
"""The transparency oracle at the issue's scale (a few hundred MiB), outside `cargo test`.

    transparency.py --kavach target/release/kavach --bin DIR --shm DIR [--failures 5] [--seed S]

For each workload: an uninterrupted run gives the reference (stdout, output file, and the
"starts" file its main appends to); then `kavach wsp run` in its own session, with FAILURES
power failures at random times (SIGPWR to the runner, the window, SIGKILL of the group), each
followed by `kavach wsp info` (the marker must be valid and the counter must count) and `kavach
wsp resume`, until the program exits. One JSON line per workload on stdout: whether stdout, the
output file and the starts file are bit-identical to the reference, the times, and the saves.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

WINDOW_MS = 250


def run_ref(cmd):
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        sys.exit("reference run failed: %s" % p.stderr.decode())
    return p.stdout, time.monotonic() - t


def spawn(cmd):
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def wait_event(p, errf, name, timeout=60):
    """Read stderr lines until one holds `"event":"name"`; keep them all in errf."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = p.stderr.readline()
        if not line:
            return False
        errf.append(line.decode("utf-8", "replace"))
        if ('"event":"%s"' % name) in errf[-1]:
            return True
    return False


def one(a, name, args, rng):
    d = os.path.join(a.shm, name)
    os.makedirs(os.path.join(d, "ref"), exist_ok=True)
    os.makedirs(os.path.join(d, "wsp"), exist_ok=True)
    prog = os.path.join(a.bin, name.split(":")[0])

    def argv(sub):
        return [x.replace("@", os.path.join(d, sub)) for x in args]

    ref_out, ref_s = run_ref([prog] + argv("ref"))
    pool = os.path.join(d, "image.wsp")
    if os.path.exists(pool):
        os.remove(pool)
    run = [a.kavach, "wsp", "run", "--json", "--size", "4GiB", "--window-ms", str(WINDOW_MS),
           "--pool", pool, "--"] + [prog] + argv("wsp")
    resume = [a.kavach, "wsp", "resume", "--json", "--window-ms", str(WINDOW_MS), "--pool", pool]
    rec = {"workload": name, "args": args, "reference_s": round(ref_s, 3),
           "failures": 0, "saves": [], "resumes": []}
    t_all = time.monotonic()
    p = spawn(run)
    stdout = b""
    ready = "started"
    for i in range(a.failures):
        err = []
        if not wait_event(p, err, ready):
            rec["error"] = "no %s event: %s" % (ready, "".join(err)[-400:])
            break
        if ready == "resumed":
            for line in err:
                if '"event":"resumed"' in line:
                    rec["resumes"].append(json.loads(line))
        time.sleep(ref_s * rng.uniform(0.1, 0.7) / a.failures)
        if p.poll() is not None:
            break
        os.kill(p.pid, signal.SIGPWR)
        time.sleep(WINDOW_MS / 1000.0)
        os.killpg(p.pid, signal.SIGKILL)
        out, rest = p.communicate()
        err += rest.decode("utf-8", "replace").splitlines()
        for line in err:
            if '"event":"saved"' in line:
                rec["saves"].append(json.loads(line))
        stdout += b"".join(l + b"\n" for l in out.splitlines() if not l.startswith(b"{"))
        rec["failures"] += 1
        info = subprocess.run([a.kavach, "wsp", "info", "--json", "--pool", pool],
                              capture_output=True, text=True)
        v = json.loads(info.stdout)
        if not (v.get("marker_valid") and v.get("counter") == i + 1):
            rec["error"] = "after failure %d: state %s counter %s" % (
                i + 1, v.get("state"), v.get("counter"))
            break
        p = spawn(resume)
        ready = "resumed"
    out, err = p.communicate()
    stdout += b"".join(l + b"\n" for l in out.splitlines() if not l.startswith(b"{"))
    for line in err.decode("utf-8", "replace").splitlines():
        if '"event":"resumed"' in line:
            rec["resumes"].append(json.loads(line))
    rec["last_exit"] = p.returncode
    rec["total_s"] = round(time.monotonic() - t_all, 3)

    def same(f):
        try:
            with open(os.path.join(d, "ref", f), "rb") as x, \
                    open(os.path.join(d, "wsp", f), "rb") as y:
                return x.read() == y.read()
        except OSError:
            return False

    rec["stdout_identical"] = stdout == ref_out
    rec["output_identical"] = same("out.txt")
    rec["starts_identical"] = same("starts.txt")
    rec["reference"] = ref_out.decode().strip()
    subprocess.run(["rm", "-rf", d])
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kavach", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--shm", required=True)
    ap.add_argument("--failures", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time())
    rng = random.Random(seed)
    print("transparency: seed %d" % seed, file=sys.stderr)
    os.makedirs(a.shm, exist_ok=True)
    work = [
        ("hashchain", ["-m", "256", "-r", "12", "-s", "@/starts.txt", "@/out.txt"]),
        ("hashchain_mt", ["-t", "4", "-m", "256", "-r", "12", "-s", "@/starts.txt",
                          "@/out.txt"]),
        ("sortsum", ["-n", "32", "-r", "1", "-s", "@/starts.txt", "@/out.txt"]),
    ]
    for name, args in work:
        rec = one(a, name, args, rng)
        rec["seed"] = seed
        print(json.dumps(rec), flush=True)
        print("  %s: %d failures, %d saves, stdout %s, output %s, starts %s, exit %s%s" % (
            name, rec["failures"], len(rec["saves"]), rec["stdout_identical"],
            rec["output_identical"], rec["starts_identical"], rec.get("last_exit"),
            (", error " + rec["error"]) if "error" in rec else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
