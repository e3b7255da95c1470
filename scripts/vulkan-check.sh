#!/usr/bin/env bash
# Builds llb with llama.cpp's Vulkan backend (LLB_VULKAN=1) and checks that a fixture offloaded
# entirely to Vulkan gives the same greedy tool call as the CPU build, on a machine without a
# GPU: Mesa's software Vulkan driver (lavapipe) runs ggml-vulkan's shaders on the CPU.
#
#   ./scripts/vulkan-check.sh            # install what is missing (Debian/Ubuntu, sudo), build, test
#
# .ci/run runs it after the README's test command (LLB_CI_VULKAN=0 skips it). The Vulkan build
# goes to its own llama.cpp build directory (the backend set is part of its key) and its own cargo
# target directory (target/vulkan), so the CPU build is left as it is. Timings: docs/scaling.md.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v glslc >/dev/null || missing+=(glslc)
command -v glslangValidator >/dev/null || missing+=(glslang-tools)
[ -d /usr/share/cmake/SPIRV-Headers ] || [ -n "${VULKAN_SDK:-}" ] || missing+=(spirv-headers)
[ -f /usr/include/vulkan/vulkan.h ] || missing+=(libvulkan-dev)
icd=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -1 || true)
[ -n "$icd" ] || missing+=(mesa-vulkan-drivers)
if [ ${#missing[@]} -gt 0 ]; then
  echo "vulkan-check.sh: installing ${missing[*]}" >&2
  sudo=$( [ "$(id -u)" = 0 ] || echo sudo )
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  icd=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json | head -1)
fi
# The pinned ggml-vulkan uses VK_EXT_layer_settings, newer than Debian 12's headers (1.3.239): there,
# Debian 13's headers (libvulkan-dev 1.4.309, checked against its sha256) go into a private
# VULKAN_SDK directory beside the system loader and shader compilers; nothing is installed.
if [ -z "${VULKAN_SDK:-}" ] && ! grep -q VK_EXT_layer_settings /usr/include/vulkan/vulkan_core.h; then
  sdk=$PWD/target/vulkan-sdk
  if [ ! -f "$sdk/include/vulkan/vulkan.hpp" ]; then
    deb=libvulkan-dev_1.4.309.0-1_amd64.deb
    tmp=$(mktemp -d)
    curl -fsSL -o "$tmp/$deb" "http://deb.debian.org/debian/pool/main/v/vulkan-loader/$deb"
    echo "8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a  $tmp/$deb" | sha256sum -c --quiet
    dpkg-deb -x "$tmp/$deb" "$tmp/x"
    rm -rf "$sdk" && mkdir -p "$sdk/lib" "$sdk/bin" "$sdk/share"
    cp -r "$tmp/x/usr/include" "$sdk/include"
    ln -s "$(ls /usr/lib/*/libvulkan.so | head -1)" "$sdk/lib/libvulkan.so"
    ln -s "$(command -v glslc)" "$sdk/bin/glslc"
    ln -s "$(command -v glslangValidator)" "$sdk/bin/glslangValidator"
    ln -s /usr/share/cmake "$sdk/share/cmake" # SPIRV-Headers' CMake package
    rm -rf "$tmp"
  fi
  export VULKAN_SDK=$sdk
fi
# Only lavapipe, even where a real GPU exists: the check is about a CPU-only machine.
# ggml-vulkan skips CPU-type devices unless they are named: GGML_VK_VISIBLE_DEVICES=0 names lavapipe.
export VK_ICD_FILENAMES=$icd GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0}
export LLB_VULKAN=1 CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/vulkan}
export LLB_LLAMA_BUILD_DIR=${LLB_LLAMA_BUILD_DIR:-$PWD/target/llama.cpp-build}
start=$(date +%s)
cargo build --release --locked
echo "vulkan-check.sh: Vulkan build ready in $(( $(date +%s) - start )) s" >&2
# The test compares Vulkan with the CPU in the same process; it needs the Vulkan device, so it
# is told not to skip. llama.cpp's log (LLB_LOG=1) shows where the layers went: all on Vulkan0.
log=$CARGO_TARGET_DIR/vulkan-check.log
LLB_REQUIRE_VULKAN=1 LLB_LOG=1 cargo test --release --locked --test backends vulkan -- --nocapture >"$log" 2>&1 ||
  { tail -40 "$log"; exit 1; }
grep -E "using device Vulkan|offloaded [0-9]+/[0-9]+ layers|Vulkan0 model buffer|test result" "$log"
grep -Eq "offloaded ([0-9]+)/\1 layers to GPU" "$log" || { echo "vulkan-check.sh: not every layer was offloaded" >&2; exit 1; }
echo "vulkan-check.sh: every layer on Vulkan gives the CPU's tool call" >&2
