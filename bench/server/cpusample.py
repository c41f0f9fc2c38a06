#!/usr/bin/env python3
"""Sample where the machine's CPU goes while a benchmark runs, for bench/server/timeline.py.

Usage:
    cpusample.py --out FILE --server PID [--client-match TEXT] [--interval S]

Every S seconds (default 0.2) until the server exits or the sampler is signalled, one JSON line
(exit 0; exit 2 if there is no process PID to begin with):
    {"t": epoch seconds,
     "sys": {"user": .., "nice": .., "system": .., "idle": .., "iowait": .., "irq": ..,
             "softirq": .., "steal": ..}          # /proc/stat's cpu line, jiffies (cumulative)
     "server": {"<thread name>": [cpu ns, minor faults, voluntary switches,
                                  involuntary switches, user ticks, system ticks], ...}
                                                  # summed over the threads of a name
     "client": [cpu ns, minor faults, user ticks, system ticks],
                                                  # every process whose command line has TEXT
     "probe_ns": CPU time of a fixed piece of work (below)}

CPU time per thread comes from /proc/PID/task/TID/schedstat (nanoseconds on a CPU), faults and
its split into user and system time (clock ticks, os.sysconf("SC_CLK_TCK") per second) from
.../stat and context switches from .../status; all are cumulative, so the reader differences
two samples. The probe times, in the sampler's own CPU time (so waiting for a CPU does not
count), the same small loop at every sample (about 1 ms): when it takes longer, the CPU itself
ran slower in that moment (another tenant of the host on the same core or cache, a lower clock),
which slows the server and the client alike; virtual machines do not always report that as steal,
and without hardware counters (cycles, instructions) nothing else here shows it. Threads with a number in their name (kavach-worker-3) are summed under the name
with the number replaced by '*', so that a line stays short; a thread that exits between two
samples takes its counts with it (the difference is clamped at 0 by the reader).
"""

import argparse
import json
import os
import re
import signal
import sys
import time

DIGITS = re.compile(r"\d+")


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def stat_fields(text):
    """Fields of /proc/.../stat after the command name (which may hold spaces)."""
    return text[text.rfind(")") + 2:].split()


def task_counts(base):
    sched = read(base + "/schedstat")
    st = read(base + "/stat")
    status = read(base + "/status")
    if sched is None or st is None or status is None:
        return None
    cpu = int(sched.split()[0])
    fields = stat_fields(st)
    minflt, utime, stime = int(fields[7]), int(fields[11]), int(fields[12])
    vol = invol = 0
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            vol = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            invol = int(line.split()[1])
    return cpu, minflt, vol, invol, utime, stime


def server_sample(pid):
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        name = read(base + "/comm")
        counts = task_counts(base)
        if name is None or counts is None:
            continue
        key = DIGITS.sub("*", name.strip())
        acc = out.setdefault(key, [0] * len(counts))
        for i, v in enumerate(counts):
            acc[i] += v
    return out


def client_sample(match):
    cpu = flt = ut = st = 0
    if not match:
        return [0, 0, 0, 0]
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        cmd = read(f"/proc/{pid}/cmdline")
        if not cmd or match not in cmd:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            c = task_counts(f"/proc/{pid}/task/{tid}")
            if c:
                cpu += c[0]
                flt += c[1]
                ut += c[4]
                st += c[5]
    return [cpu, flt, ut, st]


def probe():
    """CPU nanoseconds of a fixed loop (the machine's speed at this moment)."""
    t0 = time.thread_time_ns()
    acc = 0
    for i in range(4000):
        acc = (acc * 31 + i) & 0xFFFFFFFF
    return time.thread_time_ns() - t0


def sys_sample():
    line = (read("/proc/stat") or "").splitlines()[0].split()
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {n: int(v) for n, v in zip(names, line[1:9])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--server", type=int, required=True, help="server process id")
    ap.add_argument("--client-match", default="", help="text in the client's command line")
    ap.add_argument("--interval", type=float, default=0.2)
    a = ap.parse_args()
    if a.interval <= 0:
        ap.error("--interval must be positive")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    if server_sample(a.server) is None:
        print(f"cpusample.py: no process {a.server} to sample", file=sys.stderr)
        return 2
    with open(a.out, "w") as f:
        while not stop:
            srv = server_sample(a.server)
            if srv is None:
                break  # the server exited: the samples so far are the record
            row = {"t": round(time.time(), 4), "sys": sys_sample(), "server": srv,
                   "client": client_sample(a.client_match), "probe_ns": probe()}
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
            f.flush()
            time.sleep(a.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
