#!/usr/bin/env bash
# Issue 21 item 0 (docs/benchmarks.md): the Java example server --parallel 8, then llama-server
# --parallel 8, one after the other, same model (SmolLM2 tool copy) and threads; 8 streamed
# tool-calling conversations each, cold then warm (bindings-java/examples/src/test/python/serving_bench.py).
# Needs the Java binding installed (scripts/test-all.sh) and builds llama-server once.
set -euo pipefail
cd "$(dirname "$0")/.."
M=$(scripts/smollm2.sh 2>/dev/null | sed -n 2p)
B=bindings-java/examples/src/test/python/serving_bench.py
LS=$(LLB_PORTABLE="${LLB_PORTABLE:-1}" scripts/llama-server.sh)
wait_up() { for i in $(seq 1 240); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done; echo "server at $1 did not come up" >&2; return 1; }
echo "uptime before: $(uptime)"
bindings-java/run-example-server --model "$M" --port 18481 --parallel 8 > target/llb-example-server.log 2>&1 &
p=$!
wait_up http://127.0.0.1:18481/v1/models
echo "llb: $(python3 $B http://127.0.0.1:18481/v1 8)"
kill $p; wait $p 2>/dev/null || true
echo "uptime between: $(uptime)"
$LS -m "$M" --host 127.0.0.1 --port 18482 --jinja -np 8 -c 32768 -t 2 -tb 2 -b 512 -ub 512 > target/llama-server.log 2>&1 &
p=$!
wait_up http://127.0.0.1:18482/health
echo "llama-server: $(python3 $B http://127.0.0.1:18482/v1 8)"
kill $p; wait $p 2>/dev/null || true
echo "uptime after: $(uptime)"
