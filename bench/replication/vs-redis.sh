#!/usr/bin/env bash
# Replicated SET, Kavach against Redis 7, in one run (issue 25): Kavach with 1 and 2 backups
# (W=1, W=2: a SET is acknowledged after that many backups persisted it) against Redis with 1
# and 2 replicas and `WAIT 1 0` / `WAIT 2 0` after each SET (the nearest Redis equivalent: WAIT
# returns once that many replicas have received the write). Every Redis instance runs with
# `appendonly yes, appendfsync always`; every pool and AOF lives in a temporary directory on
# /dev/shm. The same Go client (bench/soak/cmd/vsredis) drives both, with the same connection
# counts and 64 B values; one operation is a SET (Kavach) or a SET plus its WAIT (Redis).
#
#   bench/replication/vs-redis.sh [--seconds S] [--rounds R] [--conns LIST] [--out DIR]
#
#   --seconds S   measured seconds per cell, after 1 s of warm-up (default 5)
#   --rounds R    rounds; the order Kavach/Redis alternates between rounds (default 2)
#   --conns LIST  client connection counts (default 1,16)
#   --out DIR     results (default target/bench/vs-redis-<UTC date-time>)
#
# Prints, and writes to DIR/report.md, a markdown table: median ops/s and p50/p99 latency over
# the rounds per cell, and Kavach/Redis ratios; DIR/results.jsonl has every measurement.
# Records the CPU model (lscpu), the date, the commit and the load (uptime) before and after.
# Exit status: 0 measured, 1 a client saw a wrong reply, 2 could not run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { printf '[vs-redis] %s\n' "$*" >&2; }
die() { printf '[vs-redis] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

SECONDS_PER=5 ROUNDS=2 CONNS=1,16 OUTDIR=""
need() { [ $# -ge 2 ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) need "$@"; SECONDS_PER="$2"; shift ;;
    --rounds) need "$@"; ROUNDS="$2"; shift ;;
    --conns) need "$@"; CONNS="$2"; shift ;;
    --out) need "$@"; OUTDIR="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done
OUTDIR="${OUTDIR:-$ROOT/target/bench/vs-redis-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUTDIR"
GO="${GO:-/usr/local/go/bin/go}"
[ -x "$GO" ] || GO="$(command -v go)" || die "no Go toolchain"
command -v redis-server > /dev/null || die "redis-server is missing (apt-get install redis-server)"
command -v redis-cli > /dev/null || die "redis-cli is missing (apt-get install redis-tools)"

log "cargo build --release -p kavach --bin kavach (niced)"
(cd "$ROOT" && nice -n 10 cargo build --release -q -p kavach --bin kavach) || die "cargo build failed"
KAVACH="${CARGO_TARGET_DIR:-$ROOT/target}/release/kavach"
log "go build ./cmd/vsredis"
(cd "$ROOT/bench/soak" && nice -n 10 "$GO" build -o "$OUTDIR/vsredis" ./cmd/vsredis) || die "go build failed"

SHM="$(mktemp -d /dev/shm/kavach-vs-redis-XXXXXX)"
PIDS=()
stop_all() {
  local p
  for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null || true; wait "$p" 2> /dev/null || true; done
  PIDS=()
}
trap 'stop_all; rm -rf "$SHM"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
await_line() { # await_line FILE TEXT: wait up to 60 s for TEXT in FILE
  local i
  for i in $(seq 600); do grep -q "$2" "$1" 2> /dev/null && return 0; sleep 0.1; done
  die "no '$2' in $1 after 60 s: $(tail -3 "$1")"
}

# Start a Kavach primary with B backups (W=B); sets PORT.
start_kavach() {
  local b="$1" i port listen reps=() d
  d="$SHM/cell"
  for i in $(seq "$b"); do
    port="$(free_port)" listen="127.0.0.1:$(free_port)"
    "$KAVACH" serve --role backup --listen "$listen" --dir "$d/b$i" --port "$port" \
      2> "$OUTDIR/logs/$TAG-kavach-b$i.log" > /dev/null &
    PIDS+=($!)
    await_line "$OUTDIR/logs/$TAG-kavach-b$i.log" "kavach: listening on"
    reps+=("$listen")
  done
  PORT="$(free_port)"
  "$KAVACH" serve --dir "$d/p" --port "$PORT" --replicas "$(IFS=,; echo "${reps[*]}")" \
    --write-quorum "$b" 2> "$OUTDIR/logs/$TAG-kavach-p.log" > /dev/null &
  PIDS+=($!)
  await_line "$OUTDIR/logs/$TAG-kavach-p.log" "kavach: listening on"
}

# Start a Redis master with B replicas, every one with an fsync-always AOF; sets PORT.
start_redis() {
  local b="$1" i port d
  d="$SHM/cell"
  PORT="$(free_port)"
  mkdir -p "$d/m"
  redis-server --port "$PORT" --bind 127.0.0.1 --dir "$d/m" --appendonly yes --appendfsync always \
    --save "" --daemonize no > "$OUTDIR/logs/$TAG-redis-m.log" 2>&1 &
  PIDS+=($!)
  await_line "$OUTDIR/logs/$TAG-redis-m.log" "Ready to accept connections"
  for i in $(seq "$b"); do
    port="$(free_port)"
    mkdir -p "$d/r$i"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$d/r$i" --appendonly yes --appendfsync always \
      --save "" --daemonize no --replicaof 127.0.0.1 "$PORT" > "$OUTDIR/logs/$TAG-redis-r$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in $(seq 600); do
    [ "$(redis-cli -p "$PORT" info replication | tr -d '\r' | sed -n 's/^connected_slaves://p')" = "$b" ] \
      && ! redis-cli -p "$PORT" info replication | grep -q 'state=wait_bgsave\|state=send_bulk' && return 0
    sleep 0.1
  done
  die "Redis replicas did not connect within 60 s"
}

mkdir -p "$OUTDIR/logs"
CPU="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD)"
LOAD_BEFORE="$(uptime)"
log "CPU: $CPU; commit $COMMIT; $LOAD_BEFORE"
: > "$OUTDIR/results.jsonl"
status=0
cell() { # cell SYSTEM BACKUPS CONNS ROUND
  local sys="$1" b="$2" c="$3" round="$4" wait=0 rc=0 line
  # Every cell writes its own logs: a log reused from an earlier cell would already hold the
  # line start_kavach and start_redis wait for.
  TAG="r$round-$sys-b$b-c$c"
  if [ "$sys" = kavach ]; then start_kavach "$b"; else start_redis "$b"; wait="$b"; fi
  line="$("$OUTDIR/vsredis" --addr "127.0.0.1:$PORT" --conns "$c" --seconds "$SECONDS_PER" \
          --value-size 64 --wait "$wait" --label "$sys")" || rc=$?
  stop_all
  rm -rf "$SHM/cell"
  [ "$rc" -eq 0 ] || { log "$sys b=$b c=$c: client exit $rc: $line"; [ "$rc" -ge 2 ] && die "client could not run"; status=1; }
  printf '{"system":"%s","backups":%s,"round":%s,"load":"%s","r":%s}\n' "$sys" "$b" "$round" \
    "$(cut -d' ' -f1 /proc/loadavg)" "$line" >> "$OUTDIR/results.jsonl"
  log "round $round $sys backups=$b conns=$c: $line"
}
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order="kavach redis"; else order="redis kavach"; fi
  for b in 1 2; do
    for c in ${CONNS//,/ }; do
      for sys in $order; do cell "$sys" "$b" "$c" "$round"; done
    done
  done
done
LOAD_AFTER="$(uptime)"

python3 - "$OUTDIR/results.jsonl" > "$OUTDIR/report.md" <<PY
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cells = {}
for r in rows:
    cells.setdefault((r["backups"], r["r"]["conns"], r["system"]), []).append(r["r"])
med = lambda xs: statistics.median(xs)
print("Command: \`bench/replication/vs-redis.sh --seconds $SECONDS_PER --rounds $ROUNDS --conns $CONNS\`, $(date -u +%Y-%m-%d), commit $COMMIT")
print()
print("CPU: $CPU. Persistence domain: /dev/shm (PM emulated in DRAM; Redis AOF fsync always on tmpfs).")
print("Load before: \`$LOAD_BEFORE\`; after: \`$LOAD_AFTER\`")
print()
print("| backups | conns | Kavach ops/s | Redis ops/s | ratio | Kavach p50 / p99 µs | Redis p50 / p99 µs |")
print("|---|---|---|---|---|---|---|")
for (b, c) in sorted({(k[0], k[1]) for k in cells}):
    k, r = cells.get((b, c, "kavach"), []), cells.get((b, c, "redis"), [])
    if not k or not r:
        continue
    ko, ro = med([x["ops_per_s"] for x in k]), med([x["ops_per_s"] for x in r])
    f = lambda xs, q: med([x[q] for x in xs])
    print(f"| {b} (W={b}; WAIT {b} 0) | {c} | {ko:,.0f} | {ro:,.0f} | {ko/ro:.2f} | "
          f"{f(k,'p50_us'):.0f} / {f(k,'p99_us'):.0f} | {f(r,'p50_us'):.0f} / {f(r,'p99_us'):.0f} |")
print()
print(f"Medians over {len(rows)//max(1,len(cells))} rounds; ratio = Kavach / Redis ops/s.")
PY
cat "$OUTDIR/report.md"
log "results: $OUTDIR"
exit "$status"
