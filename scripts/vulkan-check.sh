#!/usr/bin/env bash
# Builds llb with llama.cpp's Vulkan backend (LLB_VULKAN=1) and checks that a fixture offloaded
# entirely to Vulkan gives the same greedy tool call as the CPU build, on a machine without a
# GPU: Mesa's software Vulkan driver (lavapipe) runs ggml-vulkan's shaders on the CPU.
#
#   ./scripts/vulkan-check.sh            # install what is missing (Debian/Ubuntu, sudo), build, test
#
# Not part of CI (docs/scaling.md): compiling ggml-vulkan's ~150 shaders and the backend adds a
# second full llama.cpp build (tens of minutes on 2 cores), beyond CI's budget. The Vulkan build
# goes to its own llama.cpp build directory (the backend set is part of its key) and its own cargo
# target directory (target/vulkan), so the CPU build is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v glslc >/dev/null || missing+=(glslc)
[ -f /usr/include/vulkan/vulkan.h ] || missing+=(libvulkan-dev)
icd=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -1 || true)
[ -n "$icd" ] || missing+=(mesa-vulkan-drivers)
if [ ${#missing[@]} -gt 0 ]; then
  echo "vulkan-check.sh: installing ${missing[*]} (Debian 12: glslc comes from bookworm-backports)" >&2
  sudo apt-get install -y "${missing[@]}"
  icd=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json | head -1)
fi
# Only lavapipe, even where a real GPU exists: the check is about a CPU-only machine.
export VK_ICD_FILENAMES=$icd
export LLB_VULKAN=1 CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/vulkan}
export LLB_LLAMA_BUILD_DIR=${LLB_LLAMA_BUILD_DIR:-$PWD/target/llama.cpp-build}
start=$(date +%s)
cargo build --release
echo "vulkan-check.sh: Vulkan build ready in $(( $(date +%s) - start )) s" >&2
# The test compares Vulkan with the CPU in the same process; it needs the Vulkan device, so it
# is told not to skip.
LLB_REQUIRE_VULKAN=1 cargo test --release --test backends vulkan -- --nocapture
