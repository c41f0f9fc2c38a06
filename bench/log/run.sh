#!/usr/bin/env bash
# Log benchmark: Kavach's log (crates/log) vs PMDK's libpmemlog.
#
#   bench/log/run.sh [--quick] [--rounds R] [-- HARNESS OPTIONS...]
#
# Options after `--` go to both harnesses (same CLI), e.g.
#   bench/log/run.sh -- --phases lat,floor --iters 500000
#
# Environment overrides (flags win over env, env wins over defaults):
#   LOG_BENCH_ROUNDS    alternating rounds (default 6; --quick: 2)
#   LOG_BENCH_CPU       if set, pin both harnesses to these CPUs with taskset
#   LOG_BENCH_SHM_DIR   where the pool files go (default /dev/shm)
#   KAVACH_LOG_BENCH_BIN  use this prebuilt Kavach harness instead of building
#                       `cargo build --release -p kavach-bench --bin log_bench`
#
# What it does:
#   1. installs Debian's libpmemlog-dev if libpmemlog is missing (apt-get);
#   2. compiles bench/log/pmemlog_bench.c -> target/bench/pmemlog_bench;
#   3. builds the Rust harness (kavach-bench, bin log_bench, release);
#   4. for round in 1..R: runs the libpmemlog harness and the Kavach harness,
#      one process each, every phase (latency, floor, throughput, window,
#      recovery), alternating (libpmemlog first in odd rounds, Kavach first in
#      even ones: ABBA), so machine drift hits both; the pools live in a
#      temporary directory under /dev/shm (PMEM_IS_PMEM_FORCE=1 for PMDK),
#      removed on exit;
#   5. prints a markdown report (stdout, also target/bench/log.md) and writes
#      target/bench/log.json via bench/log/summarize.py.
# Raw lines go to target/bench/log.raw, harness stderr to
# target/bench/log.stderr.log. Progress messages go to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/log"
OUT="$ROOT/target/bench"

ROUNDS="${LOG_BENCH_ROUNDS:-6}"
QUICK=()
EXTRA=()

log() { printf '[log-bench] %s\n' "$*" >&2; }
die() { printf '[log-bench] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

ROUNDS_SET=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick); [ -n "$ROUNDS_SET" ] || ROUNDS="${LOG_BENCH_ROUNDS:-2}" ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS="$2"; ROUNDS_SET=1; shift ;;
    --rounds=*) ROUNDS="${1#*=}"; ROUNDS_SET=1 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer, got '$ROUNDS'"

# --- 1-3. libpmemlog, C harness, Rust harness ---------------------------------
# shellcheck source=bench/log/build.sh
source "$HERE/build.sh"
# The library the harness was just built from (the tree may move on during the run).
KAVACH_REV="git $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if ! (cd "$ROOT" && git diff --quiet HEAD -- crates/log crates/pmem 2>/dev/null); then
  KAVACH_REV="$KAVACH_REV + uncommitted changes in crates/log or crates/pmem"
fi

# --- 4. alternating runs ----------------------------------------------------
SHM_BASE="${LOG_BENCH_SHM_DIR:-/dev/shm}"
[ -d "$SHM_BASE" ] || die "$SHM_BASE does not exist"
SHM_DIR="$(mktemp -d "$SHM_BASE/kavach-logbench.XXXXXX")"
cleanup() { rm -rf -- "$SHM_DIR"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

RAW="$OUT/log.raw"
ERRLOG="$OUT/log.stderr.log"
: > "$RAW"
: > "$ERRLOG"
export PMEM_IS_PMEM_FORCE=1

PIN=()
if [ -n "${LOG_BENCH_CPU:-}" ]; then
  command -v taskset >/dev/null 2>&1 || die "LOG_BENCH_CPU set but taskset is missing"
  PIN=(taskset -c "$LOG_BENCH_CPU")
fi

# run_side LABEL BIN ROUND: one process running every phase; each line must
# come from LABEL.
run_side() {
  local label="$1" bin="$2" round="$3" lines
  echo "== $label round $round" >> "$ERRLOG"
  lines="$(${PIN[@]+"${PIN[@]}"} "$bin" --dir "$SHM_DIR" --round "$round" \
             ${QUICK[@]+"${QUICK[@]}"} ${EXTRA[@]+"${EXTRA[@]}"} 2>> "$ERRLOG")" \
    || { tail -n 5 "$ERRLOG" >&2; die "$label harness failed in round $round (see $ERRLOG)"; }
  [ -n "$lines" ] || die "$label harness printed nothing in round $round"
  printf '%s\n' "$lines" | awk -v want="$label" '
    NF < 3 || $2 != want { bad = 1; print "bad line: " $0 > "/dev/stderr"; next }
    { print }
    END { exit bad }' >> "$RAW" \
    || die "$label harness printed unexpected output in round $round"
}

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
log "rounds=$ROUNDS ${QUICK[*]:-} ${EXTRA[*]:-} (alternating pmemlog/kavach), pools in $SHM_DIR"
START=$(date +%s)
for ((r = 1; r <= ROUNDS; r++)); do
  if (( r % 2 == 1 )); then order=(pmemlog kavach); else order=(kavach pmemlog); fi
  for side in "${order[@]}"; do
    log "round $r/$ROUNDS: $side"
    if [ "$side" = pmemlog ]; then
      run_side pmemlog "$CBIN" "$r"
    else
      run_side kavach "$KBIN" "$r"
    fi
  done
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- 5. report --------------------------------------------------------------
CPU_MODEL="$(grep -m1 -E '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
[ -n "$CPU_MODEL" ] || CPU_MODEL="$(uname -m)"
FLUSH="$(sed -n 's/.*flush instruction \([a-z]*\).*/\1/p' "$ERRLOG" | head -n1)"
DOMAIN="$(sed -n 's/.*, domain \([a-z]*\),.*/\1/p' "$ERRLOG" | head -n1)"
# The copy/flush/CRC choices in force in the Kavach harness (pmem::tune), and where each came from.
TUNING="$(sed -n 's/^log_bench: cpu .*, tuning \(.*\)$/\1/p' "$ERRLOG" | head -n1)"
PMEM_VERSION="$(pkg-config --modversion libpmem 2>/dev/null || echo unknown)"
python3 "$HERE/summarize.py" "$RAW" --json "$OUT/log.json" \
  --meta "date=$(date -u '+%Y-%m-%dT%H:%M:%SZ')" \
  --meta "command=bench/log/run.sh ${QUICK[*]:-}${EXTRA[*]:+ -- ${EXTRA[*]}} (rounds $ROUNDS)" \
  --meta "kavach=$KAVACH_REV" \
  --meta "kernel=$(uname -r)" \
  --meta "cpu=$CPU_MODEL ($(nproc) cpus online)" \
  --meta "persistence_domain=${DOMAIN:-unknown} (Kavach, detected), flush ${FLUSH:-unknown} + sfence; emulated on tmpfs $SHM_BASE: not durable across reboot; PMDK with PMEM_IS_PMEM_FORCE=1" \
  --meta "pmdk=libpmemlog $PMEMLOG_VERSION, libpmem $PMEM_VERSION (Debian)" \
  --meta "rounds=$ROUNDS (alternating, ABBA order, one process per side per round), $(( $(date +%s) - START )) s" \
  --meta "load_average=before $LOAD_BEFORE, after $LOAD_AFTER" \
  --meta "cpu_pin=${LOG_BENCH_CPU:-none}" \
  --meta "kavach_tuning=${TUNING:-unknown (no lat phase)}" \
  | tee "$OUT/log.md"
log "wrote $OUT/log.md, $OUT/log.json, raw lines in $RAW"
