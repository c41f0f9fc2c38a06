#!/usr/bin/env bash
# Fetch YCSB core 0.17.0 and Jedis 4 (with their dependencies) from Maven Central and compile
# the Kavach/Redis binding (bench/ycsb/src) with javac. Run it, or source it from a script
# that defines ROOT, log and die: it sets YCSB_CP (the java class path) and YCSB_DB (the
# binding's class name).
#
#   bench/ycsb/build.sh [--force]
#
# Everything lands in bench/ycsb/.build/ (gitignored): lib/ holds the jars
# (mvn -f bench/ycsb/pom.xml dependency:copy-dependencies), classes/ the compiled binding.
# Nothing is redone when it is up to date; --force (or YCSB_BUILD_FORCE=1) redoes both.
# Needs java 17+, javac and mvn (Maven Central reachable, or the jars already in ~/.m2).

_ycsb_build() {
  local here="$ROOT/bench/ycsb" build lib classes srcs stamp
  build="$here/.build"; lib="$build/lib"; classes="$build/classes"
  command -v java >/dev/null 2>&1 || die "java not found (install a JDK 17+)"
  command -v javac >/dev/null 2>&1 || die "javac not found (install a JDK 17+)"
  mkdir -p "$build"
  if [ -n "${YCSB_BUILD_FORCE:-}" ] || [ ! -f "$lib/.complete" ] || [ "$here/pom.xml" -nt "$lib/.complete" ]; then
    command -v mvn >/dev/null 2>&1 || die "mvn not found (apt-get install maven): needed once to fetch YCSB and Jedis"
    log "fetching YCSB core 0.17.0 and Jedis with mvn (into $lib)"
    rm -rf -- "$lib"
    mvn -B -q -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$lib" >&2 \
      || die "mvn could not fetch the YCSB dependencies (is Maven Central reachable?)"
    ls "$lib"/core-0.17.0.jar "$lib"/jedis-*.jar >/dev/null 2>&1 || die "mvn ran but $lib lacks core-0.17.0.jar or jedis"
    touch "$lib/.complete"
  fi
  mapfile -t srcs < <(find "$here/src" -name '*.java' | sort)
  [ "${#srcs[@]}" -gt 0 ] || die "no Java sources under $here/src"
  stamp="$classes/.complete"
  local stale="${YCSB_BUILD_FORCE:-}" s
  [ -f "$stamp" ] || stale=1
  for s in "${srcs[@]}" "$lib/.complete"; do [ "$s" -nt "$stamp" ] && stale=1; done
  if [ -n "$stale" ]; then
    log "javac ${#srcs[@]} file(s) into $classes"
    rm -rf -- "$classes"
    mkdir -p "$classes"
    javac -Xlint:all -Xlint:-options --release 17 -d "$classes" -cp "$lib/*" "${srcs[@]}" >&2 \
      || die "javac failed on bench/ycsb/src"
    touch "$stamp"
  fi
  YCSB_CP="$classes:$lib/*"
  YCSB_DB="site.ycsb.db.kavach.KavachJedisClient"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  log() { printf '[ycsb-build] %s\n' "$*" >&2; }
  die() { printf '[ycsb-build] error: %s\n' "$*" >&2; exit 2; }
  case "${1:-}" in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    --force) YCSB_BUILD_FORCE=1 ;;
    "") ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  _ycsb_build
  echo "class path: $YCSB_CP"
  echo "binding:    $YCSB_DB"
else
  _ycsb_build
fi
