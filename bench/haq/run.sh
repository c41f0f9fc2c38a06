#!/usr/bin/env bash
# HAQ (issue 23) in one run: what arbitration costs in the block target against the same
# target with QoS off, and the shares it gives tenants through the target, on the simulator
# and on the real-time controller. See README.md.
#
#   bench/haq/run.sh [OUT_DIR]
#
# Env: QUICK=1 (short runs, a smoke test), HAQ_ROUNDS (overhead rounds, default 3),
# HAQ_SECONDS (seconds per load, default 5).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/bench/haq/results-$(date -u +%Y%m%d)}
QUICK=${QUICK:-0}
ROUNDS=${HAQ_ROUNDS:-3}
SECS=${HAQ_SECONDS:-5}
if [ "$QUICK" = 1 ]; then ROUNDS=1; SECS=1; fi
mkdir -p "$OUT"
LOG=$OUT/run.log
: >"$LOG"
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$LOG" >&2; }
die() { log "error: $*"; exit 2; }

SERVER_PID=""
DIR=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  [ -n "$DIR" ] && rm -rf "$DIR" "$DIR.out"
  return 0
}
trap cleanup EXIT

log "cargo build --release -p kavach"
(cd "$ROOT" && cargo build --release -p kavach >>"$LOG" 2>&1) || die "build failed"
K=$ROOT/target/release/kavach
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "cpus: $(nproc)"
  echo "kernel: $(uname -r)"
  echo "commit: $(cd "$ROOT" && git rev-parse --short HEAD)"
  echo "namespaces: /dev/shm (tmpfs; O_DIRECT|O_DSYNC)"
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >>"$LOG"

# serve QOS [extra args...]: start a target on a fresh directory in /dev/shm; sets ADDR.
serve() {
  cleanup
  DIR=$(mktemp -d /dev/shm/kavach-haq-bench.XXXXXX)
  "$K" target serve --dir "$DIR" --listen 127.0.0.1:0 --qos "$@" >"$DIR.out" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do grep -q listening "$DIR.out" 2>/dev/null && break; sleep 0.05; done
  ADDR=$(grep -o '127\.0\.0\.1:[0-9]*' "$DIR.out" | head -1)
  [ -n "$ADDR" ] || die "the target did not start: $(cat "$DIR.out")"
}
stop() { cleanup; SERVER_PID=""; DIR=""; }

# 1. Overhead: the same load against --qos off and --qos drr (no emulation: the namespace
#    file's own speed), ABBA per round.
OVH=$OUT/overhead.jsonl
: >"$OVH"
for round in $(seq "$ROUNDS"); do
  for rw in write read; do
    for depth in 1 8 32; do
      for qos in off drr drr off; do
        serve "$qos"
        R=""; [ "$rw" = read ] && R=--read
        "$K" target load "$ADDR" --job bench --depth "$depth" --size 4k --seconds "$SECS" $R --json \
          | python3 -c 'import json,sys; d=json.load(sys.stdin); d.update(qos=sys.argv[1], round=int(sys.argv[2])); print(json.dumps(d))' "$qos" "$round" >>"$OVH"
        stop
        log "overhead round $round $rw depth $depth qos $qos done"
      done
    done
  done
done

# 2. Three processes under ionice -c1, -c2, -c3 through one target, each with 16
#    connections, on an emulated device (the device, not this CPU, is the bottleneck).
EMU="units=2,base-us=2000,mbps=100"
IONICE=$OUT/ionice.jsonl
: >"$IONICE"
run_three() { # policy low_size
  local policy=$1 lsize=$2 at pids=()
  serve "$policy" --emulate "$EMU"
  at=$(python3 -c 'import time; print(f"{time.time() + 2:.3f}")')
  for c in 1 2 3; do
    local size=4k; [ "$c" = 3 ] && size=$lsize
    ionice -c"$c" "$K" target load "$ADDR" --job "j$c" --size "$size" --depth 16 --read \
      --seconds "$SECS" --start-at "$at" --json >"$OUT/ionice-$policy-$lsize-c$c.json" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  python3 - "$OUT" "$policy" "$lsize" >>"$IONICE" <<'PY'
import json, sys
out, policy, lsize = sys.argv[1:]
r = {"policy": policy, "low_size": lsize}
for c in (1, 2, 3):
    d = json.load(open(f"{out}/ionice-{policy}-{lsize}-c{c}.json"))
    r[f"c{c}_bps"] = d["bandwidth_bps"]
    r[f"c{c}_class"] = d["class"]
print(json.dumps(r))
PY
  stop
  log "ionice $policy (low ${lsize}) done"
}
# (--qos off has no emulated device: RR, the round robin of an NVMe drive without weights,
# is the no-QoS reference, as vanilla SPDK was in the dissertation.)
for policy in drr wrr rr; do run_three "$policy" 4k; done
for policy in drr wrr; do run_three "$policy" 8k; done

# 3. A flooding tenant: gold (ionice -c1, 12 connections), silver (-c2, 12) and flood (-c2,
#    48 connections, another job) under DRR: silver and flood share the medium class.
FLOOD=$OUT/flood.jsonl
: >"$FLOOD"
for policy in drr rr; do
  serve "$policy" --emulate "$EMU"
  at=$(python3 -c 'import time; print(f"{time.time() + 2:.3f}")')
  ionice -c1 "$K" target load "$ADDR" --job gold --depth 12 --read --seconds "$SECS" --start-at "$at" --json >"$OUT/flood-$policy-gold.json" &
  p1=$!
  ionice -c2 "$K" target load "$ADDR" --job silver --depth 12 --read --seconds "$SECS" --start-at "$at" --json >"$OUT/flood-$policy-silver.json" &
  p2=$!
  ionice -c2 "$K" target load "$ADDR" --job flood --depth 48 --read --seconds "$SECS" --start-at "$at" --json >"$OUT/flood-$policy-flood.json" &
  p3=$!
  wait $p1 $p2 $p3
  python3 - "$OUT" "$policy" >>"$FLOOD" <<'PY'
import json, sys
out, policy = sys.argv[1:]
r = {"policy": policy}
for t in ("gold", "silver", "flood"):
    r[t + "_bps"] = json.load(open(f"{out}/flood-{policy}-{t}.json"))["bandwidth_bps"]
print(json.dumps(r))
PY
  stop
  log "flood $policy done"
done

# 4. The scenarios S1-S5 and the flooding tenant on the simulator and live, and the rho_l
#    study on both.
for s in S1 S2 S3 S4 S5 rogue; do
  "$K" haq run "$s" --policy all --json >"$OUT/scenario-$s-sim.json"
  "$K" haq run "$s" --policy all --engine live --seconds "$SECS" --json >"$OUT/scenario-$s-live.json"
  log "scenario $s done"
done
"$K" haq run S1 --policy all --png "$OUT/s1-sim.png" >/dev/null
"$K" haq run S1 --policy all --engine live --seconds "$SECS" --png "$OUT/s1-live.png" >/dev/null
"$K" haq run rho-study --json --png "$OUT/rho-sim.png" --latency-png "$OUT/rho-sim-latency.png" >"$OUT/rho-sim.json"
"$K" haq run rho-study --engine live --seconds "$SECS" --json --png "$OUT/rho-live.png" \
  --latency-png "$OUT/rho-live-latency.png" >"$OUT/rho-live.json" || log "rho-study live failed"
log "done: python3 bench/haq/summarize.py $OUT"
