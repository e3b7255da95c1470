#!/usr/bin/env bash
# Builds the release jar: one command, every platform (docs/release.md).
#
#   ./scripts/release-jar.sh          # -> target/release-jar/llb-<version>.jar (+ native/, the staged libraries)
#
# Each platform's libllb is cross-built with zig's C/C++ toolchain for glibc 2.28
# (cargo-zigbuild, target <triple>.2.28) with LLB_CPU_VARIANTS=1: ggml's CPU backend is one module
# per CPU level and the best one for the running CPU is loaded at run time (any x86-64 from
# x86-64-v2/SSE4.2 up; aarch64 from ARMv8.0 up). The jar carries, per platform folder
# META-INF/native/<platform>/, libllb.so, libggml.so.0, libggml-base.so.0, the libggml-cpu-*.so
# modules and files.list; META-INF/native/platforms.list names the platforms.
#
# Environment:
#   LLB_RELEASE_PLATFORMS  default "linux-x86_64 linux-aarch64"
#   LLB_RELEASE_OUT        default target/release-jar
#   LLB_RELEASE_CACHE      default ~/.cache/llb/release: tools, cargo target, ggml/llama.cpp builds
#                          (kept between runs: a rebuild after a Rust change recompiles llb only)
#   LLB_RELEASE_NOSTRIP=1  keep debug info in the bundled libraries
#   LLB_RELEASE_VARIANTS_X86_64, LLB_RELEASE_VARIANTS_AARCH64
#                          only these CPU modules (e.g. "sse42 haswell"), for a quick trial jar;
#                          unset: every one (a jar to ship)
#
# Checks before the jar is written: every library's glibc symbol versions <= 2.28 and no
# libstdc++ (scripts/release-lib.sh). scripts/portable-check.sh runs the jar's libraries on old
# and new CPUs (qemu) and on aarch64.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/release-lib.sh
OUT="${LLB_RELEASE_OUT:-$ROOT/target/release-jar}"
PLATFORMS="${LLB_RELEASE_PLATFORMS:-linux-x86_64 linux-aarch64}"
start=$(date +%s)

llb_release_tools
mkdir -p "$OUT/native"
for p in $PLATFORMS; do
  case "$p" in linux-x86_64) v=${LLB_RELEASE_VARIANTS_X86_64:-} ;; *) v=${LLB_RELEASE_VARIANTS_AARCH64:-} ;; esac
  llb_release_build "$p" "$v"
  llb_release_stage "$p" "$OUT/native" "$v"
  max=$(llb_release_check_glibc "$OUT/native/$p") || { echo "release: $p fails the glibc $LLB_GLIBC_FLOOR floor" >&2; exit 1; }
  echo "release: $p: $(wc -l < "$OUT/native/$p/files.list") files, $(du -sh "$OUT/native/$p" | cut -f1), newest glibc symbol GLIBC_$max" >&2
done
# Only the platforms built now: a folder left from an earlier run with other settings goes.
for d in "$OUT"/native/*/; do
  case " $PLATFORMS " in *" $(basename "$d") "*) ;; *) rm -rf "$d" ;; esac
done
printf '%s\n' $PLATFORMS > "$OUT/native/platforms.list"

# The jar: the Java binding with every staged platform (bindings-java/llb/pom.xml's bundle step
# copies -Dllb.native.extra as is; the first platform is its -Dllb.library.path).
source scripts/find-jdk.sh >/dev/null
first=$(echo $PLATFORMS | cut -d' ' -f1)
(cd bindings-java && mvn -q -B -pl llb -am package -DskipTests \
  -Dllb.library.path="$OUT/native/$first/libllb.so" -Dllb.native.platform="$first" \
  -Dllb.native.extra="$OUT/native" -Dllb.native.nostrip=true)
jar=$(ls -t bindings-java/target/llb/llb-*.jar | grep -v -e sources -e javadoc | head -1)
cp "$jar" "$OUT/"
# A POM without the build's parent, for `mvn install:install-file -DpomFile=` (README, Java).
version=$(sed -n 's:^  <version>\(.*\)</version>:\1:p' bindings-java/pom.xml | head -1)
jackson=$(sed -n 's:.*<jackson.version>\(.*\)</jackson.version>.*:\1:p' bindings-java/pom.xml | head -1)
cat > "$OUT/$(basename "$jar" .jar).pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.llb</groupId>
  <artifactId>llb</artifactId>
  <version>$version</version>
  <description>llb's Java binding with its native libraries: linux-x86_64 and linux-aarch64, glibc 2.28+, CPU kernels chosen at run time</description>
  <dependencies>
    <dependency>
      <groupId>com.fasterxml.jackson.core</groupId>
      <artifactId>jackson-databind</artifactId>
      <version>$jackson</version>
    </dependency>
  </dependencies>
</project>
EOF
echo "release: $OUT/$(basename "$jar") ($(du -h "$jar" | cut -f1); platforms: $PLATFORMS) in $(( $(date +%s) - start )) s" >&2
