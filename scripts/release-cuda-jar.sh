#!/usr/bin/env bash
# Builds the CUDA classifier jar, llb-<version>-linux-x86_64-cuda.jar (docs/release.md), on a
# Linux x86-64 machine with the CUDA toolkit (nvcc, cuBLAS). Next to the main jar on a class path,
# the Java loader prefers its META-INF/native/linux-x86_64-cuda/ folder when the NVIDIA driver
# (libcuda.so.1) loads, and otherwise uses the main jar's CPU library, with one warning saying why.
#
#   ./scripts/release-cuda-jar.sh     # -> target/release-jar/llb-<version>-linux-x86_64-cuda.jar
#
# The folder is the same LLB_CPU_VARIANTS=1 build as the main jar's linux-x86_64 one (libllb.so,
# ggml's shared libraries, every CPU module) plus ggml's CUDA backend as a module,
# libggml-cuda.so, which ggml's registry loads beside the CPU one. It is built with the machine's
# own compilers (nvcc needs gcc or clang as its host compiler, not zig), so its glibc floor is the
# build machine's: build it on the oldest distribution you support (Rocky/Alma Linux 8 has glibc
# 2.28; the script prints the floor it got), and libstdc++ comes from that machine too.
#
# Environment:
#   LLB_CUDA_ARCHS   CMAKE_CUDA_ARCHITECTURES, default "75;80;86;89;90;90-virtual": Turing (T4,
#                    RTX 20), Ampere (A100, A10, RTX 30), Ada (L4, L40S, RTX 40), Hopper (H100,
#                    H200) as machine code, and PTX that newer cards (Blackwell) compile at first load
#   LLB_RELEASE_OUT  default target/release-jar
#   CUDA_PATH        default /usr/local/cuda (a machine without a toolkit: scripts/cuda-toolkit-pypi.sh,
#                    a build check)
#
# The machine that runs the jar needs the NVIDIA driver and the CUDA runtime libraries of the
# toolkit major version it was built with (libcudart.so.12, libcublas.so.12, libcublasLt.so.12
# for CUDA 12; .so.13 for 13):
# the jar does not carry them. Without them ggml's CUDA module does not load, llb runs on the CPU
# module, and Llb.version() says why.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/release-lib.sh
OUT="${LLB_RELEASE_OUT:-$ROOT/target/release-jar}"
platform=linux-x86_64-cuda
start=$(date +%s)

cuda="${CUDA_PATH:-/usr/local/cuda}"
command -v nvcc >/dev/null || [ -x "$cuda/bin/nvcc" ] || {
  echo "release-cuda-jar: no nvcc on PATH or in $cuda/bin: this script runs on a machine with the CUDA toolkit" >&2
  exit 1
}
export PATH="$cuda/bin:$PATH"
[ "$(uname -m)" = x86_64 ] || { echo "release-cuda-jar: builds linux-x86_64-cuda on an x86-64 machine" >&2; exit 1; }

cache="$LLB_RELEASE_CACHE/cuda"
echo "release-cuda-jar: building libllb with ggml's CPU variants and CUDA (archs ${LLB_CUDA_ARCHS:-75;80;86;89;90;90-virtual})" >&2
CARGO_TARGET_DIR="$cache/cargo" LLB_LLAMA_BUILD_DIR="$cache/llama" LLB_CPU_VARIANTS=1 LLB_CUDA=1 \
  LLB_CUDA_ARCHS="${LLB_CUDA_ARCHS:-75;80;86;89;90;90-virtual}" \
  cargo build -q --release --lib --target x86_64-unknown-linux-gnu

# Stage as the main jar's folders are (scripts/release-lib.sh), from this build's directories.
LLB_RELEASE_CACHE="$cache" llb_release_stage linux-x86_64 "$OUT/cuda-stage"
rm -rf "$OUT/cuda-stage/$platform" && mv "$OUT/cuda-stage/linux-x86_64" "$OUT/cuda-stage/$platform"
[ -f "$OUT/cuda-stage/$platform/libggml-cuda.so" ] || { echo "release-cuda-jar: the build made no libggml-cuda.so" >&2; exit 1; }
max=$(readelf -V -W "$OUT/cuda-stage/$platform"/*.so* | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
echo "release-cuda-jar: $platform needs glibc >= $max (the build machine's floor)" >&2

# The classifier jar: the folder and a platforms.list naming it (the loader reads every
# platforms.list on the class path).
mkdir -p "$OUT/cuda-stage/jar/META-INF/native"
rm -rf "$OUT/cuda-stage/jar/META-INF/native/$platform"
cp -r "$OUT/cuda-stage/$platform" "$OUT/cuda-stage/jar/META-INF/native/"
echo "$platform" > "$OUT/cuda-stage/jar/META-INF/native/platforms.list"
version=$(sed -n 's:^  <version>\(.*\)</version>:\1:p' bindings-java/pom.xml | head -1)
source scripts/find-jdk.sh >/dev/null
jar --create --file "$OUT/llb-$version-$platform.jar" -C "$OUT/cuda-stage/jar" .
echo "release-cuda-jar: $OUT/llb-$version-$platform.jar ($(du -h "$OUT/llb-$version-$platform.jar" | cut -f1)) in $(( $(date +%s) - start )) s" >&2
