#!/usr/bin/env bash
# Two Kavach binaries (A and B) under YCSB, each beside Redis 7 in its own run.sh invocation,
# in ABBA order, so the ratio to Redis is taken under the same conditions within a run and the
# A/B difference can be read against the spread between runs of the same binary.
#
#   bench/ycsb/ab.sh A_BIN B_BIN [--repeat N] [--out DIR] [-- run.sh options]
#
#   A_BIN, B_BIN   kavach binaries (e.g. a copy of the main branch's build and the tree's)
#   --repeat N     ABBA blocks (default 1: A B B A)
#   --out DIR      results (default target/bench/ycsb-ab); DIR/NN-A or NN-B per run.sh call
#   -- ...         passed to bench/ycsb/run.sh (default: --records 100000 --ops 100000
#                  --rounds 1 --workloads a,c --systems redis-always,kavach-always)
#
# Output: per run, Kavach/Redis ratios of throughput and of the p99 and p99.9 of each operation
# (bench/ycsb/ab_summary.py), then the median ratio per binary and its range.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
die() { printf '[ycsb-ab] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
[ "${1:-}" = -h ] || [ "${1:-}" = --help ] && { usage; exit 0; }
[ $# -ge 2 ] || die "two kavach binaries needed (see --help)"
A="$1"; B="$2"; shift 2
for b in "$A" "$B"; do [ -x "$b" ] || die "$b is not an executable"; done
REPEAT=1
OUT="$ROOT/target/bench/ycsb-ab"
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) [ $# -ge 2 ] || die "--repeat needs a value"; REPEAT="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT="$2"; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "--repeat must be a positive integer"
RUN_ARGS=("$@")
[ ${#RUN_ARGS[@]} -gt 0 ] || RUN_ARGS=(--records 100000 --ops 100000 --rounds 1 --workloads a,c
                                        --systems redis-always,kavach-always)
mkdir -p "$OUT"
n=0
for ((r = 0; r < REPEAT; r++)); do
  for which in A B B A; do
    n=$((n + 1))
    bin="$A"; [ "$which" = B ] && bin="$B"
    dir="$OUT/$(printf %02d "$n")-$which"
    printf '[ycsb-ab] run %d (%s, %s), load %s\n' "$n" "$which" "$bin" "$(cut -d' ' -f1-3 /proc/loadavg)" >&2
    KAVACH_BIN="$bin" "$ROOT/bench/ycsb/run.sh" "${RUN_ARGS[@]}" --out "$dir" > "$dir.log" 2>&1 \
      || { tail -n 20 "$dir.log" >&2; die "run $n failed (see $dir.log)"; }
  done
done
python3 "$ROOT/bench/ycsb/ab_summary.py" "$OUT"/[0-9]*-[AB] | tee "$OUT/summary.md"
