# Sourced by ./cmf, ./cmf-test and .ci/run: sets JAVA_HOME to a JDK >= 25 or exits with advice.
# Order: $JAVA_HOME if it is >= 25, then /usr/lib/jvm/*, then the `java` on PATH.
cmf_java_major() { # prints the feature version of the java binary $1, or 0
  # the image's release file says it without starting a JVM (~80 ms of every ./cmf run); the JVM is asked otherwise
  local release major
  release="$(dirname "$(dirname "$1")")/release"
  major=$(sed -n 's/^JAVA_VERSION="\([0-9]*\).*/\1/p' "$release" 2>/dev/null | head -1)
  if [ -n "$major" ]; then echo "$major"; return; fi
  "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p' | head -1
}
cmf_find_jdk() {
  local cand v
  for cand in "${JAVA_HOME:-}" /usr/lib/jvm/temurin-25* /usr/lib/jvm/*-25* /usr/lib/jvm/*; do
    [ -n "$cand" ] && [ -x "$cand/bin/javac" ] || continue
    v=$(cmf_java_major "$cand/bin/java"); v=${v:-0}
    if [ "$v" -ge 25 ]; then export JAVA_HOME="$cand"; return 0; fi
  done
  if command -v javac >/dev/null 2>&1; then
    cand=$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")
    v=$(cmf_java_major "$cand/bin/java"); v=${v:-0}
    if [ "$v" -ge 25 ]; then export JAVA_HOME="$cand"; return 0; fi
  fi
  cat >&2 <<'MSG'
cmf4j needs a JDK 25 or newer and none was found (checked $JAVA_HOME, /usr/lib/jvm/*, javac on PATH).
Install one, e.g. Eclipse Temurin 25 (https://adoptium.net, Debian/Ubuntu: apt install temurin-25-jdk
from the Adoptium repository), then run this again or set JAVA_HOME to it.
MSG
  return 1
}
