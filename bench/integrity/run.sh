#!/usr/bin/env bash
# Integrity benchmark (issue 3): modes lazy (1 s, 10 s, 60 s), eager and txb-page against off,
# all in one process on one pool on /dev/shm, plus the cost of a first write to a page.
#
#   bench/integrity/run.sh [--quick] [--seconds S] [--data-gib G] [--wait-idle SECS] [-- ARGS...]
#
#   --quick          smoke run: 256 MiB region, 2 s cells, lazy-200ms/lazy-1s, 8192 first-write pages
#   --seconds S      seconds per (config, workload) cell (default 20; lazy write cells last at
#                    least 2.5 periods, so lazy-60s write cells take 150 s)
#   --data-gib G     size of the protected region (default 2)
#   --wait-idle SECS before the measured run, wait up to SECS (polling every 30 s) while a cargo
#                    or rustc process is running on the machine (default 0: do not wait)
#   -- ARGS          passed on to the harness (see `integrity_bench --help`)
#
# Environment: INTEGRITY_SHM_DIR (default /dev/shm), KAVACH_BENCH_BIN (a prebuilt
# integrity_bench instead of `cargo build --release -p kavach-bench --bin integrity_bench`).
#
# Writes target/bench/integrity-<UTC date-time>.json (every measurement), .md (the report it
# prints) and .procs.log (uptime and every other process above 5% CPU, sampled every 20 s
# during the run, so that a disturbed cell can be told apart).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$ROOT/target/bench"
SHM_DIR="${INTEGRITY_SHM_DIR:-/dev/shm}"

log() { printf '[integrity] %s\n' "$*" >&2; }
die() { printf '[integrity] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

SECONDS_PER_CELL=20
DATA_GIB=2
WAIT_IDLE=0
QUICK=0
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --seconds) [ $# -ge 2 ] || die "--seconds needs a value"; SECONDS_PER_CELL="$2"; shift ;;
    --data-gib) [ $# -ge 2 ] || die "--data-gib needs a value"; DATA_GIB="$2"; shift ;;
    --wait-idle) [ $# -ge 2 ] || die "--wait-idle needs a value"; WAIT_IDLE="$2"; shift ;;
    --seconds=*) SECONDS_PER_CELL="${1#*=}" ;;
    --data-gib=*) DATA_GIB="${1#*=}" ;;
    --wait-idle=*) WAIT_IDLE="${1#*=}" ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$SECONDS_PER_CELL" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--seconds must be a number, got '$SECONDS_PER_CELL'"
[[ "$DATA_GIB" =~ ^[1-9][0-9]*$ ]] || die "--data-gib must be a positive integer, got '$DATA_GIB'"
[[ "$WAIT_IDLE" =~ ^[0-9]+$ ]] || die "--wait-idle must be a number of seconds, got '$WAIT_IDLE'"

if [ "$QUICK" = 1 ]; then
  SIZE_ARGS=(--data-mib 256)
  NEED_MIB=$((256 * 4 / 3 + 16 + 256))
  # shellcheck disable=SC2054  # the commas are inside one argument
  ARGS=(--seconds 2 --configs off,lazy-200ms,lazy-1s,eager,txb-page --fw-pages 8192 --fw-rounds 2)
else
  SIZE_ARGS=(--data-gib "$DATA_GIB")
  # Data, parity (1/4), line checksums (1/16), page checksums, 16 MiB of pool metadata, 256 MiB
  # to spare.
  NEED_MIB=$((DATA_GIB * 1024 * 4 / 3 + 16 + 256))
  ARGS=(--seconds "$SECONDS_PER_CELL")
fi

# --- 1. build (niced: the machine is shared) ------------------------------------------------
cargo() { nice -n 19 cargo "$@"; }  # nice execs the real cargo, not this function
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
mkdir -p "$OUT"
if [ -n "${KAVACH_BENCH_BIN:-}" ]; then
  BIN="$KAVACH_BENCH_BIN"
  log "using prebuilt harness $BIN (KAVACH_BENCH_BIN)"
else
  BIN="$(cargo_harness integrity_bench)"
fi
[ -x "$BIN" ] || die "harness '$BIN' is not executable"

# --- 2. /dev/shm ----------------------------------------------------------------------------
[ -d "$SHM_DIR" ] || die "$SHM_DIR does not exist"
FREE_MIB="$(df -BM --output=avail "$SHM_DIR" | tail -n1 | tr -dc 0-9)"
[ -n "$FREE_MIB" ] || die "cannot read the free space of $SHM_DIR"
if [ "$FREE_MIB" -lt "$NEED_MIB" ]; then
  die "$SHM_DIR has $FREE_MIB MiB free; the pool needs about $NEED_MIB MiB"
fi
log "$SHM_DIR: $FREE_MIB MiB free, the run needs about $NEED_MIB MiB"

# --- 3. a quiet machine ---------------------------------------------------------------------
busy_builds() { pgrep -x cargo >/dev/null 2>&1 || pgrep -x rustc >/dev/null 2>&1; }
waited=0
while busy_builds && [ "$waited" -lt "$WAIT_IDLE" ]; do
  log "a cargo/rustc process is running; waiting ($waited s of $WAIT_IDLE s)"
  sleep 30
  waited=$((waited + 30))
done
if busy_builds; then
  log "warning: cargo/rustc still running; the run will share the 2 cores with it"
fi

# --- 4. the run, with a sampler of other processes -------------------------------------------
STAMP="$(date -u '+%Y-%m-%d-%H%M')"
JSON="$OUT/integrity-$STAMP.json"
MD="$OUT/integrity-$STAMP.md"
PROCS="$OUT/integrity-$STAMP.procs.log"
: > "$PROCS"
sample_procs() {
  while :; do
    {
      printf '== %s  %s\n' "$(date -u '+%H:%M:%S')" "$(cut -d' ' -f1-3 /proc/loadavg)"
      # The second frame of top: CPU use over the last second (the first is since start-up).
      top -bn2 -d1 -w 200 2>/dev/null | awk '
        /^top -/ { frame++ }
        frame == 2 && $1 ~ /^[0-9]+$/ && $9 + 0 > 5 && $12 != "integrity_bench" && $12 != "top" {
          printf "   %s %s%% %s\n", $1, $9, $12 }'
    } >> "$PROCS"
    sleep 19
  done
}
sample_procs &
SAMPLER=$!
trap 'kill "$SAMPLER" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM

log "uptime: $(uptime)"
log "running $BIN ${SIZE_ARGS[*]} ${ARGS[*]} ${EXTRA[*]:-} (report: $MD)"
"$BIN" --dir "$SHM_DIR" "${SIZE_ARGS[@]}" "${ARGS[@]}" ${EXTRA[@]+"${EXTRA[@]}"} --json "$JSON" \
  | tee "$MD"
kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true

# --- 5. other processes seen ----------------------------------------------------------------
{
  printf '\n## Other processes above 5%% CPU during the run (sampled every 20 s)\n\n'
  if grep -q '^   ' "$PROCS"; then
    grep '^   ' "$PROCS" | awk '{ n[$3]++; if ($2 + 0 > max[$3]) max[$3] = $2 + 0 }
      END { for (p in n) printf "- %s: seen in %d samples, up to %s%%\n", p, n[p], max[p] }'
  else
    printf -- '- none\n'
  fi
  printf '\nLoad average at the samples: %s\n' \
    "$(grep '^==' "$PROCS" | awk '{ printf "%s%s", sep, $3; sep = ", " }')"
} | tee -a "$MD"
log "wrote $JSON, $MD, $PROCS"
