#!/usr/bin/env bash
# The "there" half of llb's GPU kit (scripts/gpu-kit.sh made it; docs/gpu.md, "The GPU kit").
# On a machine with CUDA, gcc, cmake, ninja, python3 and numpy, no Rust and no network:
#   1. builds llama.cpp's static libraries and llama-server from the kit's pinned tree with CUDA,
#      while the random-weight fixtures are written in the background (mkfixture.py, numpy and the
#      tree's gguf-py);
#   2. links libllb.so from libllb.a (built without llama.cpp's archives) and that build;
#   3. runs driver.py (ctypes over the C ABI) and prints the table, llb side by side with the same
#      feature off and with llama-server.
#
#   ./run.sh                        CUDA; KIT_CUDA_ARCHS=90 (default: native)
#   KIT_CPU=1 ./run.sh              the same path with the CPU backend (no GPU needed)
#   KIT_SMALL=1                     small sizes (fixtures, requests) for a quick check on few cores
#   KIT_REAL_MODEL=f.gguf           real weights (tool-capable template) for the copying rows;
#                                   else real/*.gguf.part-* in the kit, joined and sha256-checked
#   KIT_JOBS=N                      ninja jobs (default: all cores)
#   KIT_BUILD=dir KIT_MODELS=dir    where the build and the fixtures go (default: here)
#   KIT_CPU_LEVEL=avx2              ggml's CPU code for any AVX2 machine instead of -march=native
#                                   (binaries built on one machine and run on another)
#   KIT_NO_DRIVER=1                 build and link only: no fixtures, no table (scripts/gpu-lease.sh)
set -euo pipefail
kit="$(cd "$(dirname "$0")" && pwd)"
cd "$kit"
t0=$(date +%s)
say() { echo "[run.sh +$(( $(date +%s) - t0 ))s] $*"; }

cpu="${KIT_CPU:-0}"
if [ "$cpu" != 1 ]; then
  export PATH="$PATH:${CUDA_PATH:-/usr/local/cuda}/bin"
  if ! command -v nvcc >/dev/null; then
    echo "run.sh: no CUDA toolkit here (nvcc not on PATH nor in ${CUDA_PATH:-/usr/local/cuda}/bin)." >&2
    echo "run.sh: this kit measures llb on an NVIDIA GPU; KIT_CPU=1 ./run.sh runs the same path on the CPU backend." >&2
    exit 2
  fi
  cuda_root="$(dirname "$(dirname "$(command -v nvcc)")")"
fi
for tool in cmake ninja gcc g++ python3; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is missing here" >&2; exit 2; }
done
no_driver="${KIT_NO_DRIVER:-0}"
[ "$no_driver" = 1 ] || python3 -c 'import numpy' 2>/dev/null \
  || { echo "run.sh: python3 has no numpy (the fixtures need it)" >&2; exit 2; }

build="${KIT_BUILD:-$kit/build}"
models="${KIT_MODELS:-$kit/models}"
mkdir -p "$build" "$models"
jobs="${KIT_JOBS:-$(nproc)}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true

# 1. Fixtures in the background while ninja runs (none when only building).
small_sizes="${KIT_SMALL:-0}"
if [ "$small_sizes" = 1 ]; then big_shape=mini; else big_shape=qwen1.5b; fi
big="$models/kit-$big_shape.gguf"
small="$models/kit-small.gguf"
todo=()
[ -f "$small" ] || todo+=("small=$small")
[ -f "$big" ] || todo+=("$big_shape=$big")
fixtures_pid=""
if [ "$no_driver" != 1 ]; then
  if [ ${#todo[@]} -gt 0 ]; then
    python3 mkfixture.py --tree llama.cpp "${todo[@]}" > "$build/fixtures.log" 2>&1 &
  else
    echo "mkfixture: $small and $big are there already" > "$build/fixtures.log"; true &
  fi
  fixtures_pid=$!
fi

real="${KIT_REAL_MODEL:-}"
if [ -z "$real" ] && ls real/*.gguf.part-* >/dev/null 2>&1; then
  real="$models/$(basename "$(ls real/*.gguf.part-* | head -1)" | sed 's/\.part-.*//')"
  if [ ! -f "$real" ]; then
    cat real/*.gguf.part-* > "$real.tmp"
    want=$(cut -d' ' -f1 real/*.gguf.sha256)
    got=$(sha256sum "$real.tmp" | cut -d' ' -f1)
    [ "$want" = "$got" ] || { echo "run.sh: real weights: sha256 $got, expected $want" >&2; exit 1; }
    mv "$real.tmp" "$real"
  fi
fi

# 2. llama.cpp's libraries and llama-server, from the kit's tree (shared/gpu/README.md's recipe).
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cpu_level=(-DGGML_NATIVE=ON)
if [ "${KIT_CPU_LEVEL:-native}" = avx2 ]; then
  cpu_level=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
fi
backend=(-DGGML_CUDA=OFF)
if [ "$cpu" != 1 ]; then
  backend=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${KIT_CUDA_ARCHS:-native}" -DGGML_CUDA_NCCL=OFF)
fi
say "configuring llama.cpp ($([ "$cpu" = 1 ] && echo CPU || echo CUDA)) in $build"
cmake -S llama.cpp -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DGGML_OPENMP=OFF "${cpu_level[@]}" "${backend[@]}" "${launcher[@]}" > "$build/cmake.log" 2>&1 \
  || { tail -30 "$build/cmake.log"; exit 1; }
say "building llama-common and llama-server with $jobs jobs (log: $build/ninja.log)"
ninja -C "$build" -j "$jobs" llama-common llama-server > "$build/ninja.log" 2>&1 || { tail -40 "$build/ninja.log"; exit 1; }
say "llama.cpp built"

# 3. libllb.so: the llb side (libllb.a), llama.cpp's archives from this build, zero_pages.o
#    wrapping memset (build.rs does the same for the cdylib).
gcc -O2 -fPIC -c zero_pages.c -o "$build/zero_pages.o"
undef=$(grep -oE '\bllb_[a-z_]+\(' llb.h | tr -d '(' | sort -u | sed 's/^/-Wl,-u,/' | tr '\n' ' ')
B="$build"
archives=("$B/common/libllama-common.a" "$B/common/libllama-common-base.a" "$B/vendor/cpp-httplib/libcpp-httplib.a"
  "$B/src/libllama.a" "$B/ggml/src/libggml.a")
cuda_libs=()
if [ "$cpu" != 1 ]; then
  archives+=("$B/ggml/src/ggml-cuda/libggml-cuda.a")
  # lib64: NVIDIA's installers; lib: the PyPI wheels' layout (scripts/cuda-toolkit-pypi.sh).
  cuda_libs=(-L"$cuda_root/lib64" -L"$cuda_root/lib64/stubs" -L"$cuda_root/targets/x86_64-linux/lib"
    -L"$cuda_root/lib" -L"$cuda_root/lib/stubs" -Wl,-rpath,"$cuda_root/lib64" -Wl,-rpath,"$cuda_root/lib" -lcudart -lcublas -lcublasLt -lcuda)
fi
archives+=("$B/ggml/src/libggml-cpu.a" "$B/ggml/src/libggml-base.a")
# shellcheck disable=SC2086
g++ -shared -o "$build/libllb.so" "$build/zero_pages.o" -Wl,--wrap=memset $undef -Wl,--start-group libllb.a \
  "${archives[@]}" -Wl,--end-group "${cuda_libs[@]}" -lstdc++ -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
say "linked $build/libllb.so"

[ "$no_driver" = 1 ] && exit 0
say "waiting for the fixtures"
wait "$fixtures_pid" || { cat "$build/fixtures.log"; exit 1; }
cat "$build/fixtures.log"

# 4. The table.
args=(--lib "$build/libllb.so" --server "$build/bin/llama-server" --big "$big" --small "$small" --tree llama.cpp)
[ -n "$real" ] && args+=(--real "$real")
[ "$cpu" = 1 ] && args+=(--cpu)
[ "$small_sizes" = 1 ] && args+=(--small-sizes)
say "running the driver"
LLB_LLAMA_CPP_DIR="$kit/llama.cpp" python3 -u driver.py "${args[@]}"
say "done"
