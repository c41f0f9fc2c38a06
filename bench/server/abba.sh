#!/usr/bin/env bash
# redis-benchmark cells, Kavach and Redis interleaved at short range (ABBA per cell), for when
# bench/server/run.sh's per-system blocks (a minute or more each) may have been hit by other
# load on the machine. Data on /dev/shm.
#
#   bench/server/abba.sh [--out DIR] [--systems A,B] [--tests set,get] [--seconds S] [--reps R]
#                        [--sizes 64,1024] [--pipelines 1,16]
#
#   --out DIR          results directory (default target/bench/server-abba)
#   --systems A,B      exactly two systems (default redis-always,kavach-always)
#   --tests LIST       redis-benchmark tests (default set,get)
#   --seconds S        target length of each measurement (default 5)
#   --reps R           ABBA repetitions per cell (default 1: A B B A)
#   --sizes LIST       value sizes in bytes (default 64,1024)
#   --pipelines LIST   pipeline depths (default 1,16)
#
# Per value size and pipeline depth: both servers fresh, on two ports,
# each on its own data directory; per test a ~1 s probe against each (warm-up; sets -n to
# rate x S), then A B B A (R times), each `redis-benchmark -c 50 -r 100000 -d SIZE -P PIPE
# -t TEST --csv`, as in run.sh. Meanwhile every other process using more than 5% of a CPU is
# logged (DIR/foreign.log, from ps every 2 s), so a measurement disturbed by other work
# shows. Each measurement also reads the server's CPU time (utime and stime of
# /proc/PID/stat, all its threads, before and after) and divides it by the requests sent:
# server CPU per request, user and system, in microseconds. Prints two markdown tables: per
# cell, each system's runs and median requests per second and the ratio B/A; then per cell
# each system's median CPU per request (user + system) and the ratio B/A (below 1: B spends
# less). DIR/results.jsonl: one JSON line per measurement. Environment: see
# bench/server/lib.sh.
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
TESTS="set,get"
SECS=5
REPS=1
SIZES="64,1024"
PIPES="1,16"
need() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) need "$@"; OUT="$2"; shift ;;
    --systems) need "$@"; SYSTEMS_ARG="$2"; shift ;;
    --tests) need "$@"; TESTS="$2"; shift ;;
    --seconds) need "$@"; SECS="$2"; shift ;;
    --reps) need "$@"; REPS="$2"; shift ;;
    --sizes) need "$@"; SIZES="$2"; shift ;;
    --pipelines) need "$@"; PIPES="$2"; shift ;;
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
IFS=', ' read -r -a SLIST <<< "$SIZES"
IFS=', ' read -r -a PLIST <<< "$PIPES"
for v in "${SLIST[@]}" "${PLIST[@]}"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "--sizes and --pipelines take positive integers (got '$v')"
done
CLK_TCK="$(getconf CLK_TCK)"

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
echo "mode:     tests $TESTS, sizes $SIZES, pipelines $PIPES, ~$SECS s per measurement, $REPS x ABBA per cell, ports $PORT_A ($A) $PORT_B ($B)"
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

cpu_ticks() {  # PID -> "utime stime" in clock ticks (all threads, as /proc/PID/stat sums them)
  sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12, $13 }'
}

for size in "${SLIST[@]}"; do
  for pipe in "${PLIST[@]}"; do
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
        if [ "$who" = A ]; then sys="$A"; port="$PORT_A"; spid="$pid_a"; else sys="$B"; port="$PORT_B"; spid="$pid_b"; fi
        t0="$(date -u +%T)"
        read -r u0 s0 < <(cpu_ticks "$spid")
        rps="$(rb "$port" "$n" "$size" "$pipe" "$test")" || die "redis-benchmark against $sys failed"
        read -r u1 s1 < <(cpu_ticks "$spid")
        t1="$(date -u +%T)"
        cpu="$(python3 -c 'import sys; u0, s0, u1, s1, tck, n = map(int, sys.argv[1:]); print(f"{(u1 - u0) / tck * 1e6 / n:.3f} {(s1 - s0) / tck * 1e6 / n:.3f}")' \
          "$u0" "$s0" "$u1" "$s1" "$CLK_TCK" "$n")"
        read -r cu cs <<< "$cpu"
        printf '{"kind": "abba", "system": "%s", "test": "%s", "size": %d, "pipeline": %d, "n": %d, "seq": %d, "start": "%s", "end": "%s", "rps": %s, "cpu_user_us": %s, "cpu_sys_us": %s}\n' \
          "$sys" "${test^^}" "$size" "$pipe" "$n" "$i" "$t0" "$t1" "$rps" "$cu" "$cs" >> "$RESULTS"
        log "$(printf '%-15s %s d=%-4d P=%-2d %10.0f ops/s, server CPU %s + %s us/request (%s-%s)' "$sys" "${test^^}" "$size" "$pipe" "$rps" "$cu" "$cs" "$t0" "$t1")"
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
print()
print(f"Server CPU per request (utime + stime of the whole server process / requests), median over the runs, us:")
print()
print(f"| cell | {a} user | {a} sys | {a} total | {b} user | {b} sys | {b} total | {b}/{a} |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
cpu = {}
for r in rows:
    cpu.setdefault((r["test"], r["size"], r["pipeline"]), {}).setdefault(r["system"], []).append(
        (r["cpu_user_us"], r["cpu_sys_us"]))
for (t, s, p), d in cpu.items():
    def med(sys_):
        us = d[sys_]
        return (statistics.median(u for u, _ in us), statistics.median(s_ for _, s_ in us),
                statistics.median(u + s_ for u, s_ in us))
    ua, sa, ta = med(a)
    ub, sb, tb = med(b)
    print(f"| {t} {s} B P{p} | {ua:.2f} | {sa:.2f} | {ta:.2f} | {ub:.2f} | {sb:.2f} | {tb:.2f} | "
          f"{tb / ta:.3f} |")
lines = [l for l in open(foreign) if l.strip()]
print()
print(f"Other processes above 5% CPU during the run: {len(lines)} samples"
      + (f", from {lines[0].split()[0]} to {lines[-1].split()[0]} (see foreign.log)" if lines else " (none)"))
EOF
log "wrote $OUT/report.md; measurements in $RESULTS"
