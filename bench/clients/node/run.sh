#!/usr/bin/env bash
# node-redis smoke program: installs the current `redis` package from npm under target/ (once),
# then runs smoke.js against HOST PORT with the client's default settings (RESP3).
#   bench/clients/node/run.sh HOST PORT
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE="$ROOT/bench/clients/node"
PREFIX="${CLIENTS_CACHE:-$ROOT/target/clients}/node"
[ $# -eq 2 ] || { echo "usage: $0 HOST PORT" >&2; exit 2; }
command -v node >/dev/null || { echo "node is needed (apt-get install nodejs npm)" >&2; exit 2; }
if [ ! -f "$PREFIX/node_modules/redis/package.json" ]; then
  echo "# installing node-redis (npm redis@latest) into $PREFIX" >&2
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --silent redis@latest >&2
fi
REDIS_MODULE="$PREFIX/node_modules/redis" exec node "$HERE/smoke.js" "$1" "$2"
