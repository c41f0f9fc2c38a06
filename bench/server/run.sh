#!/usr/bin/env bash
# Server benchmark: Kavach's Redis-protocol server (`kavach serve`) vs Redis 7, same machine,
# same run, data on /dev/shm.
#
#   bench/server/run.sh [--quick] [--out DIR] [--rounds R] [--systems LIST] [--phases LIST]
#                       [--seconds S] [--keys N] [--value-size B] [--restart-systems LIST]
#
#   --quick            smoke run: 1 round, tiny fixed request counts, 100,000 keys for restart
#   --out DIR          results directory (default target/bench/server)
#   --rounds R         rounds; the order of the systems is reversed every other round
#                      (default 3; --quick: 1)
#   --systems LIST     comma-separated, from redis-always, redis-everysec, redis-none,
#                      kavach-always, kavach-f64
#                      (default redis-always,redis-everysec,kavach-always,kavach-f64)
#   --phases LIST      rb (redis-benchmark cells), restart (restart times); default rb,restart
#   --seconds S        target duration of each redis-benchmark cell (default 6; a 1 s probe
#                      run measures the rate first and -n is set to rate x S)
#   --keys N           keys loaded before the restart measurements (default 1000000;
#                      --quick: 100000)
#   --value-size B     value size of those keys (default 64)
#   --restart-systems LIST   systems whose restart is measured (default: the ones of
#                      redis-always, kavach-always that --systems lists)
#
# Phase rb: for each system, value size (64, 1024 B) and pipeline depth (-P 1, 16): a fresh
# server on a fresh data directory, then redis-benchmark -t set and -t get, 50 clients
# (-c 50), random keys in a keyspace of 100,000 (-r; --quick: 10,000), --csv parsed. The
# server's CPU time per cell is read from /proc. Then a clean shutdown.
#
# Phase restart: for each restart system, state and way of stopping: a fresh server, N keys
# loaded with one pipelined stream of SET commands (redis-cli --pipe), then
#   state "log": nothing more (Redis runs with --auto-aof-rewrite-percentage 0 here, so its AOF
#                holds every SET: its worst case; Kavach as it left itself after the load);
#   state "compacted": Redis BGREWRITEAOF (waited for), Kavach SAVE: each side's best case;
# then a clean stop (SHUTDOWN) or a crash (SIGKILL), and a restart on the same directory,
# timed from the exec of the server to the first accepted connection, the first PONG and
# DBSIZE = N (bench/server/resptool.py probe); 1,000 sampled values are then checked.
#
# Output: a header (command, date, machine, domain), progress on stderr, and the markdown
# report of bench/server/summarize.py (also DIR/report.md). DIR/results.jsonl holds every
# measurement as a JSON line; DIR/servers.log the servers' output. Data directories live in
# a temporary directory under /dev/shm, removed on exit; every server started is stopped.
# Environment: see bench/server/lib.sh (KAVACH_BIN, KAVACH_EXTRA_ARGS, REDIS_EXTRA_ARGS,
# BENCH_PORT, BENCH_SHM_DIR, BENCH_SERVER_CPU, BENCH_CLIENT_CPU).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/server"
CMDLINE="bench/server/run.sh $*"

log() { printf '[server-bench] %s\n' "$*" >&2; }
die() { printf '[server-bench] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
# shellcheck source=bench/server/lib.sh
source "$HERE/lib.sh"

OUT="$ROOT/target/bench/server"
QUICK=""
ROUNDS=""
SYSTEMS_ARG="redis-always,redis-everysec,kavach-always,kavach-f64"
PHASES="rb,restart"
CELL_SECONDS=6
KEYS=""
VALUE_SIZE=64
RESTART_SYSTEMS=""
need() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --out) need "$@"; OUT="$2"; shift ;;
    --rounds) need "$@"; ROUNDS="$2"; shift ;;
    --systems) need "$@"; SYSTEMS_ARG="$2"; shift ;;
    --phases) need "$@"; PHASES="$2"; shift ;;
    --seconds) need "$@"; CELL_SECONDS="$2"; shift ;;
    --keys) need "$@"; KEYS="$2"; shift ;;
    --value-size) need "$@"; VALUE_SIZE="$2"; shift ;;
    --restart-systems) need "$@"; RESTART_SYSTEMS="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
if [ -n "$QUICK" ]; then ROUNDS="${ROUNDS:-1}"; KEYS="${KEYS:-100000}"; else ROUNDS="${ROUNDS:-3}"; KEYS="${KEYS:-1000000}"; fi
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$ROUNDS'"
[[ "$KEYS" =~ ^[1-9][0-9]*$ ]] || die "--keys must be a positive integer, got '$KEYS'"
[[ "$VALUE_SIZE" =~ ^[1-9][0-9]*$ ]] || die "--value-size must be a positive integer"
[[ "$CELL_SECONDS" =~ ^[1-9][0-9]*$ ]] || die "--seconds must be a positive integer"
DO_RB=""; DO_RESTART=""
IFS=', ' read -r -a _phases <<< "$PHASES"
for p in "${_phases[@]}"; do
  case "$p" in rb) DO_RB=1 ;; restart) DO_RESTART=1 ;; *) die "unknown phase '$p' (rb, restart)" ;; esac
done
command -v redis-benchmark >/dev/null 2>&1 || die "redis-benchmark not found (apt-get install redis-tools)"

check_systems "$SYSTEMS_ARG"
RB_SYSTEMS=("${SYSTEMS[@]}")
if [ -z "$RESTART_SYSTEMS" ]; then
  RESTART_SYSTEMS=""
  for s in "${SYSTEMS[@]}"; do
    case "$s" in redis-always|kavach-always) RESTART_SYSTEMS="$RESTART_SYSTEMS,$s" ;; esac
  done
  RESTART_SYSTEMS="${RESTART_SYSTEMS#,}"
fi
if [ -n "$DO_RESTART" ]; then
  [ -n "$RESTART_SYSTEMS" ] || die "phase restart needs redis-always or kavach-always in --systems (or --restart-systems)"
  check_systems "$SYSTEMS_ARG,$RESTART_SYSTEMS"
  IFS=', ' read -r -a RS_SYSTEMS <<< "$RESTART_SYSTEMS"
fi

mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
SLOG="$OUT/servers.log"
: > "$RESULTS"
: > "$SLOG"
make_run_dir kavach-serverbench
trap cleanup_servers EXIT
trap 'exit 130' INT TERM
PORT="$(free_port)"
client_prefix

header "Server benchmark: Kavach serve vs Redis 7 (redis-benchmark, restart)" > "$OUT/header.txt"
cat "$OUT/header.txt"
echo "$META_JSON" >> "$RESULTS"
echo "mode:     ${QUICK:+quick, }rounds $ROUNDS, systems ${SYSTEMS_ARG}, phases $PHASES, port $PORT, data in $RUN_DIR"
echo

now() { printf '%s\n' "$EPOCHREALTIME"; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }
# proc_cpu PID: user+system CPU seconds of PID so far.
proc_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.3f\n", ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# --- phase rb ---------------------------------------------------------------------------
CLIENTS=50
if [ -n "$QUICK" ]; then KEYSPACE=10000; else KEYSPACE=100000; fi

# rb_once SYSTEM PID N SIZE PIPE TEST: run redis-benchmark once; print its CSV.
rb_once() {
  local n="$3" size="$4" pipe="$5" test="$6"
  ${CLIENT[@]+"${CLIENT[@]}"} redis-benchmark -h 127.0.0.1 -p "$PORT" -c "$CLIENTS" -n "$n" \
    -d "$size" -P "$pipe" -r "$KEYSPACE" -t "$test" --csv 2>>"$SLOG" \
    || die "redis-benchmark failed against $1 (-t $test -d $size -P $pipe -n $n)"
}

rb_cell() {
  local sys="$1" pid="$2" round="$3" size="$4" pipe="$5" test="$6" n csv rps cpu0 cpu1 line
  if [ -n "$QUICK" ]; then
    if [ "$pipe" -gt 1 ]; then n=100000; else n=20000; fi
  else
    # Probe (also a warm-up): about 1 s, then size -n for CELL_SECONDS.
    if [ "$pipe" -gt 1 ]; then n=400000; else n=60000; fi
    csv="$(rb_once "$sys" "$pid" "$n" "$size" "$pipe" "$test")"
    rps="$(printf '%s\n' "$csv" | python3 "$HERE/resptool.py" rb-csv | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["rps"])')"
    n="$(python3 -c "import sys; r, s, lo = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]); print(max(lo, int(r * s) // 1000 * 1000))" "$rps" "$CELL_SECONDS" "$n")"
  fi
  cpu0="$(proc_cpu "$pid")"
  csv="$(rb_once "$sys" "$pid" "$n" "$size" "$pipe" "$test")"
  cpu1="$(proc_cpu "$pid")"
  line="$(printf '%s\n' "$csv" | python3 "$HERE/resptool.py" rb-csv kind=rb "system=$sys" \
            "round=$round" "size=$size" "pipeline=$pipe" "clients=$CLIENTS" "n=$n" \
            "keyspace=$KEYSPACE" "server_cpu_s=$(python3 -c "print(round($cpu1 - $cpu0, 3))")")" \
    || die "could not parse redis-benchmark output: $csv"
  echo "$line" >> "$RESULTS"
  printf '%s\n' "$line" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
print("  %-15s %-3s d=%-4d P=%-2d %10.0f ops/s  p50 %.3f  p99 %.3f ms  (n=%d, %.1f s, server cpu %.1f us/op)" % (
    r["system"], r["test"], r["size"], r["pipeline"], r["rps"], r["p50_latency_ms"],
    r["p99_latency_ms"], r["n"], r["n"] / r["rps"], r["server_cpu_s"] * 1e6 / r["n"]))' >&2
}

if [ -n "$DO_RB" ]; then
  for ((round = 1; round <= ROUNDS; round++)); do
    order=("${RB_SYSTEMS[@]}")
    if (( round % 2 == 0 )); then
      order=(); for ((i = ${#RB_SYSTEMS[@]} - 1; i >= 0; i--)); do order+=("${RB_SYSTEMS[$i]}"); done
    fi
    for sys in "${order[@]}"; do
      log "round $round/$ROUNDS: redis-benchmark against $sys"
      for size in 64 1024; do
        for pipe in 1 16; do
          dir="$RUN_DIR/$sys-r$round-d$size-P$pipe"
          server_start "$sys" "$PORT" "$dir" "$SLOG"
          pid="$SERVER_PID"
          rb_cell "$sys" "$pid" "$round" "$size" "$pipe" set
          rb_cell "$sys" "$pid" "$round" "$size" "$pipe" get
          rewrites="$(info_field "$PORT" persistence aof_rewrites)"
          [ -z "$rewrites" ] || log "  ($sys: $rewrites AOF rewrites during these cells)"
          server_stop "$sys" "$PORT" "$pid"
          rm -rf -- "$dir"
        done
      done
    done
  done
fi

# --- phase restart ----------------------------------------------------------------------
# load_keys SYSTEM: N SETs in one pipelined stream; prints the seconds it took.
load_keys() {
  local t0 t1 out
  t0="$(now)"
  out="$(python3 "$HERE/resptool.py" gen-load --keys "$KEYS" --value-size "$VALUE_SIZE" \
           | ${CLIENT[@]+"${CLIENT[@]}"} redis-cli -h 127.0.0.1 -p "$PORT" --pipe 2>&1)" \
    || die "loading $KEYS keys into $1 failed: $out"
  t1="$(now)"
  printf '%s\n' "$out" | grep -q "errors: 0, replies: $KEYS" \
    || die "loading $KEYS keys into $1: unexpected redis-cli --pipe result: $(printf '%s' "$out" | tail -n1)"
  elapsed "$t0" "$t1"
}

# compact SYSTEM: Redis BGREWRITEAOF (waited for), Kavach SAVE. Prints the seconds.
compact() {
  local sys="$1" t0 r i
  t0="$(now)"
  if is_kavach "$sys"; then
    r="$(timeout 600 redis-cli -h 127.0.0.1 -p "$PORT" SAVE 2>&1)" || die "SAVE on $sys failed: $r"
    [ "$r" = OK ] || die "SAVE on $sys answered '$r'"
  else
    r="$(redis-cli -h 127.0.0.1 -p "$PORT" BGREWRITEAOF 2>&1)" || die "BGREWRITEAOF failed: $r"
    for ((i = 0; ; i++)); do
      if [ "$(info_field "$PORT" persistence aof_rewrite_in_progress)" = 0 ] \
         && [ "$(info_field "$PORT" persistence aof_rewrite_scheduled)" = 0 ]; then break; fi
      [ "$i" -lt 12000 ] || die "AOF rewrite on $sys did not finish in 600 s"
      sleep 0.05
    done
    [ "$(info_field "$PORT" persistence aof_last_bgrewrite_status)" = ok ] || die "AOF rewrite on $sys failed"
  fi
  elapsed "$t0" "$(now)"
}

restart_case() {
  local sys="$1" round="$2" state="$3" how="$4" dir load_s compact_s="" stop_s="" bytes files
  local res pid i check
  dir="$RUN_DIR/restart-$sys-r$round-$state-$how"
  if [ "${sys%%-*}" = redis ]; then
    REDIS_EXTRA_ARGS="${REDIS_EXTRA_ARGS:-} --auto-aof-rewrite-percentage 0" server_start "$sys" "$PORT" "$dir" "$SLOG"
  else
    server_start "$sys" "$PORT" "$dir" "$SLOG"
  fi
  pid="$SERVER_PID"
  load_s="$(load_keys "$sys")"
  [ "$(redis-cli -h 127.0.0.1 -p "$PORT" DBSIZE)" = "$KEYS" ] || die "$sys: DBSIZE is not $KEYS after the load"
  if [ "$state" = compacted ]; then compact_s="$(compact "$sys")"; fi
  if [ "$how" = clean ]; then
    server_stop "$sys" "$PORT" "$pid"
    stop_s="$STOP_SECONDS"
  else
    server_kill "$pid"
  fi
  bytes="$(du -sb "$dir" | cut -f1)"
  files="$(cd "$dir" && find . -type f -printf '%P:%s ' | head -c 600)"
  # Restart under the probe: it execs the server (same pid as $!) and times readiness.
  res="$dir.probe.json"
  rm -f -- "$res"
  if [ "${sys%%-*}" = redis ]; then
    REDIS_EXTRA_ARGS="${REDIS_EXTRA_ARGS:-} --auto-aof-rewrite-percentage 0" server_cmd "$sys" "$PORT" "$dir"
  else
    server_cmd "$sys" "$PORT" "$dir"
  fi
  log "restart $sys ($state, after $how stop): $(show_cmd "${CMD[@]}")"
  echo "== $(date -u '+%H:%M:%S') restart: $(show_cmd "${CMD[@]}")" >> "$SLOG"
  python3 "$HERE/resptool.py" probe --port "$PORT" --expect "$KEYS" --out "$res" --timeout 600 \
    -- "${CMD[@]}" >> "$SLOG" 2>&1 &
  pid=$!
  SERVER_PIDS+=("$pid")
  for ((i = 0; ; i++)); do
    [ -f "$res" ] && break
    [ "$i" -lt 13000 ] || die "restart probe of $sys gave no result in 650 s"
    sleep 0.05
  done
  if ! python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("ready_ms") is not None else 1)' "$res"; then
    tail -n 15 "$SLOG" >&2
    die "$sys did not come back after a $how stop: $(cat "$res")"
  fi
  check="$(python3 "$HERE/resptool.py" check --port "$PORT" --keys "$KEYS" --value-size "$VALUE_SIZE")" \
    || die "$sys lost or changed data across a $how restart: $check"
  server_stop "$sys" "$PORT" "$pid"
  python3 - "$res" "$check" "$sys" "$round" "$state" "$how" "$KEYS" "$VALUE_SIZE" "$load_s" \
    "$compact_s" "$stop_s" "$bytes" "$files" <<'EOF' >> "$RESULTS"
import json, sys
res, check, system, rnd, state, how, keys, vsize, load_s, compact_s, stop_s, nbytes, files = sys.argv[1:]
r = json.load(open(res))
c = json.loads(check)
print(json.dumps({
    "kind": "restart", "system": system, "round": int(rnd), "state": state, "how": how,
    "keys": int(keys), "value_size": int(vsize), "load_s": float(load_s),
    "compact_s": float(compact_s) if compact_s else None,
    "shutdown_s": float(stop_s) if stop_s else None,
    "data_bytes": int(nbytes), "files": files.strip(),
    "accept_ms": r["accept_ms"], "pong_ms": r["pong_ms"], "ready_ms": r["ready_ms"],
    "loading_replies": r["loading_replies"], "checked": c["checked"], "bad": c["bad"]}))
EOF
  tail -n1 "$RESULTS" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
print("  %-14s %-9s %-5s load %.2f s, data %.1f MiB, restart: accept %.1f ms, PONG %.1f ms, DBSIZE ok %.1f ms" % (
    r["system"], r["state"], r["how"], r["load_s"], r["data_bytes"] / 1048576,
    r["accept_ms"] or -1, r["pong_ms"] or -1, r["ready_ms"] or -1))' >&2
  rm -rf -- "$dir" "$res"
}

if [ -n "$DO_RESTART" ]; then
  for ((round = 1; round <= ROUNDS; round++)); do
    order=("${RS_SYSTEMS[@]}")
    if (( round % 2 == 0 )); then
      order=(); for ((i = ${#RS_SYSTEMS[@]} - 1; i >= 0; i--)); do order+=("${RS_SYSTEMS[$i]}"); done
    fi
    for sys in "${order[@]}"; do
      log "round $round/$ROUNDS: restart times of $sys with $KEYS keys of $VALUE_SIZE B"
      for state in log compacted; do
        for how in clean kill9; do
          restart_case "$sys" "$round" "$state" "$how"
        done
      done
    done
  done
fi

python3 "$HERE/summarize.py" "$RESULTS" | tee "$OUT/report.md"
log "wrote $OUT/report.md; measurements in $RESULTS, server output in $SLOG"
