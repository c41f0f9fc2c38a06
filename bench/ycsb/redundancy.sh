#!/usr/bin/env bash
# YCSB A, B and C against `kavach serve --durability always` with the store's redundancy off,
# lazy at 1 s, 5 s and 10 s periods, and eager, in one run (the bench/ycsb harness, run.sh,
# once per configuration, one after the other on the same machine).
#
#   bench/ycsb/redundancy.sh [--records N] [--ops N] [--threads T] [--rounds R]
#                            [--configs LIST] [--out DIR] [--result FILE]
#
#   --records N      recordcount (default 1000000, the issue's target)
#   --ops N          operationcount of each of A, B, C (default: as --records)
#   --threads T      YCSB client threads (default 16, run.sh's knee on 2 vCPUs)
#   --rounds R       rounds per configuration (default 1)
#   --configs LIST   from off, lazy1s, lazy5s, lazy10s, eager (default: all, in that order)
#   --out DIR        where each configuration's run.sh output goes (default
#                    target/bench/ycsb-redundancy)
#   --result FILE    the markdown table (default bench/ycsb/results-redundancy-<date>.md)
#
# Every configuration gets a fresh server on a fresh directory in /dev/shm (run.sh), a load
# phase, a clean restart on the loaded data (YCSB_RESTART_AFTER_LOAD=1: protection covers the
# regions a store's pool grew while serving from its next start, so without the restart most
# of the loaded data would not be covered), the run phases of A, B and C, then a clean
# shutdown. --no-restart skips the restart (redundancy then covers only the regions of the
# new store: both logs, the data zone and the first page frames). The server's background
# scrubber runs at its default rate (4096 pages per second) in the lazy and eager runs.
# The table gives throughput and p99 per operation, and each one's ratio to `off`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/ycsb"
CMDLINE="bench/ycsb/redundancy.sh $*"
die() { printf '[redundancy-bench] error: %s\n' "$*" >&2; exit 2; }
log() { printf '[redundancy-bench] %s\n' "$*" >&2; }

RECORDS=1000000
OPS=""
THREADS=16
ROUNDS=1
CONFIGS="off,lazy1s,lazy5s,lazy10s,eager"
OUT="$ROOT/target/bench/ycsb-redundancy"
RESULT=""
RESTART=1
need() { [ $# -ge 2 ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --records) need "$@"; RECORDS="$2"; shift ;;
    --ops) need "$@"; OPS="$2"; shift ;;
    --threads) need "$@"; THREADS="$2"; shift ;;
    --rounds) need "$@"; ROUNDS="$2"; shift ;;
    --configs) need "$@"; CONFIGS="$2"; shift ;;
    --out) need "$@"; OUT="$2"; shift ;;
    --result) need "$@"; RESULT="$2"; shift ;;
    --no-restart) RESTART="" ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
OPS="${OPS:-$RECORDS}"
for v in RECORDS OPS THREADS ROUNDS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--${v,,} must be a positive integer, got '${!v}'"
done
DATE="$(date -u '+%Y-%m-%d')"
RESULT="${RESULT:-$HERE/results-redundancy-$DATE.md}"

args_of() {
  case "$1" in
    off) echo "--redundancy off" ;;
    lazy1s) echo "--redundancy lazy --redundancy-period-ms 1000" ;;
    lazy5s) echo "--redundancy lazy --redundancy-period-ms 5000" ;;
    lazy10s) echo "--redundancy lazy --redundancy-period-ms 10000" ;;
    eager) echo "--redundancy eager" ;;
    *) die "unknown configuration '$1' (off, lazy1s, lazy5s, lazy10s, eager)" ;;
  esac
}
IFS=', ' read -r -a CFGS <<< "$CONFIGS"
for c in "${CFGS[@]}"; do args_of "$c" > /dev/null; done

mkdir -p "$OUT"
STARTED="$(date -u '+%Y-%m-%dT%H:%M:%SZ')"
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
for c in "${CFGS[@]}"; do
  log "configuration $c: kavach serve $(args_of "$c")"
  YCSB_RESTART_AFTER_LOAD="$RESTART" KAVACH_EXTRA_ARGS="$(args_of "$c")" \
    "$HERE/run.sh" --systems kavach-always \
    --rounds "$ROUNDS" --records "$RECORDS" --ops "$OPS" --threads "$THREADS" \
    --workloads a,b,c --out "$OUT/$c" > "$OUT/$c.report.md" \
    || die "run.sh failed for $c (see $OUT/$c)"
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

CMDLINE="$CMDLINE" STARTED="$STARTED" LOAD_BEFORE="$LOAD_BEFORE" LOAD_AFTER="$LOAD_AFTER" \
  OUT="$OUT" CONFIGS="$CONFIGS" RESTART="$RESTART" python3 - > "$RESULT" <<'EOF'
import json, os, statistics
e = os.environ
cfgs = [c for c in e["CONFIGS"].replace(" ", ",").split(",") if c]
names = {"off": "off", "lazy1s": "lazy, 1 s", "lazy5s": "lazy, 5 s", "lazy10s": "lazy, 10 s",
         "eager": "eager"}
meta = None
runs = {}
for c in cfgs:
    with open(os.path.join(e["OUT"], c, "results.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "meta":
                meta = meta or r
                continue
            if r.get("phase") != "run":
                continue
            runs.setdefault((c, r["workload"]), []).append(r)

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def value(c, w, what, op=None):
    rs = runs.get((c, w), [])
    if op is None:
        return med([r["throughput"] for r in rs])
    return med([r["ops"].get(op, {}).get("p99_us") for r in rs])

def fmt(x):
    return "–" if x is None else f"{x:,.0f}"

def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.3f}"

print("# YCSB against `kavach serve` with redundancy off, lazy (1 s, 5 s, 10 s) and eager")
print()
print(f"- command: `{e['CMDLINE']}`")
print(f"- started: {e['STARTED']}")
if meta:
    print(f"- CPU: {meta['cpu']} ({meta['nproc']} logical CPUs), {meta['memory']}, kernel {meta['kernel']}")
    print(f"- domain: {meta['domain']}")
    print(f"- kavach: {meta['kavach']}")
print(f"- load average (1, 5, 15 min) before: {e['LOAD_BEFORE']}; after: {e['LOAD_AFTER']}")
print("- every configuration: `--durability always`, a fresh store in /dev/shm, YCSB load, "
      + ("a clean restart of the server on the loaded data (so the protection covers the "
         "regions the pool grew while loading), then " if e["RESTART"] else
         "no restart (the protection covers only the new store's regions: both logs, the data "
         "zone, the first page frames; not the frames added while loading), then ")
      + "A, B, C (zipfian, 16 threads unless the command says otherwise); the background "
      "scrubber at its default 4096 pages/s in lazy and eager")
print()
print("Throughput in operations per second, p99 in microseconds; the ratio is to `off` "
      "(throughput: above 1 is faster; p99: above 1 is slower).")
print()
for w in ["a", "b", "c"]:
    ops = ["READ", "UPDATE"] if w != "c" else ["READ"]
    head = ["redundancy", "ops/s", "ratio"] + sum([[f"{o} p99", "ratio"] for o in ops], [])
    print(f"## Workload {w.upper()}")
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    base_t = value("off", w, "t")
    for c in cfgs:
        t = value(c, w, "t")
        row = [names[c], fmt(t), ratio(t, base_t)]
        for o in ops:
            p = value(c, w, "p99", o)
            row += [fmt(p), ratio(p, value("off", w, "p99", o))]
        print("| " + " | ".join(row) + " |")
    print()
EOF
log "wrote $RESULT"
cat "$RESULT"
