# Sourced: points JAVA_HOME/PATH at a JDK >= 25 (the FFM API is final since 22; llb targets 25).
# Looks at JAVA_HOME, then every JDK under /usr/lib/jvm; fails with the list of what it saw.
llb_java_major() { "$1/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p'; }
llb_find_jdk() {
  local seen=() c v
  for c in "${JAVA_HOME:-}" /usr/lib/jvm/* /opt/java/* /opt/*jdk*; do
    [ -n "$c" ] && [ -x "$c/bin/javac" ] || continue
    v=$(llb_java_major "$c"); seen+=("$c ($v)")
    if [ -n "$v" ] && [ "${v%%.*}" -ge 25 ] 2>/dev/null; then
      export JAVA_HOME="$c"; export PATH="$c/bin:$PATH"; return 0
    fi
  done
  echo "no JDK >= 25 found; saw: ${seen[*]:-none}" >&2
  return 1
}
llb_find_jdk
