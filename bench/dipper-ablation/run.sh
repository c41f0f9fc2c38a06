#!/usr/bin/env bash
# DIPPER's ablation (issue 27; the dissertation's Fig. 4.16 and Table 4.6): the same store with
# DIPPER's mirror-and-stream checkpoint and logical logging, a copy-on-write checkpoint, a
# quiescing checkpoint and physical (redo) logging, in one run of one process.
#
#   bench/dipper-ablation/run.sh [--quick] [-- HARNESS OPTIONS...]
#
# Options after `--` go to the harness (crates/dipper/examples/ablation.rs; see its --help),
# e.g. `-- --records 1000000 --threads 16 --seconds 60`. --quick: 20,000 records, 3 s per
# variant, one round (a smoke run).
#
# What it does:
#   1. builds the harness: cargo build --release -p kavach-dipper --example ablation;
#   2. runs it with its pools in /dev/shm/dipper-ablation.$$ (one pool at a time, removed
#      after each variant, the directory on exit): a load phase, then a timed YCSB-A-like
#      phase (zipfian 0.99, 50% reads) per variant, rounds alternating the order (ABBA);
#   3. leaves in bench/dipper-ablation/results/<UTC date-time>/: summary.md (the table, with
#      the CPU model, the load average and the dissertation's figures beside), summary.csv,
#      timeline.csv (operations per 100 ms bucket, checkpoint marks) and timeline.png.
# Exit status: 0 done, 2 could not run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { printf '[dipper-ablation] %s\n' "$*" >&2; }
die() { printf '[dipper-ablation] error: %s\n' "$*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

QUICK=()
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=(--records 20000 --seconds 3 --rounds 1 --log-mib 8) ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

log "cargo build --release -p kavach-dipper --example ablation"
(cd "$ROOT" && cargo build --release -p kavach-dipper --example ablation) \
  || die "cargo build failed"
EXE="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/ablation"
[ -x "$EXE" ] || die "no harness at $EXE"

SHM="/dev/shm/dipper-ablation.$$"
OUT="$ROOT/bench/dipper-ablation/results/$(date -u +%Y-%m-%dT%H%M%SZ)"
trap 'rm -rf "$SHM"' EXIT
mkdir -p "$OUT"
log "load before: $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT"
"$EXE" --dir "$SHM" --out "$OUT" "${QUICK[@]}" "${EXTRA[@]}" | tee "$OUT/stdout.txt" \
  || die "the harness failed"
log "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
