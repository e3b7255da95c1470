#!/usr/bin/env bash
# Issue 31's GPU check, in one run on a machine with CUDA (docs/gpu.md): builds llb with ggml's
# CUDA backend (LLB_CUDA=1) and llama-server from the same pinned tree, runs the chat and pool
# test suites with every layer on the GPU, then prints side by side, on a Qwen2.5-1.5B-shaped
# random-weight fixture and a small one (qwen2 vocabulary, Qwen2.5 tool template):
#   plain decode llb vs llama-server (T=0, T=1), llb's host work per token, a fresh engine's and
#   pool's first vs second strict request, response_format json_schema vs plain
#   (examples/bench_host.rs); required with 1-300 tools (examples/bench_grammar.rs); 1-64
#   conversations at once, pool vs llama-server --parallel N (examples/bench_serving.rs).
#
#   scripts/bench-gpu.sh                 LLB_CUDA_ARCHS=90 (H100) / 89 / 80 ... default: native
#   LLB_GPU_SKIP_TESTS=1 scripts/bench-gpu.sh     the figures only
#   LLB_GPU_NS="1 8 32 64"               conversation counts for the serving table
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ ! -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  echo "bench-gpu.sh: no CUDA toolkit (nvcc) here: this benchmark needs an NVIDIA GPU and CUDA 12 or 13" >&2
  exit 2
fi
export LLB_CUDA=1 LLB_PORTABLE="${LLB_PORTABLE:-0}"
export LLB_CUDA_ARCHS="${LLB_CUDA_ARCHS:-native}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
cargo build --release --locked --examples
server=$(scripts/llama-server.sh)
models="${LLB_MODEL_CACHE:-$HOME/.cache/llb}"
mkdir -p "$models"
small="$models/gpu-qwen2-small.gguf"
big="$models/gpu-qwen2-1.5g.gguf"
[ -f "$small" ] || ./target/release/llb fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --size small --out "$small" >/dev/null
[ -f "$big" ] || ./target/release/llb fixture --vocab qwen2 --template Qwen-Qwen2.5-7B-Instruct --size 1.5g --out "$big" >/dev/null
if [ "${LLB_GPU_SKIP_TESTS:-0}" != 1 ]; then
  echo "== tests with every layer on the GPU (fixtures load with n_gpu_layers -1 by default)"
  cargo test --release --locked --test chat --test pool
fi
threads=${LLB_BENCH_THREADS:-4}
for m in "$small" "$big"; do
  echo "== $(basename "$m"): host work, plain decode vs llama-server, first request, json_schema"
  LLB_BENCH_MODEL="$m" LLB_BENCH_NGL=-1 LLB_BENCH_THREADS=$threads LLB_LLAMA_SERVER="$server" \
    ./target/release/examples/bench_host
  echo "== $(basename "$m"): conversations at once, pool vs llama-server --parallel N"
  LLB_BENCH_MODEL="$m" LLB_LLAMA_SERVER="$server" ./target/release/examples/bench_serving ${LLB_GPU_NS:-1 8 32 64}
done
echo "== required with 1-300 tools, json_schema (151k vocabulary)"
LLB_BENCH_MODEL="$big" ./target/release/examples/bench_grammar
