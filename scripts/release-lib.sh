# Sourced by scripts/release-jar.sh and scripts/portable-check.sh: the steps of a portable release
# build (docs/release.md). Nothing here runs on its own.
#
#   llb_release_tools            zig (PyPI ziglang), cargo-zigbuild, the rustup targets (or Debian's
#                                rustc-web for a target rustup cannot fetch); installed under
#                                $LLB_RELEASE_CACHE/tools when missing, pinned versions
#   llb_release_build PLATFORM   cargo zigbuild of libllb with LLB_CPU_VARIANTS=1 for glibc 2.28
#   llb_release_stage PLATFORM DIR   DIR/PLATFORM/: libllb.so, ggml's libraries, the CPU modules,
#                                files.list (what the Java loader extracts)
#   llb_release_check_glibc DIR  every ELF file in DIR: GLIBC symbol versions <= 2.28, no libstdc++,
#                                only system libraries and ggml's own as NEEDED, no RUNPATH but
#                                $ORIGIN; prints the maximum
#   llb_release_prune            removes CMake build directories no build used for 3 days

LLB_GLIBC_FLOOR=2.28
LLB_ZIG_VERSION=0.14.1
LLB_ZIGBUILD_VERSION=0.24.1
LLB_RELEASE_CACHE="${LLB_RELEASE_CACHE:-$HOME/.cache/llb/release}"
# The CMake builds (one directory per platform and options, build.rs's key); a fixed path keeps
# ccache's hits (CCACHE_BASEDIR makes paths relative to the checkout, so the depth counts).
LLB_RELEASE_LLAMA_DIR="${LLB_RELEASE_LLAMA_DIR:-$LLB_RELEASE_CACHE/llama}"

llb_triple() {
  case "$1" in
    linux-x86_64) echo x86_64-unknown-linux-gnu ;;
    linux-aarch64) echo aarch64-unknown-linux-gnu ;;
    *) echo "release: unknown platform $1 (linux-x86_64, linux-aarch64)" >&2; return 1 ;;
  esac
}

llb_release_tools() {
  local tools="$LLB_RELEASE_CACHE/tools"
  # zig: one already installed with pip (`python3 -m ziglang`) at the pinned version, else a copy
  # in the cache. cargo-zigbuild finds either (it also tries `python3 -m ziglang`).
  if [ "$(python3 -m ziglang version 2>/dev/null)" != "$LLB_ZIG_VERSION" ]; then
    local zigdir="$tools/ziglang-$LLB_ZIG_VERSION"
    if [ ! -x "$zigdir/ziglang/zig" ]; then
      echo "release: installing zig $LLB_ZIG_VERSION (PyPI ziglang) into $zigdir" >&2
      python3 -m pip install -q --disable-pip-version-check --target "$zigdir" "ziglang==$LLB_ZIG_VERSION" >&2
    fi
    export PATH="$zigdir/ziglang:$PATH"
  fi
  if ! cargo-zigbuild --version 2>/dev/null | grep -q " $LLB_ZIGBUILD_VERSION\$"; then
    local zbdir="$tools/cargo-zigbuild-$LLB_ZIGBUILD_VERSION"
    if [ ! -x "$zbdir/bin/cargo-zigbuild" ]; then
      echo "release: installing cargo-zigbuild $LLB_ZIGBUILD_VERSION (crates.io) into $zbdir" >&2
      cargo install -q --locked --root "$zbdir" cargo-zigbuild --version "$LLB_ZIGBUILD_VERSION" >&2
    fi
    export PATH="$zbdir/bin:$PATH"
  fi
  local p
  for p in ${LLB_RELEASE_PLATFORMS:-linux-x86_64 linux-aarch64}; do
    llb_release_rust_target "$(llb_triple "$p")" || return 1
  done
}

# The Rust standard library for TRIPLE: rustup's; where rustup cannot fetch it (a machine that
# reaches the package registries but not rustup's server, as CI's), Debian's rustc-web with its
# standard library for TRIPLE, unpacked under $LLB_RELEASE_CACHE/tools/rust-debian
# (llb_release_build then compiles that platform with it).
llb_release_rust_target() {
  local t=$1
  llb_rustup_has "$t" && return 0
  # Bounded: where the server's packets are dropped rather than refused, rustup retries for long.
  timeout 180 rustup target add "$t" >&2 && return 0
  [ -x "$(llb_debian_rustc "$t")" ] && return 0
  echo "release: rustup cannot add $t here; using Debian's rustc-web and its $t standard library" >&2
  llb_debian_rustc_install "$t"
}

# Whether rustup has TRIPLE's standard library installed.
llb_rustup_has() {
  rustup target list --installed 2>/dev/null | grep -x "$1" >/dev/null
}

# The compiler for TRIPLE: empty for rustup's (it has the target), else Debian's.
llb_release_rustc() {
  llb_rustup_has "$1" || llb_debian_rustc "$1" || true
}

# The Debian rustc (a wrapper script) that has TRIPLE's standard library, when one is unpacked.
llb_debian_rustc() {
  local dir="$LLB_RELEASE_CACHE/tools/rust-debian"
  [ -d "$dir/root/usr/lib/rustlib/$1" ] && echo "$dir/rustc"
}

llb_debian_rustc_install() {
  local t=$1 arch dir="$LLB_RELEASE_CACHE/tools/rust-debian" sudo v std deps tmp f
  case "$t" in aarch64-*) arch=arm64 ;; *) arch=amd64 ;; esac
  sudo=$( [ "$(id -u)" = 0 ] || echo sudo )
  export DEBIAN_FRONTEND=noninteractive
  if [ $arch != amd64 ] && ! dpkg --print-foreign-architectures | grep -qx $arch; then
    $sudo dpkg --add-architecture $arch
  fi
  $sudo apt-get update -qq
  v=$(apt-cache policy rustc-web | sed -n 's/^ *Candidate: //p')
  case "$v" in '' | '(none)') echo "release: Debian's archive has no rustc-web here" >&2; return 1 ;; esac
  # Not older than the rustup compiler the crates are built with elsewhere (their minimum versions).
  local have want
  have=$(echo "$v" | grep -oE '^[0-9]+\.[0-9]+') want=$(rustc -V | grep -oE '[0-9]+\.[0-9]+' | head -1)
  if [ "$(printf '%s\n%s\n' "$have" "$want" | sort -V | head -1)" != "$want" ]; then
    echo "release: Debian's rustc-web is $have, older than this machine's rustc $want" >&2; return 1
  fi
  # rustc's own library (librustc_driver) and what it needs from the system (LLVM), by the archive's
  # own dependency list.
  std=$(apt-cache show "libstd-rust-web-dev=$v" | sed -n 's/^Depends: \(libstd-rust-web-[0-9.]*\) .*/\1/p' | head -1)
  deps=$(apt-cache show "$std=$v" | sed -n 's/^Depends: //p' | head -1 | tr ',' '\n' | sed 's/[(|].*//' | xargs)
  $sudo apt-get install -y -qq --no-install-recommends $deps >/dev/null
  tmp=$(mktemp -d) && chmod 755 "$tmp"
  (cd "$tmp" && apt-get download -qq rustc-web="$v" "$std=$v" libstd-rust-web-dev="$v" "libstd-rust-web-dev:$arch=$v" 2>&1 \
    | grep -v unsandboxed >&2 || true)
  rm -rf "$dir" && mkdir -p "$dir/root"
  for f in "$tmp"/*.deb; do dpkg -x "$f" "$dir/root"; done
  rm -rf "$tmp"
  # rustc finds its standard libraries from its own path (root/usr); librustc_driver is beside them.
  cat > "$dir/rustc" <<EOS
#!/bin/sh
LD_LIBRARY_PATH="$dir/root/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dir/root/usr/bin/rustc" "\$@"
EOS
  chmod +x "$dir/rustc"
  "$dir/rustc" -V >&2 && [ -d "$dir/root/usr/lib/rustlib/$t" ]
}

# The build script's output for the last build of TRIPLE: the ggml directory it linked against.
llb_ggml_dir() {
  local out
  out=$(ls -t "$LLB_RELEASE_CACHE"/cargo/"$1"/release/build/llb-*/output 2>/dev/null | while read -r f; do
    grep -q '^cargo:rustc-env=LLB_GGML_BACKEND_DIR=' "$f" && { echo "$f"; break; }
  done)
  [ -n "$out" ] || { echo "release: no LLB_CPU_VARIANTS build output for $1" >&2; return 1; }
  sed -n 's/^cargo:rustc-env=LLB_GGML_BACKEND_DIR=//p' "$out"
}

# llb_release_build PLATFORM [VARIANTS [CARGO ARGS...]]: VARIANTS (e.g. "sse42 haswell") builds
# only those CPU modules (scripts/portable-check.sh in CI); empty, every one (the release jar).
# CARGO ARGS default to --lib (--bin llb: the CLI, against the same build).
llb_release_build() {
  local platform=$1 variants=${2:-} triple rustc
  shift; shift || true
  [ $# -gt 0 ] || set -- --lib
  triple=$(llb_triple "$platform")
  rustc=$(llb_release_rustc "$triple")
  echo "release: building $platform ($triple, glibc $LLB_GLIBC_FLOOR, CPU modules: ${variants:-all}${rustc:+, rustc-web from Debian})" >&2
  # zig's libc++ is linked into each library (CXXSTDLIB=c++): no libstdc++ version to match.
  env ${rustc:+RUSTC=$rustc} CARGO_TARGET_DIR="$LLB_RELEASE_CACHE/cargo" LLB_LLAMA_BUILD_DIR="$LLB_RELEASE_LLAMA_DIR" \
    LLB_CPU_VARIANTS=1 LLB_CPU_VARIANT_LIST="$variants" CXXSTDLIB=c++ \
    nice -n "${LLB_RELEASE_NICE:-10}" cargo zigbuild -q --release "$@" --target "$triple.$LLB_GLIBC_FLOOR"
}

# llb_release_stage PLATFORM DIR [VARIANTS]: VARIANTS as for llb_release_build (the CMake
# directory may hold more modules, from an earlier build with a longer list: only these are staged).
llb_release_stage() {
  local platform=$1 dest=$2/$1 variants=${3:-} triple ggml f soname v
  triple=$(llb_triple "$platform")
  ggml=$(llb_ggml_dir "$triple")
  touch "$ggml/../.." # <key>/build/lib: this CMake directory is in use (llb_release_prune)
  rm -rf "$dest" && mkdir -p "$dest"
  cp "$LLB_RELEASE_CACHE/cargo/$triple/release/libllb.so" "$dest/"
  # Under the names libllb asks for (their SONAMEs, libggml.so.0), as plain files: jars hold no links.
  for f in libggml.so libggml-base.so; do
    soname=$(readelf -d "$ggml/$f" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
    cp -L "$ggml/$f" "$dest/${soname:-$f}"
  done
  if [ -z "$variants" ]; then
    cp "$ggml"/libggml-cpu-*.so "$dest/"
  else
    for v in $variants; do cp "$ggml/libggml-cpu-$v.so" "$dest/"; done
  fi
  # A CUDA build's module (scripts/release-cuda-jar.sh), when there is one.
  [ ! -f "$ggml/libggml-cuda.so" ] || cp "$ggml/libggml-cuda.so" "$dest/"
  # zig's objcopy: the host's strip knows only the host's architecture.
  if [ -z "${LLB_RELEASE_NOSTRIP:-}" ]; then
    for f in "$dest"/*.so*; do
      if command -v zig >/dev/null; then
        zig objcopy --strip-debug "$f" "$f.stripped" && mv "$f.stripped" "$f"
      else
        strip --strip-debug "$f"
      fi
    done
  fi
  (cd "$dest" && ls -1 | grep -v '^files.list$' > files.list)
}

# build.rs keys each CMake build directory by the llama.cpp tree's path among others, so a CI that
# clones into a new folder each run makes a new one each run (rebuilt from ccache, whose
# CCACHE_BASEDIR makes the paths relative): the ones not used for 3 days go. A build marks its
# directory used (llb_release_stage touches it).
llb_release_prune() {
  [ -d "$LLB_RELEASE_LLAMA_DIR" ] || return 0
  find "$LLB_RELEASE_LLAMA_DIR" -mindepth 1 -maxdepth 1 -type d -mtime +3 -exec rm -rf {} +
}

llb_release_check_glibc() {
  local dir=$1 f max=0 bad=0 v need rp
  for f in "$dir"/*.so*; do
    v=$(readelf -V -W "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
    if [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$v" "$LLB_GLIBC_FLOOR" | sort -V | tail -1)" != "$LLB_GLIBC_FLOOR" ]; then
      echo "release: $f needs GLIBC_$v, newer than the $LLB_GLIBC_FLOOR floor" >&2; bad=1
    fi
    [ -z "$v" ] || max=$(printf '%s\n%s\n' "$v" "$max" | sort -V | tail -1)
    if readelf -V -W "$f" | grep -qE 'GLIBCXX_|CXXABI_'; then
      echo "release: $f needs libstdc++ (GLIBCXX/CXXABI symbol versions)" >&2; bad=1
    fi
    # The libraries find each other beside themselves, never in a build directory.
    rp=$(readelf -d "$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
    case "$rp" in '' | '$ORIGIN') ;; *) echo "release: $f has RUNPATH $rp (only \$ORIGIN may ship)" >&2; bad=1 ;; esac
    for need in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      case "$need" in
        libc.so.6 | libm.so.6 | libdl.so.2 | libpthread.so.0 | librt.so.1 | ld-linux*.so.* | libggml.so.0 | libggml-base.so.0) ;;
        libcuda.so.1 | libcudart.so.* | libcublas.so.* | libcublasLt.so.*) [[ "$f" == *libggml-cuda.so ]] || { echo "release: $f needs $need" >&2; bad=1; } ;;
        *) echo "release: $f needs $need, which a user's machine may not have" >&2; bad=1 ;;
      esac
    done
  done
  echo "$max"
  return $bad
}
