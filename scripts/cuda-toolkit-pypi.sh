#!/usr/bin/env bash
# A CUDA toolkit from PyPI's NVIDIA wheels, for building llb's CUDA library on a machine that has
# no toolkit and no GPU (docs/release.md, "4. CUDA as a variant beside it"): a build check, not a
# toolkit to ship with. Prints the toolkit's root, for CUDA_PATH:
#
#   CUDA_PATH=$(scripts/cuda-toolkit-pypi.sh) LLB_CUDA_ARCHS=90 scripts/release-cuda-jar.sh
#
# The wheels (CUDA 13: the first line whose nvcc wheel carries nvcc itself, not only ptxas) unpack
# into one tree under $LLB_CUDA_PYPI_DIR (default ~/.cache/llb/cuda-pypi/<version>) laid out as a
# toolkit: bin/nvcc, nvvm/, include/, lib/. Two things a real toolkit has and the wheels do not are
# made here: the unversioned names CMake's FindCUDAToolkit links against (libcudart.so ->
# libcudart.so.13, cuBLAS likewise), and lib/stubs/libcuda.so, the driver's link-time stub (a
# real toolkit ships one; the driver itself comes with the GPU): every CUresult function cuda.h
# declares, as an empty one, under the driver's SONAME libcuda.so.1, so what links against it
# loads the real driver at run time.
set -euo pipefail
version="${LLB_CUDA_PYPI_VERSION:-13.5.37}"
root="${LLB_CUDA_PYPI_DIR:-$HOME/.cache/llb/cuda-pypi/$version}"
top="$root/nvidia/cu13"
if [ ! -x "$top/bin/nvcc" ] || [ ! -f "$top/lib/stubs/libcuda.so" ]; then
  echo "cuda-toolkit-pypi: installing CUDA $version from PyPI into $root" >&2
  rm -rf "$root"
  # nvcc, cicc (nvvm), the CUDA headers (crt), the runtime, cuBLAS and CCCL (cub, thrust).
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$root" \
    "nvidia-cuda-nvcc==$version" "nvidia-nvvm==$version" "nvidia-cuda-crt==$version" \
    "nvidia-cuda-runtime==$version" "nvidia-cublas==${LLB_CUDA_PYPI_CUBLAS:-13.10.0.20}" \
    "nvidia-cuda-cccl==${LLB_CUDA_PYPI_CCCL:-13.3.5.0.6}" >&2
  for l in cudart cublas cublasLt; do
    ln -sf "$(cd "$top/lib" && ls "lib$l.so."* | head -1)" "$top/lib/lib$l.so"
  done
  mkdir -p "$top/lib/stubs"
  gcc -E -P -I "$top/include" "$top/include/cuda.h" | tr '\n' ' ' \
    | grep -oE 'CUresult +(CUDAAPI +)?cu[A-Za-z0-9_]+ *\(' | sed -E 's/.* (cu[A-Za-z0-9_]+) *\(/\1/' \
    | sort -u | sed 's/.*/int &(void) { return 999; }/' > "$top/lib/stubs/stub.c"
  gcc -shared -fPIC -o "$top/lib/stubs/libcuda.so" -Wl,-soname,libcuda.so.1 "$top/lib/stubs/stub.c"
  "$top/bin/nvcc" --version | tail -2 >&2
fi
echo "$top"
