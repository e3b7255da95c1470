#!/usr/bin/env bash
# A GPU lease's first call (scripts/gpu-lease.sh made its carry, .gpu/c1): unpacks the prebuilt
# libllb.so and llama-server into /tmp/llbgpu, checks that ggml's CUDA backend finds the GPU with
# the CUDA runtime carried (else with the machine's), and writes the random-weight fixtures in the
# background (setsid: they outlive the call).
set -u
R="$PWD"; W=/tmp/llbgpu; mkdir -p "$W/models"; cd "$W"
cp "$R"/.gpu/c1/* "$W/"; cp "$R"/scripts/gpu-kit/driver.py "$R"/scripts/gpu-kit/mkfixture.py "$W/"
tar xJf tree.tar.xz && tar xJf pre.tar.xz && rm -f pre.tar.xz tree.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nvcc --version 2>/dev/null | tail -1; nproc; grep -m1 'model name' /proc/cpuinfo
libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
  ls "$d"/libcublas.so.* >/dev/null 2>&1 && libs="$libs:$d"
done
probe() {
  LD_LIBRARY_PATH="$1" timeout 120 python3 -c '
import json, sys; sys.path.insert(0, "/tmp/llbgpu"); import driver
d = driver.Llb("/tmp/llbgpu/libllb.so").devices(); print(json.dumps(d)[:400])
sys.exit(0 if "CUDA" in json.dumps(d) else 3)'
}
lp="$W$libs:/usr/local/nvidia/lib64"
if probe "$lp"; then echo "PROBE OK (the carried CUDA runtime)"
else
  mkdir -p "$W/carried"; mv "$W"/libcudart.so.* "$W/carried/"; lp="${libs#:}:/usr/local/nvidia/lib64"
  if probe "$lp"; then echo "PROBE OK (the machine's CUDA runtime)"; else echo "PROBE FAILED"; exit 3; fi
fi
echo "$lp" > "$W/libpath"
LD_LIBRARY_PATH="$lp" ldd "$W/llama-server" | grep -E 'not found|libllb|cudart' || true
setsid nohup bash -c 'cd /tmp/llbgpu && python3 mkfixture.py --tree llama.cpp small=models/kit-small.gguf \
  qwen1.5b=models/kit-qwen1.5b.gguf && echo "[fixtures] done"' > "$W/fixtures.log" 2>&1 < /dev/null &
echo "fixtures: writing in the background"
