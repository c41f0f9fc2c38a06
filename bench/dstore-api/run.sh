#!/usr/bin/env bash
# YCSB A/B/C (zipfian, 4 KiB values) on DStore's library API against Redis 7 with
# appendfsync always, side by side in one run (ABBA order by default).
#
#   bench/dstore-api/run.sh [--records N] [--ops N] [--threads N] [--port P] [--work DIR]
#                           [--shm DIR] [--order kavach,redis,redis,kavach] [--json FILE]
#
# Persistence domains: Kavach's pool (PM log and shadow images) in --shm (default
# /dev/shm/wt27-api/ycsb: RAM standing for PM), its object data file and Redis's AOF both in
# --work (default /tmp/wt27-api/ycsb: the disk standing for the SSD). Redis is reached over RESP
# on loopback (it pays a network round trip per request; Kavach is called in-process). Both
# acknowledge a write only when it is on disk: Redis fsyncs its AOF before replying
# (appendfsync always), Kavach fdatasyncs the object data then forces its PM record.
# Exit: 0 done, 2 could not run.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
records=10000 ops=20000 threads=8 port=17501
work=/tmp/wt27-api/ycsb shm=/dev/shm/wt27-api/ycsb order=kavach,redis,redis,kavach json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --records) records="$2"; shift 2 ;;
    --ops) ops="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --shm) shm="$2"; shift 2 ;;
    --order) order="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v redis-server >/dev/null || { echo "run.sh: redis-server not found" >&2; exit 2; }
cd "$ROOT"
CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" cargo build --release -q -p kavach-dstore --example ycsb_api \
  || { echo "run.sh: build failed" >&2; exit 2; }
exe="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/examples/ycsb_api"
mkdir -p "$work/redis" "$shm"
redis_pid=""
cleanup() {
  if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
  rm -rf "$work" "$shm"
}
trap cleanup EXIT
redis-server --port "$port" --bind 127.0.0.1 --dir "$work/redis" --appendonly yes \
  --appendfsync always --save "" --daemonize no --logfile "$work/redis/redis.log" &
redis_pid=$!
for _ in $(seq 50); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$port" ping >/dev/null || { echo "run.sh: Redis did not start" >&2; exit 2; }
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# $(redis-server --version | cut -d' ' -f1-3); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# records $records ops $ops threads $threads order $order"
args=(--pm-dir "$shm/pm" --object-dir "$work/objects" --redis-port "$port"
      --records "$records" --ops "$ops" --threads "$threads" --order "$order")
[ -n "$json" ] && args+=(--json "$json")
"$exe" "${args[@]}"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
