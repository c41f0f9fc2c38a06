#!/usr/bin/env bash
# YCSB benchmark: Kavach's Redis-protocol server vs Redis 7 through the same Jedis binding
# (bench/ycsb/src/site/ycsb/db/kavach/KavachJedisClient.java), data on /dev/shm.
#
#   bench/ycsb/run.sh [--quick] [--out DIR] [--rounds R] [--systems LIST] [--records N]
#                     [--ops N] [--threads T] [--workloads LIST] [--distribution D]
#
#   --quick            smoke run: 1 round, 10,000 records, 20,000 operations per workload
#   --out DIR          results directory (default target/bench/ycsb)
#   --rounds R         rounds; the order of the systems is reversed every other round
#                      (default 2; --quick: 1)
#   --systems LIST     comma-separated, from redis-always, redis-everysec, redis-none,
#                      kavach-always, kavach-f64 (default redis-always,redis-everysec,kavach-always)
#   --records N        recordcount (default 1000000; 10 fields of 100 B: about 1 KiB each)
#   --ops N            operationcount of each run phase (default 1000000)
#   --threads T        YCSB client threads (default 16, see below)
#   --workloads LIST   run phases, in order, from a, b, c (default a,b,c)
#   --distribution D   requestdistribution (default zipfian)
#
# Per round and system: a fresh server on a fresh data directory, one YCSB load phase
# (-load, recordcount records, checked with DBSIZE), then the run phases (-t) of workloads
# A (50% read / 50% update), B (95/5) and C (read only) on that data, then a clean shutdown.
# Every YCSB invocation uses -p measurementtype=hdrhistogram
# -p hdrhistogram.percentiles=99,99.9,99.99 -s -p status.interval=1; reads are HGETALL
# (readallfields=true), updates and inserts HSET, on one connection per client thread.
#
# Threads: 16 by default. The machines have 2 cores shared by the server and the JVM client;
# a closed-loop client needs enough requests in flight to keep the server busy (and to let
# Redis's appendfsync always group its fsyncs), but every thread past that only queues. On
# this machine (2 vCPUs, Redis 7 AOF always, 100,000 records, workload A, 6 s) throughput was
# 46k ops/s with 4 threads, 59k with 8, 74k with 16, 71k with 32 and 72k with 50, while the
# update p99 rose from 0.45 ms (16) to 1.8 ms (50): 16 is the knee.
#
# Output: a header (command, date, machine, domain), progress on stderr, and the markdown
# report of bench/ycsb/summarize.py (also DIR/report.md). DIR/results.jsonl holds one JSON
# line per YCSB invocation; DIR/raw/ the YCSB output (.out) and status lines (.status);
# DIR/servers.log the servers' output; DIR/raw/*.cpu.jsonl the CPU time of the server's
# threads and of the client over each invocation (bench/server/cpusample.py), reported as CPU
# per operation. Environment: see bench/server/lib.sh (KAVACH_BIN,
# KAVACH_EXTRA_ARGS, REDIS_EXTRA_ARGS, BENCH_PORT, BENCH_SHM_DIR, BENCH_SERVER_CPU,
# BENCH_CLIENT_CPU); YCSB_JAVA_OPTS adds JVM options; YCSB_RESTART_AFTER_LOAD=1 stops each
# server cleanly after the load phase and starts it again on the loaded data before the run
# phases.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/ycsb"
CMDLINE="bench/ycsb/run.sh $*"

log() { printf '[ycsb-bench] %s\n' "$*" >&2; }
die() { printf '[ycsb-bench] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
# shellcheck source=bench/server/lib.sh
source "$ROOT/bench/server/lib.sh"

OUT="$ROOT/target/bench/ycsb"
QUICK=""
ROUNDS=""
SYSTEMS_ARG="redis-always,redis-everysec,kavach-always"
RECORDS=""
OPS=""
THREADS=16
WORKLOADS="a,b,c"
DIST=zipfian
need() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --out) need "$@"; OUT="$2"; shift ;;
    --rounds) need "$@"; ROUNDS="$2"; shift ;;
    --systems) need "$@"; SYSTEMS_ARG="$2"; shift ;;
    --records) need "$@"; RECORDS="$2"; shift ;;
    --ops) need "$@"; OPS="$2"; shift ;;
    --threads) need "$@"; THREADS="$2"; shift ;;
    --workloads) need "$@"; WORKLOADS="$2"; shift ;;
    --distribution) need "$@"; DIST="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
if [ -n "$QUICK" ]; then
  ROUNDS="${ROUNDS:-1}"; RECORDS="${RECORDS:-10000}"; OPS="${OPS:-20000}"
else
  ROUNDS="${ROUNDS:-2}"; RECORDS="${RECORDS:-1000000}"; OPS="${OPS:-1000000}"
fi
for v in ROUNDS RECORDS OPS THREADS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--${v,,} must be a positive integer, got '${!v}'"
done
IFS=', ' read -r -a WLS <<< "$WORKLOADS"
for w in "${WLS[@]}"; do
  [ -f "$HERE/workloads/workload$w" ] || die "unknown workload '$w' (no bench/ycsb/workloads/workload$w)"
done
case "$DIST" in zipfian|uniform|latest|hotspot|sequential|exponential) ;; *) die "unknown distribution '$DIST'" ;; esac

check_systems "$SYSTEMS_ARG"
# shellcheck source=bench/ycsb/build.sh
source "$HERE/build.sh"

mkdir -p "$OUT/raw"
RESULTS="$OUT/results.jsonl"
SLOG="$OUT/servers.log"
: > "$RESULTS"
: > "$SLOG"
rm -f -- "$OUT"/raw/*.out "$OUT"/raw/*.status "$OUT"/raw/*.cpu.jsonl
make_run_dir kavach-ycsbbench
SAMPLER_PID=""
on_exit() {
  if [ -n "$SAMPLER_PID" ] && kill -0 "$SAMPLER_PID" 2>/dev/null; then kill "$SAMPLER_PID" 2>/dev/null || true; fi
  cleanup_servers
}
trap on_exit EXIT
trap 'exit 130' INT TERM
PORT="$(free_port)"
client_prefix
JAVA_OPTS=(-Duser.timezone=UTC)
read -r -a _extra <<< "${YCSB_JAVA_OPTS:-}"
JAVA_OPTS+=(${_extra[@]+"${_extra[@]}"})

header "YCSB: Kavach serve vs Redis 7 (Jedis binding, workloads ${WORKLOADS})" > "$OUT/header.txt"
cat "$OUT/header.txt"
echo "$META_JSON" >> "$RESULTS"
echo "ycsb:     core 0.17.0, $(basename "$(ls "$ROOT"/bench/ycsb/.build/lib/jedis-*.jar)" .jar), $(java -version 2>&1 | head -n1)"
echo "mode:     ${QUICK:+quick, }rounds $ROUNDS, systems $SYSTEMS_ARG, records $RECORDS, ops $OPS per workload, threads $THREADS, $DIST, port $PORT"
echo

# ycsb SYSTEM ROUND PHASE WORKLOAD: one YCSB invocation (PHASE load or run); appends a line
# to RESULTS.
ycsb() {
  local sys="$1" round="$2" phase="$3" wl="$4" base flag ops
  base="$OUT/raw/$sys-r$round-$phase${wl:+-$wl}"
  if [ "$phase" = load ]; then flag=-load; ops=0; else flag=-t; ops="$OPS"; fi
  # shellcheck disable=SC2054  # hdrhistogram.percentiles=99,99.9,99.99 is one argument
  local cmd=(${CLIENT[@]+"${CLIENT[@]}"} java "${JAVA_OPTS[@]}" -cp "$YCSB_CP" site.ycsb.Client "$flag"
             -db "$YCSB_DB" -P "$HERE/workloads/workload${wl:-a}"
             -p redis.host=127.0.0.1 -p "redis.port=$PORT"
             -p "recordcount=$RECORDS" -p "operationcount=$ops" -p "requestdistribution=$DIST"
             -threads "$THREADS" -p measurementtype=hdrhistogram
             -p hdrhistogram.percentiles=99,99.9,99.99 -s -p status.interval=1)
  log "$sys round $round: $phase${wl:+ workload $wl}"
  show_cmd "${cmd[@]}" > "$base.cmd"
  # CPU time of the server's threads and of the client over the invocation (CPU per operation
  # in the report).
  python3 "$ROOT/bench/server/cpusample.py" --out "$base.cpu.jsonl" --server "$SERVER_PID" \
    --client-match site.ycsb.Client --interval 0.5 2>> "$SLOG" &
  SAMPLER_PID=$!
  "${cmd[@]}" > "$base.out" 2> "$base.status" \
    || { tail -n 20 "$base.status" >&2; die "YCSB $phase${wl:+ $wl} against $sys failed (see $base.status)"; }
  kill "$SAMPLER_PID" 2>/dev/null || true
  SAMPLER_PID=""
  python3 "$HERE/summarize.py" parse "$base.out" system="$sys" round="$round" phase="$phase" \
      workload="${wl:-load}" threads="$THREADS" records="$RECORDS" operations="$ops" \
      distribution="$DIST" cpu_file="$base.cpu.jsonl" >> "$RESULTS" \
    || die "could not parse YCSB output $base.out"
  tail -n1 "$RESULTS" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
ops = {k: v for k, v in r["ops"].items() if k in ("READ", "UPDATE", "INSERT")}
parts = ["%s p99 %s / p99.9 %s us%s" % (k, v.get("p99_us"), v.get("p999_us"),
         "" if set(v.get("returns", {})) <= {"OK"} else " RETURNS %s" % v["returns"]) for k, v in sorted(ops.items())]
print("  %-15s %-5s %9.0f ops/s  %s" % (r["system"], r["workload"], r["throughput"], "; ".join(parts)))' >&2
}

for ((round = 1; round <= ROUNDS; round++)); do
  order=("${SYSTEMS[@]}")
  if (( round % 2 == 0 )); then
    order=(); for ((i = ${#SYSTEMS[@]} - 1; i >= 0; i--)); do order+=("${SYSTEMS[$i]}"); done
  fi
  for sys in "${order[@]}"; do
    dir="$RUN_DIR/$sys-r$round"
    server_start "$sys" "$PORT" "$dir" "$SLOG"
    pid="$SERVER_PID"
    ycsb "$sys" "$round" load ""
    n="$(redis-cli -h 127.0.0.1 -p "$PORT" DBSIZE)"
    [ "$n" = "$RECORDS" ] || die "$sys holds $n keys after loading $RECORDS records"
    if [ -n "${YCSB_RESTART_AFTER_LOAD:-}" ]; then
      # Stop cleanly and start again on the loaded data (a Kavach store with --redundancy
      # covers the regions its pool grew while loading from its next start).
      server_stop "$sys" "$PORT" "$pid"
      server_cmd "$sys" "$PORT" "$dir"
      log "restart $sys on its data: $(show_cmd "${CMD[@]}")"
      echo "== $(date -u '+%H:%M:%S') restart: $(show_cmd "${CMD[@]}")" >> "$SLOG"
      "${CMD[@]}" >> "$SLOG" 2>&1 &
      SERVER_PID=$!
      SERVER_PIDS+=("$SERVER_PID")
      wait_ready "$sys" "$PORT" "$SERVER_PID" "$SLOG" "${READY_TIMEOUT:-600}"
      pid="$SERVER_PID"
      n="$(redis-cli -h 127.0.0.1 -p "$PORT" DBSIZE)"
      [ "$n" = "$RECORDS" ] || die "$sys holds $n keys after its restart ($RECORDS loaded)"
    fi
    for w in "${WLS[@]}"; do
      ycsb "$sys" "$round" run "$w"
    done
    server_stop "$sys" "$PORT" "$pid"
    rm -rf -- "$dir"
  done
done

python3 "$HERE/summarize.py" report "$RESULTS" | tee "$OUT/report.md"
log "wrote $OUT/report.md; measurements in $RESULTS, YCSB output in $OUT/raw/"
