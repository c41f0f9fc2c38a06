#!/usr/bin/env bash
# Smoke programs of three Redis clients, each installed from its own registry, against a
# server this script starts. Run with --help for the options.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/clients"
ALL_CLIENTS="python java node"
FAMILIES=("strings" "keys/expiry" "hashes" "lists" "sets" "sorted sets" "multi/exec" "pub/sub")

usage() {
  cat <<EOF
Usage: bench/clients/run.sh [--kavach | --redis] [--clients "python java node"] [options]

Runs the smoke program of each client, with the client's default settings, against a server
started for the run (and stopped after it):
  --kavach   \`kavach serve\` on a temporary directory (the default; \$KAVACH_BIN, else
             target/release/kavach, built with cargo if absent; extra options in
             \$KAVACH_SERVE_ARGS)
  --redis    a real redis-server (installed with apt-get if missing)
  --port P   use a server already listening on 127.0.0.1:P instead of starting one

The clients (each installed once, under target/clients/, by its own script):
  python     redis-py, current release from PyPI (opens with HELLO 3: RESP3)  python/run.sh
  java       Jedis 5 from Maven Central (RESP2, sends CLIENT SETINFO)         java/run.sh
  node       node-redis, npm \`redis\` current release (HELLO 3: RESP3)        node/run.sh

Each program checks the families: ${FAMILIES[*]}
(lists include a BLPOP on one connection woken by an RPUSH on another).
Prints a table of PASS / FAIL per family per client and the reasons, also written to
target/clients/report-<server>.md and .json. Exits 1 if anything failed.

Options:
  --timeout S   seconds one client's program may take (default 300)
  --update-doc FILE
                replace the section between <!-- clients-<server>:begin --> and
                <!-- clients-<server>:end --> of FILE (e.g. docs/server.md) with the table
  -h, --help    this text
EOF
}

log() { printf 'clients: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

SIDE=kavach
CLIENTS="$ALL_CLIENTS"
PORT=""
TIMEOUT=300
UPDATE_DOC=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kavach) SIDE=kavach ;;
    --redis) SIDE=redis ;;
    --port) shift; PORT="${1:?--port needs a number}" ;;
    --clients) shift; CLIENTS="${1:?--clients needs a list}" ;;
    --timeout) shift; TIMEOUT="${1:?--timeout needs seconds}" ;;
    --update-doc) shift; UPDATE_DOC="${1:?--update-doc needs a file}" ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
  shift
done
for c in $CLIENTS; do
  case " $ALL_CLIENTS " in *" $c "*) ;; *) die "unknown client: $c" ;; esac
done

OUT="$ROOT/target/clients"
mkdir -p "$OUT"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/kavach-clients.XXXXXX")"
SERVER_PID=""
CLIENT_PID=""
cleanup() {
  if [ -n "$CLIENT_PID" ]; then
    kill -TERM "$CLIENT_PID" 2>/dev/null || true
    wait "$CLIENT_PID" 2>/dev/null || true
  fi
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

listening() {
  python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$1" 2>/dev/null
}

if [ -n "$PORT" ]; then
  listening "$PORT" || die "nothing listens on 127.0.0.1:$PORT"
  SIDE="port-$PORT"
else
  PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  if [ "$SIDE" = kavach ]; then
    KAVACH="${KAVACH_BIN:-$ROOT/target/release/kavach}"
    if [ -z "${KAVACH_BIN:-}" ] && [ ! -x "$KAVACH" ]; then
      log "cargo build --release -p kavach"
      (cd "$ROOT" && cargo build --release -p kavach >&2) || die "cargo build failed"
    fi
    [ -x "$KAVACH" ] || die "no kavach binary at $KAVACH"
    # shellcheck disable=SC2086  # KAVACH_SERVE_ARGS is a list of words
    "$KAVACH" serve --dir "$TMP/store" --port "$PORT" ${KAVACH_SERVE_ARGS:-} \
      </dev/null >"$OUT/server-kavach.log" 2>&1 &
  else
    command -v redis-server >/dev/null || { log "installing redis-server"; apt-get install -y -q redis-server >&2; } \
      || die "cannot install redis-server"
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --dir "$TMP" </dev/null >"$OUT/server-redis.log" 2>&1 &
  fi
  SERVER_PID=$!
  for _ in $(seq 600); do
    listening "$PORT" && break
    kill -0 "$SERVER_PID" 2>/dev/null || die "$SIDE exited at start (see $OUT/server-$SIDE.log)"
    sleep 0.1
  done
  listening "$PORT" || die "$SIDE did not listen"
fi

for c in $CLIENTS; do
  log "$c against $SIDE on port $PORT"
  set +e
  # In the background, so that a signal to this script stops it at once (see cleanup).
  timeout -k 10 "$TIMEOUT" "$HERE/$c/run.sh" 127.0.0.1 "$PORT" >"$OUT/$c-$SIDE.out" 2>"$OUT/$c-$SIDE.err" &
  CLIENT_PID=$!
  wait "$CLIENT_PID"
  code=$?
  CLIENT_PID=""
  set -e
  echo "$code" > "$OUT/$c-$SIDE.code"
  [ "$code" = 124 ] && log "$c: killed after ${TIMEOUT}s"
done

python3 - "$OUT" "$SIDE" "$CLIENTS" "$UPDATE_DOC" "${FAMILIES[@]}" <<'PY'
import datetime, json, sys
out, side, clients, doc, families = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5:]
names = {"python": "redis-py", "java": "Jedis", "node": "node-redis"}
results, versions, reasons, failed = {}, {}, [], False
for c in clients:
    text = open(f"{out}/{c}-{side}.out", errors="replace").read().splitlines()
    code = int(open(f"{out}/{c}-{side}.code").read())
    err = open(f"{out}/{c}-{side}.err", errors="replace").read().strip().splitlines()
    got = {}
    for line in text:
        if line.startswith("# "):
            versions[c] = line[2:]
        for word in ("PASS", "FAIL"):
            if line.startswith(word + " "):
                rest = line[5:]
                fam = next((f for f in families if rest == f or rest.startswith(f + ":")), None)
                if fam:
                    got[fam] = word
                    if word == "FAIL":
                        reasons.append((names[c], rest))
    for f in families:
        if f not in got:
            got[f] = "FAIL"
            why = "killed after the time limit" if code == 124 else \
                f"no result (exit {code}): {err[-1] if err else ''}"
            reasons.append((names[c], f"{f}: {why}"))
    failed |= any(v == "FAIL" for v in got.values()) or code != 0
    results[c] = got
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
lines = [f"Client smoke programs against {side} (`bench/clients/run.sh`, {when}):", ""]
lines += [f"- {names[c]}: {versions.get(c, 'version unknown')}" for c in clients]
lines += ["", "| family | " + " | ".join(names[c] for c in clients) + " |",
          "|---|" + "---|" * len(clients)]
for f in families:
    lines.append(f"| {f} | " + " | ".join(results[c][f] for c in clients) + " |")
passes = {c: sum(v == "PASS" for v in results[c].values()) for c in clients}
lines.append("| **passed** | " + " | ".join(f"{passes[c]}/{len(families)}" for c in clients) + " |")
if reasons:
    lines += ["", "Failures:", ""]
    lines += [f"- {c}, {r}".replace("`", "'") for c, r in reasons]
text = "\n".join(lines) + "\n"
open(f"{out}/report-{side}.md", "w").write(text)
json.dump({"server": side, "versions": versions, "results": results,
           "failures": [{"client": c, "failure": r} for c, r in reasons]},
          open(f"{out}/report-{side}.json", "w"), indent=1)
print(text, end="")
if doc:
    begin, end = f"<!-- clients-{side}:begin -->", f"<!-- clients-{side}:end -->"
    body = open(doc, encoding="utf-8").read()
    i, j = body.find(begin), body.find(end)
    if i < 0 or j < i:
        sys.exit(f"{doc} has no {begin} ... {end} section")
    open(doc, "w", encoding="utf-8").write(body[:i + len(begin)] + "\n" + text + body[j:])
sys.exit(1 if failed else 0)
PY
