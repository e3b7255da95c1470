#!/usr/bin/env bash
# Issue 41, part 5: a GPU check that runs where Rust does not (docs/gpu.md, "The GPU kit").
# Here, on a machine with Rust, gathers into target/gpu-kit.tar.xz (at most 60 MiB):
#   libllb.a        the staticlib without llama.cpp's archives (build.rs: LLB_NO_BUNDLE_LLAMA=1),
#                   debug info stripped; built in target/kit (CARGO_TARGET_DIR), no CMake build
#   llb.h, zero_pages.c
#   llama.cpp/      the pinned tree, trimmed to what the libraries, llama-server and gguf-py need
#                   (one vocabulary, one template)
#   mkfixture.py    random-weight fixtures with numpy and the tree's gguf-py
#   driver.py       the benchmark over the C ABI (python3 ctypes + numpy-free)
#   run.sh          the "there" script: builds, links libllb.so, writes fixtures, prints the table
# Then, on the GPU machine: `tar xJf gpu-kit.tar.xz && gpu-kit/run.sh` (KIT_CPU=1 without a GPU).
#
#   scripts/gpu-kit.sh                KIT_SKIP_BUILD=1: reuse target/kit's libllb.a
#   KIT_REAL_PARTS=f.gguf scripts/gpu-kit.sh   also carry real weights in 20 MiB parts inside the
#                                     kit, if the whole still fits 60 MiB (else refused)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
src="${LLB_LLAMA_CPP_DIR:-$root/native/llama.cpp}"
tdir="$root/target/kit"
stage="$tdir/stage/gpu-kit"
out="$root/target/gpu-kit.tar.xz"
limit=$((60 * 1024 * 1024))

if [ "${KIT_SKIP_BUILD:-0}" != 1 ] || [ ! -f "$tdir/release/libllb.a" ]; then
  echo "== building libllb.a without llama.cpp's archives (CARGO_TARGET_DIR=$tdir)"
  LLB_NO_BUNDLE_LLAMA=1 CARGO_TARGET_DIR="$tdir" LLB_LLAMA_CPP_DIR="$src" \
    nice -n 19 cargo rustc --lib --release --locked --crate-type staticlib
fi

rm -rf "$tdir/stage"
mkdir -p "$stage/llama.cpp/models/templates"
cp "$tdir/release/libllb.a" "$stage/libllb.a"
strip --strip-debug "$stage/libllb.a"
# No llama.cpp object may be in it: those come from the build there.
if nm -A "$stage/libllb.a" 2>/dev/null | grep -q ' T llama_decode$'; then
  echo "gpu-kit.sh: libllb.a holds llama.cpp's objects (LLB_NO_BUNDLE_LLAMA did not apply)" >&2
  exit 1
fi
cp include/llb.h native/zero_pages.c "$stage/"
cp scripts/gpu-kit/run.sh scripts/gpu-kit/mkfixture.py scripts/gpu-kit/driver.py "$stage/"
chmod +x "$stage/run.sh"

# The tree: what CMake configures with LLAMA_BUILD_TOOLS/SERVER on, gguf-py, one vocabulary and
# the Qwen2.5 template; the UI's sources, tests and docs stay behind (LLAMA_BUILD_UI=OFF).
( cd "$src" && tar cf - --exclude='tools/ui/src' --exclude='tools/ui/tests' --exclude='tools/ui/docs' \
    --exclude='__pycache__' --exclude='*.pyc' \
    CMakeLists.txt LICENSE licenses cmake common ggml include src vendor tools gguf-py scripts/ui-assets.cmake \
    models/ggml-vocab-qwen2.gguf models/templates/Qwen-Qwen2.5-7B-Instruct.jinja ) \
  | ( cd "$stage/llama.cpp" && tar xf - )

if [ -n "${KIT_REAL_PARTS:-}" ]; then
  mkdir -p "$stage/real"
  name=$(basename "$KIT_REAL_PARTS")
  split -b 20M -d "$KIT_REAL_PARTS" "$stage/real/$name.part-"
  (cd "$(dirname "$KIT_REAL_PARTS")" && sha256sum "$name") > "$stage/real/$name.sha256"
fi

{
  echo "llb commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src build.rs native 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  grep -E '^(version|commit)=' native/llama-cpp.pin | sed 's/^/llama.cpp pin /'
} > "$stage/KIT_INFO"

echo "== packing $out"
tar -C "$tdir/stage" -cf - gpu-kit | nice -n 19 xz -T2 -6 > "$out.tmp"
size=$(stat -c %s "$out.tmp")
if [ "$size" -gt "$limit" ]; then
  rm -f "$out.tmp"
  echo "gpu-kit.sh: the kit is $((size / 1024 / 1024)) MiB, over the 60 MiB limit" >&2
  exit 1
fi
mv "$out.tmp" "$out"
echo "$out: $(awk "BEGIN{printf \"%.1f\", $size/1048576}") MiB"
echo "there: tar xJf gpu-kit.tar.xz && gpu-kit/run.sh    (KIT_CPU=1 without a GPU; KIT_SMALL=1 small sizes)"
