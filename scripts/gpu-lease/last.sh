#!/usr/bin/env bash
# A GPU lease's last call: `last.sh K SECONDS` adds carry .gpu/cK's part, joins and checks the
# real weights, waits for the fixtures and runs the kit's driver (KIT_ONLY rows, default all;
# KIT_REPS) within SECONDS; the table goes to $OUT/table.log as well.
set -u
R="$PWD"; W=/tmp/llbgpu; t0=$(date +%s); limit="${2:-400}"
cp "$R"/.gpu/c"$1"/real.part-* "$W/" 2>/dev/null
cd "$W"
real=()
if ls real.part-* >/dev/null 2>&1; then
  cat real.part-* > models/real.gguf
  got=$(sha256sum models/real.gguf | cut -d' ' -f1)
  if [ "$got" = "$(cat real.sha256)" ]; then real=(--real models/real.gguf); else echo "real weights: sha256 $got differs: rows 3-5 on random weights"; fi
fi
until grep -q '^\[fixtures\] done' fixtures.log; do
  [ $(( $(date +%s) - t0 )) -gt 120 ] && { cat fixtures.log; echo "no fixtures"; exit 1; }
  sleep 2
done
left=$(( limit - ($(date +%s) - t0) - 10 ))
set -o pipefail
LD_LIBRARY_PATH="$(cat libpath)" LLB_LLAMA_CPP_DIR="$W/llama.cpp" timeout "$left" python3 -u driver.py \
  --lib "$W/libllb.so" --server "$W/llama-server" --big models/kit-qwen1.5b.gguf --small models/kit-small.gguf \
  --tree llama.cpp "${real[@]}" 2>&1 | tee "${OUT:-$W}/table.log"
rc=$?
tail -c 4000000 llama-server.log > "${OUT:-$W}/llama-server.log" 2>/dev/null
echo "last.sh: rc $rc after $(( $(date +%s) - t0 )) s"
exit $rc
