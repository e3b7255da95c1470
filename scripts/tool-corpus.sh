#!/usr/bin/env bash
# The whole tool corpus (tests/data/tool-corpus.json) × six template families × required and
# named, on random-weight fixtures: prints the pass rate per family (docs/tool-calls.md has the
# figures). CI runs a fixed sample of the same test; this runs every tool (STRIDE=1, about two
# hours on 2 cores) or every STRIDE-th one. The full log goes to target/tool-corpus.log.
# LLB_TOOL_CORPUS_300=1 also runs the 300-tool request through the model in every family (a
# ~110k-token prompt: about 4 minutes per family on 2 cores; CI runs the grammar walk only).
#
#   ./scripts/tool-corpus.sh [STRIDE]
set -uo pipefail
cd "$(dirname "$0")/.."
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
start=$(date +%s)
mkdir -p target
LLB_TOOL_CORPUS_STRIDE="${1:-1}" cargo test --release --test tool_corpus -- --nocapture \
  real_tool_schemas_yield_valid_calls_in_every_family >target/tool-corpus.log 2>&1
rc=$?
if [ "${LLB_TOOL_CORPUS_300:-0}" = 1 ]; then
  cargo test --release --test tool_corpus -- --nocapture --ignored \
    three_hundred_tools_yield_a_valid_strict_call_in_every_family >>target/tool-corpus.log 2>&1 || rc=1
fi
grep -E '^(FAIL|GAP|[a-z].*valid calls|[a-z].*: valid; prompt|[0-9]+ tools of|test result)' target/tool-corpus.log | cut -c1-400
echo "== $(( $(date +%s) - start )) s, exit $rc"
exit $rc
