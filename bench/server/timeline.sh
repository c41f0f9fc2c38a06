#!/usr/bin/env bash
# Timeline: throughput and tail latency, second by second, of a steady write-heavy load while
# Kavach checkpoints and while Redis rewrites its AOF. Data on /dev/shm.
#
#   bench/server/timeline.sh [--quick] [--out DIR] [--systems LIST] [--seconds S]
#                            [--records N] [--threads T] [--every S] [--workload W]
#                            [--kavach-trigger CMD] [--warmup SECS]
#
#   --quick            smoke run: 10 s, 50,000 records, a trigger every 3 s
#   --out DIR          results directory (default target/bench/timeline)
#   --systems LIST     comma-separated (default redis-always,kavach-always; any of
#                      redis-always, redis-everysec, redis-none, kavach-always, kavach-f64)
#   --seconds S        length of the measured load (default 60)
#   --records N        records loaded first (default 1000000, about 1 KiB each: enough for
#                      an AOF rewrite to take seconds)
#   --threads T        YCSB client threads (default 16; see bench/ycsb/run.sh)
#   --every S          seconds between triggers (default 10)
#   --workload W       YCSB workload of the measured load (default a: 50% read, 50% update)
#   --warmup SECS      seconds, from the start of the YCSB client, of the same load run before
#                      the measured S (default 10; quick: 2; the JVM starts within them):
#                      YCSB's JVM compiles its hot code then, and those seconds were the slowest
#                      of many runs for Redis and Kavach alike; the report shows them apart.
#                      On a 2-vCPU Zen 3 the JVM's C2 compiler threads took 0.31-0.69 CPU in
#                      its first 5 s and under 0.07 from its sixth (issue 27, ninth session):
#                      with 5 s, the first measured second was every Kavach run's worst
#   --kavach-trigger CMD  what is sent to Kavach every --every seconds: BGSAVE (default: a
#                      checkpoint on a thread of its own, answered at once, as Redis answers
#                      BGREWRITEAOF) or SAVE (answered when the checkpoint is done; it runs on
#                      the worker thread that serves the controller's connection, so that
#                      worker's other connections wait for it: up to Kavach 0.1 of issue 27
#                      the only trigger)
#
# Per system: a fresh server on a fresh data directory, a YCSB load of N records, one
# BGSAVE (Kavach: a checkpoint of what the load logged) or BGREWRITEAOF (Redis) waited for, so
# that every system starts the measured load with its persistence caught up whatever N is,
# then for SECS + S seconds YCSB workload W (zipfian, closed loop, -p maxexecutiontime=SECS+S,
# -p measurementtype=hdrhistogram, -s -p status.interval=1: one status line per second with
# that second's operation count and READ/UPDATE percentiles, from per-interval histograms)
# while bench/server/resptool.py ctl
#   - sends BGSAVE or SAVE (Kavach: a checkpoint, on top of the ones it starts when its log
#     fills) or BGREWRITEAOF (Redis) every --every seconds, noting when it was sent and
#     answered;
#   - polls INFO persistence every 0.1 s, noting every *_in_progress flag change (Redis
#     aof_rewrite_in_progress; Kavach whatever it reports) and every finished
#     rewrite/checkpoint counted there (aof_rewrites; *checkpoints*).
# INFO persistence is also read just before and just after the measured load (Kavach:
# checkpoints, last_checkpoint_ms, last_checkpoint_swap_us; Redis: aof_rewrites), and for
# Kavach the pool's domain (`kavach pool info`) after the server has stopped.
# Then bench/server/timeline.py buckets the status lines (1 s each; the warm-up's, and a last
# partial one, are dropped; the report gives the warm-up's worst bucket apart), marks a bucket "busy" when it overlaps a
# rewrite/checkpoint (SAVE sent..answered, an *_in_progress=1 span, or a finished-counter
# change), and reports per system: median and worst bucket throughput and their ratio, median
# and worst per-bucket p99.9 and their ratio, and the median p99.9 and throughput in busy
# buckets against the others. It plots both timelines (DIR/timeline.png, matplotlib; pip
# installs it if missing) with the rewrite/checkpoint spans shaded and triggers marked.
#
# Output: a header, progress on stderr, the markdown report (also DIR/report.md);
# DIR/buckets.jsonl (one JSON line per bucket and per event), DIR/raw/ (YCSB output and
# status lines, controller events), DIR/servers.log. Environment: see bench/server/lib.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/server"
CMDLINE="bench/server/timeline.sh $*"

log() { printf '[timeline] %s\n' "$*" >&2; }
die() { printf '[timeline] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
# shellcheck source=bench/server/lib.sh
source "$HERE/lib.sh"

OUT="$ROOT/target/bench/timeline"
QUICK=""
WARMUP=""
SYSTEMS_ARG="redis-always,kavach-always"
DURATION=""
RECORDS=""
THREADS=16
EVERY=""
WORKLOAD=a
KAVACH_TRIGGER=BGSAVE
need() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --out) need "$@"; OUT="$2"; shift ;;
    --systems) need "$@"; SYSTEMS_ARG="$2"; shift ;;
    --seconds) need "$@"; DURATION="$2"; shift ;;
    --records) need "$@"; RECORDS="$2"; shift ;;
    --threads) need "$@"; THREADS="$2"; shift ;;
    --every) need "$@"; EVERY="$2"; shift ;;
    --workload) need "$@"; WORKLOAD="$2"; shift ;;
    --kavach-trigger) need "$@"; KAVACH_TRIGGER="${2^^}"; shift ;;
    --warmup) need "$@"; WARMUP="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
if [ -n "$QUICK" ]; then
  DURATION="${DURATION:-10}"; RECORDS="${RECORDS:-50000}"; EVERY="${EVERY:-3}"; WARMUP="${WARMUP:-2}"
else
  DURATION="${DURATION:-60}"; RECORDS="${RECORDS:-1000000}"; EVERY="${EVERY:-10}"; WARMUP="${WARMUP:-10}"
fi
for v in DURATION RECORDS THREADS EVERY; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "${v,,} must be a positive integer, got '${!v}'"
done
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "warmup must be a whole number of seconds, got '$WARMUP'"
[ -f "$ROOT/bench/ycsb/workloads/workload$WORKLOAD" ] || die "unknown workload '$WORKLOAD'"
case "$KAVACH_TRIGGER" in SAVE|BGSAVE) ;; *) die "--kavach-trigger must be SAVE or BGSAVE, got '$KAVACH_TRIGGER'" ;; esac

check_systems "$SYSTEMS_ARG"
# shellcheck source=bench/ycsb/build.sh
source "$ROOT/bench/ycsb/build.sh"
if ! python3 -c 'import matplotlib' 2>/dev/null; then
  log "matplotlib missing: python3 -m pip install matplotlib"
  python3 -m pip install -q matplotlib >&2 || log "warning: could not install matplotlib; no plot"
fi

mkdir -p "$OUT/raw"
RESULTS="$OUT/buckets.jsonl"
RUNS="$OUT/runs.jsonl"
SLOG="$OUT/servers.log"
: > "$RUNS"
: > "$SLOG"
rm -f -- "$OUT"/raw/*
make_run_dir kavach-timeline
CTL_PID=""
SAMPLER_PID=""
on_exit() {
  if [ -n "$CTL_PID" ] && kill -0 "$CTL_PID" 2>/dev/null; then kill "$CTL_PID" 2>/dev/null || true; fi
  if [ -n "$SAMPLER_PID" ] && kill -0 "$SAMPLER_PID" 2>/dev/null; then kill "$SAMPLER_PID" 2>/dev/null || true; fi
  cleanup_servers
}
trap on_exit EXIT
trap 'exit 130' INT TERM
PORT="$(free_port)"
client_prefix

header "Timeline: Kavach checkpoints vs Redis AOF rewrites under load (YCSB workload $WORKLOAD)" > "$OUT/header.txt"
cat "$OUT/header.txt"
echo "mode:     ${QUICK:+quick, }systems $SYSTEMS_ARG, $WARMUP s of warm-up and $DURATION s of workload $WORKLOAD, $RECORDS records, $THREADS threads, trigger every $EVERY s, port $PORT"
echo
printf '%s\n' "$META_JSON" > "$OUT/meta.json"

ycsb_cmd() {  # PHASE(-load|-t) EXTRA...
  local flag="$1"; shift
  # shellcheck disable=SC2054  # hdrhistogram.percentiles=99,99.9,99.99 is one argument
  YCMD=(${CLIENT[@]+"${CLIENT[@]}"} java -Duser.timezone=UTC -cp "$YCSB_CP" site.ycsb.Client "$flag"
        -db "$YCSB_DB" -P "$ROOT/bench/ycsb/workloads/workload$WORKLOAD"
        -p redis.host=127.0.0.1 -p "redis.port=$PORT" -p "recordcount=$RECORDS"
        -p requestdistribution=zipfian -threads "$THREADS" -p measurementtype=hdrhistogram
        -p hdrhistogram.percentiles=99,99.9,99.99 -s -p status.interval=1 "$@")
}

for sys in "${SYSTEMS[@]}"; do
  dir="$RUN_DIR/$sys"
  base="$OUT/raw/$sys"
  server_start "$sys" "$PORT" "$dir" "$SLOG"
  pid="$SERVER_PID"
  log "$sys: loading $RECORDS records"
  ycsb_cmd -load -p operationcount=0
  "${YCMD[@]}" > "$base.load.out" 2> "$base.load.status" \
    || { tail -n 20 "$base.load.status" >&2; die "YCSB load against $sys failed"; }
  n="$(redis-cli -h 127.0.0.1 -p "$PORT" DBSIZE)"
  [ "$n" = "$RECORDS" ] || die "$sys holds $n keys after loading $RECORDS records"
  # Start from a quiet server with its persistence caught up: one rewrite / checkpoint of what
  # the load wrote (queued behind one the load itself set off, Redis auto-rewrite or Kavach's
  # checkpoint when its log fills), and let it finish.
  if is_kavach "$sys"; then trig="$KAVACH_TRIGGER"; else trig=BGREWRITEAOF; fi
  if is_kavach "$sys"; then first=BGSAVE; else first="BGREWRITEAOF"; fi
  log "$sys: $first after the load: $(redis-cli -h 127.0.0.1 -p "$PORT" "$first" 2>&1 | head -n1)"
  sleep 0.5
  quiet=""
  for ((i = 0; i < 12000; i++)); do
    if [ "$(info_field "$PORT" persistence aof_rewrite_in_progress)" != 1 ] \
       && [ "$(info_field "$PORT" persistence aof_rewrite_scheduled)" != 1 ] \
       && [ "$(info_field "$PORT" persistence checkpoint_in_progress)" != 1 ] \
       && [ "$(info_field "$PORT" persistence rdb_bgsave_in_progress)" != 1 ]; then
      quiet=1; break
    fi
    sleep 0.05
  done
  [ -n "$quiet" ] || log "warning: $sys still rewriting / checkpointing 600 s after the load; starting anyway"
  [ "$i" -eq 0 ] || log "$sys: waited at least $(( i * 50 )) ms for the load's rewrite / checkpoint to finish"
  mem="$(info_field "$PORT" memory used_memory_human)"
  log "$sys: $WARMUP s of warm-up, then $DURATION s of workload $WORKLOAD, $trig every $EVERY s (dataset: ${mem:-?} used memory, $(du -sh "$dir" | cut -f1) on disk)"
  pers_before="$(info_json "$PORT" persistence)"
  # t0: the end of the warm-up (the controller's clock and the buckets' zero).
  t0="$(python3 -c 'import sys; print(f"{float(sys.argv[1]) + int(sys.argv[2]):.6f}")' "$EPOCHREALTIME" "$WARMUP")"
  python3 "$HERE/resptool.py" ctl --port "$PORT" --command "$trig" --every "$EVERY" \
    --duration "$DURATION" --t0 "$t0" --out "$base.events.jsonl" 2>> "$SLOG" &
  CTL_PID=$!
  # Where the CPU goes, for the report's worst seconds (server threads, YCSB, the machine).
  python3 "$HERE/cpusample.py" --out "$base.cpu.jsonl" --server "$pid" \
    --client-match site.ycsb.Client 2>> "$SLOG" &
  SAMPLER_PID=$!
  ycsb_cmd -t -p operationcount=2000000000 -p "maxexecutiontime=$((DURATION + WARMUP))"
  show_cmd "${YCMD[@]}" > "$base.cmd"
  "${YCMD[@]}" > "$base.out" 2> "$base.status" \
    || { tail -n 20 "$base.status" >&2; die "YCSB run against $sys failed"; }
  kill "$SAMPLER_PID" 2>/dev/null || true
  SAMPLER_PID=""
  wait "$CTL_PID" || log "warning: the controller for $sys exited with an error (see $SLOG)"
  CTL_PID=""
  rewrites="$(info_field "$PORT" persistence aof_rewrites)"
  pers_after="$(info_json "$PORT" persistence)"
  server_stop "$sys" "$PORT" "$pid"
  domain=""
  if is_kavach "$sys"; then
    domain="$(pool_domain "$dir")"
    log "$sys: checkpoints $(printf '%s' "$pers_before" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("checkpoints","?"))') before the run, $(printf '%s' "$pers_after" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("checkpoints","?"))') after; pool domain: $domain"
  fi
  python3 -c 'import json, sys; print(json.dumps({"system": sys.argv[1], "t0": float(sys.argv[2]),
      "status": sys.argv[3], "events": sys.argv[4], "cpu": sys.argv[4].replace(".events.jsonl", ".cpu.jsonl"), "out": sys.argv[5], "trigger": sys.argv[6],
      "every": int(sys.argv[7]), "seconds": int(sys.argv[8]), "records": int(sys.argv[9]),
      "threads": int(sys.argv[10]), "workload": sys.argv[11], "used_memory": sys.argv[12],
      "warmup": int(sys.argv[17]),
      "aof_rewrites": sys.argv[13], "persistence_before": json.loads(sys.argv[14]),
      "persistence_after": json.loads(sys.argv[15]), "pool_domain": sys.argv[16]}))' \
      "$sys" "$t0" "$base.status" "$base.events.jsonl" \
      "$base.out" "$trig" "$EVERY" "$DURATION" "$RECORDS" "$THREADS" "$WORKLOAD" "$mem" "$rewrites" \
      "$pers_before" "$pers_after" "$domain" "$WARMUP" >> "$RUNS"
  rm -rf -- "$dir"
done

python3 "$HERE/timeline.py" "$OUT" | tee "$OUT/report.md"
log "wrote $OUT/report.md, $OUT/timeline.png, $RESULTS"
