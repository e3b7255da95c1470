#!/usr/bin/env bash
# Builds llama.cpp's `rpc-server` from the pinned tree and prints its path; with arguments, runs
# it with them.
#
#   ./scripts/rpc-server.sh                          # build (once), print the binary's path
#   ./scripts/rpc-server.sh -H 127.0.0.1 -p 50052    # build, then serve on loopback
#
# No second llama.cpp build: the server is tools/rpc/rpc-server.cpp plus ggml's RPC files
# (ggml/src/ggml-rpc), compiled (ccache when installed) and linked against the ggml libraries of
# the llama.cpp build llb's build.rs made, and cached inside that build directory
# (<build>/llb-rpc-server/rpc-server): about 20 s the first time, nothing afterwards. So run a
# `cargo build` first. The server then has the backends of that build (CPU; CUDA with LLB_CUDA=1).
#
#   LLB_LLAMA_CPP_DIR    the llama.cpp tree (default: native/llama.cpp), as for build.rs
#   LLB_LLAMA_BUILD      the build.rs build directory to use (default: the newest one under
#                        LLB_LLAMA_BUILD_DIR, else target/llama.cpp-build)
#
# SECURITY: llama.cpp's RPC protocol is unauthenticated; bind to 127.0.0.1 or a private network
# only (docs/scaling.md).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${LLB_LLAMA_CPP_DIR:-$PWD/native/llama.cpp}
[ -f "$src/tools/rpc/rpc-server.cpp" ] || { echo "rpc-server.sh: no llama.cpp tree with tools/rpc at $src (run cargo build first, or set LLB_LLAMA_CPP_DIR)" >&2; exit 2; }
build=${LLB_LLAMA_BUILD:-}
if [ -z "$build" ]; then
  root=${LLB_LLAMA_BUILD_DIR:-$PWD/target/llama.cpp-build}
  lib=$(ls -t "$root"/*/build/ggml/src/libggml-base.a 2>/dev/null | head -1 || true)
  [ -n "$lib" ] || { echo "rpc-server.sh: no llama.cpp build under $root: run \`cargo build --release\` first" >&2; exit 2; }
  build=${lib%/build/ggml/src/libggml-base.a}
fi
libs=$build/build/ggml/src
[ -f "$libs/libggml-base.a" ] || { echo "rpc-server.sh: $build is not a llama.cpp build of build.rs (no build/ggml/src/libggml-base.a)" >&2; exit 2; }
out=$build/llb-rpc-server
bin=$out/rpc-server
mkdir -p "$out"
# One build at a time (tests and hosts may ask at once); the others wait, then find it built.
exec 9>"$out/.lock"
flock 9
if [ ! -x "$bin" ] || [ "$src/tools/rpc/rpc-server.cpp" -nt "$bin" ] || [ "$libs/libggml-base.a" -nt "$bin" ]; then
  echo "rpc-server.sh: building llama.cpp's rpc-server into $out" >&2
  cxx=(${CXX:-c++}); command -v ccache >/dev/null && cxx=(ccache "${cxx[@]}")
  flags=(-O2 -std=c++17 -I"$src/ggml/include" -I"$src/ggml/src")
  # rpc-server.cpp looks the RPC backend up in ggml's registry; with GGML_RPC off in the
  # llama.cpp build nothing registers it, so a three-line main does, then runs the tool's main.
  cat >"$out/main.cpp" <<'EOF'
#include "ggml-backend.h"
#include "ggml-rpc.h"
int rpc_server_main(int argc, char ** argv);
int main(int argc, char ** argv) {
    ggml_backend_register(ggml_backend_rpc_reg());
    return rpc_server_main(argc, argv);
}
EOF
  "${cxx[@]}" "${flags[@]}" -Dmain=rpc_server_main -c "$src/tools/rpc/rpc-server.cpp" -o "$out/rpc-server.o"
  "${cxx[@]}" "${flags[@]}" -c "$src/ggml/src/ggml-rpc/ggml-rpc.cpp" -o "$out/ggml-rpc.o"
  "${cxx[@]}" "${flags[@]}" -c "$src/ggml/src/ggml-rpc/transport.cpp" -o "$out/transport.o"
  "${cxx[@]}" "${flags[@]}" -c "$out/main.cpp" -o "$out/main.o"
  extra=()
  for b in cuda vulkan metal blas; do
    [ -f "$libs/ggml-$b/libggml-$b.a" ] && extra+=("$libs/ggml-$b/libggml-$b.a")
  done
  sys=(-lpthread -ldl -lm)
  [ -f "$libs/ggml-vulkan/libggml-vulkan.a" ] && sys+=(-lvulkan)
  [ -f "$libs/ggml-cuda/libggml-cuda.a" ] && sys+=(-L"${CUDA_PATH:-/usr/local/cuda}/lib64" -lcudart -lcublas -lcublasLt -lcuda)
  ${CXX:-c++} -o "$bin.tmp" "$out"/main.o "$out"/rpc-server.o "$out"/ggml-rpc.o "$out"/transport.o \
    "$libs/libggml.a" "${extra[@]}" "$libs/libggml-cpu.a" "$libs/libggml-base.a" "${sys[@]}"
  mv "$bin.tmp" "$bin"
fi
exec 9>&-
if [ $# -eq 0 ]; then
  echo "$bin"
else
  exec "$bin" "$@"
fi
