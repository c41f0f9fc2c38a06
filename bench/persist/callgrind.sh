#!/usr/bin/env bash
# Drift-free instruction counts per persist: libpmem vs Kavach, under callgrind.
#
#   bench/persist/callgrind.sh
#
# Environment:
#   CG_SIZES   space/comma list of sizes        (default "64 4096")
#   CG_ITERS   N, iterations of the small run   (default 20000; the other is 2N)
#   KAVACH_BENCH_BIN   prebuilt Kavach harness instead of the cargo build
#   KAVACH_PERSIST_FN  regex naming Kavach's persist function in callgrind's
#                      (demangled) symbol names (default: "persist")
#
# Method -- why two runs instead of reading one callgrind_annotate listing:
# each harness runs under `valgrind --tool=callgrind` with --iters N and with
# --iters 2N (one size, --rounds 1). Process start, mapping, the 64 MiB
# prefault, the warm-ups and the clock reads are identical in both, so the
# difference of the totals divided by N is exactly the cost of one
# persist-loop iteration plus one store-only-loop iteration, with no
# dependence on symbol names (Kavach's persist may well be inlined). The same
# difference taken per callee (calls and inclusive Ir, parsed from the
# callgrind output by callgrind_report.py) gives the exact Ir per call of
# pmem_persist, and of Kavach's persist function when it is a real call.
# callgrind_annotate --inclusive=yes listings of the 2N runs are kept next to
# the raw outputs for reading by hand.
#
# Caveat: valgrind 3.19 hides CLFLUSHOPT/CLWB from CPUID and cannot decode
# CLWB (SIGILL). libpmem therefore takes its clflush path under callgrind
# (same instruction count per line as its clwb path: one flush per 64-byte
# line + one sfence). A harness that issues clwb without checking CPUID will
# die with SIGILL here.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/persist"
OUT="$ROOT/target/bench"
CG="$OUT/callgrind"

SIZES="${CG_SIZES:-64 4096}"
SIZES="${SIZES//,/ }"
ITERS="${CG_ITERS:-20000}"

log() { printf '[callgrind] %s\n' "$*" >&2; }
die() { printf '[callgrind] error: %s\n' "$*" >&2; exit 2; }

case "${1:-}" in
  "") ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) die "unknown argument '$1' (configure with CG_SIZES / CG_ITERS)" ;;
esac
[[ "$ITERS" =~ ^[1-9][0-9]*$ ]] || die "CG_ITERS must be a positive integer, got '$ITERS'"
for s in $SIZES; do
  [[ "$s" =~ ^[1-9][0-9]*$ ]] || die "CG_SIZES entries must be positive integers, got '$s'"
done
command -v valgrind >/dev/null 2>&1 || die "valgrind is not installed (apt-get install valgrind)"

# --- build both harnesses (shared with run.sh) ------------------------------
mkdir -p "$CG"
# shellcheck source=bench/persist/build.sh
source "$HERE/build.sh"

SHM_FILE="$(mktemp /dev/shm/kavach-callgrind.XXXXXX)"
trap 'rm -f -- "$SHM_FILE"' EXIT
trap 'exit 130' INT TERM
export PMEM_IS_PMEM_FORCE=1

# cg_run LABEL BIN SIZE ITERS -> writes $CG/LABEL-SIZE-ITERS.out
cg_run() {
  local label="$1" bin="$2" size="$3" iters="$4"
  local out="$CG/$label-$size-$iters.out"
  log "$label size $size iters $iters"
  valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
      --callgrind-out-file="$out" \
      "$bin" --file "$SHM_FILE" --sizes "$size" --iters "$iters" --rounds 1 \
      > "$CG/$label-$size-$iters.stdout" 2> "$CG/$label-$size-$iters.log" \
    || { tail -n 15 "$CG/$label-$size-$iters.log" >&2
         die "$label harness failed under callgrind (size $size, iters $iters)"; }
}

SPECS=()
for s in $SIZES; do
  for side in libpmem kavach; do
    if [ "$side" = libpmem ]; then bin="$CBIN"; else bin="$KBIN"; fi
    cg_run "$side" "$bin" "$s" "$ITERS"
    cg_run "$side" "$bin" "$s" "$((2 * ITERS))"
    callgrind_annotate --inclusive=yes "$CG/$side-$s-$((2 * ITERS)).out" \
      > "$CG/$side-$s-$((2 * ITERS)).annotate.txt" 2>/dev/null || true
    SPECS+=("$side:$s:$CG/$side-$s-$ITERS.out:$CG/$side-$s-$((2 * ITERS)).out")
  done
done

{
  echo "# Persist instruction counts (callgrind)"
  echo
  echo "- date: $(date -u '+%Y-%m-%dT%H:%M:%SZ'), kernel $(uname -r), $(valgrind --version)"
  echo "- libpmem flush path under valgrind: $(grep -h -o 'instruction (inferred): [^;]*' \
          "$CG"/libpmem-*.log | head -n1 | sed 's/instruction (inferred): //')"
  echo
  python3 "$HERE/callgrind_report.py" --iters "$ITERS" \
    --fn-regex 'libpmem=^pmem_persist$' \
    --fn-regex "kavach=${KAVACH_PERSIST_FN:-persist}" \
    "${SPECS[@]}"
} | tee "$OUT/persist-callgrind.md"
log "raw callgrind outputs and annotate listings in $CG"
