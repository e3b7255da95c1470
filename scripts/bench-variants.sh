#!/usr/bin/env bash
# Decode speed of the release library (CPU kernels chosen at run time, zig, glibc 2.28) against
# today's native build (GGML_NATIVE: -march=native), side by side in one run (docs/release.md,
# issue 45's goal: >= 0.97x). Both load the same fixture through llb_chat_infer (decode.c, one
# binary that dlopens each library), in alternating processes.
#
#   scripts/bench-variants.sh     LLB_NATIVE_LIB=... LLB_RELEASE_LIB=... to use libraries built already
#   LLB_BENCH_ROUNDS (default 3) alternating process pairs; each process: 5 runs of 192 tokens, median
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
native="${LLB_NATIVE_LIB:-}"
if [ -z "$native" ]; then
  # The default build as a user gets it (LLB_PORTABLE unset: -march=native), in its own target dir.
  (unset LLB_PORTABLE; CARGO_TARGET_DIR=target/bench-variants cargo build -q --release --lib)
  native=$ROOT/target/bench-variants/release/libllb.so
fi
release="${LLB_RELEASE_LIB:-$ROOT/target/release-jar/native/linux-x86_64/libllb.so}"
[ -f "$release" ] || { echo "bench-variants: no release library at $release: run scripts/release-jar.sh (or set LLB_RELEASE_LIB)" >&2; exit 1; }
work=$ROOT/target/bench-variants
mkdir -p "$work"
cc -O2 -o "$work/decode" scripts/bench-variants/decode.c -ldl
fixture=$work/bench-llama-spm-nemo-0.3g.gguf
cli="${LLB_CLI:-$ROOT/target/release/llb}"
[ -f "$fixture" ] || "$cli" fixture --vocab llama-spm --template mistralai-Mistral-Nemo-Instruct-2407 --size 0.3g --out "$fixture" >/dev/null
rounds=${LLB_BENCH_ROUNDS:-3}
a=() b=() r=()
for i in $(seq "$rounds"); do
  # Each round runs both, the first one alternating, so that a drift of the machine within a
  # round favours neither.
  if [ $((i % 2)) = 1 ]; then
    read -r ra va < <("$work/decode" "$native" "$fixture" 5)
    read -r rb vb < <("$work/decode" "$release" "$fixture" 5)
  else
    read -r rb vb < <("$work/decode" "$release" "$fixture" 5)
    read -r ra va < <("$work/decode" "$native" "$fixture" 5)
  fi
  ri=$(awk -v x="$rb" -v y="$ra" 'BEGIN {printf "%.3f", x / y}')
  echo "round $i: native $ra tok/s ($va), release $rb tok/s ($vb), ratio $ri"
  a+=("$ra") b+=("$rb") r+=("$ri")
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
ma=$(med "${a[@]}") mb=$(med "${b[@]}")
echo "decode tok/s, median of $rounds rounds: native build $ma, release build (runtime CPU variant $vb) $mb -> ratio $(awk -v x="$mb" -v y="$ma" 'BEGIN {printf "%.3f", x / y}'); median of the rounds' ratios $(med "${r[@]}")"
