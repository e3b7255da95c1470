#!/usr/bin/env bash
# The whole sampled-fidelity matrix (tests/fidelity.rs, issue 24): 20 template families ×
# required/named/auto × streamed and whole × parallel on/off × thinking on/off × SEEDS seeds,
# temperature 1, on random-weight fixtures, plus the 6-turn required agent loop in every family,
# a complete call before a second cut at every token end (17 families), and 40 raw-text walks in
# each of the 8 raw-text formats.
# Prints the per-family table docs/tool-calls.md quotes; the full log goes to target/fidelity.log.
# CI runs a bounded sample of the same tests (LLB_FIDELITY_SAMPLE, default 40 requests).
#
#   ./scripts/fidelity.sh [SEEDS]   (default 2: 48 replies per family, 960 in all)
set -uo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
start=$(date +%s)
mkdir -p target
LLB_FIDELITY_SAMPLE=full LLB_FIDELITY_SEEDS="${1:-2}" cargo test --release --test fidelity -- --nocapture \
  --test-threads 1 >target/fidelity.log 2>&1
rc=$?
grep -E '(replies|evaluated per turn|failures|FAIL|panicked|test result|^agent loops|^sampled fidelity|^a complete call|^raw-text values| walks [0-9]+:)' target/fidelity.log | cut -c1-400
echo "== $(( $(date +%s) - start )) s, exit $rc"
exit $rc
