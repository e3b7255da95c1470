#!/usr/bin/env bash
# Checks what building and testing llb needs and, on Debian/Ubuntu, installs what is missing.
# demo.sh, test-all.sh and .ci/run call it, so CI takes the path a new user takes.
#
#   scripts/setup.sh            to build: Rust, a C and C++ compiler, CMake >= 3.16, ninja (or
#                               make), ccache, pip (only while the llama.cpp source is not there)
#   scripts/setup.sh --tests    also what test-all.sh runs: python3, valgrind (the C tests under
#                               memcheck), Maven and a JDK >= 25 (the Java binding)
#   scripts/setup.sh --ci       also libclang (tests/bindings.rs compares the committed bindings)
#
# Installs with apt-get when running as root or with password-less sudo; otherwise (or with
# LLB_SETUP_NO_INSTALL=1) prints one line saying what to install. Exits 1 when something required
# is still missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tests=0 ci=0
for a in "$@"; do
  case "$a" in
    --tests) tests=1 ;;
    --ci) tests=1 ci=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $a (--tests, --ci)" >&2; exit 2 ;;
  esac
done

have() { command -v "$1" >/dev/null 2>&1; }
# cmake >= 3.16
cmake_ok() {
  have cmake || return 1
  local v; v=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  [ -n "$v" ] && set -- $v && { [ "$1" -gt 3 ] || { [ "$1" -eq 3 ] && [ "$2" -ge 16 ]; }; }
}
cxx_ok() { if [ -n "${CXX:-}" ]; then have "${CXX%% *}"; else have c++ || have g++ || have clang++; fi; }
cc_ok() { if [ -n "${CC:-}" ]; then have "${CC%% *}"; else have cc || have gcc || have clang; fi; }
pip_ok() { [ -n "${PIP:-}" ] || have pip || have pip3 || python3 -m pip --version >/dev/null 2>&1; }
needs_source() { [ -z "${LLB_LLAMA_CPP_DIR:-}" ] && ! [ -f native/llama.cpp/common/chat.h ]; }
# What clang-sys (bindgen) loads: libclang.so / libclang-N.so; libclang-cpp.so is another library.
libclang_ok() {
  ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1 ||
    { have ldconfig && ldconfig -p | grep -Eq 'libclang(-[0-9.]+)?\.so'; }
}
jdk_ok() { (source scripts/find-jdk.sh) >/dev/null 2>&1; }

# Each check: "required|optional <test> <Debian package> <what it is for>"
checks=(
  "required cc_ok gcc a C compiler"
  "required cxx_ok g++ a C++ compiler"
  "required cmake_ok cmake CMake >= 3.16"
  "optional have_ccache ccache ccache (rebuilds in minutes after the llama.cpp build is gone)"
)
have_ninja() { have ninja; }
# CMake needs one of the two to run the build; ninja is the faster one.
if have make; then
  checks+=("optional have_ninja ninja-build ninja (faster llama.cpp builds)")
else
  checks+=("required have_ninja ninja-build ninja (runs the llama.cpp build; or make)")
fi
have_ccache() { have ccache; }
have_python3() { have python3; }
have_venv() { python3 -c 'import ensurepip, venv' >/dev/null 2>&1; }
have_valgrind() { have valgrind; }
have_mvn() { have mvn; }
needs_source && checks+=("required pip_ok python3-pip pip (fetches the pinned llama.cpp source once)")
if [ $tests = 1 ]; then
  checks+=(
    "required have_python3 python3 python3 (test-all.sh counts the Java results)"
    "required have_venv python3-venv python3-venv (scripts/smollm2.sh runs the pinned gguf-py in a venv)"
    "optional have_valgrind valgrind valgrind (runs the C tests under memcheck)"
  )
  if [ -f bindings-java/pom.xml ]; then
    checks+=("required have_mvn maven Maven (the Java binding's tests)")
    # Debian/Ubuntu carry a JDK 25 only in newer releases: offer the package only where apt has it.
    jdk_pkg=-
    have apt-cache && apt-cache show openjdk-25-jdk-headless >/dev/null 2>&1 && jdk_pkg=openjdk-25-jdk-headless
    checks+=("required jdk_ok $jdk_pkg a JDK >= 25 (the Java binding; FFM)")
  fi
fi
[ $ci = 1 ] && checks+=("required libclang_ok libclang-dev libclang (tests/bindings.rs regenerates the bindings)")

# --- what is missing ------------------------------------------------------------------------
run_checks() {
  missing_req=() missing_opt=() req_pkgs=() opt_pkgs=() no_pkg=()
  local c kind test pkg what
  for c in "${checks[@]}"; do
    read -r kind test pkg what <<<"$c"
    "$test" && continue
    if [ "$pkg" = - ]; then no_pkg+=("$what")
    elif [ "$kind" = required ]; then req_pkgs+=("$pkg")
    else opt_pkgs+=("$pkg")
    fi
    if [ "$kind" = required ]; then missing_req+=("$what"); else missing_opt+=("$what"); fi
  done
}
run_checks

if ! have cargo; then
  hint="install Rust from https://rustup.rs"
  [ -x "$HOME/.cargo/bin/cargo" ] && hint="it is in ~/.cargo/bin: run \`. ~/.cargo/env\` first"
  echo "error: llb needs Rust (cargo): $hint" >&2
  exit 1
fi

pkgs=("${req_pkgs[@]}" "${opt_pkgs[@]}")
if [ ${#pkgs[@]} -gt 0 ] && have apt-get && [ "${LLB_SETUP_NO_INSTALL:-0}" != 1 ]; then
  sudo=(-)
  if [ "$(id -u)" = 0 ]; then sudo=()
  elif have sudo && sudo -n true 2>/dev/null; then sudo=(sudo)
  fi
  if [ "${sudo[*]}" != - ]; then
    echo "== setup: installing ${pkgs[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq || echo "setup: apt-get update failed" >&2
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
      echo "setup: apt-get install ${pkgs[*]} failed" >&2
    run_checks
  fi
fi

# One line for what is still missing: what it is for, and the command that installs it.
list() { local s; s=$(printf '%s, ' "$@"); echo "${s%, }"; }
install="sudo apt-get install"
have apt-get || install="install (Debian package names):"
if [ ${#missing_req[@]} -gt 0 ]; then
  hints=()
  [ ${#req_pkgs[@]} -gt 0 ] && hints+=("install with \`$install ${req_pkgs[*]}\`${opt_pkgs[*]:+ (and, optional, ${opt_pkgs[*]})}")
  # Only the JDK can lack a package: older Debian/Ubuntu releases carry no openjdk-25.
  [ ${#no_pkg[@]} -gt 0 ] && hints+=("this system's apt has no JDK 25: install one (e.g. Eclipse Temurin 25) and set JAVA_HOME")
  hint=$(printf '%s; ' "${hints[@]}")
  echo "error: llb needs $(list "${missing_req[@]}"): ${hint%; }" >&2
  exit 1
fi
[ ${#missing_opt[@]} -gt 0 ] &&
  echo "note: optional, not installed: $(list "${missing_opt[@]}"): \`$install ${opt_pkgs[*]}\`" >&2

# --- the long step ahead -----------------------------------------------------------------------
# cargo shows build-script output only when the script is done: say it before cargo starts.
build_dir="${LLB_LLAMA_BUILD_DIR:-target/llama.cpp-build}"
if ! ls "$build_dir"/*/build/src/libllama.a >/dev/null 2>&1; then
  stack=$(sed -n 's/^chat_stack=//p' native/llama-cpp.pin)
  echo "== setup: no llama.cpp build yet: the first cargo build compiles llama.cpp $stack" \
    "(15-25 minutes on 2 cores, a few with a warm ccache; cached in $build_dir afterwards)"
fi
echo "== setup: ok"
