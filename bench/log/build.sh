# Sourced by run.sh (not run): make sure libpmemlog is installed, compile the C harness and build
# the Rust one. Expects HERE, ROOT, OUT and the log/die functions; sets CBIN, KBIN and
# PMEMLOG_VERSION.

# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"

# --- 1. libpmemlog ----------------------------------------------------------
have_libpmemlog() {
  if command -v pkg-config >/dev/null 2>&1; then
    pkg-config --exists libpmemlog
  else
    [ -f /usr/include/libpmemlog.h ]
  fi
}
if ! have_libpmemlog; then
  log "libpmemlog not found; installing libpmemlog-dev (and pkg-config) with apt-get"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to apt-get install libpmemlog-dev"
    SUDO="sudo"
  fi
  # Try with the package lists as they are first; refresh them only if that fails.
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y libpmemlog-dev pkg-config >&2; then
    $SUDO apt-get update >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y libpmemlog-dev pkg-config >&2
  fi
  have_libpmemlog || die "libpmemlog still missing after apt-get install libpmemlog-dev"
fi
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libpmemlog; then
  PMEMLOG_CFLAGS="$(pkg-config --cflags libpmemlog libpmem)"
  PMEMLOG_LIBS="$(pkg-config --libs libpmemlog libpmem)"
  PMEMLOG_VERSION="$(pkg-config --modversion libpmemlog)"
else
  PMEMLOG_CFLAGS=""
  PMEMLOG_LIBS="-lpmemlog -lpmem"
  PMEMLOG_VERSION="unknown"
fi

# --- 2. C harness -----------------------------------------------------------
mkdir -p "$OUT"
CBIN="$OUT/pmemlog_bench"
log "compiling $CBIN"
# shellcheck disable=SC2086  # pkg-config output is a word list
gcc -O2 -Wall -Wextra -Werror -pthread -o "$CBIN" "$HERE/pmemlog_bench.c" \
  $PMEMLOG_CFLAGS $PMEMLOG_LIBS

# --- 3. Rust harness --------------------------------------------------------
if [ -n "${KAVACH_LOG_BENCH_BIN:-}" ]; then
  KBIN="$KAVACH_LOG_BENCH_BIN"
  log "using prebuilt Kavach harness $KBIN (KAVACH_LOG_BENCH_BIN)"
else
  KBIN="$(cargo_harness log_bench)"
fi
[ -x "$KBIN" ] || die "Kavach harness '$KBIN' is not executable"
