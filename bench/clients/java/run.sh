#!/usr/bin/env bash
# Jedis 5 smoke program: fetches Jedis from Maven Central and compiles Smoke.java with Maven
# (into target/clients/java, once), then runs it against HOST PORT with the client's defaults.
#   bench/clients/java/run.sh HOST PORT
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE="$ROOT/bench/clients/java"
BUILD="$ROOT/target/clients/java"
[ $# -eq 2 ] || { echo "usage: $0 HOST PORT" >&2; exit 2; }
command -v java >/dev/null && command -v mvn >/dev/null \
  || { echo "java 17+ and mvn are needed (apt-get install openjdk-17-jdk-headless maven)" >&2; exit 2; }
stamp="$BUILD/.complete"
if [ ! -f "$stamp" ] || [ "$HERE/pom.xml" -nt "$stamp" ] || [ "$HERE/src/main/java/Smoke.java" -nt "$stamp" ]; then
  echo "# building the Jedis smoke program (mvn compile; Jedis from Maven Central)" >&2
  rm -rf "$BUILD/lib"
  mvn -B -q -Dstyle.color=never -f "$HERE/pom.xml" -Dsmoke.build="$BUILD" \
    compile dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$BUILD/lib" >&2
  touch "$stamp"
fi
exec java -cp "$BUILD/classes:$BUILD/lib/*" Smoke "$1" "$2"
