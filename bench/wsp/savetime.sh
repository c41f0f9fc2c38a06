#!/usr/bin/env bash
# Save-time figures of whole-process persistence (`kavach wsp`), for docs/wsp.md:
#   - handler latency (marker_ns) against dirty bytes (16 MiB .. 1 GiB) and threads (1, 2, 4, 8);
#   - write-back none / all / tracked lines before the marker;
#   - the hibernate baseline (copy all writable memory into the image at the warning);
#   - success rate against windows of 1, 5, 10, 33 and 100 ms with a CPU hog running;
#   - write-back of tracked pages at a second save, when only a 16 MiB working set was written;
#   - the transparency oracle at a few hundred MiB (transparency.py: 5 power failures each).
#
# Usage: bench/wsp/savetime.sh [--quick] [--only latency|writeback|hibernate|tracked|window|transparency]...
# Results: bench/wsp/results-YYYYMMDD/{machine.txt,<experiment>.jsonl,summary.md}.
# The images live on /dev/shm (tmpfs: the persistence domain of these figures).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/bench/wsp"
log() { printf '%s savetime: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 2; }

QUICK=()
ONLY=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--quick) ;;
    --only) shift; ONLY+=("${1:?--only needs an experiment}") ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (try --help)" ;;
  esac
  shift
done
[ ${#ONLY[@]} -gt 0 ] || ONLY=(latency writeback hibernate tracked window transparency)

OUT="$HERE/results-$(date -u +%Y%m%d)"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/wsp-bench-bin"
mkdir -p "$OUT" "$BIN"
SHM=/dev/shm/kavach-wsp-bench-$$
trap 'rm -rf "$SHM"' EXIT

log "cargo build --release -p kavach"
(cd "$ROOT" && cargo build --release -p kavach >&2) || die "cargo build failed"
KAVACH="${CARGO_TARGET_DIR:-$ROOT/target}/release/kavach"
[ -x "$KAVACH" ] || die "no $KAVACH"

for p in hashchain hashchain_mt sortsum; do
  gcc -O2 -Wall -Wextra -static -no-pie -pthread -o "$BIN/$p" \
    "$ROOT/crates/wsp/tests/programs/$p.c" || die "gcc $p"
done

# A later run into the same day's directory (e.g. --only one experiment) adds its own block.
[ -s "$OUT/machine.txt" ] && echo "--- a later run ---" >> "$OUT/machine.txt"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: bench/wsp/savetime.sh ${QUICK[*]:-} ${ONLY[*]}"
  echo "commit: $(cd "$ROOT" && git rev-parse --short HEAD)"
  echo "kernel: $(uname -r)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|L1d|L2|L3)' | sed 's/  */ /g'
  echo "persistence domain: tmpfs $(df -h /dev/shm | awk 'NR==2 {print $1, $2}') at /dev/shm"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >> "$OUT/machine.txt"
cat "$OUT/machine.txt" >&2

for e in "${ONLY[@]}"; do
  log "experiment $e"
  if [ "$e" = transparency ]; then
    python3 "$HERE/transparency.py" --kavach "$KAVACH" --bin "$BIN" --shm "$SHM" \
      --failures 5 > "$OUT/$e.jsonl"
  else
    python3 "$HERE/savetime.py" --kavach "$KAVACH" --bin "$BIN" --shm "$SHM" \
      --experiment "$e" --reps 5 "${QUICK[@]}" > "$OUT/$e.jsonl"
  fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
python3 "$HERE/summarize.py" "$OUT" > "$OUT/summary.md"
log "wrote $OUT/summary.md"
cat "$OUT/summary.md"
