#!/usr/bin/env bash
# Builds llb's fuzz targets (cargo-fuzz / libFuzzer, fuzz/) and runs each for a bounded time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   SECONDS per target (default 30); all targets by default
#   scripts/fuzz.sh --seeds [TARGET...]     regenerate the committed seed corpora (fuzz/corpus/)
#   scripts/fuzz.sh --build                 build only
#
# Targets: infer_request create_config model_info_gguf pull_listing (docs/fuzzing.md).
# Each target runs with one worker on a working copy of its corpus (fuzz/corpus-work/<target>,
# git-ignored) plus the committed seeds (fuzz/corpus/<target>, never written). Crash inputs go
# to fuzz/artifacts/<target>/. Prints per target: exec count, exec/s, coverage, crashes; exits
# non-zero when a target crashed, leaked, ran out of memory or timed out.
#
# Toolchain: nightly (AddressSanitizer). Without a nightly toolchain it falls back to stable
# with RUSTC_BOOTSTRAP=1 and --sanitizer none (coverage-guided, no ASan: crashes, aborts,
# timeouts and libFuzzer's malloc/RSS limits are still caught).
#
# Environment: LLB_FUZZ_JOBS (cargo build jobs, default 1), LLB_FUZZ_RSS_MB (default 2048; also
# the largest single allocation allowed), LLB_FUZZ_TIMEOUT (seconds one input may take, default
# 20), LLB_FUZZ_RUNS (stop each target after this many execs instead of SECONDS),
# LLB_LLAMA_BUILD_DIR (default <repo>/target/llama.cpp-build: the llama.cpp build of the normal
# cargo build is reused, not rebuilt).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ALL_TARGETS=(infer_request create_config model_info_gguf pull_listing)

MODE=run
SECONDS_PER_TARGET=30
case "${1:-}" in
    --seeds) MODE=seeds; shift ;;
    --build) MODE=build; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    '') ;;
    *)
        if [[ "$1" =~ ^[0-9]+$ ]]; then SECONDS_PER_TARGET="$1"; shift
        else echo "fuzz.sh: first argument must be seconds per target, --seeds or --build" >&2; exit 2; fi ;;
esac
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")
for t in "${TARGETS[@]}"; do
    [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target $t (${ALL_TARGETS[*]})" >&2; exit 2; }
done

# --- toolchain and cargo-fuzz -------------------------------------------------------------------
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    TOOLCHAIN=(+nightly)
    SANITIZER=address
else
    echo "fuzz.sh: no nightly toolchain (rustup toolchain install nightly); falling back to stable" \
        "with RUSTC_BOOTSTRAP=1 and --sanitizer none" >&2
    export RUSTC_BOOTSTRAP=1
    TOOLCHAIN=()
    SANITIZER=none
fi
export LLB_LLAMA_BUILD_DIR="${LLB_LLAMA_BUILD_DIR:-$ROOT/target/llama.cpp-build}"
export CARGO_BUILD_JOBS="${LLB_FUZZ_JOBS:-1}"
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
BIN_DIR="$ROOT/fuzz/target/$TRIPLE/release"

build() {
    echo "== building fuzz targets (sanitizer: $SANITIZER, llama.cpp build: $LLB_LLAMA_BUILD_DIR)"
    cargo "${TOOLCHAIN[@]}" fuzz build -O --codegen-units 16 --sanitizer "$SANITIZER" "$@"
}

if [ "$MODE" = seeds ]; then
    build make_seeds
    ASAN_OPTIONS=detect_leaks=0 "$BIN_DIR/make_seeds" "${TARGETS[@]}"
    exit 0
fi
build
[ "$MODE" = build ] && exit 0

# --- run ------------------------------------------------------------------------------------------
RSS_MB="${LLB_FUZZ_RSS_MB:-2048}"
TIMEOUT="${LLB_FUZZ_TIMEOUT:-20}"
LOG_DIR="$ROOT/fuzz/artifacts/logs"
mkdir -p "$LOG_DIR"
# Leak checking stays on for the Rust side; llama.cpp's process-lifetime globals are not leaks.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0:detect_odr_violation=0:quarantine_size_mb=64}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/fuzz/lsan.supp:print_suppressions=0}"

failed=0
SUMMARY=()
for t in "${TARGETS[@]}"; do
    work="$ROOT/fuzz/corpus-work/$t"
    seeds="$ROOT/fuzz/corpus/$t"
    artifacts="$ROOT/fuzz/artifacts/$t"
    mkdir -p "$work" "$artifacts"
    limit=(-max_total_time="$SECONDS_PER_TARGET")
    [ -n "${LLB_FUZZ_RUNS:-}" ] && limit=(-runs="$LLB_FUZZ_RUNS")
    log="$LOG_DIR/$t.log"
    echo "== $t: ${LLB_FUZZ_RUNS:+$LLB_FUZZ_RUNS runs}${LLB_FUZZ_RUNS:-$SECONDS_PER_TARGET s}," \
        "$(find "$seeds" -type f | wc -l) seeds (log: ${log#"$ROOT"/})"
    start=$(date +%s)
    set +e
    "$BIN_DIR/$t" "${limit[@]}" -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$RSS_MB" -timeout="$TIMEOUT" \
        -dict="$ROOT/fuzz/dicts/$t.dict" -artifact_prefix="$artifacts/" -print_final_stats=1 \
        -close_fd_mask=1 "$work" "$seeds" </dev/null >"$log" 2>&1
    rc=$?
    set -e
    wall=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\) .*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\) .*/\1/p' <<<"$last")
    crash=$(grep -Eo "Test unit written to [^ ]+" "$log" | sed 's/Test unit written to //' | tail -1 || true)
    if [ $rc -ne 0 ]; then
        failed=1
        kind=$(grep -Eo "ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer): [a-zA-Z -]+" "$log" | head -1 || true)
        [ -z "$kind" ] && kind=$(grep -E "panicked at|deadly signal|out-of-memory|timeout" "$log" | head -1 || true)
        echo "   CRASH (exit $rc): ${kind:-see log}"
        [ -n "$crash" ] && echo "   input: ${crash#"$ROOT"/}  (reproduce: $BIN_DIR/$t $crash)"
        grep -E "panicked at" -A3 "$log" | head -8 | sed 's/^/   | /' || true
        crashes=1
    else
        crashes=0
    fi
    line=$(printf "%-16s execs %-9s exec/s %-6s cov %-6s ft %-7s wall %4ss  crashes %s" \
        "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$wall" "$crashes")
    echo "   $line"
    SUMMARY+=("$line")
done

echo "== summary"
printf '   %s\n' "${SUMMARY[@]}"
if [ $failed -ne 0 ]; then
    echo "fuzz.sh: a target failed; inputs are in fuzz/artifacts/<target>/, logs in fuzz/artifacts/logs/" >&2
    exit 1
fi
