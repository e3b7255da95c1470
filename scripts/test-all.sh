#!/usr/bin/env bash
# Runs every test of llb: Rust (cargo test), C (ctest), Java (Maven, when bindings-java/ exists).
# One llama.cpp build serves all of them (release profile; see build.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

echo "== Rust: cargo test --release"
cargo build --release --locked
cargo test --release --locked

echo "== C: ctest (tests/c)"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S tests/c -B target/c-tests "${gen[@]}" -DLLB_LIB_DIR="$root/target/release" -DLLB_CLI="$root/target/release/llb" >/dev/null
cmake --build target/c-tests
ctest --test-dir target/c-tests --output-on-failure

if [ -f bindings-java/pom.xml ]; then
  echo "== Java: mvn test (bindings-java)"
  source scripts/find-jdk.sh
  (cd bindings-java && mvn -q -B test -Dllb.library.path="$root/target/release/libllb.so" -Dllb.cli="$root/target/release/llb")
fi
echo "== all tests passed"
