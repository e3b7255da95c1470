#!/usr/bin/env bash
# Deterministic call syntax on real weights: N (default 200) seeded `auto` requests at
# temperature 1.0 on SmolLM2-135M with the Qwen2.5 tool template, with and without the switch;
# prints calls started, parsed and distinct argument sets (docs/tool-calls.md has the figures;
# N=200 takes about 30-40 min on a loaded 2-core machine).
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_SMOLLM2_TOOLS="$(./scripts/smollm2.sh | tail -1)"
export LLB_CALL_SYNTAX_N="${1:-200}"
cargo test --release --test call_syntax real_weights -- --nocapture
