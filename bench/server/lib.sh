# Shared by bench/server/run.sh, bench/server/timeline.sh and bench/ycsb/run.sh (sourced, not
# run). Expects ROOT and the log/die functions; starts and stops the servers under test.
#
# Systems (the names every script's --systems option takes):
#   redis-always     redis-server, AOF on, appendfsync always (equal durability to Kavach always)
#   redis-everysec   redis-server, AOF on, appendfsync everysec
#   redis-none       redis-server, no persistence at all (upper bound; never in a default list)
#   kavach-always    kavach serve --durability always
#   kavach-f64       kavach serve --durability frequency:64
# Redis runs with `--save ""` (no RDB snapshots: the AOF is its only persistence) and its default
# AOF settings otherwise (multi-part AOF, RDB preamble, auto-rewrite at 100% growth over 64 MB).
#
# Environment:
#   KAVACH_BIN          the kavach binary (default: $ROOT/target/release/kavach, built by
#                       `cargo build --release -p kavach`)
#   KAVACH_REV          what the binary was built from, for the report header (default: the
#                       working tree's git revision, "+ uncommitted changes in crates/" if any;
#                       set it when KAVACH_BIN is a copy built earlier than the tree's state)
#   KAVACH_EXTRA_ARGS   more arguments for `kavach serve` (word-split)
#   REDIS_EXTRA_ARGS    more arguments for redis-server (word-split)
#   BENCH_PORT          first TCP port to try (default 17379; the next free one is used)
#   BENCH_SHM_DIR       where data directories go (default /dev/shm)
#   BENCH_SERVER_CPU    if set, pin the server to these CPUs (taskset -c)
#   BENCH_CLIENT_CPU    if set, pin the load generator to these CPUs (taskset -c)

# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables set here are read by the scripts sourcing this
DOMAIN_NOTE="data on /dev/shm (tmpfs): not durable across reboot; Kavach pool domain adr emulated"
ALL_SYSTEMS="redis-always redis-everysec redis-none kavach-always kavach-f64"
SERVER_PIDS=()    # every server this script started (cleanup kills the ones still alive)
RUN_DIR=""        # temporary directory under BENCH_SHM_DIR holding every data directory

is_kavach() { case "$1" in kavach-*) return 0 ;; *) return 1 ;; esac; }

# check_systems "a,b,c": validate the names; find the kavach binary if one is a Kavach system.
# Sets SYSTEMS (array).
check_systems() {
  local s need_kavach=""
  IFS=', ' read -r -a SYSTEMS <<< "$1"
  [ "${#SYSTEMS[@]}" -gt 0 ] || die "no system given"
  for s in "${SYSTEMS[@]}"; do
    case " $ALL_SYSTEMS " in *" $s "*) ;; *) die "unknown system '$s' (known: $ALL_SYSTEMS)" ;; esac
    if is_kavach "$s"; then need_kavach=1; fi
  done
  command -v redis-server >/dev/null 2>&1 || die "redis-server not found (apt-get install redis-server)"
  command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (apt-get install redis-tools)"
  KAVACH_DESC="not used"
  if [ -n "$need_kavach" ]; then
    KAVACH_BIN="${KAVACH_BIN:-$ROOT/target/release/kavach}"
    [ -x "$KAVACH_BIN" ] || die "the Kavach server binary is missing: $KAVACH_BIN is not an executable.
  Build it with: cargo build --release -p kavach   (or set KAVACH_BIN=/path/to/kavach),
  or measure Redis alone with: --systems redis-always,redis-everysec"
    "$KAVACH_BIN" serve --help >/dev/null 2>&1 || die "$KAVACH_BIN has no working 'serve' command
  (\`$KAVACH_BIN serve --help\` failed): rebuild it with cargo build --release -p kavach,
  or measure Redis alone with: --systems redis-always,redis-everysec"
    local rev
    if [ -n "${KAVACH_REV:-}" ]; then
      rev="$KAVACH_REV"
    else
      rev="git $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
      if ! (cd "$ROOT" && git diff --quiet HEAD -- crates 2>/dev/null); then
        rev="$rev + uncommitted changes in crates/"
      fi
    fi
    KAVACH_DESC="$KAVACH_BIN ($rev, binary built $(date -u -r "$KAVACH_BIN" '+%Y-%m-%dT%H:%M:%SZ'))"
  fi
}

# show_cmd ARGS...: the command line, with empty or spaced arguments quoted.
show_cmd() {
  local a out=()
  for a in "$@"; do
    if [ -z "$a" ] || [[ "$a" =~ [[:space:]\'\"] ]]; then out+=("$(printf '%q' "$a")"); [ -n "$a" ] || out[-1]="''"; else out+=("$a"); fi
  done
  printf '%s\n' "${out[*]}"
}

cpu_model() {
  local m
  m="$(grep -m1 -E '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
  printf '%s\n' "${m:-$(uname -m)}"
}

# header TITLE: the lines every report starts with (stdout). Also sets META_JSON (one JSON
# object, "kind": "meta") for the results file.
header() {
  local title="$1" date mem load
  date="$(date -u '+%Y-%m-%dT%H:%M:%SZ')"
  mem="$(awk '/^MemTotal:/ { printf "%.0f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $title"
  echo "command:  $CMDLINE"
  echo "date:     $date"
  echo "machine:  $(nproc) cpus online (nproc), $(cpu_model), $mem, Linux $(uname -r), load average $load"
  echo "redis:    $(redis-server --version | sed 's/ sha=.*malloc=/ malloc=/; s/ bits=.*//')"
  echo "kavach:   $KAVACH_DESC"
  echo "domain:   $DOMAIN_NOTE"
  echo "pinning:  server ${BENCH_SERVER_CPU:-not pinned}, client ${BENCH_CLIENT_CPU:-not pinned}"
  META_JSON="$(TITLE="$title" CMDLINE="$CMDLINE" DATE="$date" CPU="$(cpu_model)" MEM="$mem" \
    LOAD="$load" REDIS="$(redis-server --version)" KAVACH="$KAVACH_DESC" DOMAIN="$DOMAIN_NOTE" \
    python3 -c '
import json, os
e = os.environ
print(json.dumps({"kind": "meta", "title": e["TITLE"], "command": e["CMDLINE"], "date": e["DATE"],
    "nproc": os.cpu_count(), "cpu": e["CPU"], "memory": e["MEM"], "kernel": os.uname().release,
    "load_average": e["LOAD"], "redis": e["REDIS"], "kavach": e["KAVACH"], "domain": e["DOMAIN"]}))')"
}

# make_run_dir PREFIX: the temporary directory for data directories (removed by cleanup).
make_run_dir() {
  local base="${BENCH_SHM_DIR:-/dev/shm}"
  [ -d "$base" ] || die "$base does not exist"
  RUN_DIR="$(mktemp -d "$base/$1.XXXXXX")"
}

# free_port: the first free TCP port on 127.0.0.1 from BENCH_PORT (default 17379) on.
free_port() {
  python3 - "${BENCH_PORT:-17379}" <<'EOF'
import socket, sys
p = int(sys.argv[1])
for port in range(p, p + 200):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is fine
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    sys.exit("no free port in %d..%d" % (p, p + 199))
EOF
}

# server_cmd SYSTEM PORT DIR: the command line that starts SYSTEM, in the array CMD.
server_cmd() {
  local sys="$1" port="$2" dir="$3" extra=()
  case "$sys" in
    redis-*)
      CMD=(redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --daemonize no
           --protected-mode no --logfile "")
      case "$sys" in
        redis-always) CMD+=(--appendonly yes --appendfsync always) ;;
        redis-everysec) CMD+=(--appendonly yes --appendfsync everysec) ;;
        redis-none) CMD+=(--appendonly no) ;;
      esac
      read -r -a extra <<< "${REDIS_EXTRA_ARGS:-}"
      ;;
    kavach-*)
      CMD=("$KAVACH_BIN" serve --dir "$dir" --port "$port" --bind 127.0.0.1)
      case "$sys" in
        kavach-always) CMD+=(--durability always) ;;
        kavach-f64) CMD+=(--durability frequency:64) ;;
      esac
      read -r -a extra <<< "${KAVACH_EXTRA_ARGS:-}"
      ;;
    *) die "unknown system '$sys'" ;;
  esac
  CMD+=(${extra[@]+"${extra[@]}"})
  if [ -n "${BENCH_SERVER_CPU:-}" ]; then CMD=(taskset -c "$BENCH_SERVER_CPU" "${CMD[@]}"); fi
}

# Prefix for load generators (taskset when BENCH_CLIENT_CPU is set).
client_prefix() {
  CLIENT=()
  if [ -n "${BENCH_CLIENT_CPU:-}" ]; then CLIENT=(taskset -c "$BENCH_CLIENT_CPU"); fi
}

# server_start SYSTEM PORT DIR LOGFILE: start SYSTEM in the background on a fresh DIR, wait
# until it answers PING. Sets SERVER_PID.
server_start() {
  local sys="$1" port="$2" dir="$3" logf="$4"
  rm -rf -- "$dir"
  mkdir -p -- "$dir"
  server_cmd "$sys" "$port" "$dir"
  log "start $sys: $(show_cmd "${CMD[@]}")"
  echo "== $(date -u '+%H:%M:%S') $(show_cmd "${CMD[@]}")" >> "$logf"
  "${CMD[@]}" >> "$logf" 2>&1 &
  SERVER_PID=$!
  SERVER_PIDS+=("$SERVER_PID")
  wait_ready "$sys" "$port" "$SERVER_PID" "$logf" "${READY_TIMEOUT:-120}"
}

# wait_ready SYSTEM PORT PID LOGFILE TIMEOUT_S: poll PING every 50 ms.
wait_ready() {
  local sys="$1" port="$2" pid="$3" logf="$4" timeout="$5" deadline reply
  deadline=$(( $(date +%s) + timeout ))
  while :; do
    if ! pid_alive "$pid"; then
      tail -n 15 "$logf" >&2
      die "$sys (pid $pid) exited before answering PING (log: $logf)"
    fi
    reply="$(redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null || true)"
    [ "$reply" = PONG ] && return 0
    [ "$(date +%s)" -lt "$deadline" ] || { tail -n 15 "$logf" >&2; die "$sys did not answer PING within ${timeout}s (last reply: '${reply}'; log: $logf)"; }
    sleep 0.05
  done
}

# pid_alive PID: running (a zombie, exited but not yet reaped, counts as gone).
pid_alive() {
  local st
  kill -0 "$1" 2>/dev/null || return 1
  st="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# wait_exit PID TIMEOUT_S: 0 once PID is gone, 1 on timeout. Reaps our own children.
wait_exit() {
  local pid="$1" timeout="$2" i
  for ((i = 0; i < timeout * 20; i++)); do
    if ! pid_alive "$pid"; then
      wait "$pid" 2>/dev/null || true
      return 0
    fi
    sleep 0.05
  done
  return 1
}

# forget_pid PID: PID is gone, cleanup need not look at it.
forget_pid() {
  local p keep=()
  for p in ${SERVER_PIDS[@]+"${SERVER_PIDS[@]}"}; do [ "$p" = "$1" ] || keep+=("$p"); done
  SERVER_PIDS=(${keep[@]+"${keep[@]}"})
}

# server_stop SYSTEM PORT PID: clean shutdown (SHUTDOWN command; SIGTERM, then SIGKILL as
# fallbacks, with a warning). Sets STOP_SECONDS (time from SHUTDOWN to exit).
server_stop() {
  local sys="$1" port="$2" pid="$3" t0
  t0=$EPOCHREALTIME
  timeout 300 redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN >/dev/null 2>&1 || true
  if ! wait_exit "$pid" 300; then
    log "warning: $sys (pid $pid) still running 300 s after SHUTDOWN; sending SIGTERM"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_exit "$pid" 30; then
      log "warning: $sys (pid $pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_exit "$pid" 10 || true
    fi
  fi
  STOP_SECONDS="$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$t0" "$EPOCHREALTIME")"
  forget_pid "$pid"
}

# server_kill PID: SIGKILL, as a crash.
server_kill() {
  kill -KILL "$1" 2>/dev/null || true
  wait_exit "$1" 30 || die "pid $1 survived SIGKILL"
  forget_pid "$1"
}

# pool_domain DIR: the "domain" line of `kavach pool info` for DIR/kavach.pool (read-only; run it
# on a stopped server's directory), or "?" if there is no pool or the command fails.
pool_domain() {
  local d
  [ -f "$1/kavach.pool" ] || { echo "?"; return 0; }
  d="$("$KAVACH_BIN" pool info "$1/kavach.pool" 2>/dev/null | sed -n 's/^domain  *//p' | head -n1)" || true
  printf '%s\n' "${d:-?}"
}

# info_field PORT SECTION FIELD: one value of INFO SECTION (empty if absent).
info_field() {
  redis-cli -h 127.0.0.1 -p "$1" INFO "$2" 2>/dev/null | tr -d '\r' | sed -n "s/^$3://p" | head -n1
}

# info_json PORT SECTION: INFO SECTION as one JSON object ({} if the server does not answer).
info_json() {
  redis-cli -h 127.0.0.1 -p "$1" INFO "$2" 2>/dev/null | python3 -c '
import json, sys
d = {}
for line in sys.stdin.read().splitlines():
    k, sep, v = line.strip().partition(":")
    if sep and not k.startswith("#"):
        d[k] = v
print(json.dumps(d))' || echo '{}'
}

# cleanup_servers: SIGTERM, then SIGKILL, every server still running; remove RUN_DIR.
cleanup_servers() {
  local p
  for p in ${SERVER_PIDS[@]+"${SERVER_PIDS[@]}"}; do
    if pid_alive "$p"; then
      log "cleanup: stopping leftover server pid $p"
      kill -TERM "$p" 2>/dev/null || true
      wait_exit "$p" 20 || { kill -KILL "$p" 2>/dev/null || true; wait_exit "$p" 5 || true; }
    fi
  done
  SERVER_PIDS=()
  if [ -n "$RUN_DIR" ] && [ -d "$RUN_DIR" ]; then rm -rf -- "$RUN_DIR"; fi
}
