#!/usr/bin/env bash
# Persist-latency benchmark: libpmem's pmem_persist vs Kavach's persist.
#
#   bench/persist/run.sh [--quick] [--sizes LIST] [--iters N] [--rounds R]
#
# Environment overrides (flags win over env, env wins over defaults):
#   PERSIST_SIZES   comma list of sizes   (default 64,128,256,512,1024,2048,4096)
#   PERSIST_ITERS   iterations per loop   (default 200000; --quick: 20000)
#   PERSIST_ROUNDS  alternating rounds    (default 7;      --quick: 3)
#   PERSIST_CPU     if set, pin both harnesses to this CPU with taskset
#   KAVACH_BENCH_BIN  use this prebuilt Kavach harness instead of building
#                   `cargo build --release -p kavach-bench --bin persist_bench`
#
# What it does:
#   1. installs Debian's libpmem-dev if libpmem is missing (apt-get);
#   2. compiles bench/persist/pmem_persist_bench.c -> target/bench/pmem_persist_bench;
#   3. builds the Rust harness (kavach-bench, bin persist_bench);
#   4. for round in 1..R: runs the libpmem harness with --rounds 1 and the
#      Kavach harness with --rounds 1, alternating (libpmem first in odd
#      rounds, Kavach first in even ones), so machine drift hits both; each
#      side maps its own file under /dev/shm (PMEM_IS_PMEM_FORCE=1), removed
#      on exit;
#   5. prints a markdown report (stdout, also target/bench/persist.md) and
#      writes target/bench/persist.json via bench/persist/summarize.py.
# Raw lines go to target/bench/persist.raw, harness stderr to
# target/bench/persist.stderr.log. Progress messages go to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/persist"
OUT="$ROOT/target/bench"

SIZES="${PERSIST_SIZES:-64,128,256,512,1024,2048,4096}"
ITERS="${PERSIST_ITERS:-200000}"
ROUNDS="${PERSIST_ROUNDS:-7}"

log() { printf '[persist] %s\n' "$*" >&2; }
die() { printf '[persist] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --quick) ITERS=20000; ROUNDS=3 ;;
    --sizes) [ $# -ge 2 ] || die "--sizes needs a value"; SIZES="$2"; shift ;;
    --iters) [ $# -ge 2 ] || die "--iters needs a value"; ITERS="$2"; shift ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS="$2"; shift ;;
    --sizes=*) SIZES="${1#*=}" ;;
    --iters=*) ITERS="${1#*=}" ;;
    --rounds=*) ROUNDS="${1#*=}" ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$ITERS" =~ ^[1-9][0-9]*$ ]] || die "iters must be a positive integer, got '$ITERS'"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "rounds must be a positive integer, got '$ROUNDS'"
[[ "$SIZES" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "sizes must be a comma list of integers, got '$SIZES'"

# --- 1-3. libpmem, C harness, Rust harness (shared with callgrind.sh) ------------
# shellcheck source=bench/persist/build.sh
source "$HERE/build.sh"

# --- 4. alternating runs ----------------------------------------------------
SHM_DIR="${PERSIST_SHM_DIR:-/dev/shm}"
[ -d "$SHM_DIR" ] || die "$SHM_DIR does not exist"
FILE_C="$(mktemp "$SHM_DIR/kavach-persist-libpmem.XXXXXX")"
FILE_K="$(mktemp "$SHM_DIR/kavach-persist-kavach.XXXXXX")"
cleanup() { rm -f -- "$FILE_C" "$FILE_K"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

RAW="$OUT/persist.raw"
ERRLOG="$OUT/persist.stderr.log"
: > "$RAW"
: > "$ERRLOG"
export PMEM_IS_PMEM_FORCE=1

PIN=()
if [ -n "${PERSIST_CPU:-}" ]; then
  command -v taskset >/dev/null 2>&1 || die "PERSIST_CPU set but taskset is missing"
  PIN=(taskset -c "$PERSIST_CPU")
fi

# run_side LABEL BIN FILE ROUND: one --rounds 1 run; its round field is
# rewritten to ROUND, and every line is checked to come from LABEL.
run_side() {
  local label="$1" bin="$2" file="$3" round="$4" lines
  echo "== $label round $round" >> "$ERRLOG"
  lines="$(${PIN[@]+"${PIN[@]}"} "$bin" --file "$file" --sizes "$SIZES" --iters "$ITERS" \
             --rounds 1 2>> "$ERRLOG")" \
    || { tail -n 5 "$ERRLOG" >&2; die "$label harness failed in round $round (see $ERRLOG)"; }
  [ -n "$lines" ] || die "$label harness printed nothing in round $round"
  printf '%s\n' "$lines" | awk -v want="$label" -v r="$round" '
    NF != 5 || $1 != want { bad = 1; print "bad line: " $0 > "/dev/stderr"; next }
    { $3 = r; print }
    END { exit bad }' >> "$RAW" \
    || die "$label harness printed unexpected output in round $round"
}

log "sizes=$SIZES iters=$ITERS rounds=$ROUNDS (alternating libpmem/kavach)"
# Odd rounds run libpmem first, even rounds Kavach first (ABBA), so a
# systematic advantage of going first or second cancels out over the rounds.
for ((r = 1; r <= ROUNDS; r++)); do
  if (( r % 2 == 1 )); then order=(libpmem kavach); else order=(kavach libpmem); fi
  for side in "${order[@]}"; do
    log "round $r/$ROUNDS: $side"
    if [ "$side" = libpmem ]; then
      run_side libpmem "$CBIN" "$FILE_C" "$r"
    else
      run_side kavach "$KBIN" "$FILE_K" "$r"
    fi
  done
done

# Which flush instruction libpmem uses: the harness infers it from CPUID and
# env; if PMDK's debug build (libpmem1-debug) is present, ask libpmem itself.
FLUSH_INFO="$(sed -n 's/.*libpmem flush instruction (inferred): \([^;]*;[^;]*\);.*/inferred from CPUID+env: \1/p' \
  "$ERRLOG" | head -n1)"
DBG_LIB="$(ls /usr/lib/*/pmdk_dbg/libpmem.so.1 2>/dev/null | head -n1 || true)"
if [ -n "$DBG_LIB" ]; then
  DBG_SAYS="$(PMEM_LOG_LEVEL=3 LD_LIBRARY_PATH="$(dirname "$DBG_LIB")" \
      "$CBIN" --file "$FILE_C" --sizes 64 --iters 1 --rounds 1 2>&1 >/dev/null \
    | grep -o -E 'using (clwb|clflushopt|clflush)|(not f|F)lushing CPU.cache' \
    | sort -u | paste -sd ';' - || true)"
  [ -n "$DBG_SAYS" ] && FLUSH_INFO="$FLUSH_INFO; pmdk_dbg log says: $DBG_SAYS"
fi

# --- 5. report --------------------------------------------------------------
CPU_MODEL="$(grep -m1 -E '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
[ -n "$CPU_MODEL" ] || CPU_MODEL="$(uname -m)"
python3 "$HERE/summarize.py" "$RAW" --json "$OUT/persist.json" \
  --meta "date=$(date -u '+%Y-%m-%dT%H:%M:%SZ')" \
  --meta "kernel=$(uname -r)" \
  --meta "cpu=$CPU_MODEL ($(nproc) cpus online)" \
  --meta "persistence_domain=adr, emulated on tmpfs /dev/shm: not durable across reboot" \
  --meta "libpmem=$PMEM_VERSION" \
  --meta "libpmem_flush=${FLUSH_INFO:-unknown}" \
  --meta "sizes=$SIZES" \
  --meta "iters=$ITERS" \
  --meta "rounds=$ROUNDS (alternating, ABBA order, one process per side per round)" \
  --meta "cpu_pin=${PERSIST_CPU:-none}" \
  | tee "$OUT/persist.md"
log "wrote $OUT/persist.md, $OUT/persist.json, raw lines in $RAW"
