#!/usr/bin/env bash
# The release libraries run on the machines users have (issue 45, docs/release.md):
#
#   1. glibc floor: every library of every platform needs nothing newer than GLIBC_2.28 and no
#      libstdc++ (symbol versions read with readelf).
#   2. x86-64: the C smoke tests (tests/c/smoke.c, and chat_smoke.c: a forced tool call on the
#      random-weight fixture) against the release libllb natively, under `qemu-x86_64 -cpu Nehalem`
#      (SSE4.2, no AVX: x86-64-v2) and `-cpu Haswell` (AVX2), each also checking which CPU module
#      ggml chose (sse42, haswell).
#   3. aarch64: the same C smoke tests, cross-built with zig, under `qemu-aarch64` (Debian's
#      qemu-user, with the arm64 glibc of libc6-arm64-cross) on its default CPU and on a
#      Cortex-A53 (ARMv8.0: the baseline module).
#
#   ./scripts/portable-check.sh        # prints its elapsed seconds; .ci/run calls it with LLB_CI_PORTABLE=1
#
# The release libraries come from scripts/release-lib.sh's steps (the ones scripts/release-jar.sh
# runs), staged under $LLB_RELEASE_CACHE/staged/<key>, where <key> hashes every input of the
# libraries (the tracked sources, the pin, the toolchain versions). A warm run (same key) builds
# nothing and only runs the checks; a changed Rust source recompiles libllb for each platform
# against the CMake builds cached in $LLB_RELEASE_CACHE/llama. A cold run (no cache at all)
# builds ggml's CPU variants and llama.cpp for each platform (docs/release.md has the times);
# LLB_PORTABLE_COLD_LIMIT=N (.ci/run sets 1) builds at most N platforms cold per run and says
# which it skipped, so a first CI run stays within its time and the next one completes the set.
#
# The CPU modules it builds are the ones its checks choose, not all of them (the release jar has
# every one): sse42 and haswell on x86-64 (Nehalem, Haswell, and this machine: haswell on an AVX2
# machine, sse42 on an older one; an AVX-512 machine also chooses haswell here), armv8.0_1 and
# armv8.2_2 on aarch64 (Cortex-A53, and qemu's default CPU, which takes the best one built).
# LLB_PORTABLE_VARIANTS_X86_64 / LLB_PORTABLE_VARIANTS_AARCH64 change the lists; "" builds all.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)
source scripts/release-lib.sh
PLATFORMS="${LLB_RELEASE_PLATFORMS:-linux-x86_64 linux-aarch64}"
export LLB_RELEASE_PLATFORMS="$PLATFORMS"
VARIANTS_X86_64="${LLB_PORTABLE_VARIANTS_X86_64-sse42 haswell}"
VARIANTS_AARCH64="${LLB_PORTABLE_VARIANTS_AARCH64-armv8.0_1 armv8.2_2}"
variants_of() {
  case "$1" in linux-x86_64) echo "$VARIANTS_X86_64" ;; linux-aarch64) echo "$VARIANTS_AARCH64" ;; esac
}

# --- system tools: qemu-user, the arm64 glibc for qemu-aarch64 --------------------------------
missing=()
command -v qemu-x86_64 >/dev/null && command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] || missing+=(libc6-arm64-cross)
if [ ${#missing[@]} -gt 0 ]; then
  echo "portable-check: installing ${missing[*]}" >&2
  sudo=$( [ "$(id -u)" = 0 ] || echo sudo )
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- the libraries: cached by the hash of their inputs ----------------------------------------
# The tools first (zig, cargo-zigbuild, each platform's Rust standard library): the key names the
# compilers, and the checks below use zig.
llb_release_tools
key=$( { git ls-files -z -- src native build.rs Cargo.toml Cargo.lock cbindgen.toml include scripts/release-lib.sh \
           | grep -zv '^native/llama.cpp/' | xargs -0 sha256sum
         echo "zig $LLB_ZIG_VERSION cargo-zigbuild $LLB_ZIGBUILD_VERSION $(rustc -V) $PLATFORMS"
         for p in $PLATFORMS; do r=$(llb_release_rustc "$(llb_triple "$p")"); [ -z "$r" ] || "$r" -V; done
         echo "variants: $VARIANTS_X86_64 / $VARIANTS_AARCH64"; } | sha256sum | cut -c1-16)
staged="$LLB_RELEASE_CACHE/staged/$key"
if [ -f "$staged/ok" ]; then
  echo "portable-check: release libraries cached ($staged)"
else
  mkdir -p "$staged/native"
  complete=1 cold_built=0
  for p in $PLATFORMS; do
    # A platform is cold until its CMake build (ggml's CPU variants, llama.cpp) once succeeded here.
    cold=0 && [ -f "$LLB_RELEASE_CACHE/warm-$p" ] || cold=1
    if [ $cold = 1 ] && [ -n "${LLB_PORTABLE_COLD_LIMIT:-}" ] && [ $cold_built -ge "$LLB_PORTABLE_COLD_LIMIT" ]; then
      echo "portable-check: $p: SKIPPED this run: its first (cold) build is left to the next run (LLB_PORTABLE_COLD_LIMIT=$LLB_PORTABLE_COLD_LIMIT)"
      rm -rf "${staged:?}/native/$p"
      complete=0
      continue
    fi
    t0=$(date +%s)
    llb_release_build "$p" "$(variants_of "$p")"
    llb_release_stage "$p" "$staged/native" "$(variants_of "$p")"
    touch "$LLB_RELEASE_CACHE/warm-$p"
    [ $cold = 0 ] || cold_built=$((cold_built + 1))
    echo "portable-check: built $p in $(( $(date +%s) - t0 )) s$( [ $cold = 0 ] || echo ' (cold)')"
  done
  [ $complete = 0 ] || touch "$staged/ok"
  # Older keys' staged libraries go; the CMake builds and cargo's target directory stay.
  find "$LLB_RELEASE_CACHE/staged" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
  llb_release_prune
fi
native="$staged/native"

# --- 1. the glibc floor --------------------------------------------------------------------------
staged_platforms=""
for p in $PLATFORMS; do
  [ -f "$native/$p/files.list" ] && staged_platforms="$staged_platforms $p"
done
for p in $staged_platforms; do
  max=$(llb_release_check_glibc "$native/$p")
  echo "portable-check: $p: newest glibc symbol version GLIBC_$max (floor $LLB_GLIBC_FLOOR), no libstdc++: ok"
done
# x86-64's CPU modules carry llamafile's sgemm.cpp compiled by the host's g++
# (native/ggml-dl/cxx-launcher.sh: zig's clang made the release library ~8% slower to decode),
# which leaves gcc's mark in the module's .comment section beside clang's.
case " $staged_platforms " in *" linux-x86_64 "*)
  if command -v g++ >/dev/null; then
    for m in "$native"/linux-x86_64/libggml-cpu-*.so; do
      readelf -p .comment "$m" | grep -q 'GCC:' || { echo "portable-check: $(basename "$m") has no object from g++: sgemm.cpp went to zig's clang" >&2; exit 1; }
    done
    echo "portable-check: linux-x86_64: every CPU module's sgemm.cpp compiled by g++: ok"
  fi ;;
esac

# --- fixtures: the random-weight models the C smoke tests use -----------------------------------
work="$LLB_RELEASE_CACHE/check"
mkdir -p "$work"
cli="${LLB_CLI:-$ROOT/target/release/llb}"
if [ ! -x "$cli" ]; then
  # No default build here (CI has one: test-all.sh): the CLI of the release build, which reuses
  # its CMake build and cargo directory.
  echo "portable-check: building the llb CLI for the fixtures" >&2
  llb_release_build linux-x86_64 "$VARIANTS_X86_64" --bin llb
  cli="$LLB_RELEASE_CACHE/cargo/x86_64-unknown-linux-gnu/release/llb"
fi
for spec in "tools Qwen-Qwen2.5-7B-Instruct" "plain google-gemma-2-2b-it"; do
  set -- $spec
  [ -f "$work/$1.gguf" ] || "$cli" fixture --vocab qwen2 --template "$2" --out "$work/$1.gguf" >/dev/null
done

# A probe printing the CPU module llb chose (llb_version's "cpu" field).
cat > "$work/variant.c" <<'EOF'
#include "llb.h"
#include <stdio.h>
#include <string.h>
int main(void) {
    char *v = llb_version();
    const char *at = strstr(v, "\"variant\":");
    printf("%s\n", at ? at : v);
    llb_string_free(v);
    return at ? 0 : 1;
}
EOF

# run LABEL EXPECTED_VARIANT COMMAND-PREFIX... : the probe and both smoke tests, under the prefix.
run() {
  local label=$1 want=$2 dir=$3; shift 3
  local t0 got
  t0=$(date +%s)
  # (qemu-x86_64 -cpu Haswell warns on stderr about CPUID bits TCG does not emulate.)
  got=$("$@" "$dir/variant" 2>/dev/null)
  case "$got" in
    *"\"variant\":\"$want\""*) ;;
    *) echo "portable-check: $label: expected CPU module $want, llb reports: $got" >&2; return 1 ;;
  esac
  "$@" "$dir/smoke" "$work/tools.gguf" "$work/plain.gguf" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; return 1; }
  "$@" "$dir/chat_smoke" "$work/tools.gguf" "$work/plain.gguf" >>"$work/out.txt" 2>&1 || { cat "$work/out.txt"; return 1; }
  echo "portable-check: $label: CPU module $want; smoke: $(grep passed "$work/out.txt" | tr '\n' ' ')($(( $(date +%s) - t0 )) s)"
}

# --- 2. x86-64: native, Nehalem, Haswell --------------------------------------------------------
case " $staged_platforms " in *" linux-x86_64 "*)
  d="$work/x86_64" && rm -rf "$d" && mkdir -p "$d"
  for prog in smoke:tests/c/smoke.c chat_smoke:tests/c/chat_smoke.c variant:"$work/variant.c"; do
    cc -std=c11 -O1 -I include "${prog#*:}" -L "$native/linux-x86_64" -lllb -Wl,-rpath,"$native/linux-x86_64" -o "$d/${prog%%:*}"
  done
  here=$("$d/variant" 2>/dev/null | sed -n 's/.*"variant":"\([^"]*\)".*/\1/p')
  run "x86-64 native" "$here" "$d"
  run "x86-64 qemu -cpu Nehalem" sse42 "$d" qemu-x86_64 -cpu Nehalem
  run "x86-64 qemu -cpu Haswell" haswell "$d" qemu-x86_64 -cpu Haswell
  ;;
esac

# --- 3. aarch64 under qemu ------------------------------------------------------------------------
case " $staged_platforms " in *" linux-aarch64 "*)
  d="$work/aarch64" && rm -rf "$d" && mkdir -p "$d"
  for prog in smoke:tests/c/smoke.c chat_smoke:tests/c/chat_smoke.c variant:"$work/variant.c"; do
    zig cc -target aarch64-linux-gnu.2.28 -std=c11 -O1 -I include "${prog#*:}" -L "$native/linux-aarch64" -lllb \
      -Wl,-rpath,"$native/linux-aarch64" -o "$d/${prog%%:*}"
  done
  export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
  best=$(qemu-aarch64 "$d/variant" 2>/dev/null | sed -n 's/.*"variant":"\([^"]*\)".*/\1/p')
  run "aarch64 qemu (default CPU)" "$best" "$d" qemu-aarch64
  run "aarch64 qemu -cpu cortex-a53" armv8.0_1 "$d" qemu-aarch64 -cpu cortex-a53
  ;;
esac

echo "== portable check: $(( $(date +%s) - start )) s"
