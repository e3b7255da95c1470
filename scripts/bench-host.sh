#!/usr/bin/env bash
# Issue 31's CPU figures in one run (docs/benchmarks.md, "Host work per token"): llb's host work
# per token on the 151,936-token qwen2 fixture (tiny body), plain decode against llama-server
# built from the pinned tree (same fixture, same threads), a fresh engine's and pool's first vs
# second strict request, and response_format json_schema against plain. Builds what it needs.
#   scripts/bench-host.sh                 LLB_BENCH_THREADS=N (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
cargo build --release --locked --example bench_host
server=$(scripts/llama-server.sh)
LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_host
