#!/usr/bin/env python3
"""Small RESP2 helpers for the server benchmarks (stdlib only). Subcommands:

  gen-load --keys N --value-size S
      Print N `SET key:NNNNNNNNN VALUE` commands in RESP (for `redis-cli --pipe`). Values are
      S bytes, derived from the key number (so a check can recompute them).

  check --port P --keys N --value-size S [--samples K]
      DBSIZE must be N and K evenly spread keys must hold their values; prints JSON.

  probe --port P --expect N --out FILE [--timeout T] -- CMD ARGS...
      Restart timing. The probe process execs CMD (so CMD keeps the probe's pid, the caller's
      $!, and its stdout/stderr) after forking a poller that takes the time just before the
      exec and then polls: connect every 1 ms, PING until +PONG (a -LOADING error means not
      yet), then DBSIZE until it is N. The poller writes one JSON object to FILE (atomically,
      when done): milliseconds from the exec to the first accepted connection, the first PONG
      and the right DBSIZE, or an "error".

  rb-csv KEY=VALUE...
      Read redis-benchmark --csv output on stdin; print one JSON line per test, with the
      KEY=VALUE pairs added (numbers converted).

  ctl --port P --command CMD --every S --duration S --t0 EPOCH --out FILE
      Timeline controller: every S seconds send CMD (SAVE or BGREWRITEAOF) on its own
      connection and log when it was sent and answered; meanwhile poll INFO persistence every
      0.1 s on another connection and log transitions of every *_in_progress field and changes
      of the counters of finished rewrites/saves/checkpoints (aof_rewrites, rdb_saves, and
      *checkpoints, *checkpoints_total, *checkpoint_count for Kavach). JSON lines, times in
      seconds since --t0.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time


class RespError(Exception):
    pass


class Conn:
    def __init__(self, port, host="127.0.0.1", timeout=30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RespError(f"unexpected reply type {line[:40]!r}")

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if not isinstance(a, bytes):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))

    def call(self, *args):
        self.send(*args)
        return self.reply()


def value_for(i, size):
    pat = b"%09d." % i
    return (pat * (size // len(pat) + 1))[:size]


def key_for(i):
    return b"key:%09d" % i


def cmd_gen_load(a):
    out = sys.stdout.buffer
    batch = []
    for i in range(a.keys):
        k, v = key_for(i), value_for(i, a.value_size)
        batch.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
        if len(batch) == 10000:
            out.write(b"".join(batch))
            batch.clear()
    out.write(b"".join(batch))
    out.flush()


def cmd_check(a):
    c = Conn(a.port)
    n = c.call("DBSIZE")
    bad = []
    step = max(1, a.keys // max(1, a.samples))
    checked = 0
    for i in list(range(0, a.keys, step)) + [a.keys - 1]:
        got = c.call("GET", key_for(i))
        checked += 1
        if got != value_for(i, a.value_size):
            bad.append(key_for(i).decode())
    c.close()
    print(json.dumps({"dbsize": n, "expected": a.keys, "checked": checked, "bad": len(bad),
                      "bad_keys": bad[:5]}))
    return 0 if n == a.keys and not bad else 1


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def cmd_probe(a):
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        sys.exit("probe: no command given")
    server_pid = os.getpid()
    rfd, wfd = os.pipe()
    child = os.fork()
    if child != 0:
        # This process becomes the server (same pid: the caller's $!). The poller, a
        # grandchild, learns the start time through the pipe.
        os.close(rfd)
        os.waitpid(child, 0)
        t0 = time.perf_counter()
        os.write(wfd, repr(t0).encode())
        os.close(wfd)
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            sys.stderr.write(f"probe: cannot start {cmd[0]}: {e}\n")
            os._exit(127)
    if os.fork() != 0:
        os._exit(0)
    os.close(wfd)
    os.setsid()
    data = b""
    while True:
        chunk = os.read(rfd, 64)
        if not chunk:
            break
        data += chunk
    os.close(rfd)
    try:
        t0 = float(data)
    except ValueError:
        t0 = time.perf_counter()
    res = {"pid": server_pid, "accept_ms": None, "pong_ms": None, "ready_ms": None,
           "loading_replies": 0, "dbsize": None}
    deadline = t0 + a.timeout
    conn = None

    def ms():
        return round((time.perf_counter() - t0) * 1000.0, 3)

    def alive():
        if not pid_alive(server_pid):
            res["error"] = "server exited before it was ready"
            return False
        return True

    while time.perf_counter() < deadline and alive():
        try:
            conn = Conn(a.port, timeout=max(1.0, deadline - time.perf_counter()))
            res["accept_ms"] = ms()
            break
        except OSError:
            time.sleep(0.001)
    while conn is not None and res["pong_ms"] is None and time.perf_counter() < deadline and alive():
        try:
            if conn.call("PING") == "PONG":
                res["pong_ms"] = ms()
        except RespError as e:
            res["loading_replies"] += 1
            res["last_error"] = str(e)[:100]
            time.sleep(0.001)
        except OSError as e:  # accepted then dropped (still starting): reconnect
            res["last_error"] = str(e)[:100]
            conn.close()
            conn = None
            while conn is None and time.perf_counter() < deadline and alive():
                try:
                    conn = Conn(a.port)
                except OSError:
                    time.sleep(0.001)
    while conn is not None and res["pong_ms"] is not None and res["ready_ms"] is None \
            and time.perf_counter() < deadline and alive():
        try:
            res["dbsize"] = conn.call("DBSIZE")
            if res["dbsize"] == a.expect:
                res["ready_ms"] = ms()
                break
        except (RespError, OSError) as e:
            res["last_error"] = str(e)[:100]
        time.sleep(0.001)
    if conn is not None:
        conn.close()
    if res["ready_ms"] is None and "error" not in res:
        res["error"] = (f"not ready within {a.timeout} s (DBSIZE {res['dbsize']}, "
                        f"expected {a.expect})")
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(res) + "\n")
    os.rename(tmp, a.out)
    os._exit(0)


def convert(v):
    for f in (int, float):
        try:
            return f(v)
        except ValueError:
            pass
    return v


def cmd_rb_csv(a):
    import csv
    extra = {}
    for kv in a.pairs:
        k, sep, v = kv.partition("=")
        if not sep:
            sys.exit(f"rb-csv: expected KEY=VALUE, got {kv!r}")
        extra[k] = convert(v)
    rows = list(csv.reader(line for line in sys.stdin if line.strip()))
    if not rows or rows[0][:2] != ["test", "rps"]:
        sys.exit(f"rb-csv: not redis-benchmark --csv output: {rows[:2]!r}")
    names = rows[0]
    n = 0
    for row in rows[1:]:
        rec = dict(extra)
        for k, v in zip(names, row):
            rec[k] = convert(v)
        rec["test"] = str(rec["test"])
        print(json.dumps(rec))
        n += 1
    if n == 0:
        sys.exit("rb-csv: no result row")


def cmd_ctl(a):
    out = open(a.out, "a", buffering=1)
    lock = threading.Lock()
    stop = threading.Event()
    end = a.t0 + a.duration

    def now():
        return round(time.time() - a.t0, 3)

    def emit(**rec):
        with lock:
            out.write(json.dumps(rec) + "\n")

    def trigger():
        conn = None
        k = 1
        while not stop.is_set():
            at = a.t0 + k * a.every
            if at >= end - 0.5:
                return
            delay = at - time.time()
            if delay > 0 and stop.wait(delay):
                return
            k += 1
            sent = now()
            try:
                if conn is None:
                    conn = Conn(a.port, timeout=600)
                r = conn.call(*a.command.split())
                emit(event="command", command=a.command, sent=sent, answered=now(),
                     reply=str(r)[:100])
            except (OSError, RespError) as e:
                emit(event="command", command=a.command, sent=sent, answered=now(),
                     error=str(e)[:200])
                if conn is not None:
                    conn.close()
                conn = None

    def parse_info(text):
        d = {}
        for line in text.decode(errors="replace").splitlines():
            k, sep, v = line.partition(":")
            if sep and not line.startswith("#"):
                d[k.strip()] = v.strip()
        return d

    def watched(k):
        # Counters of finished checkpoints / rewrites / saves, not sizes or dirty counts.
        return k in ("aof_rewrites", "rdb_saves") or bool(
            re.fullmatch(r"[a-z_]*checkpoints(_total|_done|_count)?|[a-z_]*checkpoint_count", k))

    def poll():
        conn = None
        prev = {}
        while not stop.is_set() and time.time() < end + 1:
            t = now()
            try:
                if conn is None:
                    conn = Conn(a.port, timeout=5)
                info = parse_info(conn.call("INFO", "persistence"))
            except (OSError, RespError) as e:
                emit(event="poll-error", t=t, error=str(e)[:200])
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(0.5)
                continue
            for k, v in info.items():
                if k.endswith("_in_progress") and prev.get(k) != v:
                    emit(event="flag", t=t, field=k, value=v)
                elif watched(k) and k in prev and prev[k] != v:
                    try:
                        int(v)
                    except ValueError:
                        continue
                    # What the server says of the checkpoint just finished (Kavach: its
                    # start time, phase durations and CPU time), for timeline.py's phases.
                    last = {x: y for x, y in info.items() if x.startswith("last_checkpoint_")}
                    emit(event="counter", t=t, field=k, old=prev[k], value=v, last=last)
            prev = info
            stop.wait(0.1)

    emit(event="start", t=now(), port=a.port, command=a.command, every=a.every,
         duration=a.duration)
    threads = [threading.Thread(target=trigger, daemon=True),
               threading.Thread(target=poll, daemon=True)]
    for th in threads:
        th.start()
    try:
        while time.time() < end + 1 and any(th.is_alive() for th in threads):
            time.sleep(0.1)
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=5)
        emit(event="end", t=now())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="sub", required=True)
    g = sub.add_parser("gen-load")
    g.add_argument("--keys", type=int, required=True)
    g.add_argument("--value-size", type=int, required=True)
    c = sub.add_parser("check")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--keys", type=int, required=True)
    c.add_argument("--value-size", type=int, required=True)
    c.add_argument("--samples", type=int, default=1000)
    pr = sub.add_parser("probe")
    pr.add_argument("--port", type=int, required=True)
    pr.add_argument("--expect", type=int, required=True)
    pr.add_argument("--out", required=True)
    pr.add_argument("--timeout", type=float, default=600)
    pr.add_argument("cmd", nargs=argparse.REMAINDER)
    r = sub.add_parser("rb-csv")
    r.add_argument("pairs", nargs="*")
    t = sub.add_parser("ctl")
    t.add_argument("--port", type=int, required=True)
    t.add_argument("--command", required=True)
    t.add_argument("--every", type=float, default=10)
    t.add_argument("--duration", type=float, required=True)
    t.add_argument("--t0", type=float, required=True)
    t.add_argument("--out", required=True)
    a = p.parse_args()
    fn = {"gen-load": cmd_gen_load, "check": cmd_check, "probe": cmd_probe,
          "rb-csv": cmd_rb_csv, "ctl": cmd_ctl}[a.sub]
    sys.exit(fn(a) or 0)


if __name__ == "__main__":
    main()
