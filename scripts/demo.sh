#!/usr/bin/env bash
# The offline demo: generate a tiny tool-capable model (the pinned tree's Qwen2.5 template and
# qwen2 tokenizer, random weights) and show what llb reports about it. No network, no weights.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
out=target/demo
mkdir -p "$out"
./target/release/llb fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --out "$out/qwen2.5-tools.gguf"
echo "== llb info $out/qwen2.5-tools.gguf"
./target/release/llb info "$out/qwen2.5-tools.gguf" --pretty --brief
