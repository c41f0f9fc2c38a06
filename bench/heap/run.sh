#!/usr/bin/env bash
# Persistent heap benchmark: Kavach's heap (kavach.h, crate kavach-heap-ffi) vs libpmemobj 1.12.
#
#   bench/heap/run.sh [--quick] [--rounds R] [--only tx|words|list|maps] [--keys K] [--sizes LIST]
#                     [--tx-n N] [--alloc-n N] [--threads LIST] [--maps LIST] [--words LIST]
#                     [--elements LIST] [--list-ops N] [--visits V] [--no-redo] [--out DIR]
#                     [--pmemobj-only] [--wait-idle SECS] [--redundancy LIST]
#
#   --quick         smoke run: 1 round, 20,000 overwrites, 10,000 allocs, 50,000 keys, lists of
#                   10..1,000 elements with 2,000 push/pop and 20,000 visits
#   --rounds R      rounds (default 3; --quick: 1); within a round every cell runs every
#                   library back to back, the first one rotating by cell and by round
#   --only X        run only one group: tx (overwrite, alloc/free, pair), words (the
#                   transaction-size sweep), list (the doubly-linked list) or maps
#   --keys K        map keys (default 1,000,000), split between the threads
#   --sizes LIST    tx sizes in bytes (default 64,256,1024,4096)
#   --tx-n N        overwrite transactions per size (default 200,000)
#   --alloc-n N     alloc / free / pair transactions per size (default 100,000)
#   --threads LIST  map thread counts (default 1,2)
#   --maps LIST     maps (default btree,rbtree,hash)
#   --words LIST    words written per transaction in the size sweep (default 1,2,4,8,16,32,64;
#                   n = --tx-n transactions per point)
#   --elements LIST list lengths (default 10,100,1000,10000,100000)
#   --list-ops N    push_back / pop_front transactions per list length (default 100,000)
#   --visits V      element visits per iterate op (default 1,000,000; at least one transaction)
#   --no-redo       do not build or run the kavach-redo library (Kavach's redo mode)
#   --out DIR       report directory (default target/bench/heap-<UTC date-time>)
#   --pmemobj-only  do not build or run Kavach (to check the harness while it does not build)
#   --redundancy LIST  also run Kavach (undo mode) on pools created with these redundancy modes
#                   (lazy, eager, txb-object, txb-page: kv_pool_create_flags with KV_CREATE_*),
#                   as libraries kavach-MODE; "kavach" stays redundancy off.
#                   The report gets a "Redundancy" table (each mode against off)
#
# Libraries: pmemobj (libpmemobj), kavach (Kavach, undo mode, the same calls as pmemobj) and
# kavach-redo (Kavach in redo mode: kv_tx_begin_mode(KV_TX_REDO), kv_tx_write, kv_tx_read; not
# for the maps, which store directly). See pm.h.
#   --wait-idle S   before every cell, wait up to S seconds (default 600; 0: do not wait) while
#                   cargo or rustc runs or another process uses more than 20% of a CPU; cells
#                   that ran with such a process anyway are marked in the report
#
# Environment: KAVACH_LIB=path/to/libkavach.a uses that library instead of running
# `cargo build --release -p kavach-heap-ffi`; HEAP_BENCH_SHM_DIR (default /dev/shm) is where
# the pools go (a temporary directory, removed on exit).
#
# What it does: builds libkavach.a (cargo, release), compiles txbench, mapbench and selftest
# once per library (gcc -O2; pm.h picks the library), runs selftest on both (pm.h semantics and
# map correctness; the run stops if either fails), a short validation of every map with a pool
# close + reopen, then the timed cells. Every process creates a fresh pool and deletes it. PMDK
# runs with PMEM_IS_PMEM_FORCE=1 (clwb + sfence, not msync). The load average is logged at the
# start, after every cell and at the end. Report: DIR/report.md (tables, ratios), DIR/results.json,
# raw outputs in DIR/raw/, DIR/runs.jsonl (one line per process), DIR/loads.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/heap"

log() { printf '[heap-bench] %s\n' "$*" >&2; }
die() { printf '[heap-bench] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

QUICK=0
ROUNDS=""
ONLY=""
KEYS=""
SIZES="64,256,1024,4096"
TX_N=""
ALLOC_N=""
THREADS="1,2"
MAPS="btree,rbtree,hash"
WORDS="1,2,4,8,16,32,64"
ELEMENTS=""
LIST_OPS=""
VISITS=""
REDO=1
OUTDIR=""
PMEMOBJ_ONLY=0
WAIT_IDLE=600
REDUNDANCY=""
ARGS_ORIG="$*"

need() { [ $# -ge 2 ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --rounds) need "$@"; ROUNDS="$2"; shift ;;
    --only) need "$@"; ONLY="$2"; shift ;;
    --keys) need "$@"; KEYS="$2"; shift ;;
    --sizes) need "$@"; SIZES="$2"; shift ;;
    --tx-n) need "$@"; TX_N="$2"; shift ;;
    --alloc-n) need "$@"; ALLOC_N="$2"; shift ;;
    --threads) need "$@"; THREADS="$2"; shift ;;
    --maps) need "$@"; MAPS="$2"; shift ;;
    --words) need "$@"; WORDS="$2"; shift ;;
    --elements) need "$@"; ELEMENTS="$2"; shift ;;
    --list-ops) need "$@"; LIST_OPS="$2"; shift ;;
    --visits) need "$@"; VISITS="$2"; shift ;;
    --no-redo) REDO=0 ;;
    --out) need "$@"; OUTDIR="$2"; shift ;;
    --pmemobj-only) PMEMOBJ_ONLY=1 ;;
    --wait-idle) need "$@"; WAIT_IDLE="$2"; shift ;;
    --redundancy) need "$@"; REDUNDANCY="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
case "$ONLY" in ""|tx|words|list|maps) ;; *) die "--only takes tx, words, list or maps" ;; esac
if [ "$QUICK" = 1 ]; then
  : "${ROUNDS:=1}" "${KEYS:=50000}" "${TX_N:=20000}" "${ALLOC_N:=10000}"
  : "${ELEMENTS:=10,100,1000}" "${LIST_OPS:=2000}" "${VISITS:=20000}"
else
  : "${ROUNDS:=3}" "${KEYS:=1000000}" "${TX_N:=200000}" "${ALLOC_N:=100000}"
  : "${ELEMENTS:=10,100,1000,10000,100000}" "${LIST_OPS:=100000}" "${VISITS:=1000000}"
fi
[[ "$WAIT_IDLE" =~ ^[0-9]+$ ]] || die "--wait-idle takes seconds"
for v in "$ROUNDS" "$KEYS" "$TX_N" "$ALLOC_N" "$LIST_OPS" "$VISITS"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"
done
IFS=, read -r -a SIZE_LIST <<< "$SIZES"
IFS=, read -r -a THREAD_LIST <<< "$THREADS"
IFS=, read -r -a MAP_LIST <<< "$MAPS"
IFS=, read -r -a WORD_LIST <<< "$WORDS"
IFS=, read -r -a ELEMENT_LIST <<< "$ELEMENTS"
RED_LIST=()
[ -n "$REDUNDANCY" ] && IFS=, read -r -a RED_LIST <<< "$REDUNDANCY"
for v in "${RED_LIST[@]}"; do
  case "$v" in lazy|eager|txb-page|txb-object) ;; *) die "--redundancy: '$v' is not lazy, eager, txb-page or txb-object" ;; esac
done
for v in "${WORD_LIST[@]}"; do [[ "$v" =~ ^[1-9][0-9]*$ ]] && (( v <= 64 )) || die "--words: '$v' is not in 1..64"; done
for v in "${ELEMENT_LIST[@]}"; do [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "--elements: '$v' is not a positive integer"; done

STAMP="$(date -u +%Y%m%d-%H%M%S)"
OUT="${OUTDIR:-$ROOT/target/bench/heap-$STAMP}"
mkdir -p "$OUT/raw" "$OUT/bin"
LOADS="$OUT/loads.log"
RUNS="$OUT/runs.jsonl"
: > "$LOADS"
: > "$RUNS"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
note_load "start (uptime: $(uptime | sed 's/^ *//'))"
if pgrep -x cargo >/dev/null || pgrep -x rustc >/dev/null; then
  log "warning: cargo/rustc is running on this machine; timings may be disturbed"
  note_load "cargo/rustc running at start: $(pgrep -a -x cargo | head -n 3 | tr '\n' ';')"
fi

# --- build --------------------------------------------------------------------------------------
[ -f /usr/include/libpmemobj.h ] || die "libpmemobj.h missing: apt-get install libpmemobj-dev"
PMDK_VERSION="$(dpkg-query -W -f='${Version}' libpmemobj-dev 2>/dev/null || pkg-config --modversion libpmemobj 2>/dev/null || echo unknown)"
BIN="$OUT/bin"
CFLAGS=(-O2 -g -std=gnu11 -Wall -Wextra -pthread)
MAP_SRCS=("$HERE/btree_map.c" "$HERE/rbtree_map.c" "$HERE/hash_map.c")

build_side() { # build_side BACKEND_DEFINE SUFFIX EXTRA_CFLAGS... -- LIBS...
  local def="$1" sfx="$2"; shift 2
  local extra=() libs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do extra+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  libs=("$@")
  log "compiling $sfx harnesses"
  gcc "${CFLAGS[@]}" -D"$def" "${extra[@]}" -o "$BIN/txbench-$sfx" "$HERE/txbench.c" "${libs[@]}"
  gcc "${CFLAGS[@]}" -D"$def" "${extra[@]}" -o "$BIN/listbench-$sfx" "$HERE/listbench.c" "${libs[@]}"
  gcc "${CFLAGS[@]}" -D"$def" "${extra[@]}" -o "$BIN/mapbench-$sfx" "$HERE/mapbench.c" \
    "${MAP_SRCS[@]}" "${libs[@]}"
  gcc "${CFLAGS[@]}" -D"$def" -DHM_LOG=6 "${extra[@]}" -o "$BIN/selftest-$sfx" \
    "$HERE/selftest.c" "${MAP_SRCS[@]}" "${libs[@]}"
}

build_side KV_BACKEND_PMEMOBJ pmemobj -- -lpmemobj

KAVACH_DESC="not run (--pmemobj-only)"
BACKENDS=(pmemobj)
if [ "$PMEMOBJ_ONLY" = 0 ]; then
  if [ -n "${KAVACH_LIB:-}" ]; then
    LIB="$KAVACH_LIB"
    log "using $LIB (KAVACH_LIB)"
  else
    log "cargo build --release -p kavach-heap-ffi"
    (cd "$ROOT" && cargo build --release -p kavach-heap-ffi) >&2 \
      || die "cargo build --release -p kavach-heap-ffi failed (use --pmemobj-only to check the harness alone)"
    LIB="${CARGO_TARGET_DIR:-$ROOT/target}/release/libkavach.a"
  fi
  [ -f "$LIB" ] || die "$LIB not found"
  cp "$LIB" "$BIN/libkavach.a"
  build_side KV_BACKEND_KAVACH kavach -I"$ROOT/crates/heap-ffi/include" -- \
    "$BIN/libkavach.a" -lpthread -ldl -lm
  if [ "$REDO" = 1 ]; then
    build_side KV_BACKEND_KAVACH kavach-redo -DKV_KAVACH_REDO -I"$ROOT/crates/heap-ffi/include" -- \
      "$BIN/libkavach.a" -lpthread -ldl -lm
  fi
  REV="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  DIRTY="$(cd "$ROOT" && git status --porcelain -- crates/heap crates/heap-ffi crates/pmem 2>/dev/null | wc -l)"
  KAVACH_DESC="git $REV$( [ "$DIRTY" != 0 ] && echo " + $DIRTY uncommitted/untracked paths in crates/heap, crates/heap-ffi, crates/pmem"), libkavach.a sha256 $(sha256sum "$BIN/libkavach.a" | cut -c1-16), built $(date -u -r "$BIN/libkavach.a" '+%Y-%m-%dT%H:%M:%SZ')"
  BACKENDS=(kavach pmemobj)
  [ "$REDO" = 1 ] && BACKENDS=(kavach kavach-redo pmemobj)
  for v in "${RED_LIST[@]}"; do
    flag="KV_CREATE_$(echo "$v" | tr 'a-z-' 'A-Z_')"
    build_side KV_BACKEND_KAVACH "kavach-$v" -DKV_CREATE_MODE="$flag" \
      -I"$ROOT/crates/heap-ffi/include" -- "$BIN/libkavach.a" -lpthread -ldl -lm
    BACKENDS+=("kavach-$v")
  done
fi

# --- pools ------------------------------------------------------------------------------------
SHM_BASE="${HEAP_BENCH_SHM_DIR:-/dev/shm}"
[ -d "$SHM_BASE" ] || die "$SHM_BASE does not exist"
SHM_DIR="$(mktemp -d "$SHM_BASE/kavach-heapbench.XXXXXX")"
cleanup() { rm -rf -- "$SHM_DIR"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
FS_TYPE="$(stat -f -c %T "$SHM_BASE" 2>/dev/null || echo unknown)"

FAILED=0
BUSY=""   # set by the timed loop: other processes seen before the cell
# run_one NAME BACKEND ROUND CELL ARGS...: one process; stdout -> raw/NAME.out, stderr -> .err
run_one() {
  local name="$1" be="$2" round="$3" cell="$4"; shift 4
  local exe="$1"; shift
  local out="$OUT/raw/$name.out" err="$OUT/raw/$name.err" rc=0 t0 t1
  t0=$(date +%s.%N)
  if [ "$be" = pmemobj ]; then
    PMEM_IS_PMEM_FORCE=1 "$BIN/$exe-$be" "$@" > "$out" 2> "$err" || rc=$?
  else
    "$BIN/$exe-$be" "$@" > "$out" 2> "$err" || rc=$?
  fi
  t1=$(date +%s.%N)
  rm -f -- "$SHM_DIR"/*.pool
  printf '{"name":"%s","backend":"%s","round":%s,"cell":"%s","rc":%d,"seconds":%.2f,"load":"%s","busy_before":"%s","busy_after":"%s","args":"%s %s"}\n' \
    "$name" "$be" "$round" "$cell" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
    "$(loadavg)" "$BUSY" "$( [ "$round" = 0 ] || others 20)" "$exe" "$*" >> "$RUNS"
  if [ "$rc" != 0 ]; then
    FAILED=$((FAILED + 1))
    log "FAILED: $name (exit $rc); last lines of $err:"
    tail -n 5 "$err" >&2
  fi
  return 0
}

# --- selftest and validation ------------------------------------------------------------------
for be in "${BACKENDS[@]}"; do
  log "selftest $be"
  run_one "selftest-$be" "$be" 0 selftest selftest --dir "$SHM_DIR"
done
[ "$FAILED" = 0 ] || die "selftest failed (see $OUT/raw/selftest-*.err); not timing anything"
if [ -z "$ONLY" ] || [ "$ONLY" = maps ]; then
  for be in "${BACKENDS[@]}"; do
    [ "$be" = kavach-redo ] && continue # the maps store directly: undo mode only
    for m in "${MAP_LIST[@]}"; do
      for t in "${THREAD_LIST[@]}"; do
        log "validate $be $m T=$t (20,000 keys, close + reopen between phases)"
        run_one "validate-$m-t$t-$be" "$be" 0 "validate-$m-t$t" mapbench --map "$m" \
          --threads "$t" --keys 20000 --seed 7 --reopen --pool-mib 512 --dir "$SHM_DIR"
      done
    done
  done
  note_load "after validation"
fi
VALIDATE_FAILED=$FAILED
[ "$VALIDATE_FAILED" = 0 ] || log "warning: $VALIDATE_FAILED validation run(s) failed; continuing with the timed cells"

# --- timed cells ------------------------------------------------------------------------------
CELLS=()
if [ -z "$ONLY" ] || [ "$ONLY" = tx ]; then
  for s in "${SIZE_LIST[@]}"; do
    CELLS+=("tx overwrite $s" "tx allocfree $s" "tx pair $s")
  done
fi
if [ -z "$ONLY" ] || [ "$ONLY" = words ]; then
  for w in "${WORD_LIST[@]}"; do CELLS+=("tx words $w"); done
fi
if [ -z "$ONLY" ] || [ "$ONLY" = list ]; then
  for e in "${ELEMENT_LIST[@]}"; do CELLS+=("list $e -"); done
fi
if [ -z "$ONLY" ] || [ "$ONLY" = maps ]; then
  for m in "${MAP_LIST[@]}"; do
    for t in "${THREAD_LIST[@]}"; do CELLS+=("map $m $t"); done
  done
fi

START=$(date +%s)
log "${#CELLS[@]} cells x ${#BACKENDS[@]} libraries x $ROUNDS round(s); pools in $SHM_DIR ($FS_TYPE)"
for ((r = 1; r <= ROUNDS; r++)); do
  for ((c = 0; c < ${#CELLS[@]}; c++)); do
    read -r kind a b <<< "${CELLS[$c]}"
    BUSY="$(wait_idle "round $r cell ${CELLS[$c]}")"
    # The libraries of this cell, the first one rotating by cell and by round.
    cell_be=()
    for be in "${BACKENDS[@]}"; do
      [ "$kind" = map ] && [ "$be" = kavach-redo ] && continue
      cell_be+=("$be")
    done
    order=()
    for ((k = 0; k < ${#cell_be[@]}; k++)); do
      order+=("${cell_be[$(( (k + r + c) % ${#cell_be[@]} ))]}")
    done
    for be in "${order[@]}"; do
      if [ "$kind" = list ]; then
        log "round $r/$ROUNDS cell $((c + 1))/${#CELLS[@]}: list of $a elements, $be"
        run_one "r$r-list-$a-$be" "$be" "$r" "list-$a" listbench --elements "$a" \
          --ops "$LIST_OPS" --visits "$VISITS" --dir "$SHM_DIR"
      elif [ "$kind" = tx ]; then
        n="$ALLOC_N"; { [ "$a" = overwrite ] || [ "$a" = words ]; } && n="$TX_N"
        log "round $r/$ROUNDS cell $((c + 1))/${#CELLS[@]}: tx $a ${b} B, $be"
        run_one "r$r-tx-$a-$b-$be" "$be" "$r" "tx-$a-$b" txbench --op "$a" --size "$b" \
          --n "$n" --dir "$SHM_DIR"
      else
        log "round $r/$ROUNDS cell $((c + 1))/${#CELLS[@]}: map $a T=$b, $be"
        run_one "r$r-map-$a-t$b-$be" "$be" "$r" "map-$a-t$b" mapbench --map "$a" --threads "$b" \
          --keys "$KEYS" --seed "$r" --dir "$SHM_DIR"
      fi
    done
    note_load "after round $r cell ${CELLS[$c]} (others: $(others 5))"
  done
done
ELAPSED=$(( $(date +%s) - START ))
note_load "end"

# --- report -----------------------------------------------------------------------------------
CPU_MODEL="$(grep -m1 -E '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
FLUSH_INSNS="$(grep -m1 -oE '\b(clwb|clflushopt)\b' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)"
MEM_GIB="$(awk '/MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
python3 "$HERE/summarize.py" "$OUT" \
  --meta "date=$(date -u '+%Y-%m-%dT%H:%M:%SZ') (started $STAMP UTC)" \
  --meta "command=bench/heap/run.sh $ARGS_ORIG" \
  --meta "rounds=$ROUNDS; tx sizes $SIZES; overwrite and words n=$TX_N, alloc/free/pair n=$ALLOC_N (warm-up n/10); words per tx $WORDS; list elements $ELEMENTS, push/pop n=$LIST_OPS, $VISITS visits per iterate op; map keys $KEYS, threads $THREADS; $ELAPSED s of timed cells" \
  --meta "kernel=$(uname -r)" \
  --meta "cpu=${CPU_MODEL:-unknown} ($(nproc) cpus online, ${MEM_GIB} GiB RAM; cpuinfo flags: ${FLUSH_INSNS:-none of clwb/clflushopt})" \
  --meta "medium=pool files in $SHM_BASE ($FS_TYPE): persistent memory emulated in DRAM, not durable across reboot" \
  --meta "persistence_domain=both libraries flush with cache-line write-back + fence at commit: PMDK with PMEM_IS_PMEM_FORCE=1 (libpmem picks clwb when the CPU has it; no msync); Kavach on /dev/shm: domain adr emulated (clwb + sfence), as its design states (kavach.h has no call that reports the domain)" \
  --meta "pmdk=libpmemobj $PMDK_VERSION (Debian), public API only, transactions begun with a NULL jmp_buf" \
  --meta "kavach=$KAVACH_DESC" \
  --meta "compiler=$(gcc --version | head -n1), ${CFLAGS[*]}" \
  --meta "load_average=$(head -n1 "$LOADS" | sed 's/.*load \([0-9. ]*\).*/\1/') at start, $(loadavg) at end (every cell in loads.log)" \
  > "$OUT/report.md" || die "summarize.py failed"
cat "$OUT/report.md"
log "report: $OUT/report.md, $OUT/results.json; raw outputs in $OUT/raw/"
if [ "$FAILED" != 0 ]; then
  log "$FAILED run(s) FAILED: see the 'Failures' section of the report"
  exit 1
fi
