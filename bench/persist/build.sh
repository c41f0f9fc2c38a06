# Shared by run.sh and callgrind.sh (sourced, not run): make sure libpmem is installed, compile
# the C harness and build the Rust one. Expects HERE, ROOT, OUT and the log/die functions; sets
# CBIN, KBIN and PMEM_VERSION.

# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"

# --- 1. libpmem -------------------------------------------------------------
have_libpmem() {
  if command -v pkg-config >/dev/null 2>&1; then
    pkg-config --exists libpmem
  else
    [ -f /usr/include/libpmem.h ]
  fi
}
if ! have_libpmem; then
  log "libpmem not found; installing libpmem-dev (and pkg-config) with apt-get"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to apt-get install libpmem-dev"
    SUDO="sudo"
  fi
  $SUDO apt-get update >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y libpmem-dev pkg-config >&2
  have_libpmem || die "libpmem still missing after apt-get install libpmem-dev"
fi
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libpmem; then
  PMEM_CFLAGS="$(pkg-config --cflags libpmem)"
  PMEM_LIBS="$(pkg-config --libs libpmem)"
  PMEM_VERSION="$(pkg-config --modversion libpmem)"
else
  PMEM_CFLAGS=""
  PMEM_LIBS="-lpmem"
  PMEM_VERSION="unknown"
fi

# --- 2. C harness -----------------------------------------------------------
mkdir -p "$OUT"
CBIN="$OUT/pmem_persist_bench"
log "compiling $CBIN"
# shellcheck disable=SC2086  # pkg-config output is a word list
gcc -O2 -Wall -Wextra -Werror -o "$CBIN" "$HERE/pmem_persist_bench.c" $PMEM_CFLAGS $PMEM_LIBS

# --- 3. Rust harness --------------------------------------------------------
if [ -n "${KAVACH_BENCH_BIN:-}" ]; then
  KBIN="$KAVACH_BENCH_BIN"
  log "using prebuilt Kavach harness $KBIN (KAVACH_BENCH_BIN)"
else
  KBIN="$(cargo_harness persist_bench)"
fi
[ -x "$KBIN" ] || die "Kavach harness '$KBIN' is not executable"

