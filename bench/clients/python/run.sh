#!/usr/bin/env bash
# redis-py smoke program: installs the current redis-py from PyPI into a venv under target/
# (once), then runs smoke.py against HOST PORT with the client's default settings (RESP3).
#   bench/clients/python/run.sh HOST PORT
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE="$ROOT/bench/clients/python"
VENV="${CLIENTS_CACHE:-$ROOT/target/clients}/redis-py-venv"
[ $# -eq 2 ] || { echo "usage: $0 HOST PORT" >&2; exit 2; }
if ! "$VENV/bin/python" -c 'import redis' 2>/dev/null; then
  echo "# installing redis-py from PyPI into $VENV" >&2
  if ! python3 -m venv --clear "$VENV" >&2; then
    # Debian keeps venv (ensurepip) in a package of its own.
    apt-get install -y -q python3-venv >&2
    python3 -m venv --clear "$VENV" >&2
  fi
  "$VENV/bin/pip" install -q --upgrade redis >&2
fi
exec "$VENV/bin/python" "$HERE/smoke.py" "$1" "$2"
