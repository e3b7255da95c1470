#!/usr/bin/env bash
# The C++ compiler launcher of the build with CPU modules chosen at run time (build.rs,
# build_llama_dl; docs/release.md, "Decode speed"). Every file goes to the compiler CMake names
# (zig's c++ in the release build), through ccache where it is installed, except llamafile's
# sgemm.cpp on x86-64, which goes to the host's g++ with the same flags: zig's clang makes its
# f16 gemm slow enough to cost the release library ~8% of its decode speed (0.91x of the gcc
# build; 1.03x with gcc's sgemm.o). The object needs no C++ runtime and no libc symbol (only
# ggml's), so zig still links the module against its glibc 2.28 stubs and its own libc++.
set -euo pipefail
ccache=(); command -v ccache >/dev/null && ccache=(ccache)
compiler=$1
case " $* " in
  *"/ggml-cpu/llamafile/sgemm.cpp "*) ;;
  *) exec "${ccache[@]}" "$@" ;;
esac
case "$compiler" in
  *aarch64*|*arm64*) exec "${ccache[@]}" "$@" ;;   # no x86-64 g++ for these; keep zig's
esac
command -v g++ >/dev/null || exec "${ccache[@]}" "$@"
shift
args=()
for a in "$@"; do
  case "$a" in
    # clang-only options of ggml's and build.rs's flags
    -mevex512|-Wunreachable-code-break|-Wunreachable-code-return) ;;
    *) args+=("$a") ;;
  esac
done
exec "${ccache[@]}" g++ "${args[@]}"
