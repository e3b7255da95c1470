#!/usr/bin/env bash
# Builds llama-server from the pinned llama.cpp tree (the benchmark peer; never committed) and
# prints its path. Cached: target/llama-server/<options>/bin/llama-server is reused while the
# tree and options are the same; ccache makes a rebuild after `cargo clean` take minutes.
#   scripts/llama-server.sh            # build (if needed) and print the binary's path
set -euo pipefail
cd "$(dirname "$0")/.."
src="${LLB_LLAMA_CPP_DIR:-$PWD/native/llama.cpp}"
if [ ! -f "$src/CMakeLists.txt" ]; then
  echo "llama-server.sh: no llama.cpp tree at $src; run 'cargo build --release' first (it fetches the pinned one)" >&2
  exit 1
fi
native=ON; [ "${LLB_PORTABLE:-0}" = 1 ] && native=OFF
dir="$PWD/target/llama-server/native-$native"
bin="$dir/bin/llama-server"
if [ ! -x "$bin" ]; then
  echo "building llama-server from $src (3-10 minutes on 2 cores; once)" >&2
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  launch=(); command -v ccache >/dev/null && launch=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$src" -B "$dir" "${gen[@]}" "${launch[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=OFF -DGGML_NATIVE=$native >/dev/null
  cmake --build "$dir" --target llama-server -j"$(nproc)" >/dev/null
fi
echo "$bin"
