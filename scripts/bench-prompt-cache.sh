#!/usr/bin/env bash
# Issue 33's figures in one run (docs/benchmarks.md, "The prompt cache"): an engine alternating
# two long conversations, a restart with the same dir, a pool serving more conversations than
# it holds, and llama-server with --cache-ram on the same pool run. Real SmolLM2-135M weights
# with the Qwen2.5 tool template (scripts/smollm2.sh); llama-server from the pinned tree.
#   scripts/bench-prompt-cache.sh          LLB_BENCH_THREADS=N (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
cargo build --release --locked --example bench_prompt_cache
model=$(scripts/smollm2.sh | tail -1)
server=$(scripts/llama-server.sh)
LLB_BENCH_MODEL="$model" LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_prompt_cache
