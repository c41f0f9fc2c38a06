#!/usr/bin/env bash
# TVARAK's controller simulator (issue 24) in one run: generate and record the traces, run
# every design on each, the ablation (Fig. 9), the sensitivity sweeps (Fig. 10) and the
# fault-coverage matrix; JSON and PNG per step. Tables: summarize.py OUT_DIR.
#
#   bench/tvarak/run.sh [OUT_DIR]
#
# Env: KAVACH (a kavach binary to use instead of building target/release/kavach; use a
# release build: the recorded traces carry the measured CPU work of the program, and a debug
# build's is many times slower), FIO_KIB (KiB per fio thread, default 4096; the paper: 32768),
# STREAM_KIB (KiB per stream array, default 16384; the paper: 131072), OPS (operations per
# instance of the recorded heap runs, default 20000), QUICK=1 (tiny sizes, a smoke test).
# The simulator and the generators are deterministic. The heap and store recordings run their
# instances in turn on one thread, so their events repeat from run to run but their measured
# work varies a little; the log and the server run real threads (interleaving varies).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench/tvarak/results-$(date -u +%Y%m%d)}
FIO_KIB=${FIO_KIB:-4096}
STREAM_KIB=${STREAM_KIB:-16384}
OPS=${OPS:-20000}
if [ "${QUICK:-0}" = 1 ]; then FIO_KIB=16; STREAM_KIB=96; OPS=100; fi
mkdir -p "$OUT/traces"
LOG=$OUT/run.log
: >"$LOG"
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$LOG" >&2; }
die() { log "error: $*"; exit 2; }

if [ -n "${KAVACH:-}" ]; then
  K=$KAVACH
else
  log "cargo build --release -p kavach"
  (cd "$ROOT" && cargo build --release -p kavach >>"$LOG" 2>&1) || die "build failed"
  K=$ROOT/target/release/kavach
fi
[ -x "$K" ] || die "no kavach binary at $K"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cd "$ROOT" && git rev-parse --short HEAD)"
  echo "binary: $K"
  echo "sizes: fio ${FIO_KIB} KiB per thread (12 threads, regions 16x), stream ${STREAM_KIB} KiB per array (12 threads), heap 12 instances x ${OPS} ops, store 4 clients x ${OPS} ops, log 2 threads x ${OPS} records, server 4 clients x $((OPS / 4)) requests"
  echo "machine simulated: the paper's Table III (kavach tvarak-sim run --help)"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >>"$LOG"

T=$OUT/traces
gen() { # NAME ARGS...: a trace at $T/NAME.trace (kept if there already)
  local name=$1; shift
  [ -f "$T/$name.trace" ] && return 0
  log "trace $name"
  "$K" tvarak-sim "$@" -o "$T/$name.trace" >>"$LOG" 2>&1 || die "trace $name: see $LOG"
}
for p in seq-read seq-write rand-read rand-write; do
  gen "fio-$p" gen fio --pattern "$p" --bytes-per-thread "${FIO_KIB}KiB"
done
for k in copy scale add triad; do
  gen "stream-$k" gen stream --kernel "$k" --array-bytes "${STREAM_KIB}KiB"
done
gen log-sync record log --threads 2 --ops "$OPS"
# Insert-only: keys from a range far larger than the operations, so nearly every one inserts.
gen heap-insert record heap --threads 12 --ops "$OPS" --keys 1000000 --buckets 4096 --read-percent 0
gen heap-balanced record heap --threads 12 --ops "$OPS" --keys "$OPS" --buckets 4096 --read-percent 50
gen kv-ycsb-a record store --threads 4 --keys $((OPS / 2)) --ops "$OPS" --read-percent 50 --value 64
gen server-ycsb-a record server --clients 4 --keys $((OPS / 4)) --ops $((OPS / 4)) --read-percent 50 --value 64

TRACES=(fio-seq-read fio-seq-write fio-rand-read fio-rand-write stream-copy stream-scale
        stream-add stream-triad log-sync heap-insert heap-balanced kv-ycsb-a server-ycsb-a)

# The server under real YCSB (workload A through the Jedis binding of bench/ycsb), when Java
# and the YCSB jars can be had; otherwise said in the log, and the table has no such row.
ycsb_server() {
  local cp db port pid addr n=$((OPS / 4))
  if ! cp=$(ROOT=$ROOT; log() { :; }; die() { echo "$*" >&2; exit 2; }
            . "$ROOT/bench/ycsb/build.sh" >>"$LOG" 2>&1 && echo "$YCSB_CP|$YCSB_DB"); then
    log "skipped: the server under YCSB (bench/ycsb/build.sh failed; see $LOG)"
    return 0
  fi
  db=${cp#*|}; cp=${cp%|*}
  log "trace server-ycsb-real (YCSB workload A, $n records, $((2 * n)) operations)"
  # A YCSB record is 10 fields of 100 B: --value 2048 sizes the store for it.
  "$K" tvarak-sim record server --listen 0 --keys "$n" --value 2048 \
    -o "$T/server-ycsb-real.trace" 2>"$OUT/ycsb-server.err" &
  pid=$!
  for _ in $(seq 100); do
    addr=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$OUT/ycsb-server.err" | head -1)
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { kill "$pid" 2>/dev/null; die "record server --listen printed no address"; }
  port=${addr##*:}
  local common=(-db "$db" -P "$ROOT/bench/ycsb/workloads/workloada" -p redis.host=127.0.0.1
                -p "redis.port=$port" -p "recordcount=$n" -threads 4)
  java -cp "$cp" site.ycsb.Client -load "${common[@]}" >>"$LOG" 2>&1 || die "YCSB load failed"
  java -cp "$cp" site.ycsb.Client -t "${common[@]}" -p "operationcount=$((2 * n))" \
    -p requestdistribution=zipfian >>"$LOG" 2>&1 || die "YCSB run failed"
  kill -INT "$pid"
  wait "$pid" || die "record server --listen failed: $(cat "$OUT/ycsb-server.err")"
  TRACES+=(server-ycsb-real)
}
if [ -f "$T/server-ycsb-real.trace" ]; then TRACES+=(server-ycsb-real); else ycsb_server; fi

for t in "${TRACES[@]}"; do
  "$K" tvarak-sim info "$T/$t.trace" --json >"$OUT/info-$t.json"
  log "run $t (all designs)"
  "$K" tvarak-sim run "$T/$t.trace" --design all --json --png "$OUT/run-$t.png" \
    >"$OUT/run-$t.json" 2>>"$LOG" || die "run $t"
  log "ablation $t"
  "$K" tvarak-sim ablation "$T/$t.trace" --json --png "$OUT/ablation-$t.png" \
    >"$OUT/ablation-$t.json" 2>>"$LOG" || die "ablation $t"
done

# Fig. 10: the workloads the paper sweeps, one of each kind.
for t in fio-rand-write stream-triad heap-insert kv-ycsb-a; do
  log "sweep $t"
  "$K" tvarak-sim sweep "$T/$t.trace" --red-ways 1,2,4,8 --json --png "$OUT/sweep-red-$t.png" \
    >"$OUT/sweep-red-$t.json" 2>>"$LOG" || die "sweep red $t"
  "$K" tvarak-sim sweep "$T/$t.trace" --diff-ways 1,2,4,6,8 --json --png "$OUT/sweep-diff-$t.png" \
    >"$OUT/sweep-diff-$t.json" 2>>"$LOG" || die "sweep diff $t"
  "$K" tvarak-sim sweep "$T/$t.trace" --ctl-cache-kib 0,1,2,4,8,16 --json \
    --png "$OUT/sweep-ctl-$t.png" >"$OUT/sweep-ctl-$t.json" 2>>"$LOG" || die "sweep ctl $t"
done

log "faults"
"$K" tvarak-sim faults --trials 50 --json >"$OUT/faults.json" 2>>"$LOG" || die "faults"
log "done: python3 bench/tvarak/summarize.py $OUT"
