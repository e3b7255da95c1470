#!/usr/bin/env bash
# The host work of one request in instructions, two builds side by side (docs/benchmarks.md,
# "The house rework in instructions"). callgrind counts instructions, not seconds: its figures
# repeat on a noisy machine where the wall-clock benchmarks spread ±10-15% between runs of one
# tree, so a change that must leave the request's work alone (issue 43: ±3%) can be shown to.
#   scripts/bench-instructions.sh [REV]     REV: the build to compare with (default HEAD~1)
#   LLB_BENCH_TOKENS=N (default 48)         the reply's length
# `llb chat` runs on the real SmolLM2 tool model (scripts/smollm2.sh) at T=0 under valgrind's
# callgrind, for a forced tool call and for free text, on one compute thread
# (LLB_THREAD_BUDGET=1: no ggml worker spinning at barriers). Printed for each build: the
# instructions of the request's own thread inside `Engine::infer` (plan, prompt, sampling,
# grammar, parsing, response), of `llama_decode` (the model's compute, on the scheduler's
# thread), and of the scheduler's thread in all (with the scheduling, whose short spin-waits for
# a request's next token make it vary a little between runs of one build).
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:-HEAD~1}"
tokens="${LLB_BENCH_TOKENS:-48}"
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
command -v valgrind >/dev/null || { echo "valgrind is needed (Debian: apt-get install valgrind)" >&2; exit 1; }
cargo build --release --locked --bin llb >&2
out=target/bench-instructions
mkdir -p "$out"
sha=$(git rev-parse --verify "$rev^{commit}")
before="$out/llb-${sha:0:12}"
if [ ! -x "$before" ]; then
  # The other build from a worktree of REV, sharing the pinned llama.cpp tree fetched above.
  tree="$out/tree"
  rm -rf "$tree"
  git worktree prune
  git worktree add --detach "$tree" "$sha" >&2
  ln -s "$PWD/native/llama.cpp" "$tree/native/llama.cpp"
  (cd "$tree" && CARGO_TARGET_DIR="$PWD/../target" cargo build --release --locked --bin llb >&2)
  cp "$out/target/release/llb" "$before"
  git worktree remove --force "$tree"
fi
model=$(scripts/smollm2.sh | tail -1)
tools="$out/tools.json"
cat >"$tools" <<'EOF'
[{"type": "function", "function": {"name": "edit_file", "description": "Replace a file's text",
  "parameters": {"type": "object", "properties": {"path": {"type": "string"},
  "text": {"type": "string"}}, "required": ["path", "text"], "additionalProperties": false}}}]
EOF

# instructions BIN NAME ARGS...: "<request thread> <llama_decode> <scheduler thread>" for one run.
instructions() {
  local bin=$1 name=$2
  shift 2
  rm -f "$out/$name".*
  LLB_THREAD_BUDGET=1 valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/$name.%p" \
    "$bin" chat "$model" --temperature 0 --max-tokens "$tokens" --n-ctx 2048 "$@" >"$out/$name.reply" 2>/dev/null
  # The run whose main thread ran the request (the caps probe forks a child that valgrind follows).
  local main_ir=0 decode=0 sched=0 f n t
  for f in "$out/$name".*-01; do
    n=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null | awk '/llb::engine::Engine::infer/ && !n {gsub(",","",$1); n=$1} END {print n}')
    [ -n "$n" ] || continue
    main_ir=$n
    for t in "${f%-01}"-0[2-9] "${f%-01}"-[1-9][0-9]; do
      [ -e "$t" ] || continue
      n=$(callgrind_annotate --inclusive=yes "$t" 2>/dev/null | awk '/[?]:llama_decode / && !n {gsub(",","",$1); n=$1} END {print n}')
      [ -n "$n" ] || continue
      decode=$n
      sched=$(callgrind_annotate "$t" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
    done
  done
  echo "$main_ir $decode $sched"
}

row() {
  local what=$1
  shift
  read -r b_main b_dec b_sched < <(instructions "$before" "before-$what" "$@")
  read -r a_main a_dec a_sched < <(instructions target/release/llb "after-$what" "$@")
  if ! diff <(jq -S 'del(.id, .created, .timings, .choices[0].message.tool_calls[]?.id)' "$out/before-$what.reply") \
    <(jq -S 'del(.id, .created, .timings, .choices[0].message.tool_calls[]?.id)' "$out/after-$what.reply") >/dev/null; then
    echo "  ($what: the two builds' replies differ, so they did different work)"
  fi
  awk -v w="$what" -v b="$b_main $b_dec $b_sched" -v a="$a_main $a_dec $a_sched" 'BEGIN {
    split(b, x, " "); split(a, y, " "); split("request thread|llama_decode|scheduler thread", name, "|")
    for (i = 1; i <= 3; i++)
      printf "%-16s %-17s %14.0f -> %14.0f  (%.4fx)\n", (i == 1 ? w : ""), name[i], x[i], y[i], (x[i] > 0 ? y[i] / x[i] : 0) }'
}

echo "== instructions, ${sha:0:12} -> working tree (callgrind, T=0, $tokens tokens, SmolLM2-135M tools)"
row forced-call "Edit notes.txt: replace its text with 'The keeper climbed the stairs.'" \
  --tools "$tools" --tool-choice required --no-parallel
row free-text "Tell me a short story about a lighthouse keeper."
