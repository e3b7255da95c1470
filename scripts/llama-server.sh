#!/usr/bin/env bash
# Builds llama-server from the pinned llama.cpp tree (the benchmark peer; never committed) and
# prints its path. Cached: target/llama-server/<options>/bin/llama-server is reused while the
# tree and options are the same. Configured like the library's own build (build.rs); when that
# build exists (target/llama.cpp-build), its ggml/llama/common archives are reused and only the
# server's sources compile (~3 minutes on 2 cores).
#   scripts/llama-server.sh            # build (if needed) and print the binary's path
#   LLB_LLAMA_SERVER_OPENMP=1 scripts/llama-server.sh
#   LLB_CUDA=1 scripts/llama-server.sh  # with ggml's CUDA backend (CMAKE_CUDA_ARCHITECTURES from
#                                      # LLB_CUDA_ARCHS, default: the card's own, "native")
#                                      # llama.cpp's default build (ggml on OpenMP), as a user
#                                      # gets it; nothing reused from the library's build
set -euo pipefail
cd "$(dirname "$0")/.."
src="${LLB_LLAMA_CPP_DIR:-$PWD/native/llama.cpp}"
if [ ! -f "$src/CMakeLists.txt" ]; then
  echo "llama-server.sh: no llama.cpp tree at $src; run 'cargo build --release' first (it fetches the pinned one)" >&2
  exit 1
fi
native=ON; [ "${LLB_PORTABLE:-0}" = 1 ] && native=OFF
omp="${LLB_LLAMA_SERVER_OPENMP:-0}"
openmp=OFF; suffix=""
[ "$omp" = 1 ] && { openmp=ON; suffix="-openmp"; }
cuda=()
if [ "${LLB_CUDA:-0}" = 1 ]; then
  suffix="$suffix-cuda"
  cuda=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${LLB_CUDA_ARCHS:-native}" -DGGML_CUDA_NCCL=OFF)
fi
dir="$PWD/target/llama-server/native-$native$suffix"
bin="$dir/bin/llama-server"
if [ ! -x "$bin" ]; then
  echo "building llama-server from $src (3-10 minutes on 2 cores; once)" >&2
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  launch=(); command -v ccache >/dev/null && launch=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # The same compiler, flags and options as build.rs's build of the library (target/llama.cpp-build),
  # so that the archives reused below are the ones CMake would build here.
  cmake -S "$src" -B "$dir" "${gen[@]}" "${launch[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_C_COMPILER=/usr/bin/cc -DCMAKE_CXX_COMPILER=/usr/bin/c++ -DCMAKE_ASM_COMPILER=/usr/bin/cc \
    -DCMAKE_C_FLAGS=" -w" -DCMAKE_CXX_FLAGS=" -w" -DCMAKE_ASM_FLAGS=" -w" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=$openmp -DGGML_NATIVE=$native "${cuda[@]}" >/dev/null
  # Reuse the library's own build (build.rs: target/llama.cpp-build/<key>, same tree, same options):
  # its ggml, llama and common archives are copied in, and only the server's own objects (server,
  # mtmd, cpp-httplib, ui stub) are compiled; then the archives and the binary are made with the
  # commands CMake wrote for them. Without such a build, everything is built here.
  lib=""
  for c in $( [ "$omp" = 1 ] || [ ${#cuda[@]} -gt 0 ] || ls -td "$PWD"/target/llama.cpp-build/*/build 2>/dev/null); do
    cache="$c/CMakeCache.txt"
    [ -f "$c/src/libllama.a" ] && [ -f "$c/common/libllama-common.a" ] || continue
    grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$cache" && grep -qx "GGML_NATIVE:BOOL=$native" "$cache" || continue
    grep -qE '^GGML_(CUDA|VULKAN|METAL|HIP|RPC):BOOL=ON' "$cache" && continue
    lib=$c; break
  done
  if [ -n "$lib" ]; then
    echo "reusing ggml/llama/common from $lib" >&2
    reused='^(ggml/src|src|common)/'
    for a in common/libllama-common.a common/libllama-common-base.a src/libllama.a \
             ggml/src/libggml.a ggml/src/libggml-base.a ggml/src/libggml-cpu.a; do
      cp -p "$lib/$a" "$dir/$a"
    done
    cmds=$(ninja -C "$dir" -t commands bin/llama-server)
    objs=$(sed -nE 's/.* -o ([^ ]+\.o) -c .*/\1/p' <<<"$cmds" | grep -vE "$reused" || true)
    ninja -C "$dir" -j"$(nproc)" $objs >/dev/null
    (cd "$dir" && while IFS= read -r line; do
       case "$line" in
         ": && /usr/bin/cmake -E rm -f "*) a=${line#": && /usr/bin/cmake -E rm -f "}; a=${a%% *}
            [[ "$a" =~ $reused ]] || bash -c "$line" ;;
       esac
     done <<<"$cmds"
     bash -c "$(tail -1 <<<"$cmds")")
  else
    cmake --build "$dir" --target llama-server -j"$(nproc)" >/dev/null
  fi
fi
echo "$bin"
