# Shared by the benchmarks' scripts: source it after defining ROOT, log and die.

# Build the Rust harness binary NAME of kavach-bench in release mode and print its path.
# Cargo's JSON messages say where the binary landed (honouring CARGO_TARGET_DIR and
# .cargo/config); diagnostics are still rendered on stderr.
cargo_harness() {
  local name="$1" exe
  log "cargo build --release -p kavach-bench --bin $name"
  exe="$(cd "$ROOT" && cargo build --release -p kavach-bench --bin "$name" \
            --message-format=json-render-diagnostics \
          | HARNESS="$name" python3 -c '
import json, os, sys
exe = ""
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m.get("target", {}).get("name") == os.environ["HARNESS"]:
        exe = m["executable"]
print(exe)')" || die "cargo build of kavach-bench/$name failed"
  [ -n "$exe" ] || die "cargo did not report a $name executable"
  printf '%s\n' "$exe"
}

# --- an idle machine ---------------------------------------------------------------------------
# note_load and wait_idle use LOADS (a log file) and WAIT_IDLE (seconds), read when called.
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
note_load() { printf '%s %s load %s\n' "$(date -u +%H:%M:%S)" "$1" "$(loadavg)" >> "$LOADS"; }
others() {
  # Processes other than this script and its children using more than ${1:-5}% of a CPU over
  # the next half second ("pid:name:percent" separated by spaces), plus any cargo / rustc.
  python3 - "$$" "${1:-5}" <<'PY'
import os, sys, time
me, limit = int(sys.argv[1]), float(sys.argv[2])
hz = os.sysconf("SC_CLK_TCK")
def snap():
    d = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        rp = st.rindex(")")
        name = st[st.index("(") + 1:rp]
        fields = st[rp + 2:].split()
        d[int(p)] = (name, int(fields[1]), int(fields[11]) + int(fields[12]))
    return d
a = snap(); time.sleep(0.5); b = snap()
def ours(pid):
    seen = 0
    while pid > 1 and seen < 64:
        if pid == me:
            return True
        pid = b.get(pid, a.get(pid, ("", 0, 0)))[1]
        seen += 1
    return False
out = []
for pid, (name, ppid, t) in b.items():
    if pid in a and not ours(pid):
        pct = 100.0 * (t - a[pid][2]) / hz / 0.5
        if pct > limit or name in ("cargo", "rustc"):
            out.append(f"{pid}:{name}:{pct:.0f}%")
print(" ".join(out))
PY
}
wait_idle() { # wait_idle WHAT: wait up to WAIT_IDLE s while others run; echo what ran at the end
  local waited=0 o
  o="$(others 20)"
  while [ -n "$o" ] && [ "$waited" -lt "$WAIT_IDLE" ]; do
    [ "$waited" = 0 ] && log "waiting for the machine to be idle before $1: $o"
    sleep 10; waited=$((waited + 10))
    o="$(others 20)"
  done
  [ "$waited" -gt 0 ] && note_load "waited ${waited} s before $1"
  [ -n "$o" ] && log "warning: running $1 with other processes busy: $o"
  printf '%s' "$o"
}
