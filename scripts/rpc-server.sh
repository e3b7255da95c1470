#!/usr/bin/env bash
# Builds llama.cpp's `rpc-server` from the pinned tree (once; cached under
# target/rpc-server-build/) and prints its path; with arguments, runs it with them.
#
#   ./scripts/rpc-server.sh                          # build, print the binary's path
#   ./scripts/rpc-server.sh -H 127.0.0.1 -p 50052    # build, then serve on loopback
#
# The tree is the one build.rs uses: LLB_LLAMA_CPP_DIR, else native/llama.cpp (fetch it with a
# first `cargo build`). SECURITY: llama.cpp's RPC protocol is unauthenticated; bind to 127.0.0.1
# or a private network only (docs/scaling.md).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${LLB_LLAMA_CPP_DIR:-$PWD/native/llama.cpp}
[ -f "$src/tools/rpc/rpc-server.cpp" ] || { echo "rpc-server.sh: no llama.cpp tree with tools/rpc at $src (run cargo build first, or set LLB_LLAMA_CPP_DIR)" >&2; exit 2; }
portable=OFF
[ "${LLB_PORTABLE:-0}" != "0" ] && portable=ON
key=$(printf '%s\n' "$src" "$(cat native/llama-cpp.pin)" "portable=$portable" | sha256sum | cut -c1-16)
dir=${LLB_RPC_SERVER_BUILD_DIR:-$PWD/target/rpc-server-build}/$key
bin=$dir/bin/rpc-server
if [ ! -x "$bin" ]; then
  echo "rpc-server.sh: building llama.cpp's rpc-server into $dir (first time: several minutes on 2 cores)" >&2
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$src" -B "$dir" "${gen[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_RPC=ON -DGGML_NATIVE=$([ $portable = ON ] && echo OFF || echo ON) -DGGML_OPENMP=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >&2
  cmake --build "$dir" --target rpc-server -j"${CARGO_BUILD_JOBS:-$(nproc)}" >&2
fi
if [ $# -eq 0 ]; then
  echo "$bin"
else
  exec "$bin" "$@"
fi
