#!/usr/bin/env bash
# redis-benchmark cells, Kavach and Redis interleaved at short range (ABBA per cell), for when
# bench/server/run.sh's per-system blocks (a minute or more each) may have been hit by other
# load on the machine. Data on /dev/shm.
#
#   bench/server/abba.sh [--out DIR] [--systems A,B] [--tests set,get] [--seconds S] [--reps R]
#
#   --out DIR          results directory (default target/bench/server-abba)
#   --systems A,B      exactly two systems (default redis-always,kavach-always)
#   --tests LIST       redis-benchmark tests (default set)
#   --seconds S        target length of each measurement (default 5)
#   --reps R           ABBA repetitions per cell (default 1: A B B A)
#
# Per value size (64, 1024 B) and pipeline depth (1, 16): both servers fresh, on two ports,
# each on its own data directory; per test a ~1 s probe against each (warm-up; sets -n to
# rate x S), then A B B A (R times), each `redis-benchmark -c 50 -r 100000 -d SIZE -P PIPE
# -t TEST --csv`, as in run.sh. Meanwhile every other process using more than 5% of a CPU is
# logged (DIR/foreign.log, from ps every 2 s), so a measurement disturbed by other work
# shows. Prints a markdown table: per cell, each system's runs and median, and the ratio B/A.
# DIR/results.jsonl: one JSON line per measurement. Environment: see bench/server/lib.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/server"
CMDLINE="bench/server/abba.sh $*"

log() { printf '[abba] %s\n' "$*" >&2; }
die() { printf '[abba] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
# shellcheck source=bench/server/lib.sh
source "$HERE/lib.sh"

OUT="$ROOT/target/bench/server-abba"
SYSTEMS_ARG="redis-always,kavach-always"
TESTS="set"
SECS=5
REPS=1
need() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) need "$@"; OUT="$2"; shift ;;
    --systems) need "$@"; SYSTEMS_ARG="$2"; shift ;;
    --tests) need "$@"; TESTS="$2"; shift ;;
    --seconds) need "$@"; SECS="$2"; shift ;;
    --reps) need "$@"; REPS="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$SECS" =~ ^[1-9][0-9]*$ ]] || die "--seconds must be a positive integer"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
check_systems "$SYSTEMS_ARG"
[ "${#SYSTEMS[@]}" -eq 2 ] || die "--systems takes exactly two systems"
A="${SYSTEMS[0]}"; B="${SYSTEMS[1]}"
IFS=', ' read -r -a TLIST <<< "$TESTS"

mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
SLOG="$OUT/servers.log"
FOREIGN="$OUT/foreign.log"
: > "$RESULTS"; : > "$SLOG"; : > "$FOREIGN"
make_run_dir kavach-abba
SAMPLER=""
on_exit() {
  if [ -n "$SAMPLER" ]; then kill "$SAMPLER" 2>/dev/null || true; fi
  cleanup_servers
}
trap on_exit EXIT
trap 'exit 130' INT TERM
PORT_A="$(free_port)"
PORT_B="$(BENCH_PORT=$((PORT_A + 1)) free_port)"
client_prefix

header "redis-benchmark, $A vs $B interleaved (ABBA per cell)" > "$OUT/header.txt"
cat "$OUT/header.txt"
echo "$META_JSON" >> "$RESULTS"
echo "mode:     tests $TESTS, ~$SECS s per measurement, $REPS x ABBA per cell, ports $PORT_A ($A) $PORT_B ($B)"
echo

# Foreign-load sampler: processes other than the benchmark's own above 5% CPU, every 2 s.
( while :; do
    ps -eo pid,etimes,pcpu,comm --sort=-pcpu | awk -v t="$(date -u +%T)" \
      'NR > 1 && $3 > 5 && $4 !~ /^(redis-server|redis-benchmark|redis-cli|kavach|python3|bash|ps|awk|sleep|timeout|date)$/ { print t, $0 }'
    sleep 2
  done ) >> "$FOREIGN" 2>/dev/null &
SAMPLER=$!

rb() {  # PORT N SIZE PIPE TEST -> rps
  ${CLIENT[@]+"${CLIENT[@]}"} redis-benchmark -h 127.0.0.1 -p "$1" -c 50 -n "$2" -d "$3" -P "$4" \
    -r 100000 -t "$5" --csv 2>>"$SLOG" | python3 "$HERE/resptool.py" rb-csv \
    | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["rps"])'
}

for size in 64 1024; do
  for pipe in 1 16; do
    server_start "$A" "$PORT_A" "$RUN_DIR/a-d$size-P$pipe" "$SLOG"; pid_a="$SERVER_PID"
    server_start "$B" "$PORT_B" "$RUN_DIR/b-d$size-P$pipe" "$SLOG"; pid_b="$SERVER_PID"
    for test in "${TLIST[@]}"; do
      if [ "$pipe" -gt 1 ]; then probe=400000; else probe=60000; fi
      ra="$(rb "$PORT_A" "$probe" "$size" "$pipe" "$test")"
      rbb="$(rb "$PORT_B" "$probe" "$size" "$pipe" "$test")"
      n="$(python3 -c "import sys; print(max(int(sys.argv[3]), int(min(float(sys.argv[1]), float(sys.argv[2])) * int(sys.argv[4])) // 1000 * 1000))" "$ra" "$rbb" "$probe" "$SECS")"
      seq=()
      for ((r = 0; r < REPS; r++)); do seq+=(A B B A); done
      i=0
      for who in "${seq[@]}"; do
        i=$((i + 1))
        if [ "$who" = A ]; then sys="$A"; port="$PORT_A"; else sys="$B"; port="$PORT_B"; fi
        t0="$(date -u +%T)"
        rps="$(rb "$port" "$n" "$size" "$pipe" "$test")" || die "redis-benchmark against $sys failed"
        t1="$(date -u +%T)"
        printf '{"kind": "abba", "system": "%s", "test": "%s", "size": %d, "pipeline": %d, "n": %d, "seq": %d, "start": "%s", "end": "%s", "rps": %s}\n' \
          "$sys" "${test^^}" "$size" "$pipe" "$n" "$i" "$t0" "$t1" "$rps" >> "$RESULTS"
        log "$(printf '%-15s %s d=%-4d P=%-2d %10.0f ops/s (%s-%s)' "$sys" "${test^^}" "$size" "$pipe" "$rps" "$t0" "$t1")"
      done
    done
    server_stop "$A" "$PORT_A" "$pid_a"
    server_stop "$B" "$PORT_B" "$pid_b"
    rm -rf -- "$RUN_DIR/a-d$size-P$pipe" "$RUN_DIR/b-d$size-P$pipe"
  done
done

python3 - "$RESULTS" "$A" "$B" "$FOREIGN" <<'EOF' | tee "$OUT/report.md"
import json, statistics, sys
path, a, b, foreign = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if '"abba"' in l]
cells = {}
for r in rows:
    cells.setdefault((r["test"], r["size"], r["pipeline"]), {}).setdefault(r["system"], []).append(r["rps"])
print(f"| cell | {a} runs | {a} median | {b} runs | {b} median | {b}/{a} |")
print("| --- | --- | ---: | --- | ---: | ---: |")
for (t, s, p), d in cells.items():
    ma, mb = statistics.median(d[a]), statistics.median(d[b])
    print(f"| {t} {s} B P{p} | {', '.join(f'{x:,.0f}' for x in d[a])} | {ma:,.0f} | "
          f"{', '.join(f'{x:,.0f}' for x in d[b])} | {mb:,.0f} | {mb / ma:.3f} |")
lines = [l for l in open(foreign) if l.strip()]
print()
print(f"Other processes above 5% CPU during the run: {len(lines)} samples"
      + (f", from {lines[0].split()[0]} to {lines[-1].split()[0]} (see foreign.log)" if lines else " (none)"))
EOF
log "wrote $OUT/report.md; measurements in $RESULTS"
