#!/usr/bin/env bash
# The constraint-engine benchmark (docs/benchmarks.md, issue 25): token masks alone (1, 32, 128 and
# 300 tools; llguidance engine vs llama.cpp's GBNF sampler), grammar build time cold and cached,
# decode with tool_choice none vs required at T=0 and T=1 on the 151k-token Qwen2.5 fixture,
# response_format vs plain, and SmolLM2 real weights with 40 tools. Prints ratios of this one run.
#   scripts/bench-grammar.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
cargo build --release --locked --example bench_grammar --bin llb
fixture="${LLB_MODEL_CACHE:-$HOME/.cache/llb}/bench-qwen2-tools-64k.gguf"
mkdir -p "$(dirname "$fixture")"
[ -f "$fixture" ] || ./target/release/llb fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --context-length 65536 --out "$fixture" >/dev/null
smol=$(scripts/smollm2.sh 2>/dev/null | tail -1)
uptime
LLB_BENCH_MODEL="$fixture" LLB_BENCH_SMOL="$smol" ./target/release/examples/bench_grammar
uptime
echo
echo "== before: the same end-to-end rows on llama.cpp's GBNF sampler (LLB_GRAMMAR_ENGINE=gbnf)"
LLB_GRAMMAR_ENGINE=gbnf LLB_BENCH_END_TO_END_ONLY=1 LLB_BENCH_MODEL="$fixture" LLB_BENCH_SMOL="$smol" ./target/release/examples/bench_grammar
uptime
