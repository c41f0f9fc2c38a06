#!/usr/bin/env bash
# Flush-on-fail against flush-on-commit: the WSP paper's hash-table and AVL-tree workloads on
# libpmemobj, Kavach's heap (undo, redo, redo with durability on demand) and plain DRAM, in one
# run. See bench/fof/README.md.
#
#   bench/fof/run.sh [--quick] [--rounds R] [--only hash|avl] [--updates LIST] [--entries N]
#                    [--ops N] [--inserts N] [--configs LIST] [--no-ltx] [--window-ms W]
#                    [--wait-idle SECS] [--out DIR]
#
#   --quick         smoke run (a few seconds): 1 round, updates 0,50,100, 10,000 entries,
#                   50,000 operations, 10,000 AVL inserts
#   --rounds R      rounds (default 5); in every cell the configurations run back to back, the
#                   order rotating by cell and by round and reversed every other round (ABBA)
#   --only X        only the hash table (hash) or only the AVL tree (avl)
#   --updates LIST  update percentages of the hash table (default 0,10,...,100)
#   --entries N     hash entries prepopulated (default 100,000)
#   --ops N         timed hash operations (default 1,000,000)
#   --inserts N     AVL inserts (default 100,000)
#   --configs LIST  configurations (default pmemobj,kavach-undo,kavach-redo,kavach-fof,volatile;
#                   `wsp` is added when WSP_WRAP is set)
#   --no-ltx        do not run the per-lookup-transaction variants (CONFIG+ltx) of the hash cells
#   --window-ms W   kavach-fof's save window (default 33)
#   --wait-idle S   before every cell wait up to S seconds (default 600; 0: do not wait) while
#                   cargo or rustc runs or another process uses more than 20% of a CPU; cells
#                   that ran with such a process anyway are marked busy in the report
#   --out DIR       report directory (default target/bench/fof-<UTC date-time>)
#
# Configurations (one C source, fofbench.c, compiled per configuration; fof.h):
#   pmemobj      libpmemobj 1.12, undo log, flush on commit, PMEM_IS_PMEM_FORCE=1
#   kavach-undo  Kavach's heap through kavach.h, undo log, flush on commit
#   kavach-redo  Kavach's heap, redo log (kv_tx_write / kv_tx_read), flush on commit
#   kavach-fof   the same binary with KAVACH_ON_DEMAND_MS=W: kv_pool_on_demand(W), commits store
#                in place without flush or fence; a save on SIGPWR writes the dirty lines back
#   volatile     the same code on malloc'd DRAM: no transactions, no log, no flush (static,
#                non-PIE binary)
#   wsp          (only with WSP_WRAP) the volatile binary run as: $WSP_WRAP BINARY ARGS, e.g.
#                WSP_WRAP=bench/fof/wsp-wrap.sh (a fresh image per run, removed after it)
#   X+ltx        hash cells below 100% updates: X with every lookup in a transaction of its own
#
# Environment: KAVACH_LIB=path/libkavach.a (skip `cargo build --release -p kavach-heap-ffi`),
# FOF_SHM_DIR (default /dev/shm: where the pools go, in a temporary directory removed on exit),
# WSP_WRAP (above).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/fof"

log() { printf '[fof-bench] %s\n' "$*" >&2; }
die() { printf '[fof-bench] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

QUICK=0
ROUNDS=""
ONLY=""
UPDATES=""
ENTRIES=""
OPS=""
INSERTS=""
CONFIGS="pmemobj,kavach-undo,kavach-redo,kavach-fof,volatile"
LTX=1
WINDOW_MS=33
WAIT_IDLE=600
OUTDIR=""
ARGS_ORIG="$*"

need() { [ $# -ge 2 ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --rounds) need "$@"; ROUNDS="$2"; shift ;;
    --only) need "$@"; ONLY="$2"; shift ;;
    --updates) need "$@"; UPDATES="$2"; shift ;;
    --entries) need "$@"; ENTRIES="$2"; shift ;;
    --ops) need "$@"; OPS="$2"; shift ;;
    --inserts) need "$@"; INSERTS="$2"; shift ;;
    --configs) need "$@"; CONFIGS="$2"; shift ;;
    --no-ltx) LTX=0 ;;
    --window-ms) need "$@"; WINDOW_MS="$2"; shift ;;
    --wait-idle) need "$@"; WAIT_IDLE="$2"; shift ;;
    --out) need "$@"; OUTDIR="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
case "$ONLY" in ""|hash|avl) ;; *) die "--only takes hash or avl" ;; esac
if [ "$QUICK" = 1 ]; then
  : "${ROUNDS:=1}" "${UPDATES:=0,50,100}" "${ENTRIES:=10000}" "${OPS:=50000}" "${INSERTS:=10000}"
else
  : "${ROUNDS:=5}" "${UPDATES:=0,10,20,30,40,50,60,70,80,90,100}" "${ENTRIES:=100000}"
  : "${OPS:=1000000}" "${INSERTS:=100000}"
fi
for v in "$ROUNDS" "$ENTRIES" "$OPS" "$INSERTS"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"
done
[[ "$WAIT_IDLE" =~ ^[0-9]+$ ]] || die "--wait-idle takes seconds"
[[ "$WINDOW_MS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--window-ms takes milliseconds"
IFS=, read -r -a UPDATE_LIST <<< "$UPDATES"
for v in "${UPDATE_LIST[@]}"; do
  [[ "$v" =~ ^[0-9]+$ ]] && (( v <= 100 )) || die "--updates: '$v' is not in 0..100"
done
IFS=, read -r -a CONFIG_LIST <<< "$CONFIGS"
for c in "${CONFIG_LIST[@]}"; do
  case "$c" in pmemobj|kavach-undo|kavach-redo|kavach-fof|volatile) ;;
    *) die "--configs: unknown configuration '$c'" ;; esac
done
WRAP=()
if [ -n "${WSP_WRAP:-}" ]; then
  read -r -a WRAP <<< "$WSP_WRAP"
  CONFIG_LIST+=(wsp)
fi

STAMP="$(date -u +%Y%m%d-%H%M%S)"
OUT="${OUTDIR:-$ROOT/target/bench/fof-$STAMP}"
mkdir -p "$OUT/raw" "$OUT/bin"
LOADS="$OUT/loads.log"
RUNS="$OUT/runs.jsonl"
: > "$LOADS"
: > "$RUNS"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
note_load "start (uptime: $(uptime | sed 's/^ *//'))"

# --- build --------------------------------------------------------------------------------------
[ -f /usr/include/libpmemobj.h ] || die "libpmemobj.h missing: apt-get install libpmemobj-dev"
PMDK_VERSION="$(dpkg-query -W -f='${Version}' libpmemobj-dev 2>/dev/null || echo unknown)"
BIN="$OUT/bin"
CFLAGS=(-O2 -g -std=gnu11 -Wall -Wextra -pthread)
if [ -n "${KAVACH_LIB:-}" ]; then
  LIB="$KAVACH_LIB"
  log "using $LIB (KAVACH_LIB)"
else
  log "cargo build --release -p kavach-heap-ffi"
  (cd "$ROOT" && cargo build --release -p kavach-heap-ffi) >&2 \
    || die "cargo build --release -p kavach-heap-ffi failed"
  LIB="${CARGO_TARGET_DIR:-$ROOT/target}/release/libkavach.a"
fi
[ -f "$LIB" ] || die "$LIB not found"
cp "$LIB" "$BIN/libkavach.a"
KINC=(-I"$ROOT/crates/heap-ffi/include")
KLIBS=("$BIN/libkavach.a" -lpthread -ldl -lm)
log "compiling fofbench for every configuration"
gcc "${CFLAGS[@]}" -DFOF_PMEMOBJ -o "$BIN/fofbench-pmemobj" "$HERE/fofbench.c" -lpmemobj
gcc "${CFLAGS[@]}" -DFOF_KAVACH_UNDO "${KINC[@]}" -o "$BIN/fofbench-kavach-undo" "$HERE/fofbench.c" "${KLIBS[@]}"
gcc "${CFLAGS[@]}" -DFOF_KAVACH_REDO "${KINC[@]}" -o "$BIN/fofbench-kavach-redo" "$HERE/fofbench.c" "${KLIBS[@]}"
gcc "${CFLAGS[@]}" -DFOF_VOLATILE -static -no-pie -o "$BIN/fofbench-volatile" "$HERE/fofbench.c"
REV="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
DIRTY="$(cd "$ROOT" && git status --porcelain -- crates/heap crates/heap-ffi crates/pmem crates/powerfail 2>/dev/null | wc -l)"
KAVACH_DESC="git $REV$( [ "$DIRTY" != 0 ] && echo " + $DIRTY uncommitted paths in crates/heap, heap-ffi, pmem, powerfail"), libkavach.a sha256 $(sha256sum "$BIN/libkavach.a" | cut -c1-16)"

# --- pools --------------------------------------------------------------------------------------
SHM_BASE="${FOF_SHM_DIR:-/dev/shm}"
[ -d "$SHM_BASE" ] || die "$SHM_BASE does not exist"
SHM_DIR="$(mktemp -d "$SHM_BASE/kavach-fof.XXXXXX")"
cleanup() { rm -rf -- "$SHM_DIR"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
FS_TYPE="$(stat -f -c %T "$SHM_BASE" 2>/dev/null || echo unknown)"

FAILED=0
BUSY=""
# run_one NAME CONFIG ROUND CELL ARGS...: one process; stdout -> raw/NAME.out, stderr -> .err
run_one() {
  local name="$1" cfg="$2" round="$3" cell="$4"; shift 4
  local out="$OUT/raw/$name.out" err="$OUT/raw/$name.err" rc=0 t0 t1 base="${cfg%+ltx}"
  local cmd=() envs=()
  case "$base" in
    pmemobj) envs=(PMEM_IS_PMEM_FORCE=1); cmd=("$BIN/fofbench-pmemobj") ;;
    kavach-undo) cmd=("$BIN/fofbench-kavach-undo") ;;
    kavach-redo) envs=(KAVACH_ON_DEMAND_MS=); cmd=("$BIN/fofbench-kavach-redo") ;;
    kavach-fof) envs=(KAVACH_ON_DEMAND_MS="$WINDOW_MS"); cmd=("$BIN/fofbench-kavach-redo") ;;
    volatile) cmd=("$BIN/fofbench-volatile") ;;
    wsp) cmd=("${WRAP[@]}" "$BIN/fofbench-volatile") ;;
  esac
  [ "$cfg" != "$base" ] && set -- "$@" --lookup-tx
  t0=$(date +%s.%N)
  env "${envs[@]}" "${cmd[@]}" "$@" --dir "$SHM_DIR" > "$out" 2> "$err" || rc=$?
  t1=$(date +%s.%N)
  rm -f -- "$SHM_DIR"/*.pool
  printf '{"name":"%s","config":"%s","round":%s,"cell":"%s","rc":%d,"seconds":%.2f,"load":"%s","busy_before":"%s","busy_after":"%s","args":"%s"}\n' \
    "$name" "$cfg" "$round" "$cell" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
    "$(loadavg)" "$BUSY" "$(others 20)" "$*" >> "$RUNS"
  if [ "$rc" != 0 ]; then
    FAILED=$((FAILED + 1))
    log "FAILED: $name (exit $rc); last lines of $err:"
    tail -n 5 "$err" >&2
  fi
  return 0
}

# --- cells --------------------------------------------------------------------------------------
CELLS=()
if [ -z "$ONLY" ] || [ "$ONLY" = hash ]; then
  for u in "${UPDATE_LIST[@]}"; do CELLS+=("hash $u"); done
fi
if [ -z "$ONLY" ] || [ "$ONLY" = avl ]; then CELLS+=("avl 100"); fi

START=$(date +%s)
log "${#CELLS[@]} cells x ${#CONFIG_LIST[@]} configurations (+ltx variants) x $ROUNDS round(s); pools in $SHM_DIR ($FS_TYPE)"
for ((r = 1; r <= ROUNDS; r++)); do
  for ((c = 0; c < ${#CELLS[@]}; c++)); do
    read -r wl u <<< "${CELLS[$c]}"
    cell_cfg=("${CONFIG_LIST[@]}")
    if [ "$wl" = hash ] && [ "$LTX" = 1 ] && [ "$u" != 100 ]; then
      for cfg in "${CONFIG_LIST[@]}"; do
        case "$cfg" in volatile|wsp) ;; *) cell_cfg+=("$cfg+ltx") ;; esac
      done
    fi
    n=${#cell_cfg[@]}
    order=()
    for ((k = 0; k < n; k++)); do order+=("${cell_cfg[$(( (k + r + c) % n ))]}"); done
    if (( r % 2 == 0 )); then
      rev=(); for ((k = n - 1; k >= 0; k--)); do rev+=("${order[$k]}"); done; order=("${rev[@]}")
    fi
    BUSY="$(wait_idle "round $r cell ${CELLS[$c]}")"
    for cfg in "${order[@]}"; do
      if [ "$wl" = hash ]; then
        log "round $r/$ROUNDS cell $((c + 1))/${#CELLS[@]}: hash ${u}% updates, $cfg"
        run_one "r$r-hash-u$u-$cfg" "$cfg" "$r" "hash-$u" --workload hash --entries "$ENTRIES" \
          --ops "$OPS" --update-pct "$u" --seed "$r"
      else
        log "round $r/$ROUNDS cell $((c + 1))/${#CELLS[@]}: avl $INSERTS inserts, $cfg"
        run_one "r$r-avl-$cfg" "$cfg" "$r" "avl" --workload avl --inserts "$INSERTS" --seed "$r"
      fi
    done
    note_load "after round $r cell ${CELLS[$c]} (others: $(others 5))"
  done
done
ELAPSED=$(( $(date +%s) - START ))
note_load "end"

# --- report -------------------------------------------------------------------------------------
CPU_MODEL="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
FLUSH_INSNS="$(grep -m1 -oE '\b(clwb|clflushopt)\b' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)"
MEM_GIB="$(awk '/MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
python3 "$HERE/summarize.py" "$OUT" \
  --meta "date=$(date -u '+%Y-%m-%dT%H:%M:%SZ') (started $STAMP UTC, $ELAPSED s of timed cells)" \
  --meta "command=bench/fof/run.sh $ARGS_ORIG" \
  --meta "sizes=rounds $ROUNDS; hash: $ENTRIES entries prepopulated, $OPS timed operations, updates $UPDATES %; AVL: $INSERTS inserts into an empty tree" \
  --meta "kernel=$(uname -r)" \
  --meta "cpu=${CPU_MODEL:-unknown} (lscpu; $(nproc) cpus online, ${MEM_GIB} GiB RAM; cpuinfo flags: ${FLUSH_INSNS:-none of clwb/clflushopt})" \
  --meta "medium=pool files in $SHM_BASE ($FS_TYPE): persistent memory emulated in DRAM, not durable across reboot" \
  --meta "pmemobj=libpmemobj $PMDK_VERSION (Debian), PMEM_IS_PMEM_FORCE=1: undo log, flushes (clwb) + fences every snapshotted range, allocated block and its own metadata at commit" \
  --meta "kavach-undo=Kavach heap, undo mode, domain adr emulated: clwb + sfence of snapshots, data and commit state at commit" \
  --meta "kavach-redo=Kavach heap, redo mode, durability at commit: redo log and data flushed + fenced at commit" \
  --meta "kavach-fof=Kavach heap, redo mode, kv_pool_on_demand($WINDOW_MS ms): no flush, no fence at commit; dirty lines written back by the save on a warning (none was raised in this run)" \
  --meta "volatile=malloc'd DRAM, no transactions, no log, no flush (static, non-PIE binary)$( [ ${#WRAP[@]} -gt 0 ] && echo "; wsp = the same binary under: ${WRAP[*]}")" \
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
