#!/usr/bin/env bash
# Issue 23's table in one run (docs/benchmarks.md): decode speed of llb (adaptive and fixed
# threads) and llama-server (llama.cpp's default OpenMP build from the pinned tree) with the
# machine idle, one core busy and every core busy, then two llb processes side by side; the
# SmolLM2 tool copy (real weights). Downloads/builds what it needs (cached).
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
cargo build --release --locked --example bench_contention
server=$(LLB_LLAMA_SERVER_OPENMP=1 scripts/llama-server.sh)
model=$(scripts/smollm2.sh 2>/dev/null | tail -1)
LLB_BENCH_MODEL="$model" LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_contention
