#!/usr/bin/env bash
# ThreadSanitizer over the concurrency stress tests (tests/stress.rs) — Rust side only.
#
#   ./scripts/tsan.sh                 # two threads racing on one handle (busy): clean
#   ./scripts/tsan.sh eight_engines   # any test of tests/stress.rs, by name filter
#
# Known false positives (docs/stress.md): with eight engines, llb::model::acquire's registry
# (always used under its std Mutex) is reported when the mutex was contended — the contended
# path lives in the uninstrumented std, so TSan misses the acquire; and the last Arc<Model> drop
# (llama_vocab freed) against an earlier read, because Arc's acquire fence is invisible to TSan.
#
# What is instrumented, and what is not (docs/stress.md has the details):
#   - llb's Rust code, the test and every Rust dependency: nightly `-Zsanitizer=thread`.
#   - NOT the Rust standard library: `-Zbuild-std` needs the nightly `rust-src` component, which
#     this machine does not have (no network beyond crates.io), so std is the prebuilt one and
#     `-Cunsafe-allow-abi-mismatch=sanitizer` accepts the mix. Generic std code (Mutex, Arc,
#     channels) is monomorphized into instrumented crates, but its non-generic parts are not:
#     libtest's result channel (std::sync::mpmc) reports a false race, suppressed below.
#   - NOT llama.cpp / ggml / native/shim.cpp: the existing Release build is reused (built without
#     -fsanitize=thread); races inside C++ are invisible. With one compute thread per engine
#     ("n_threads": 1) ggml starts no worker threads, so what runs concurrently in C++ is each
#     engine's own context over the shared, read-only llama_model.
# llb_model_info / llb_chat_create probe templates in a forked child; TSan cannot start threads
# in the child of a multi-threaded process unless die_after_fork=0.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
filter=("$@")
[ ${#filter[@]} -eq 0 ] && filter=(two_threads_on_one_handle)

rustup run nightly rustc --version >/dev/null 2>&1 || { echo "tsan.sh: needs a nightly toolchain (rustup toolchain install nightly)" >&2; exit 2; }
target=$(rustc -vV | sed -n 's/^host: //p')
supp=$(mktemp)
trap 'rm -f "$supp"' EXIT
cat >"$supp" <<'SUPP'
# libtest's result channel: std's non-generic atomics are not instrumented (no -Zbuild-std).
race:std::sync::mpmc
# glibc's tzset (via llama.cpp's format_time -> std::localtime) runs under glibc's internal
# lock, which TSan does not see.
race:tzset_internal
SUPP

# A target dir of its own (other flags), the cached llama.cpp build of the release profile.
export CARGO_TARGET_DIR="$root/target/tsan"
export LLB_LLAMA_BUILD_DIR="${LLB_LLAMA_BUILD_DIR:-$root/target/llama.cpp-build}"
export RUSTFLAGS="-Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer"
export TSAN_OPTIONS="halt_on_error=1 die_after_fork=0 suppressions=$supp ${TSAN_OPTIONS:-}"
status=0
for f in "${filter[@]}"; do
  echo "== TSan: tests/stress.rs $f"
  cargo +nightly test --release --target "$target" --test stress -- --nocapture --test-threads 1 "$f" || status=1
done
exit $status
