# Shared by the benchmarks' build scripts: source it after defining ROOT, log and die.

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
