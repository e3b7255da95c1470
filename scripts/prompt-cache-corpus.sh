#!/usr/bin/env bash
# The prompt cache's disk-tier damage corpus (issue 42; docs/reliability.md, "The prompt cache's
# directory"): every kind of damage, each seeded differently, each answered by fresh processes.
# CI runs one case of each kind (tests/prompt_cache_corpus.rs); this runs the whole corpus.
#   scripts/prompt-cache-corpus.sh [CASES]      default 65 (5 of each of the 13 kinds)
set -euo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
LLB_CORPUS_N="${1:-65}" cargo test --release --locked --test prompt_cache_corpus -- --nocapture the_damage_corpus
