#!/usr/bin/env bash
# Prepares issue 41's GPU table for a short GPU lease (a few minutes of device time, a 64 MiB
# limit on what each call carries, no Rust and no network there): builds here what the kit's
# run.sh would build there, and splits it into carries (docs/gpu.md, "Running the kit within a
# lease").
#
#   PATH=~/.cache/llb/cuda-pypi/13.5.37/nvidia/cu13/bin:$PATH \
#   KIT_REAL_MODEL=smollm2-tools.gguf scripts/gpu-lease.sh
#
# Here: scripts/gpu-kit.sh (libllb.a without llama.cpp's archives, the trimmed tree), then the
# kit's run.sh with KIT_NO_DRIVER=1 KIT_CPU_LEVEL=avx2 builds llama.cpp with CUDA
# (KIT_CUDA_ARCHS, default 90; ~40 min cold on 2 cores, relinks only when warm, in KIT_BUILD,
# default target/kit/cuda-build; KIT_DIR reuses an unpacked kit and its build) and links libllb.so; llama-server is linked again against that
# libllb.so, so that the CUDA code travels once. Out: .gpu/c1 .. .gpu/cN (ignored by git), one
# carry per call: c1 holds the binaries, the CUDA runtime of the toolkit, the tree's gguf-py,
# vocabulary and templates and the first part of the real weights; the others the rest of them.
# There, in one lease, back to back (the machine stays warm ~30 s between calls):
#   run `bash scripts/gpu-lease/first.sh`           carry [".gpu/c1"]   (probe, fixtures)
#   run `bash scripts/gpu-lease/part.sh 2`          carry [".gpu/c2"]   (each middle carry)
#   run `bash scripts/gpu-lease/last.sh N 400`      carry [".gpu/cN"]   (the table, in 400 s)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
command -v nvcc >/dev/null || { echo "gpu-lease.sh: needs nvcc on PATH (scripts/cuda-toolkit-pypi.sh)" >&2; exit 2; }
git check-ignore -q .gpu/x || { echo "gpu-lease.sh: .gpu/ must be ignored (echo /.gpu/ >> .git/info/exclude)" >&2; exit 2; }
real="${KIT_REAL_MODEL:-}"
pack="$root/target/kit/lease"

./scripts/gpu-kit.sh >/dev/null
# KIT_DIR: an unpacked kit whose CUDA build (KIT_DIR/build) to reuse; it gets this tree's
# libllb.a and scripts. Else the fresh stage, built in target/kit/cuda-build.
stage="$root/target/kit/stage/gpu-kit"
build="${KIT_BUILD:-$root/target/kit/cuda-build}"
if [ -n "${KIT_DIR:-}" ]; then
  cp "$stage/libllb.a" "$stage/llb.h" "$stage/zero_pages.c" "$stage/run.sh" "$stage/driver.py" "$stage/mkfixture.py" "$KIT_DIR/"
  stage="$KIT_DIR" build="${KIT_BUILD:-$KIT_DIR/build}"
fi
KIT_NO_DRIVER=1 KIT_CPU_LEVEL=avx2 KIT_BUILD="$build" KIT_CUDA_ARCHS="${KIT_CUDA_ARCHS:-90}" "$stage/run.sh"

rm -rf "$pack" .gpu && mkdir -p "$pack" .gpu/c1
cp "$build/libllb.so" "$pack/"
B="$build"
# The server's own objects and libraries; llama.cpp, ggml and CUDA come from libllb.so, which
# exports them (run path $ORIGIN: the two travel side by side).
c++ -O3 "$B/tools/server/CMakeFiles/llama-server.dir/main.cpp.o" -o "$pack/llama-server" -Wl,-rpath,'$ORIGIN' \
  "$B/tools/server/libllama-server-impl.a" "$B/tools/server/libserver-context.a" "$B/common/libllama-common.a" \
  "$B/common/libllama-common-base.a" "$B/tools/mtmd/libmtmd.a" "$B/tools/ui/libllama-ui.a" \
  "$B/vendor/cpp-httplib/libcpp-httplib.a" -L"$pack" -l:libllb.so -Wl,--allow-shlib-undefined -ldl -lm -lpthread
strip --strip-unneeded "$pack/libllb.so" "$pack/llama-server"
cuda_root="$(dirname "$(dirname "$(command -v nvcc)")")"
cudart=""
for f in "$cuda_root"/lib*/libcudart.so.[0-9]* "$cuda_root"/targets/x86_64-linux/lib/libcudart.so.[0-9]*; do
  if [[ -e $f && $f =~ libcudart\.so\.[0-9]+$ ]]; then cudart=$f; break; fi
done
[ -n "$cudart" ] || { echo "gpu-lease.sh: no libcudart.so.N under $cuda_root" >&2; exit 1; }
cp -L "$cudart" "$pack/"
echo "== packing (xz -9)"
tar cf - -C "$pack" . | xz -T0 -9 > .gpu/c1/pre.tar.xz
tar cJf .gpu/c1/tree.tar.xz -C "$stage" llama.cpp/gguf-py llama.cpp/models/ggml-vocab-qwen2.gguf llama.cpp/models/templates

# What one call may carry: 64 MiB less what travels from the repository (its tracked and
# untracked-not-ignored files) and 1 MiB to spare.
repo=$(git ls-files -co --exclude-standard -z | xargs -0 cat 2>/dev/null | wc -c)
cap=$(( 64 * 1024 * 1024 - repo - 1024 * 1024 ))
used=$(du -cb .gpu/c1 | tail -1 | cut -f1)
[ "$used" -lt "$cap" ] || { echo "gpu-lease.sh: the first carry alone is $used bytes, over $cap" >&2; exit 1; }
if [ -n "$real" ]; then
  sha256sum "$real" | cut -d' ' -f1 > .gpu/c1/real.sha256
  size=$(stat -c %s "$real") off=0 k=1 room=$(( cap - used - 4096 ))
  while [ "$off" -lt "$size" ]; do
    mkdir -p ".gpu/c$k"
    n=$(( room < size - off ? room : size - off ))
    dd if="$real" of=".gpu/c$k/real.part-$(printf %02d "$k")" bs=1M iflag=skip_bytes,count_bytes \
      skip="$off" count="$n" status=none
    off=$(( off + n )) k=$(( k + 1 )) room=$(( cap - 4096 ))
  done
fi
last=$(ls -d .gpu/c* | wc -l)
echo "== carries ready (cap $cap bytes a call):"
du -sb .gpu/c* 
echo "calls: first.sh [.gpu/c1]; part.sh K [.gpu/cK] for K in 2..$((last - 1)); last.sh $last SECONDS [.gpu/c$last]"
