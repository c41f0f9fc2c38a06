#!/usr/bin/env bash
# Redis 7.0.15's own test suite, in external mode, against `kavach serve` and against a real
# redis-server, side by side. Run with --help for the options.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/redis-suite"
REDIS_VERSION=7.0.15
DEFAULT_UNITS="unit/type/string unit/type/incr unit/type/hash unit/type/list unit/type/set
unit/type/zset unit/expire unit/keyspace unit/multi unit/scan unit/pubsub unit/protocol"
# Tests of Redis internals that a server other than Redis cannot answer: refused by tag (the
# same tags for both servers, so the counts compare). They are listed apart in the report.
DENY_TAGS="needs:debug needs:repl needs:config-maxmemory needs:save needs:reset needs:latency
needs:pfdebug needs:other-server"

usage() {
  cat <<EOF
Usage: bench/redis-suite/run.sh [--kavach | --redis | --both] [options]

Runs Redis ${REDIS_VERSION}'s own test suite (Debian's source package, fetched with
\`apt-get source redis\` into a cache, never vendored) in external mode:
  ./runtest --host 127.0.0.1 --port P --single unit/X --durable --tags -needs:debug ...
once per test file, each against a fresh server started (and stopped) by this script:
  --kavach   \`kavach serve\` on a temporary directory (\$KAVACH_BIN, else target/release/kavach,
             built with cargo if absent; extra serve options in \$KAVACH_SERVE_ARGS)
  --redis    a real redis-server (the baseline; installed with apt-get if missing)
  --both     both, one after the other (the default)

Options:
  --units "unit/a unit/b"  test files to run (default: the twelve of issue 18:
                           $(echo $DEFAULT_UNITS))
  --timeout S              seconds one test file may take before it is killed (default 600)
  --out DIR                where logs and reports go (default target/redis-suite)
  --json                   print the JSON report on stdout instead of the Markdown one
  --update-doc FILE        replace the section between the markers
                           <!-- redis-suite:begin --> and <!-- redis-suite:end --> of FILE
                           (e.g. docs/server.md) with the Markdown report
  --lenient-setup          run a copy of the suite whose external-mode setup of a test group
                           ignores errors from \`FUNCTION FLUSH\` (sent before every group) and
                           from the \`CONFIG GET/SET\` of the group's settings (encoding sizes
                           such as list-max-ziplist-size); the report says so. Off by default:
                           while these are refused, runtest stops the file (or group) there.
  --singledb               pass runtest's own --singledb: no SELECT 9 before each test group
                           (tests tagged singledb:skip are then skipped); the report says so
  --report-only            run nothing: write the reports (and --update-doc) from the runs
                           recorded in OUT/runs.tsv
  -h, --help               this text

Tests tagged ${DENY_TAGS//$'\n'/ } are skipped by runtest's
--tags option (they need DEBUG, replication, or a server of its own), on both servers alike;
the report counts them apart from failures. A test file that hangs (a command the server does
not answer) is killed after --timeout and reported as "timeout" with what it passed so far.

Reports: OUT/report.md and OUT/report.json (passed / failed / skipped per file per server, the
failing tests with their error lines, the skipped ones); each file's runtest log in OUT/logs/.
The suite is cached in \${REDIS_SUITE_CACHE:-\${XDG_CACHE_HOME:-target}/redis-suite-src}.
EOF
}

log() { printf 'redis-suite: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

SIDES="kavach redis"
UNITS="$DEFAULT_UNITS"
TIMEOUT=600
OUT="$ROOT/target/redis-suite"
JSON=0
UPDATE_DOC=""
LENIENT=0
SINGLEDB=0
REPORT_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kavach) SIDES="kavach" ;;
    --redis) SIDES="redis" ;;
    --both) SIDES="kavach redis" ;;
    --units) shift; UNITS="${1:?--units needs a list}" ;;
    --timeout) shift; TIMEOUT="${1:?--timeout needs seconds}" ;;
    --out) shift; OUT="${1:?--out needs a directory}" ;;
    --json) JSON=1 ;;
    --update-doc) shift; UPDATE_DOC="${1:?--update-doc needs a file}" ;;
    --lenient-setup) LENIENT=1 ;;
    --singledb) SINGLEDB=1 ;;
    --report-only) REPORT_ONLY=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
  shift
done
case "$TIMEOUT" in ''|*[!0-9]*) die "--timeout takes whole seconds" ;; esac
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"

# --- the suite: Debian's source package of Redis 7.0.15 ---------------------------------------
if [ -n "${REDIS_SUITE_CACHE:-}" ]; then
  CACHE="$REDIS_SUITE_CACHE"
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  CACHE="$XDG_CACHE_HOME/kavach/redis-suite-src"
else
  CACHE="$ROOT/target/redis-suite-src"
fi
SUITE="$CACHE/redis-$REDIS_VERSION"

have_deb_src() {
  # A deb-src entry for bookworm in either format (one-line .list or deb822 .sources).
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && grep -qE '^[[:space:]]*deb-src[[:space:]].*[[:space:]]bookworm([[:space:]]|$)' "$f" && return 0
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    python3 - "$f" <<'PY' && return 0
import sys
text = open(sys.argv[1]).read()
for stanza in text.split("\n\n"):
    fields = {}
    for line in stanza.splitlines():
        if ":" in line and not line.lstrip().startswith("#"):
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.split()
    if "deb-src" in fields.get("types", []) and "bookworm" in fields.get("suites", []) \
            and fields.get("enabled", ["yes"])[0] != "no":
        sys.exit(0)
sys.exit(1)
PY
  done
  return 1
}

fetch_suite() {
  [ -x "$SUITE/runtest" ] && return 0
  command -v apt-get >/dev/null || die "apt-get is needed to fetch Debian's source package of redis"
  if ! have_deb_src; then
    log "adding a deb-src entry for bookworm (/etc/apt/sources.list.d/kavach-bookworm-src.sources)"
    cat > /etc/apt/sources.list.d/kavach-bookworm-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  fi
  log "apt-get update"
  apt-get update -q >&2 || die "apt-get update failed"
  command -v dpkg-source >/dev/null || apt-get install -y -q dpkg-dev >&2 \
    || die "cannot install dpkg-dev (needed by apt-get source)"
  local version
  version="$(apt-cache showsrc redis 2>/dev/null | awk '/^Version:/ {print $2}' \
              | grep -F ":$REDIS_VERSION-" | sort -V | tail -1)"
  [ -n "$version" ] || die "no source package of redis $REDIS_VERSION in apt's sources"
  mkdir -p "$CACHE"
  log "apt-get source redis=$version into $CACHE"
  (cd "$CACHE" && apt-get source -q "redis=$version" >&2) || die "apt-get source redis failed"
  [ -x "$SUITE/runtest" ] || die "the source package did not unpack into $SUITE"
}

summarize() {
  python3 "$HERE/summarize.py" --runs "$OUT/runs.tsv" --out "$OUT" \
    --deny-tags "$(echo $DENY_TAGS)" --timeout "$TIMEOUT" \
    ${UPDATE_DOC:+--update-doc "$UPDATE_DOC"}
  if [ "$JSON" = 1 ]; then cat "$OUT/report.json"; else cat "$OUT/report.md"; fi
}
if [ "$REPORT_ONLY" = 1 ]; then
  [ -f "$OUT/runs.tsv" ] || die "no runs recorded in $OUT/runs.tsv"
  TIMEOUT="$(cat "$OUT/timeout" 2>/dev/null || echo "$TIMEOUT")"
  summarize
  exit 0
fi

fetch_suite
command -v tclsh >/dev/null || { log "installing tcl"; apt-get install -y -q tcl >&2; } \
  || die "cannot install tcl"

RUN_SUITE="$SUITE"
if [ "$LENIENT" = 1 ]; then
  # A copy in which the external-mode setup of each test group (run_external_server_test)
  # ignores errors from FUNCTION FLUSH and from CONFIG GET/SET of the group's settings.
  RUN_SUITE="$CACHE/lenient-redis-$REDIS_VERSION"
  rm -rf "$RUN_SUITE"
  cp -a "$SUITE" "$RUN_SUITE"
  server_tcl="$RUN_SUITE/tests/support/server.tcl"
  sed -i -e '/^proc run_external_server_test /,/^}/ {
      s/^\( *\)r function flush$/\1catch {r function flush}/
      s/^\( *\)\(dict set saved_config .*\)$/\1catch {\2}/
      s/^\( *\)r config set \$param \$val$/\1catch {r config set $param $val}/
    }' "$server_tcl"
  [ "$(grep -c '^ *catch {\(r function flush\|dict set saved_config\|r config set \$param\)' "$server_tcl")" = 4 ] \
    || die "--lenient-setup: tests/support/server.tcl is not as expected (4 setup lines to relax)"
fi

# --- the servers --------------------------------------------------------------------------------
SERVER_PID=""
SERVER_PORT=""
SERVER_DIR=""
TMP="$(mktemp -d "${TMPDIR:-/tmp}/kavach-redis-suite.XXXXXX")"

stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    local i
    for i in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
  [ -n "$SERVER_DIR" ] && rm -rf "$SERVER_DIR"
  SERVER_DIR=""
}
RUNTEST_PID=""
stop_runtest() {
  # timeout passes the signal on to runtest's process group.
  if [ -n "$RUNTEST_PID" ]; then
    kill -TERM "$RUNTEST_PID" 2>/dev/null || true
    wait "$RUNTEST_PID" 2>/dev/null || true
    RUNTEST_PID=""
  fi
}
cleanup() {
  stop_runtest
  stop_server
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_listening() { # wait_listening PORT PID: until PORT accepts, or the server died
  local i
  for i in $(seq 600); do
    kill -0 "$2" 2>/dev/null || return 1
    if python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$1" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

KAVACH=""
kavach_binary() {
  [ -n "$KAVACH" ] && return 0
  if [ -n "${KAVACH_BIN:-}" ]; then
    KAVACH="$KAVACH_BIN"
  else
    KAVACH="$ROOT/target/release/kavach"
    if [ ! -x "$KAVACH" ]; then
      log "cargo build --release -p kavach"
      (cd "$ROOT" && cargo build --release -p kavach >&2) || die "cargo build failed"
    fi
  fi
  [ -x "$KAVACH" ] || die "no kavach binary at $KAVACH"
  # Which Kavach the report is about.
  printf '%s (work tree at %s)\n' "${KAVACH#"$ROOT"/}" \
    "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" > "$OUT/kavach-binary"
}

start_server() { # start_server SIDE LOG: sets SERVER_PID and SERVER_PORT
  SERVER_DIR="$(mktemp -d "$TMP/server.XXXXXX")"
  SERVER_PORT="$(free_port)"
  if [ "$1" = kavach ]; then
    kavach_binary
    # shellcheck disable=SC2086  # KAVACH_SERVE_ARGS is a list of words
    "$KAVACH" serve --dir "$SERVER_DIR/store" --port "$SERVER_PORT" ${KAVACH_SERVE_ARGS:-} \
      </dev/null >"$2" 2>&1 &
  else
    command -v redis-server >/dev/null || { log "installing redis-server"; apt-get install -y -q redis-server >&2; } \
      || die "cannot install redis-server"
    redis-server --port "$SERVER_PORT" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize no --dir "$SERVER_DIR" </dev/null >"$2" 2>&1 &
  fi
  SERVER_PID=$!
  wait_listening "$SERVER_PORT" "$SERVER_PID" || { tail -5 "$2" >&2; die "$1 did not start listening"; }
}

# --- the runs -------------------------------------------------------------------------------------
TAG_ARGS=()
for t in $DENY_TAGS; do TAG_ARGS+=(--tags "-$t"); done
MODE="strict"
[ "$LENIENT" = 1 ] && MODE="lenient-setup"
if [ "$SINGLEDB" = 1 ]; then
  TAG_ARGS+=(--singledb)
  [ "$MODE" = strict ] && MODE="singledb" || MODE="$MODE+singledb"
fi

# OUT/runs.tsv: one line per (server, file) last run; a run replaces its own line only, so
# `--kavach` after `--redis` still reports both side by side.
RUNS="$OUT/runs.tsv"
touch "$RUNS"
echo "$TIMEOUT" > "$OUT/timeout"
for side in $SIDES; do
  for unit in $UNITS; do
    name="${unit//\//_}"
    test_log="$OUT/logs/$side-$name.log"
    server_log="$OUT/logs/$side-$name.server.log"
    [ -f "$RUN_SUITE/tests/$unit.tcl" ] || die "no test file tests/$unit.tcl in the suite"
    start_server "$side" "$server_log"
    log "$side: $unit (port $SERVER_PORT, timeout ${TIMEOUT}s)"
    started=$(date +%s)
    # timeout kills runtest's whole process group: the test client it forks goes with it. It
    # runs in the background so that a signal to this script is handled at once (cleanup
    # stops it, see stop_runtest).
    set +e
    (cd "$RUN_SUITE" && exec timeout -k 10 "$TIMEOUT" ./runtest --host 127.0.0.1 \
        --port "$SERVER_PORT" --single "$unit" --durable --clients 1 --timeout "$TIMEOUT" \
        "${TAG_ARGS[@]}" </dev/null >"$test_log" 2>&1) &
    RUNTEST_PID=$!
    wait "$RUNTEST_PID"
    code=$?
    RUNTEST_PID=""
    set -e
    seconds=$(( $(date +%s) - started ))
    alive=1
    kill -0 "$SERVER_PID" 2>/dev/null || alive=0
    stop_server
    awk -F'\t' -v s="$side" -v u="$unit" '!($1 == s && $2 == u)' "$RUNS" > "$RUNS.new"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$side" "$unit" "$code" "$seconds" "$alive" "$MODE" \
      "$test_log" >> "$RUNS.new"
    mv "$RUNS.new" "$RUNS"
    log "$side: $unit: exit $code after ${seconds}s$([ $alive = 1 ] || echo ', the server died')"
  done
done

summarize
