#!/usr/bin/env bash
# Run a program under `kavach wsp run` with a fresh image file, removed afterwards: the `wsp`
# configuration of run.sh (WSP_WRAP=bench/fof/wsp-wrap.sh). The program's memory lives in the
# image (tmpfs), as the paper's NVDIMMs hold all of DRAM; no warning is raised during the run.
#   KAVACH=path/to/kavach (default target/release/kavach), WSP_SHM_DIR (default /dev/shm)
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KAVACH="${KAVACH:-$ROOT/target/release/kavach}"
pool="$(mktemp -u "${WSP_SHM_DIR:-/dev/shm}/fof-wsp.XXXXXX.img")"
"$KAVACH" wsp run --pool "$pool" --size 4GiB -- "$@"
rc=$?
rm -f -- "$pool"
exit "$rc"
