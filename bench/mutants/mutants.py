#!/usr/bin/env python3
"""Mutation campaign over Kavach's persistence paths.

Generates mutants at every persistence call (flush, fence, persist, non-temporal store,
flush_range/store_fence, msync, fsync) in the non-test sources of the crates named in
config.toml, applies each to a scratch copy of the tree, and runs the crash tests listed for its
crate. Each mutant ends caught, survived, unviable (does not compile) or timeout.

Never part of `cargo test`. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

RESULT_COLUMNS = [
    "id", "crate", "file", "line", "kind", "fn", "site", "result", "caught_by",
    "build_s", "test_s", "tree", "date",
]

# ---------------------------------------------------------------------------------------------
# A small Rust lexer: blank out comments and the insides of string and char literals (keeping
# every character's position and every newline), so the scans below see only code.


def mask_rust(src: str) -> str:
    out = list(src)
    n = len(src)
    i = 0

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "rb" and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.compile(r'(?:br|r)(#*)"').match(src, i)
            if m:
                close = '"' + m.group(1)
                j = src.find(close, m.end())
                j = n if j < 0 else j + len(close)
                blank(m.end(), j - len(close))
                i = j
            elif src.startswith('b"', i) or src.startswith("b'", i):
                i += 1  # the literal itself is handled on the next round
            else:
                i += 1
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if i + 1 < n and src[i + 1] == "\\":
                j = src.find("'", i + 2)
                j = n if j < 0 else j
                blank(i + 1, j)
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                blank(i + 1, i + 2)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


PAIRS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in PAIRS.items()}


def match_forward(code: str, i: int) -> int:
    """Index just past the bracket that closes the one at `i`."""
    stack = []
    for j in range(i, len(code)):
        c = code[j]
        if c in PAIRS:
            stack.append(PAIRS[c])
        elif c in CLOSERS:
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j + 1
    return -1


def match_backward(code: str, i: int) -> int:
    """Index of the bracket that opens the one closed at `i`."""
    stack = []
    for j in range(i, -1, -1):
        c = code[j]
        if c in CLOSERS:
            stack.append(CLOSERS[c])
        elif c in PAIRS:
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j
    return -1


def test_only_ranges(code: str) -> list[tuple[int, int]]:
    """Spans of items under a `#[cfg(...)]` that needs `test` (test modules, test helpers)."""
    ranges = []
    for m in re.finditer(r"#\s*\[\s*cfg\s*\(", code):
        end = match_forward(code, m.end() - 1)
        if end < 0:
            continue
        cond = code[m.end() - 1:end]
        cond = re.sub(r"not\s*\([^()]*\)", "", cond)
        if not re.search(r"\btest\b", cond):
            continue
        close = code.find("]", end)
        j = close + 1
        # The item (or field, or statement): up to its first top-level `;` or `,`, its
        # `{ ... }` body, or the brace that closes what holds it.
        depth = 0
        while j < len(code):
            c = code[j]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c in ";," and depth == 0:
                j += 1
                break
            elif c == "{" and depth == 0:
                j = match_forward(code, j)
                break
            elif c == "}" and depth == 0:
                break
            j += 1
        if j > 0:
            ranges.append((m.start(), j))
    return ranges


# ---------------------------------------------------------------------------------------------
# Sites and mutants.

# Defaults for config.toml's settings.method_calls / settings.free_calls: name -> what the call
# returns ("result": the medium's Result, "io": std::io::Result, "unit": nothing).
METHOD_CALLS = {
    "flush": "result",
    "fence": "result",
    "persist": "result",
    "write_nontemporal": "unit",
    "msync_range": "result",
    "sync_all": "io",
    "sync_data": "io",
}
FREE_CALLS = {"flush_range_with": "unit", "flush_range": "unit", "store_fence": "unit"}
ORDER_KINDS = {"flush", "fence", "persist", "flush_range", "flush_range_with", "store_fence"}


@dataclasses.dataclass
class Site:
    name: str
    ret: str
    start: int  # first character of the call expression (receiver included)
    name_at: int  # first character of the method or function name
    end: int  # just past the call's closing parenthesis
    stmt: tuple[int, int] | None  # the whole statement, when the call is one (`x.f(..)?;`)
    line: int


@dataclasses.dataclass
class Mutant:
    id: str
    crate: str
    file: str  # relative to the repository root
    line: int
    kind: str
    fn: str
    site: str
    note: str
    original_sha: str
    mutated: str = dataclasses.field(repr=False, default="")
    # Other spellings of the same mutation, tried in order when the first does not compile
    # (an annotated `Ok::<(), E>(())` where E is the wrong error type, say).
    alts: list[str] = dataclasses.field(repr=False, default_factory=list)


def receiver_start(code: str, dot: int) -> int:
    """Walk back from the `.` of a method call over its receiver (`self.log.medium`,
    `(**self)`, `inner.medium()`, `a[i]`)."""
    i = dot - 1
    while True:
        while i >= 0 and code[i].isspace():
            i -= 1
        if i < 0:
            return 0
        c = code[i]
        if c in ")]":
            j = match_backward(code, i)
            if j < 0:
                return i + 1
            i = j - 1
            # a call or index: an identifier may precede it directly
            k = i
            while k >= 0 and (code[k].isalnum() or code[k] == "_"):
                k -= 1
            start = k + 1
            i = k
        elif c.isalnum() or c == "_":
            k = i
            while k >= 0 and (code[k].isalnum() or code[k] == "_"):
                k -= 1
            start = k + 1
            i = k
        elif c == "?":
            i -= 1
            continue
        else:
            return i + 1
        # continue over `.` or `::` to the left
        k = i
        while k >= 0 and code[k].isspace():
            k -= 1
        if k >= 0 and code[k] == "." and (k == 0 or code[k - 1] != "."):
            i = k - 1
        elif k >= 1 and code[k] == ":" and code[k - 1] == ":":
            i = k - 2
        else:
            return start


def statement_span(code: str, start: int, end: int) -> tuple[int, int] | None:
    """The statement the call is, if it is one: preceded by `;`, `{` or `}` and followed by
    an optional `?` and a `;`."""
    i = start - 1
    while i >= 0 and code[i].isspace():
        i -= 1
    if i >= 0 and code[i] not in ";{}":
        return None
    j = end
    while j < len(code) and code[j].isspace():
        j += 1
    if j < len(code) and code[j] == "?":
        j += 1
        while j < len(code) and code[j].isspace():
            j += 1
    if j < len(code) and code[j] == ";":
        return (start, j + 1)
    return None


def find_sites(src: str, code: str, method_calls: dict, free_calls: dict) -> list[Site]:
    excluded = test_only_ranges(code)

    def is_test(pos: int) -> bool:
        return any(a <= pos < b for a, b in excluded)

    sites = []
    names = "|".join(sorted(method_calls, key=len, reverse=True))
    for m in re.finditer(r"\.\s*(" + names + r")\s*\(", code):
        name = m.group(1)
        dot = m.start()
        if dot > 0 and code[dot - 1] == ".":
            continue
        if is_test(dot):
            continue
        close = match_forward(code, m.end() - 1)
        if close < 0:
            continue
        args = code[m.end():close - 1].strip()
        if name == "flush" and not args:
            continue  # io::Write::flush, not a persistence call
        if name == "fence" and args:
            continue
        start = receiver_start(code, dot)
        sites.append(Site(name, method_calls[name], start, m.start(1), close,
                          statement_span(code, start, close), src.count("\n", 0, m.start(1)) + 1))
    fnames = "|".join(sorted(free_calls, key=len, reverse=True))
    for m in re.finditer(r"(?<![\w.:])((?:\w+\s*::\s*)*)(" + fnames + r")\s*\(", code):
        name = m.group(2)
        if re.search(r"\bfn\s*$", code[max(0, m.start() - 8):m.start()]):
            continue  # the definition
        if is_test(m.start()):
            continue
        close = match_forward(code, m.end() - 1)
        if close < 0:
            continue
        sites.append(Site(name, free_calls[name], m.start(), m.start(2), close,
                          statement_span(code, m.start(), close),
                          src.count("\n", 0, m.start(2)) + 1))
    sites.sort(key=lambda s: s.start)
    return sites


def enclosing_fn(code: str, pos: int) -> str:
    """The innermost `fn` whose body holds `pos`."""
    found = "-"
    for m in re.finditer(r"\bfn\s+(\w+)", code[:pos]):
        body = code.find("{", m.end())
        semi = code.find(";", m.end())
        if body < 0 or body > pos or (0 <= semi < body):
            continue
        end = match_forward(code, body)
        if end < 0 or end > pos:
            found = m.group(1)
    return found


def previous_statement(code: str, start: int) -> tuple[int, int] | None:
    """The statement ending right before `start` (only blanks between), within the same block."""
    i = start - 1
    while i >= 0 and code[i].isspace():
        i -= 1
    if i < 0 or code[i] != ";":
        return None
    end = i + 1
    j = i - 1
    while j >= 0:
        c = code[j]
        if c in ")]}":
            k = match_backward(code, j)
            if k < 0:
                return None
            j = k - 1
            continue
        if c in ";{":
            break
        j -= 1
    s = j + 1
    while s < end and code[s].isspace():
        s += 1
    return (s, end)


def one_line(text: str, width: int = 90) -> str:
    t = re.sub(r"\s+", " ", text).strip()
    return t if len(t) <= width else t[:width - 3] + "..."


def blank_lines_like(text: str) -> str:
    return "\n" * text.count("\n")


def generate(cfg: dict, crates: list[str] | None = None) -> list[Mutant]:
    kinds = set(cfg["settings"]["kinds"])
    exclude = set(cfg["settings"].get("exclude_files", []))
    method_calls = cfg["settings"].get("method_calls", METHOD_CALLS)
    free_calls = cfg["settings"].get("free_calls", FREE_CALLS)
    mutants: list[Mutant] = []
    for cname, c in cfg["crates"].items():
        if crates and cname not in crates:
            continue
        src_dir = ROOT / c["dir"] / "src"
        for path in sorted(src_dir.rglob("*.rs")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in exclude:
                continue
            src = path.read_text()
            code = mask_rust(src)
            sha = hashlib.sha256(src.encode()).hexdigest()
            sites = find_sites(src, code, method_calls, free_calls)
            crate_rel = path.relative_to(ROOT / c["dir"]).as_posix()

            def add(kind: str, line: int, pos: int, site_text: str, note: str, mutated: str,
                    alts: list[str] | None = None) -> None:
                mutants.append(Mutant(
                    id=f"{cname}:{crate_rel}:{line}:{kind}", crate=cname, file=rel, line=line,
                    kind=kind, fn=enclosing_fn(code, pos), site=one_line(site_text),
                    note=note, original_sha=sha, mutated=mutated, alts=alts or []))

            err = c["error"]
            for s in sites:
                call_text = src[s.start:s.end]
                if "remove" in kinds and s.name != "write_nontemporal":
                    alts = []
                    if s.stmt:
                        a, b = s.stmt
                        rep = "/* mutant: removed */" + blank_lines_like(src[a:b])
                        note = "statement removed"
                    else:
                        a, b = s.start, s.end
                        if s.ret == "unit":
                            rep = "()"
                        elif s.ret == "io":
                            rep = "Ok::<(), std::io::Error>(())"
                        else:
                            rep = f"Ok::<(), {err}>(())"
                        if s.ret != "unit":
                            # the error type left to inference (a layer's own `fence` wrapper
                            # returns the layer's error, not the medium's)
                            alts.append(src[:a] + "Ok(())" + blank_lines_like(src[a:b]) + src[b:])
                        rep += blank_lines_like(src[a:b])
                        note = f"call replaced by `{rep.strip()}`"
                    add(f"remove-{s.name}", s.line, s.start, call_text, note,
                        src[:a] + rep + src[b:], alts)
                if "nt-to-write" in kinds and s.name == "write_nontemporal":
                    add("nt-to-write", s.line, s.start, call_text,
                        "non-temporal store made a plain store (no implied write-back)",
                        src[:s.name_at] + "write" + src[s.name_at + len(s.name):])
            stmts = [s for s in sites if s.stmt]
            if "swap" in kinds:
                for x, y in zip(stmts, stmts[1:]):
                    if x.name not in ORDER_KINDS or y.name not in ORDER_KINDS:
                        continue
                    between = code[x.stmt[1]:y.stmt[0]]
                    if between.strip():
                        continue
                    plain = {"flush", "flush_range", "flush_range_with"}
                    if x.name in plain and y.name in plain:
                        continue  # write-backs before one fence: order is free by design
                    if x.name in ("fence", "store_fence") and y.name in ("fence", "store_fence"):
                        continue
                    xa, xb = x.stmt
                    ya, yb = y.stmt
                    if src[xa:xb] == src[ya:yb]:
                        continue
                    mutated = src[:xa] + src[ya:yb] + src[xb:ya] + src[xa:xb] + src[yb:]
                    add("swap", x.line, x.start,
                        f"{src[xa:xb]} <-> {src[ya:yb]}",
                        f"`{x.name}` and the next statement `{y.name}` swapped", mutated)
            if "store-after" in kinds:
                for s in stmts:
                    if s.name not in ("flush", "persist", "flush_range", "flush_range_with"):
                        continue
                    prev = previous_statement(code, s.stmt[0])
                    if not prev:
                        continue
                    pa, pb = prev
                    ptext = code[pa:pb]
                    if not re.match(r"^[\w.\s()&*\[\]]*\.\s*(write|store_u64|write_nontemporal)\s*\(",
                                    ptext) or re.match(r"^\s*let\b", ptext):
                        continue
                    sa, sb = s.stmt
                    mutated = src[:pa] + src[sa:sb] + src[pb:sa] + src[pa:pb] + src[sb:]
                    add("store-after", s.line, s.start,
                        f"{src[pa:pb]} ; {src[sa:sb]}",
                        f"`{s.name}` moved before the store it was to make durable", mutated)
    # Stable, unique ids: a second mutant of the same kind on one line gets `#2`.
    seen: dict[str, int] = {}
    for m in mutants:
        k = seen.get(m.id, 0) + 1
        seen[m.id] = k
        if k > 1:
            m.id = f"{m.id}#{k}"
    for man in cfg.get("manual", []):
        if crates and man["crate"] not in crates:
            continue
        path = ROOT / man["file"]
        src = path.read_text()
        sha = hashlib.sha256(src.encode()).hexdigest()
        edits = man.get("edits") or [{"find": man["find"], "replace": man["replace"]}]
        mutated, problems = src, []
        for e in edits:
            count = mutated.count(e["find"])
            if count != 1:
                problems.append(f"`find` occurs {count} times (must be once): {one_line(e['find'], 60)}")
            else:
                mutated = mutated.replace(e["find"], e["replace"])
        first = edits[0]["find"]
        at = max(0, src.find(first))
        line = src.count("\n", 0, at) + 1 + (len(first) - len(first.lstrip("\n")))
        m = Mutant(id=f"manual:{man['name']}", crate=man["crate"], file=man["file"],
                   line=line, kind="manual", fn=enclosing_fn(mask_rust(src), at),
                   site=" / ".join(one_line(e["find"], 60) for e in edits),
                   note=man.get("note", ""), original_sha=sha,
                   mutated="" if problems else mutated)
        if problems:
            m.note = f"STALE in {man['file']}: " + "; ".join(problems)
        mutants.append(m)
    return mutants


# ---------------------------------------------------------------------------------------------
# Running.


class Interrupted(Exception):
    pass


def _on_signal(signum, frame):  # noqa: ARG001
    raise Interrupted(f"signal {signum}")


def tree_files() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                         check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def tree_label() -> str:
    """What the results are about: a hash of the crates' sources and the workspace manifest and
    lock file (the same hash that keys the baseline cache), so commits elsewhere (this tool,
    docs) do not make earlier rows look stale."""
    digest = hashlib.sha256()
    for rel in sorted(tree_files()):
        if rel.startswith("crates/") or rel in ("Cargo.toml", "Cargo.lock"):
            data = (ROOT / rel).read_bytes()
            digest.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:16]


def sync_scratch(scratch: Path) -> str:
    """Make `scratch` a copy of the tree (sources only). Unchanged files keep their mtime, so the
    scratch target directory's incremental state stays valid; a changed file (including one a
    killed run left mutated) is rewritten. Returns a hash of what the tests depend on (the crates
    and the workspace manifest and lock file), which keys the baseline cache."""
    scratch.mkdir(parents=True, exist_ok=True)
    files = tree_files()
    digest = hashlib.sha256()
    keep = set()
    for rel in sorted(files):
        data = (ROOT / rel).read_bytes()
        if rel.startswith("crates/") or rel in ("Cargo.toml", "Cargo.lock"):
            digest.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
        dst = scratch / rel
        keep.add(rel)
        if dst.is_file() and dst.read_bytes() == data:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
    for dirpath, dirnames, filenames in os.walk(scratch):
        rel_dir = Path(dirpath).relative_to(scratch)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in ("target", ".git")]
        for f in filenames:
            rel = (rel_dir / f).as_posix()
            if rel not in keep:
                (Path(dirpath) / f).unlink()
    return digest.hexdigest()[:16]


@dataclasses.dataclass
class Proc:
    rc: int | None  # None: timed out
    out: str
    seconds: float


_children: set[int] = set()
_children_lock = threading.Lock()


def run_cmd(cmd: list[str], cwd: Path, env: dict, timeout: float) -> Proc:
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    with _children_lock:
        _children.add(p.pid)
    try:
        out, _ = p.communicate(timeout=max(1.0, timeout))
        return Proc(p.returncode, out.decode(errors="replace"), time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        kill_group(p.pid)
        out, _ = p.communicate()
        return Proc(None, out.decode(errors="replace"), time.monotonic() - t0)
    except BaseException:
        kill_group(p.pid)
        p.wait()
        raise
    finally:
        with _children_lock:
            _children.discard(p.pid)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def target_args(target: str) -> tuple[str, list[str]]:
    pkg, _, t = target.partition(":")
    return pkg, (["--lib"] if t == "lib" else ["--test", t])


def failing_tests(out: str) -> list[str]:
    names = re.findall(r"^---- (\S+) stdout ----", out, re.M)
    if not names:
        m = re.search(r"^failures:\n((?:    \S+\n)+)", out, re.M)
        if m:
            names = m.group(1).split()
    if not names and re.search(r"process didn't exit successfully", out):
        sig = re.search(r"\(signal: (\d+)[^)]*\)", out)
        names = [f"<test binary died{', signal ' + sig.group(1) if sig else ''}>"]
    return names


class Runner:
    def __init__(self, cfg: dict, work: Path, job: int, verbose: bool):
        self.cfg = cfg
        self.scratch = work / f"scratch-{job}"
        self.target = work / f"target-{job}"
        self.work = work
        self.job = job
        self.verbose = verbose
        self.env = dict(os.environ, CARGO_TARGET_DIR=str(self.target), CARGO_TERM_COLOR="never",
                        RUST_BACKTRACE="0")
        self.env.pop("RUSTFLAGS", None)

    def log(self, msg: str) -> None:
        print(f"[job {self.job} {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def build(self, targets: list[str], timeout: float) -> Proc:
        """Build the test binaries of `targets`, one cargo call per package."""
        by_pkg: dict[str, list[str]] = {}
        for t in targets:
            pkg, args = target_args(t)
            by_pkg.setdefault(pkg, []).extend(args)
        outs, t0 = [], time.monotonic()
        for pkg, args in by_pkg.items():
            left = timeout - (time.monotonic() - t0)
            p = run_cmd(["cargo", "test", "--no-run", "-p", pkg, *args], self.scratch, self.env, left)
            outs.append(p.out)
            if p.rc != 0:
                return Proc(p.rc, "\n".join(outs), time.monotonic() - t0)
        return Proc(0, "\n".join(outs), time.monotonic() - t0)

    def run_target(self, target: str, timeout: float) -> Proc:
        pkg, args = target_args(target)
        return run_cmd(["cargo", "test", "-p", pkg, *args], self.scratch, self.env, timeout)

    def baseline(self, crates: list[str], source_hash: str) -> dict[str, float]:
        """Seconds per test target on the unmutated tree, cached per source hash."""
        cache = self.work / "baseline.json"
        data = {}
        if cache.is_file():
            data = json.loads(cache.read_text())
        if data.get("hash") != source_hash:
            data = {"hash": source_hash, "targets": {}}
        targets = []
        for c in crates:
            for t in self.cfg["crates"][c]["tests"]:
                if t not in targets:
                    targets.append(t)
        todo = [t for t in targets if t not in data["targets"]]
        if todo:
            self.log(f"baseline: building {len(todo)} test targets on the unmutated tree")
            b = self.build(todo, self.cfg["settings"]["build_timeout"] * 3)
            if b.rc != 0:
                sys.exit(f"the unmutated tree does not build:\n{b.out[-4000:]}")
            self.log(f"baseline: built in {b.seconds:.0f}s")
            for t in todo:
                p = self.run_target(t, 3600)
                ok = p.rc == 0
                data["targets"][t] = {"seconds": round(p.seconds, 1), "ok": ok}
                self.log(f"baseline: {t}: {'ok' if ok else 'FAILS'} in {p.seconds:.1f}s")
                cache.write_text(json.dumps(data, indent=1))
        return data["targets"]

    def apply_and_build(self, m: Mutant, path: Path, pkg: str) -> Proc:
        """Write the mutant (each spelling in turn until one compiles) and build its crate."""
        secs, last = 0.0, None
        for text in [m.mutated, *m.alts]:
            path.write_text(text)
            last = run_cmd(["cargo", "build", "-p", pkg, "--lib"], self.scratch, self.env,
                           self.cfg["settings"]["build_timeout"])
            secs += last.seconds
            if last.rc == 0 or last.rc is None:
                break
        assert last is not None
        return Proc(last.rc, last.out, secs)

    def check_mutant(self, m: Mutant) -> tuple[str, str, float]:
        """Only whether the mutant compiles (its crate's library)."""
        path = self.scratch / m.file
        original = path.read_text()
        if not m.mutated or hashlib.sha256(original.encode()).hexdigest() != m.original_sha:
            return "stale", m.note, 0.0
        try:
            pkg = self.cfg["crates"][m.crate]["package"]
            b = self.apply_and_build(m, path, pkg)
        finally:
            path.write_text(original)
        if b.rc is None:
            return "timeout", "", b.seconds
        if b.rc != 0:
            err = re.search(r"^error(\[E\d+\])?: .*$", b.out, re.M)
            return "unviable", err.group(0) if err else "(build failed)", b.seconds
        if not re.search(rf"^\s*Compiling {re.escape(pkg)} ", b.out, re.M):
            return "error", f"{pkg} was not recompiled", b.seconds
        return "viable", "", b.seconds

    def run_mutant(self, m: Mutant, targets: list[str], test_timeout: float) -> dict:
        row = {"result": "", "caught_by": "", "build_s": "", "test_s": ""}
        path = self.scratch / m.file
        original = path.read_text()
        if hashlib.sha256(original.encode()).hexdigest() != m.original_sha:
            row["result"] = "stale"
            row["caught_by"] = "the file changed since the mutants were generated"
            return row
        if not m.mutated:
            row["result"] = "stale"
            row["caught_by"] = m.note
            return row
        marker = self.scratch / ".mutant-applied"
        try:
            marker.write_text(m.file + "\n")
            settings = self.cfg["settings"]
            pkg = self.cfg["crates"][m.crate]["package"]
            b = self.apply_and_build(m, path, pkg)
            if b.rc is None:
                row.update(result="timeout", caught_by="(build)", build_s=f"{b.seconds:.0f}")
                return row
            if b.rc != 0:
                err = re.search(r"^error(\[E\d+\])?: .*$", b.out, re.M)
                row.update(result="unviable", caught_by=err.group(0) if err else "(build failed)",
                           build_s=f"{b.seconds:.0f}")
                return row
            if not re.search(rf"^\s*Compiling {re.escape(pkg)} ", b.out, re.M):
                # The mutated crate was not rebuilt (a stale build state would make every
                # mutant "survive"): say so rather than test the unmutated code.
                row.update(result="error", caught_by=f"{pkg} was not recompiled",
                           build_s=f"{b.seconds:.0f}")
                return row
            bt = self.build(targets, settings["build_timeout"])
            build_s = b.seconds + bt.seconds
            row["build_s"] = f"{build_s:.0f}"
            if bt.rc is None:
                row.update(result="timeout", caught_by="(build of tests)")
                return row
            if bt.rc != 0:
                err = re.search(r"^error(\[E\d+\])?: .*$", bt.out, re.M)
                row.update(result="unviable", caught_by=err.group(0) if err else "(test build failed)")
                return row
            spent = 0.0
            for t in targets:
                p = self.run_target(t, test_timeout - spent)
                spent += p.seconds
                if p.rc is None:
                    row.update(result="timeout", caught_by=t, test_s=f"{spent:.1f}")
                    return row
                if p.rc != 0:
                    names = failing_tests(p.out)
                    row.update(result="caught", test_s=f"{spent:.1f}",
                               caught_by=f"{t}: {', '.join(names[:3]) or '(exit ' + str(p.rc) + ')'}"
                               + (f" (+{len(names) - 3})" if len(names) > 3 else ""))
                    if self.verbose:
                        self.log(p.out[-3000:])
                    return row
            row.update(result="survived", test_s=f"{spent:.1f}")
            return row
        finally:
            path.write_text(original)
            marker.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Results and report.


def read_tsv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    if not lines:
        return []
    head = lines[0].split("\t")
    return [dict(zip(head, ln.split("\t"))) for ln in lines[1:] if ln.strip()]


def write_tsv(path: Path, rows: list[dict], columns: list[str]) -> None:
    def clean(v) -> str:
        return str(v).replace("\t", " ").replace("\n", " ")

    text = "\t".join(columns) + "\n"
    text += "".join("\t".join(clean(r.get(c, "")) for c in columns) + "\n" for r in rows)
    path.write_text(text)


def read_equivalent(path: Path) -> dict[str, str]:
    out = {}
    for r in read_tsv(path):
        if r.get("id") and not r["id"].startswith("#"):
            out[r["id"]] = r.get("reason", "")
    return out


def md(s: str) -> str:
    return s.replace("|", "\\|")


def write_report(path: Path, rows: list[dict], equivalent: dict[str, str],
                 all_mutants: list[Mutant]) -> None:
    results = ["caught", "survived", "unviable", "timeout", "stale", "error"]
    by_crate: dict[str, dict[str, int]] = {}
    for m in all_mutants:
        by_crate.setdefault(m.crate, {"mutants": 0})["mutants"] += 1
    for r in rows:
        d = by_crate.setdefault(r["crate"], {"mutants": 0})
        d[r["result"]] = d.get(r["result"], 0) + 1
    trees = sorted({r.get("tree", "") for r in rows})
    lines = [
        "# Mutation campaign: results",
        "",
        "Generated by `bench/mutants/mutants.py` (see README.md): do not edit by hand.",
        f"Tree(s): {', '.join(trees) or '-'}; mutants in the tree now: {len(all_mutants)}; "
        f"run: {len(rows)}.",
        "",
        "| crate | mutants | run | " + " | ".join(results) + " | survived, not argued equivalent |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in results) + " | ---: |",
    ]
    for c in sorted(by_crate):
        d = by_crate[c]
        run = sum(d.get(k, 0) for k in results)
        open_ = sum(1 for r in rows if r["crate"] == c and r["result"] == "survived"
                    and r["id"] not in equivalent)
        lines.append(f"| {c} | {d['mutants']} | {run} | "
                     + " | ".join(str(d.get(k, 0)) for k in results) + f" | {open_} |")
    viable = [r for r in rows if r["result"] in ("caught", "survived", "timeout")]
    killed = sum(1 for r in viable if r["result"] in ("caught", "timeout"))
    killed_or_eq = killed + sum(1 for r in viable if r["result"] == "survived"
                                and r["id"] in equivalent)
    if viable:
        lines += ["", f"Viable mutants run: {len(viable)}; caught (or timed out): {killed} "
                  f"({100 * killed / len(viable):.0f}%); caught or argued equivalent: "
                  f"{killed_or_eq} ({100 * killed_or_eq / len(viable):.0f}%)."]
    lines += ["", "| id | fn | site | mutation | result | caught by | build s | test s | equivalent? |",
              "| --- | --- | --- | --- | --- | --- | ---: | ---: | --- |"]
    order = {r: i for i, r in enumerate(["survived", "error", "timeout", "caught", "unviable",
                                         "stale"])}
    for r in sorted(rows, key=lambda r: (order.get(r["result"], 9), r["id"])):
        lines.append(
            f"| `{md(r['id'])}` | {md(r.get('fn', ''))} | `{md(r.get('site', ''))}` | "
            f"{md(r.get('kind', ''))} | **{r['result']}** | {md(r.get('caught_by', ''))} | "
            f"{r.get('build_s', '')} | {r.get('test_s', '')} | {md(equivalent.get(r['id'], ''))} |")
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------


SELF_TEST_SRC = """fn a<'x>(m: &'x M) -> Result<()> {
    let c = '"'; let d = '\\'';
    let s = r#"m.flush(1, 2)?;"#; // m.fence()?;
    /* outer /* m.persist(0,1) */ still */
    m.flush(0, 64)?;
    m.fence()?;
    if let Err(e) = m.persist(0, 8) { return Err(e); }
    unsafe { cpu::flush_range(p, 8) };
    w.flush()?;
    Ok(())
}
#[cfg(all(test, not(loom)))]
mod t { fn x(m: &M) { m.fence().unwrap(); } }
struct S { a: u8, #[cfg(test)] b: u8, }
fn b(m: &M) -> Result<()> { self.inner
        .medium.fence() }
"""


def self_test() -> None:
    """The lexer and site finder on a snippet with the awkward cases (literals, comments,
    test-only items, expression and statement positions)."""
    code = mask_rust(SELF_TEST_SRC)
    got = [(s.name, s.line, SELF_TEST_SRC[s.start:s.end], s.stmt is not None,
            enclosing_fn(code, s.start))
           for s in find_sites(SELF_TEST_SRC, code, METHOD_CALLS, FREE_CALLS)]
    want = [
        ("flush", 5, "m.flush(0, 64)", True, "a"),
        ("fence", 6, "m.fence()", True, "a"),
        ("persist", 7, "m.persist(0, 8)", False, "a"),
        ("flush_range", 8, "cpu::flush_range(p, 8)", False, "a"),
        ("fence", 16, "self.inner\n        .medium.fence()", False, "b"),
    ]
    assert got == want, f"self-test: got {got}"
    print("self-test: ok")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=HERE / "config.toml")
    ap.add_argument("--crate", action="append", help="only this crate (repeatable)")
    ap.add_argument("--kind", action="append", help="only mutants of this kind (repeatable; "
                    "prefix match, e.g. remove)")
    ap.add_argument("--only", action="append", help="only this mutant id (repeatable)")
    ap.add_argument("--limit", type=int, help="run at most N mutants")
    ap.add_argument("--skip-done", action="store_true",
                    help="skip ids that already have a result for this tree in the results file")
    ap.add_argument("--jobs", type=int, default=1, help="mutants in parallel (each job has its "
                    "own scratch tree and target directory)")
    ap.add_argument("--list", action="store_true", help="print the mutants and per-crate counts")
    ap.add_argument("--show", metavar="ID", help="print the diff of one mutant")
    ap.add_argument("--work", type=Path, default=Path("/tmp/kavach-mutants"),
                    help="scratch trees, target directories and the baseline cache")
    ap.add_argument("--results", type=Path, default=HERE / "results.tsv")
    ap.add_argument("--report", type=Path, default=HERE / "report.md")
    ap.add_argument("--fresh", action="store_true", help="start a new results file instead of "
                    "updating rows by id")
    ap.add_argument("--report-only", action="store_true", help="rewrite report.md from the "
                    "results file and equivalent.tsv")
    ap.add_argument("--check-only", action="store_true", help="only build each selected mutant's "
                    "crate (viable / unviable), print it, write nothing but the scratch tree")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--self-test", action="store_true", help="check the lexer and site finder")
    a = ap.parse_args()
    if a.self_test:
        self_test()
        return 0

    cfg = tomllib.loads(a.config.read_text())
    for c in a.crate or []:
        if c not in cfg["crates"]:
            ap.error(f"unknown crate {c}; known: {', '.join(cfg['crates'])}")
    everything = generate(cfg)
    mutants = [m for m in everything if not a.crate or m.crate in a.crate]
    if a.kind:
        mutants = [m for m in mutants if any(m.kind.startswith(k) for k in a.kind)]
    if a.only:
        known = {m.id for m in everything}
        for i in a.only:
            if i not in known:
                ap.error(f"no mutant {i} in the tree now (see --list)")
        mutants = [m for m in mutants if m.id in a.only]

    equivalent = read_equivalent(HERE / "equivalent.tsv")
    if a.report_only:
        write_report(a.report, read_tsv(a.results), equivalent, everything)
        print(f"wrote {a.report}")
        return 0
    if a.show:
        m = next((m for m in everything if m.id == a.show), None)
        if not m:
            ap.error(f"no mutant {a.show}")
        import difflib
        orig = (ROOT / m.file).read_text().splitlines(keepends=True)
        sys.stdout.writelines(difflib.unified_diff(orig, m.mutated.splitlines(keepends=True),
                                                   "a/" + m.file, "b/" + m.file, n=3))
        return 0
    if a.list:
        counts: dict[str, dict[str, int]] = {}
        for m in mutants:
            print(f"{m.id}\t{m.fn}\t{m.site}")
            k = m.kind.split("-")[0] if m.kind.startswith("remove") else m.kind
            counts.setdefault(m.crate, {}).setdefault(k, 0)
            counts[m.crate][k] += 1
        print()
        kinds = ["remove", "nt-to-write", "swap", "store-after", "manual"]
        print("crate\t" + "\t".join(kinds) + "\ttotal")
        for c in cfg["crates"]:
            if c in counts:
                d = counts[c]
                print(f"{c}\t" + "\t".join(str(d.get(k, 0)) for k in kinds)
                      + f"\t{sum(d.values())}")
        print(f"total\t{len(mutants)}")
        return 0

    tree = tree_label()
    old_rows = [] if a.fresh else read_tsv(a.results)
    if a.skip_done:
        done = {r["id"] for r in old_rows if r.get("tree") == tree and r.get("result") != "stale"}
        mutants = [m for m in mutants if m.id not in done]
    if a.limit is not None:
        mutants = mutants[:a.limit]
    if not mutants:
        print("no mutants selected")
        return 0

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    a.work.mkdir(parents=True, exist_ok=True)
    runners = [Runner(cfg, a.work, j, a.verbose) for j in range(max(1, a.jobs))]
    source_hash = ""
    for r in runners:
        source_hash = sync_scratch(r.scratch)
    crates = sorted({m.crate for m in mutants})
    base = {} if a.check_only else runners[0].baseline(crates, source_hash)
    bad = [t for t, v in base.items() if not v["ok"]]
    if bad:
        print("test targets that fail on the unmutated tree (they are left out, so they cannot "
              "count as catching anything): " + ", ".join(bad), flush=True)

    if a.check_only:
        counts: dict[str, int] = {}
        try:
            for m in mutants:
                res, why, secs = runners[0].check_mutant(m)
                counts[res] = counts.get(res, 0) + 1
                print(f"{m.id}\t{res}\t{secs:.0f}s\t{why}", flush=True)
        except (KeyboardInterrupt, Interrupted):
            print("interrupted; the scratch file was restored", file=sys.stderr)
            return 130
        print(" ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
        return 0

    rows_by_id = {r["id"]: r for r in old_rows}
    lock = threading.Lock()
    queue = list(mutants)
    total = len(queue)

    def save() -> None:
        rows = sorted(rows_by_id.values(), key=lambda r: r["id"])
        write_tsv(a.results, rows, RESULT_COLUMNS)
        write_report(a.report, rows, equivalent, everything)

    stopping = threading.Event()

    def worker(runner: Runner) -> None:
        while not stopping.is_set():
            with lock:
                if not queue:
                    return
                m = queue.pop(0)
                n = total - len(queue)
            targets = [t for t in cfg["crates"][m.crate]["tests"] if base.get(t, {}).get("ok")]
            budget = sum(base[t]["seconds"] for t in targets)
            timeout = max(cfg["settings"]["min_test_timeout"],
                          cfg["settings"]["test_timeout_factor"] * budget)
            runner.log(f"{n}/{total} {m.id} ({m.site})")
            res = runner.run_mutant(m, targets, timeout)
            if stopping.is_set():
                return  # its processes were killed: no result
            runner.log(f"{n}/{total} {m.id}: {res['result']} {res['caught_by']} "
                       f"[build {res['build_s'] or '-'}s, tests {res['test_s'] or '-'}s]")
            row = {"id": m.id, "crate": m.crate, "file": m.file, "line": m.line, "kind": m.kind,
                   "fn": m.fn, "site": m.site, "tree": tree,
                   "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"), **res}
            with lock:
                rows_by_id[m.id] = row
                save()

    threads: list[threading.Thread] = []
    try:
        if len(runners) == 1:
            worker(runners[0])
        else:
            threads = [threading.Thread(target=worker, args=(r,)) for r in runners]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    except (KeyboardInterrupt, Interrupted) as e:
        stopping.set()
        with _children_lock:
            for pid in list(_children):
                kill_group(pid)
        if len(runners) > 1:
            for t in threads:
                t.join()  # each restores its scratch file on the way out
        print(f"interrupted ({e or 'ctrl-c'}); the scratch file was restored", file=sys.stderr)
        return 130
    finally:
        with lock:
            save()
    print(f"results: {a.results}\nreport:  {a.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
