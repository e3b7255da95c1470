#!/usr/bin/env bash
# Issue 41's CPU figures in one run (docs/benchmarks.md, "The cost model"): the defaults (prompt
# cache and speculation, decided by the cost model) against the same with the feature off, on
# the device in use. Real SmolLM2-135M with the Qwen2.5 tool template (scripts/smollm2.sh),
# llama-server from the pinned tree for the "repeat this passage" row.
#   scripts/bench-costs.sh        LLB_BENCH_THREADS=N (default 2), LLB_BENCH_TOKENS (128)
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
cargo build --release --locked --example bench_costs --example bench_prompt_cache --example bench_speculative
model=$(scripts/smollm2.sh | tail -1)
server=$(scripts/llama-server.sh)
echo "== pools and random-weight text (examples/bench_costs.rs)"
LLB_BENCH_MODEL="$model" ./target/release/examples/bench_costs
echo "== the alternation and a restart (examples/bench_prompt_cache.rs)"
LLB_BENCH_MODEL="$model" LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_prompt_cache
echo "== speculation: strict copy, story, repeat vs llama-server, pool half copying (examples/bench_speculative.rs)"
LLB_BENCH_MODEL="$model" LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_speculative
