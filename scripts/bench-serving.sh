#!/usr/bin/env bash
# The serving benchmark (docs/benchmarks.md): llb pools against llama-server --parallel N built
# from the pinned tree, on the real-weights SmolLM2 copy with a tool template and on the ~1 GB F16
# fixture. Downloads/builds what it needs (cached); prints ratios measured in this one run.
#   scripts/bench-serving.sh [N ...]        # default N = 1 4 8 16
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
cargo build --release --locked --example bench_serving
server=$(scripts/llama-server.sh)
smol=$(scripts/smollm2.sh 2>/dev/null | tail -1)
f16="${LLB_MODEL_CACHE:-$HOME/.cache/llb}/bench-qwen2-f16-1g.gguf"
[ -f "$f16" ] || ./target/release/llb fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --size 1g --out "$f16" >/dev/null
echo "== SmolLM2-135M-Instruct Q4_1 (real weights, Qwen2.5 tool template)"
LLB_BENCH_MODEL="$smol" LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_serving "$@"
echo "== ~1 GB F16 fixture (random weights; decoding is bandwidth-bound)"
LLB_BENCH_MODEL="$f16" LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_serving ${LLB_BENCH_F16_NS:-1 8}
