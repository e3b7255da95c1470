#!/usr/bin/env bash
# The jump-forward benchmark (docs/benchmarks.md): named and required calls with 1, 3 and 10
# arguments, jump_forward on vs off, on the real-weights SmolLM2 copy with a tool template and on
# the ~1 GB F16 fixture. Prints ratios measured in this one run.
#   scripts/bench-jump.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
cargo build --release --locked --example bench_jump --bin llb
smol=$(scripts/smollm2.sh 2>/dev/null | tail -1)
f16="${LLB_MODEL_CACHE:-$HOME/.cache/llb}/bench-qwen2-f16-1g.gguf"
[ -f "$f16" ] || ./target/release/llb fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --size 1g --out "$f16" >/dev/null
bench() { uptime; LLB_BENCH_MODEL="$1" ./target/release/examples/bench_jump; uptime; }
echo "== SmolLM2-135M-Instruct Q4_1 (real weights, Qwen2.5 tool template), 1 thread"
bench "$smol"
echo "== the same, $(nproc) threads"
LLB_BENCH_THREADS=$(nproc) bench "$smol"
echo "== ~1 GB F16 fixture (random weights; decoding is bandwidth-bound), 1 thread"
LLB_BENCH_REPEATS="${LLB_BENCH_F16_REPEATS:-3}" bench "$f16"
