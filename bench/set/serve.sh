#!/usr/bin/env bash
# redis-benchmark SET and GET against `kavach serve` on one pool file and on a three-member pool
# set, in one run, in ABBA order per test (one file, set, set, one file), each server on its own
# fresh directory under /dev/shm. Prints one CSV line per measurement and the medians' ratio.
#
#   bench/set/serve.sh [KAVACH_BIN] [N] [CLIENTS]      (defaults: target/release/kavach 200000 16)
set -euo pipefail
BIN="${1:-target/release/kavach}"
N="${2:-200000}"
C="${3:-16}"
BASE="$(mktemp -d /dev/shm/kavach-setbench.XXXXXX)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$BASE"
}
trap cleanup EXIT

start() { # name port extra-args...
  local name="$1" port="$2"; shift 2
  "$BIN" serve --dir "$BASE/$name" --port "$port" "$@" 2>"$BASE/$name.err" &
  PIDS+=("$!")
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server $name did not start" >&2; cat "$BASE/$name.err" >&2; exit 2
}

start file 16401
start set 16402 --pool-files 3
redis-cli -p 16402 info pool | grep -E 'pool_(kind|members|chunk_bytes|state)' >&2

run() { # port test -> requests per second
  redis-benchmark -p "$1" -t "$2" -n "$N" -c "$C" -P 1 -d 64 -r 100000 --csv 2>/dev/null \
    | awk -F'"' -v t="$(echo "$2" | tr a-z A-Z)" '$2 == t { print $4 }'
}

echo "test,server,rps"
for t in set get; do
  a1=$(run 16401 "$t"); echo "$t,file,$a1"
  b1=$(run 16402 "$t"); echo "$t,set,$b1"
  b2=$(run 16402 "$t"); echo "$t,set,$b2"
  a2=$(run 16401 "$t"); echo "$t,file,$a2"
  awk -v t="$t" -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" 'BEGIN {
    a = (a1 + a2) / 2; b = (b1 + b2) / 2;
    printf "# %s: one file %.0f rps, set %.0f rps, set / file %.2f\n", t, a, b, b / a }'
done
redis-cli -p 16401 shutdown >/dev/null 2>&1 || true
redis-cli -p 16402 shutdown >/dev/null 2>&1 || true
