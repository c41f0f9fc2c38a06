#!/usr/bin/env bash
# Replication benchmark (issue 7): the Kavach log replicated to 1, 2 and 3 backups over loopback
# TCP against the same log with no redundancy (0 backups), in the same processes; recovery of a
# full 256 MiB log whose primary copy was lost.
#
#   bench/replication/run.sh [--quick] [--rounds R] [--wait-idle SECS] [--backups LIST]
#                            [--out DIR] [-- HARNESS ARGS...]
#
#   --quick          smoke run: 1 round, 0.2 s per measurement, 32 MiB recovery log, 1 rep
#   --rounds R       rounds (default 3; --quick: 1); the order of the backup groups is reversed
#                    in every other round
#   --wait-idle SECS before every harness process, wait up to SECS (polling every 10 s) while
#                    cargo or rustc runs or another process uses more than 20% of a CPU
#                    (default 0: do not wait); processes that ran beside such work anyway are
#                    marked in the report
#   --backups LIST   backup counts, one process (group) each (default 1,2,3); every group also
#                    runs the 0-backup anchor cells next to its own
#   --out DIR        report directory (default target/bench/replication-<UTC date-time>)
#   -- ARGS          passed to every harness process (see `repl_bench --help`), e.g.
#                    -- --sizes 64,4096 --seconds 2
#
# Environment: REPL_BENCH_SHM_DIR (default /dev/shm) is where the pool files go (a temporary
# directory, removed on exit); KAVACH_BENCH_BIN uses a prebuilt repl_bench instead of
# `cargo build --release -p kavach-bench --bin repl_bench` (niced).
#
# Per round: `repl_bench --phases floor` (bare loopback round trips), one
# `repl_bench --phases lat,mt --backups B` per group, `repl_bench --phases recov`. Each process
# appends its cells to DIR/results.jsonl; its table and progress go to DIR/raw/. Report:
# DIR/report.md (also printed): medians over rounds, every cell's ratio to the 0-backup anchor
# of its own group, size and round (then the median of those ratios), recovery times against
# the dissertation's 500 ms; DIR/report-undisturbed.md (the same from the cells during which no
# other process used more than 0.25 CPU); DIR/runs.jsonl (one line per process: load, other busy
# processes before and after), DIR/loads.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/replication"

log() { printf '[repl-bench] %s\n' "$*" >&2; }
die() { printf '[repl-bench] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

QUICK=()
ROUNDS=""
WAIT_IDLE=0
BACKUPS="1,2,3"
OUTDIR=""
EXTRA=()
ARGS_ORIG="$*"
need() { [ $# -ge 2 ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick) ;;
    --rounds) need "$@"; ROUNDS="$2"; shift ;;
    --rounds=*) ROUNDS="${1#*=}" ;;
    --wait-idle) need "$@"; WAIT_IDLE="$2"; shift ;;
    --wait-idle=*) WAIT_IDLE="${1#*=}" ;;
    --backups) need "$@"; BACKUPS="$2"; shift ;;
    --backups=*) BACKUPS="${1#*=}" ;;
    --out) need "$@"; OUTDIR="$2"; shift ;;
    --out=*) OUTDIR="${1#*=}" ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
if [ -z "$ROUNDS" ]; then
  if [ ${#QUICK[@]} -gt 0 ]; then ROUNDS=1; else ROUNDS=3; fi
fi
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$ROUNDS'"
[[ "$WAIT_IDLE" =~ ^[0-9]+$ ]] || die "--wait-idle must be a number of seconds, got '$WAIT_IDLE'"
[[ "$BACKUPS" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--backups takes a list of positive counts, got '$BACKUPS'"
IFS=, read -r -a GROUPS_LIST <<< "$BACKUPS"

# --- build (niced: the machine is shared) ------------------------------------------------------
cargo() { nice -n 19 cargo "$@"; }  # nice execs the real cargo, not this function
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
if [ -n "${KAVACH_BENCH_BIN:-}" ]; then
  SRC_BIN="$KAVACH_BENCH_BIN"
  log "using prebuilt harness $SRC_BIN (KAVACH_BENCH_BIN)"
else
  SRC_BIN="$(cargo_harness repl_bench)"
fi
[ -x "$SRC_BIN" ] || die "harness '$SRC_BIN' is not executable"
REV="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
DIRTY="$(cd "$ROOT" && git status --porcelain -- crates/log crates/pmem crates/replication crates/bench 2>/dev/null | wc -l)"
KAVACH_DESC="git $REV$( [ "$DIRTY" != 0 ] && echo " + $DIRTY uncommitted/untracked paths in crates/{log,pmem,replication,bench}" || true)"

STAMP="$(date -u +%Y%m%d-%H%M%S)"
OUT="${OUTDIR:-$ROOT/target/bench/replication-$STAMP}"
mkdir -p "$OUT/raw" "$OUT/bin"
# Run a copy: the tree (and target/) may change while the benchmark runs.
BIN="$OUT/bin/repl_bench"
cp "$SRC_BIN" "$BIN"
KAVACH_DESC="$KAVACH_DESC, repl_bench sha256 $(sha256sum "$BIN" | cut -c1-16), built $(date -u -r "$SRC_BIN" '+%Y-%m-%dT%H:%M:%SZ')"
RESULTS="$OUT/results.jsonl"
RUNS="$OUT/runs.jsonl"
LOADS="$OUT/loads.log"
: > "$RESULTS"
: > "$RUNS"
: > "$LOADS"

# --- pools --------------------------------------------------------------------------------------
SHM_BASE="${REPL_BENCH_SHM_DIR:-/dev/shm}"
[ -d "$SHM_BASE" ] || die "$SHM_BASE does not exist"
FS_TYPE="$(stat -f -c %T "$SHM_BASE" 2>/dev/null || echo unknown)"
FREE_MIB="$(df -BM --output=avail "$SHM_BASE" | tail -n1 | tr -dc 0-9)"
# Recovery: the primary and two backups of 256 MiB, plus the rebuilt copy.
[ -z "$FREE_MIB" ] || [ "$FREE_MIB" -ge 1536 ] || die "$SHM_BASE has $FREE_MIB MiB free; the run needs about 1.5 GiB"
SHM_DIR="$(mktemp -d "$SHM_BASE/kavach-replbench.XXXXXX")"
cleanup() { rm -rf -- "$SHM_DIR"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

FAILED=0
# run_one NAME ROUND ARGS...: one harness process.
run_one() {
  local name="$1" round="$2"; shift 2
  local busy rc=0 t0 t1
  busy="$(wait_idle "$name")"
  log "round $round: $name ($*)"
  t0=$(date +%s.%N)
  "$BIN" --dir "$SHM_DIR" --round "$round" --json "$RESULTS" ${QUICK[@]+"${QUICK[@]}"} "$@" \
    ${EXTRA[@]+"${EXTRA[@]}"} > "$OUT/raw/$name.out" 2> "$OUT/raw/$name.err" || rc=$?
  t1=$(date +%s.%N)
  printf '{"name":"%s","round":%s,"rc":%d,"seconds":%.1f,"load":"%s","busy_before":"%s","busy_after":"%s","args":"%s"}\n' \
    "$name" "$round" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
    "$(loadavg)" "$busy" "$(others 20)" "$*" >> "$RUNS"
  note_load "after $name"
  if [ "$rc" != 0 ]; then
    FAILED=$((FAILED + 1))
    log "FAILED: $name (exit $rc); last lines of $OUT/raw/$name.err:"
    tail -n 5 "$OUT/raw/$name.err" >&2
  fi
}

note_load "start (uptime: $(uptime | sed 's/^ *//'))"
START_UTC="$(date -u '+%Y-%m-%dT%H:%M:%SZ')"
START=$(date +%s)
log "rounds=$ROUNDS groups=$BACKUPS ${QUICK[*]:-} ${EXTRA[*]:-}; pools in $SHM_DIR ($FS_TYPE); report in $OUT"
for ((r = 1; r <= ROUNDS; r++)); do
  run_one "r$r-floor" "$r" --phases floor
  order=("${GROUPS_LIST[@]}")
  if (( r % 2 == 0 )); then
    order=()
    for ((i = ${#GROUPS_LIST[@]} - 1; i >= 0; i--)); do order+=("${GROUPS_LIST[$i]}"); done
  fi
  for b in "${order[@]}"; do
    run_one "r$r-group$b" "$r" --phases lat,mt --backups "$b"
  done
  run_one "r$r-recov" "$r" --phases recov
done
ELAPSED=$(( $(date +%s) - START ))
note_load "end"

# --- report -------------------------------------------------------------------------------------
CPU_MODEL="$(grep -m1 -E '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
MEM_GIB="$(awk '/MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
DOMAIN="$(sed -n 's/.*backing \([a-z]*\), domain \([a-z]*\), flush \([a-z]*\),.*/backing \1, domain \2, flush \3 + sfence/p' "$OUT"/raw/*group*.err 2>/dev/null | head -n1)"
IDLE_DRIVER="$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo unknown)"
META=(
  --meta "date=$START_UTC to $(date -u '+%Y-%m-%dT%H:%M:%SZ') ($ELAPSED s)"
  --meta "command=bench/replication/run.sh $ARGS_ORIG"
  --meta "rounds=$ROUNDS; groups (backups) $BACKUPS, reversed in even rounds; one process per group"
  --meta "kavach=$KAVACH_DESC"
  --meta "kernel=$(uname -r); cpuidle driver $IDLE_DRIVER"
  --meta "cpu=${CPU_MODEL:-unknown} ($(nproc) cpus online, ${MEM_GIB} GiB RAM)"
  --meta "medium=pool files in $SHM_BASE ($FS_TYPE): persistent memory emulated in DRAM, not durable across reboot; ${DOMAIN:-domain unknown} (detected by pmem for every copy, primary and backups)"
  --meta "network=loopback TCP (127.0.0.1), TCP_NODELAY, primary and backups are threads of one process on the same 2 cores"
  --meta "load_average=$(head -n1 "$LOADS" | sed 's/.*load \([0-9. ]*\).*/\1/') at start, $(loadavg) at end (every process in loads.log)"
)
python3 "$HERE/summarize.py" "$OUT" "${META[@]}" > "$OUT/report.md" || die "summarize.py failed"
python3 "$HERE/summarize.py" "$OUT" --undisturbed "${META[@]}" > "$OUT/report-undisturbed.md" \
  || die "summarize.py --undisturbed failed"
cat "$OUT/report.md"
log "report: $OUT/report.md (every cell), $OUT/report-undisturbed.md (cells with no other busy process); cells in $RESULTS; raw outputs in $OUT/raw/"
if [ "$FAILED" != 0 ]; then
  log "$FAILED harness process(es) FAILED"
  exit 1
fi
