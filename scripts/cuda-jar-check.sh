#!/usr/bin/env bash
# The CUDA classifier jar beside the main jar on a machine without a GPU: the Java loader's
# fallbacks, for real (docs/release.md, "4. CUDA as a variant beside it"). With both jars on one
# class path, scripts/cuda-jar-check/CudaJarCheck.java prints what was loaded and answers a forced
# tool call on a random-weight fixture:
#
#   1. no NVIDIA driver (no libcuda.so.1): the CPU folder linux-x86_64, one note saying why;
#   2. a driver (the link-time stub of scripts/cuda-toolkit-pypi.sh stands in for it) but no CUDA
#      runtime libraries: the CUDA folder linux-x86_64-cuda loads, ggml's CUDA module does not, the
#      note names the library it missed, and llb runs on that folder's CPU module;
#   3. the driver and the runtime libraries (the toolkit's lib/), but a driver that cannot start
#      CUDA (the stub fails every call, as an old driver or a container without the GPU does):
#      ggml's CUDA backend loads and finds no GPU, the note says so, llb runs on the CPU module.
#
#   ./scripts/cuda-jar-check.sh     after scripts/release-jar.sh and scripts/release-cuda-jar.sh
#
# Environment: LLB_RELEASE_OUT (default target/release-jar); CUDA_PATH, the toolkit whose
# lib/stubs/libcuda.so stands in for the driver in cases 2 and 3 and whose lib/ holds the runtime
# for case 3 (default: scripts/cuda-toolkit-pypi.sh's).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT="${LLB_RELEASE_OUT:-target/release-jar}"
version=$(sed -n 's:^  <version>\(.*\)</version>:\1:p' bindings-java/pom.xml | head -1)
main="$OUT/llb-$version.jar" cuda="$OUT/llb-$version-linux-x86_64-cuda.jar"
for j in "$main" "$cuda"; do
  [ -f "$j" ] || { echo "cuda-jar-check: no $j (scripts/release-jar.sh, scripts/release-cuda-jar.sh)" >&2; exit 1; }
done
if ldconfig -p | grep -q 'libcuda\.so\.1 '; then
  echo "cuda-jar-check: this machine has an NVIDIA driver (libcuda.so.1): the fallbacks cannot be shown here" >&2
  exit 1
fi
source scripts/find-jdk.sh >/dev/null
work=target/cuda-jar-check && mkdir -p "$work"
# The binding's runtime dependencies (Jackson), as Maven resolves them for it.
(cd bindings-java && mvn -q -B -pl llb dependency:build-classpath -DincludeScope=runtime \
  -Dmdep.outputFile="$ROOT/$work/deps.classpath" >/dev/null)
cp="$cuda:$main:$(cat "$work/deps.classpath")"
fixture="$work/tools.gguf"
[ -f "$fixture" ] || "${LLB_CLI:-target/release/llb}" fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --out "$fixture" >/dev/null
# Each case extracts the jars' libraries into its own cache directory.
probe() {
  local cache=$1; shift
  env "$@" XDG_CACHE_HOME="$PWD/$work/$cache" java --enable-native-access=ALL-UNNAMED -cp "$cp" \
    scripts/cuda-jar-check/CudaJarCheck.java "$fixture" 2>&1
}
fail=0
expect() { # CASE OUTPUT PATTERN...: every pattern must match a line of OUTPUT
  local name=$1 out=$2 p; shift 2
  for p in "$@"; do
    grep -qE "$p" <<<"$out" || { echo "cuda-jar-check: $name: no line matches /$p/" >&2; fail=1; }
  done
}

out=$(probe no-driver -u LD_LIBRARY_PATH)
echo "--- 1. no NVIDIA driver"; echo "$out"
expect "no driver" "$out" '^platform: linux-x86_64$' '^backends: CPU(,RPC)?$' \
  '^note: llb: the CUDA library linux-x86_64-cuda is on the class path but not used: no NVIDIA driver' \
  '^call: tool call get_weather$'

stubs="${CUDA_PATH:-$(scripts/cuda-toolkit-pypi.sh)}/lib/stubs"
[ -f "$stubs/libcuda.so" ] || { echo "cuda-jar-check: no driver stub at $stubs/libcuda.so" >&2; exit 1; }
mkdir -p "$work/driver" && cp "$stubs/libcuda.so" "$work/driver/libcuda.so.1"
out=$(probe stub-driver LD_LIBRARY_PATH="$PWD/$work/driver")
echo "--- 2. a driver, no CUDA runtime"; echo "$out"
expect "no runtime" "$out" '^platform: linux-x86_64-cuda$' '^backends: CPU(,RPC)?$' \
  '^note: llb: the CUDA library linux-x86_64-cuda loaded but ggml has no CUDA backend \(.*libcudart\.so\.[0-9]+.*\); running on the CPU$' \
  '^call: tool call get_weather$'
out=$(probe no-gpu LD_LIBRARY_PATH="$PWD/$work/driver:${stubs%/stubs}")
echo "--- 3. a driver that cannot start CUDA, and the CUDA runtime"; echo "$out"
expect "no GPU" "$out" '^platform: linux-x86_64-cuda$' '^backends: CUDA,CPU(,RPC)?$' \
  "^note: llb: the CUDA library linux-x86_64-cuda loaded but ggml's CUDA backend found no GPU " \
  '^call: tool call get_weather$'
[ $fail = 0 ] && echo "cuda-jar-check: the three fallbacks as documented"
exit $fail
