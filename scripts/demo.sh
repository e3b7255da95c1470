#!/usr/bin/env bash
# The offline demo: generate a tiny tool-capable model (the pinned tree's Qwen2.5 template and
# qwen2 tokenizer, random weights), show what llb reports about it, then run a real tool-calling
# chat with tool_choice "required" and print the tool call. No network, no downloaded weights.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked
out=target/demo
mkdir -p "$out"
model="$out/qwen2.5-tools.gguf"
./target/release/llb fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --out "$model" >/dev/null

echo "== llb info $model"
./target/release/llb info "$model" --pretty --brief

echo
echo "== llb chat (tool_choice=required, streamed deltas on stderr)"
./target/release/llb chat "$model" "What's the weather in Paris for the next 3 days?" \
  --tools examples/weather-tools.json --tool-choice required --no-parallel --seed 42 --stream --pretty
echo
echo "The weights are random, so the words are noise; the tool call is real: llama.cpp's chat"
echo "template rendered the tools, llb's strict grammar forced a schema-valid call, and the"
echo "template's own parser returned it."
