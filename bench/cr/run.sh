#!/usr/bin/env bash
# Checkpoint/restart benchmarks of microfs under MPI (issue 22), in one run. See README.md.
#
#   bench/cr/run.sh [OUT_DIR]        (root: it loop-mounts an ext4 image and drops caches)
#
# Env: QUICK=1 (small sizes, for a smoke test), CR_MAX_TOTAL (bytes written per point, all
# processes together; default 2 GiB), CR_NPS ("1 2 4 8"), CR_IMG (the ext4 image file).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench/cr/results-$(date -u +%Y%m%d)}
QUICK=${QUICK:-0}
NPS=${CR_NPS:-"1 2 4 8"}
MiB=$((1 << 20))
if [ "$QUICK" = 1 ]; then
  SIZES="1 16"; MAX_TOTAL=${CR_MAX_TOTAL:-$((64 * MiB))}; SWEEP_MB=16; DRILL_MB=8; CREATES=200
  REMOTE_SIZES="16"
else
  SIZES="1 16 256 1024"; MAX_TOTAL=${CR_MAX_TOTAL:-$((2048 * MiB))}; SWEEP_MB=256; DRILL_MB=32
  CREATES=2000; REMOTE_SIZES="16 256"
fi
IMG=${CR_IMG:-/var/tmp/kavach-cr-bench-ext4.img}
# The shim's coalescing switch (microfs reads it from the environment).
COALESCE_ON=KAVACH_CR_COALESCE=1
COALESCE_OFF=KAVACH_CR_COALESCE=0
MNT=/mnt/kavach-cr-bench-ext4
SHM=/dev/shm/kavach-cr-bench
WORK=$(mktemp -d /tmp/kavach-cr-bench.XXXXXX)
mkdir -p "$OUT" "$SHM"
CSV=$OUT/results.csv
LOG=$OUT/run.log
: >"$LOG"
LOOP=""
SERVER_PID=""

cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  if mountpoint -q "$MNT"; then umount "$MNT"; fi
  [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
  rm -f "$IMG"
  rm -rf "$SHM" "$WORK"
}
trap cleanup EXIT

say() { echo "$*" | tee -a "$LOG"; }

# --- build (release) ------------------------------------------------------------------------
cd "$ROOT"
cargo build --release -q -p kavach-cr-preload -p kavach
PRELOAD=$ROOT/target/release/libkavach_cr.so
KAVACH=$ROOT/target/release/kavach
COMD=$WORK/comd_cr
mpicc -O2 -o "$COMD" crates/microfs-preload/tests/programs/comd_cr.c
cp Cargo.lock bench/cr/cov/Cargo.lock
(cd bench/cr/cov && cargo build --release -q)
COV=$ROOT/bench/cr/cov/target/release/cr-balance-cov

# --- the ext4 loop mount --------------------------------------------------------------------
rm -f "$IMG"
truncate -s 12G "$IMG"
mkfs.ext4 -q -F "$IMG"
LOOP=$(losetup --find --show --direct-io=on "$IMG")
mkdir -p "$MNT"
mount "$LOOP" "$MNT"

# --- the machine ----------------------------------------------------------------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) vCPU)"
  echo "kernel: $(uname -r); memory: $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "mpi: $(mpirun --version | head -1)"
  echo "persistence domains:"
  echo "  /dev/shm: $(findmnt -no FSTYPE -T /dev/shm | head -1) -- RAM, volatile: nothing survives a power cut; it stands for PM"
  echo "  $MNT: ext4 on $LOOP (direct-io=on) backed by $IMG on $(findmnt -no SOURCE,FSTYPE -T "$(dirname "$IMG")" | head -1) (a virtio disk; what the host does with its cache is unknown)"
  echo "sizes per process (MiB): $SIZES, capped at $((MAX_TOTAL / MiB)) MiB written per point; processes: $NPS"
} | tee "$OUT/machine.txt" | tee -a "$LOG"

echo "section,variant,opts,np,bytes_per_proc,hugeblock,write_s,read_s,creates_s,files,user_s,sys_s" >"$CSV"

# One device file per point, sized for np partitions of `bytes` plus room for the logs.
dev_size() { # np bytes
  echo $(($1 * ($2 + $2 / 4 + 96 * MiB)))
}

reps_for() { # bytes
  local b=$1
  if [ "$b" -le $((16 * MiB)) ]; then echo 5; elif [ "$b" -le $((256 * MiB)) ]; then echo 2; else echo 1; fi
}

# bench_point SECTION VARIANT NP BYTES HUGEBLOCK [OPTS [ENV=VALUE...]]
# VARIANT picks the place: kernel-tmpfs, kernel-ext4, shim-shm, shim-ext4, shim-remote;
# OPTS labels the row (the drilldown's configuration), the ENV assignments go to the ranks.
bench_point() {
  local section=$1 variant=$2 np=$3 bytes=$4 hb=$5 opts=${6:--}
  shift 5
  if [ $# -gt 0 ]; then shift; fi
  local reps chunk dir out envs=() drop="" dev="" size
  reps=$(reps_for "$bytes")
  chunk=${CHUNK:-$MiB}
  case $variant in
    kernel-tmpfs) dir=$SHM/k; rm -rf "$dir" ;;
    kernel-ext4) dir=$MNT/k; rm -rf "$dir"; drop=--drop-caches ;;
    shim-*)
      dir=$WORK/cr; mkdir -p "$dir"
      size=$(dev_size "$np" "$bytes")
      case $variant in
        shim-shm) dev=$SHM/dev.$np.$bytes ;;
        shim-ext4) dev=$MNT/dev.$np.$bytes; drop=--drop-caches ;;
        shim-remote) dev="tcp://$SERVER_ADDR/j$RANDOM$RANDOM" ;;
      esac
      case $dev in /*) rm -f "$dev" ;; esac
      envs=(-x "LD_PRELOAD=$PRELOAD" -x "KAVACH_CR_DIR=$dir" -x "KAVACH_CR_DEVICE=$dev"
            -x "KAVACH_CR_SIZE=$size" -x "KAVACH_CR_JOB=bench")
      [ "$hb" != - ] && envs+=(-x "KAVACH_CR_HUGEBLOCK=$hb")
      for kv in "$@"; do envs+=(-x "$kv"); done
      ;;
  esac
  out=$(mpirun --allow-run-as-root --oversubscribe -np "$np" "${envs[@]}" \
        "$COMD" bench "$dir" --bytes "$bytes" --reps "$reps" --chunk "$chunk" $drop 2>>"$LOG") || {
    say "FAILED: $section $variant $opts np=$np bytes=$bytes hb=$hb"; return 0; }
  case $dev in /*) rm -f "$dev" ;; esac
  case $variant in
    kernel-*) rm -rf "$dir" ;;
    shim-*) leak_check "$dir" "$section $variant np=$np" || return 0 ;;
  esac
  local w r us ss
  w=$(echo "$out" | awk '/^bench/{print $3}')
  r=$(echo "$out" | awk '/^bench/{print $5}')
  us=$(echo "$out" | awk '/^bench/{print $13}')
  ss=$(echo "$out" | awk '/^bench/{print $15}')
  echo "$section,$variant,$opts,$np,$bytes,$hb,$w,$r,,,$us,$ss" >>"$CSV"
  say "$section $variant $opts np=$np size=$((bytes / 1024))KiB hb=$hb write ${w}s read ${r}s"
}

# Through the shim nothing may reach the kernel's directory: a file there means the run was not
# intercepted, and its numbers are the kernel's. The row is dropped and the log says so.
leak_check() { # DIR WHAT
  if [ -n "$(find "$1" -mindepth 1 -print -quit 2>/dev/null)" ]; then
    say "NOT INTERCEPTED: $2 left files in $1; row dropped"
    rm -rf "${1:?}"/*
    return 1
  fi
}

create_point() { # VARIANT NP
  local variant=$1 np=$2 dir envs=() shared=""
  case $variant in
    kernel-tmpfs-shared) dir=$SHM/c; shared=--shared ;;
    kernel-ext4-shared) dir=$MNT/c; shared=--shared ;;
    kernel-tmpfs-private) dir=$SHM/c ;;
    shim-shm)
      dir=$WORK/cr; mkdir -p "$dir"
      local dev=$SHM/cdev.$np
      rm -f "$dev"
      envs=(-x "LD_PRELOAD=$PRELOAD" -x "KAVACH_CR_DIR=$dir" -x "KAVACH_CR_DEVICE=$dev"
            -x "KAVACH_CR_SIZE=$((np * 256 * MiB))" -x "KAVACH_CR_JOB=creates") ;;
  esac
  rm -rf "$SHM/c" "$MNT/c"
  local out
  out=$(mpirun --allow-run-as-root --oversubscribe -np "$np" "${envs[@]}" \
        "$COMD" create "$dir" --files "$CREATES" $shared 2>>"$LOG") || {
    say "FAILED: create $variant np=$np"; return 0; }
  rm -f "$SHM/cdev.$np"; rm -rf "$SHM/c" "$MNT/c"
  if [ "$variant" = shim-shm ]; then leak_check "$dir" "create $variant np=$np" || return 0; fi
  local s f
  s=$(echo "$out" | awk '/^create/{print $3}')
  f=$(echo "$out" | awk '/^create/{print $5}')
  echo "create,$variant,-,$np,0,-,,,$s,$f,," >>"$CSV"
  say "create $variant np=$np files=$f in ${s}s"
}

T0=$(date +%s)
# --- 1. bandwidth: the shim against the kernel ----------------------------------------------
for np in $NPS; do
  for mb in $SIZES; do
    bytes=$((mb * MiB))
    [ $((np * bytes)) -le "$MAX_TOTAL" ] || continue
    for v in kernel-tmpfs shim-shm kernel-ext4 shim-ext4; do
      bench_point bw "$v" "$np" "$bytes" -
    done
  done
done
say "bandwidth done at +$(($(date +%s) - T0))s"

# --- 2. hugeblock sweep (2 processes = every core, as the dissertation's full subscription) ----
for hb in 4096 8192 16384 32768 65536 131072 262144 524288 1048576; do
  for v in shim-shm shim-ext4; do
    bench_point sweep "$v" 2 $((SWEEP_MB * MiB)) "$hb"
  done
done
say "sweep done at +$(($(date +%s) - T0))s"

# --- 3. drilldown: each optimisation by itself, 64 KiB writes ---------------------------------
for np in $NPS; do
  b=$((DRILL_MB * MiB))
  CHUNK=65536 bench_point drill kernel-tmpfs "$np" "$b" - kernel
  CHUNK=65536 bench_point drill kernel-ext4 "$np" "$b" - kernel
  for v in shim-shm shim-ext4; do
    CHUNK=65536 bench_point drill "$v" "$np" "$b" 4096 none "$COALESCE_OFF"
    CHUNK=65536 bench_point drill "$v" "$np" "$b" 4096 coalesce "$COALESCE_ON"
    CHUNK=65536 bench_point drill "$v" "$np" "$b" 32768 hugeblock "$COALESCE_OFF"
    CHUNK=65536 bench_point drill "$v" "$np" "$b" 32768 all "$COALESCE_ON"
  done
done
say "drilldown done at +$(($(date +%s) - T0))s"

# --- 4. file creates: private namespaces against one shared kernel directory -----------------
for np in $NPS; do
  for v in kernel-tmpfs-shared kernel-ext4-shared kernel-tmpfs-private shim-shm; do
    create_point "$v" "$np"
  done
done
say "creates done at +$(($(date +%s) - T0))s"

# --- 5. local against remote (a target process on loopback, storing on /dev/shm) ------------
mkdir -p "$SHM/target"
"$KAVACH" target serve --dir "$SHM/target" --listen 127.0.0.1:0 >"$WORK/server.out" 2>>"$LOG" &
SERVER_PID=$!
for _ in $(seq 100); do
  SERVER_ADDR=$(grep -o '127\.0\.0\.1:[0-9]*' "$WORK/server.out" | head -1 || true)
  [ -n "$SERVER_ADDR" ] && break
  sleep 0.1
done
[ -n "$SERVER_ADDR" ] || { say "the target server printed no address"; exit 2; }
say "target server at $SERVER_ADDR"
for np in $NPS; do
  for mb in $REMOTE_SIZES; do
    bytes=$((mb * MiB))
    [ $((np * bytes)) -le "$MAX_TOTAL" ] || continue
    bench_point remote shim-shm "$np" "$bytes" -
    bench_point remote shim-remote "$np" "$bytes" -
  done
done
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
say "remote done at +$(($(date +%s) - T0))s"

# --- 6. balancer load imbalance ---------------------------------------------------------------
"$COV" 8 10 >"$OUT/cov.md" 2>"$OUT/cov.csv"
tee -a "$LOG" <"$OUT/cov.md"

say "total $(($(date +%s) - T0))s"
python3 "$ROOT/bench/cr/summarize.py" "$OUT" | tee "$OUT/summary.md"
