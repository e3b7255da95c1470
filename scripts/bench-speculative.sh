#!/usr/bin/env bash
# Issue 32's figures in one run (docs/benchmarks.md, "Speculative decoding"): a strict
# copy-heavy tool call and free text with and without speculation, "repeat this passage" against
# llama-server's n-gram types, and a pool of 8 conversations. Real SmolLM2-135M weights with the
# Qwen2.5 tool template (scripts/smollm2.sh); llama-server from the pinned tree, built as llb is.
#   scripts/bench-speculative.sh          LLB_BENCH_THREADS=N (default 2), LLB_BENCH_REPS=N (3)
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
cargo build --release --locked --example bench_speculative
model=$(scripts/smollm2.sh | tail -1)
server=$(scripts/llama-server.sh)
LLB_BENCH_MODEL="$model" LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_speculative
