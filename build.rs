//! Build script: owns every native step (docs/STYLE.md §12).
//!
//! 1. Locate the pinned llama.cpp tree (`LLB_LLAMA_CPP_DIR`, else `native/llama.cpp/`, else fetch
//!    the pinned sdist with pip, verify its sha256 and unpack it).
//! 2. Build llama.cpp's static libraries with CMake, always Release, into a directory keyed by the
//!    pin and the options so that debug and release cargo profiles share one build.
//! 3. Compile the C++ shim (`native/shim.cpp`, `native/isolate.cpp`, `native/speculative.cpp`)
//!    with the cc crate.
//! 4. cbindgen: the public C header, written to `OUT_DIR/llb.h`; `include/llb.h` is the committed
//!    copy, refreshed when `LLB_BLESS_HEADER=1` and checked by a test.
//!
//! The Rust FFI (llama.h, gguf.h, ggml-backend.h, ggml-rpc.h, native/shim.h, native/rpc_guard.h)
//! is not generated here: bindgen's output for the pinned tree is committed
//! (`src/sys/bindings.rs`), so a build needs no libclang;
//! `tests/bindings.rs` regenerates it and compares where libclang is installed.
//!
//! A missing tool (cmake, a C/C++ compiler, pip) stops the build with one `error:` line saying
//! what to install (`cargo::error`), not a panic backtrace.

use std::collections::BTreeMap;
use std::env;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());

    let pin = read_pin(&manifest.join("native/llama-cpp.pin"));
    for (k, v) in &pin {
        println!("cargo:rustc-env=LLB_PIN_{}={}", k.to_uppercase(), v);
    }
    println!("cargo:rerun-if-changed=native/llama-cpp.pin");
    println!("cargo:rerun-if-env-changed=LLB_LLAMA_CPP_DIR");
    println!("cargo:rerun-if-env-changed=LLB_PORTABLE");
    println!("cargo:rerun-if-env-changed=LLB_LLAMA_BUILD_DIR");
    println!("cargo:rerun-if-env-changed=LLB_BLESS_HEADER");
    println!("cargo:rerun-if-env-changed=LLB_NO_BUNDLE_LLAMA");
    println!("cargo:rerun-if-env-changed=LLB_CPU_VARIANTS");
    println!("cargo::rustc-check-cfg=cfg(llb_backend_dl)");
    println!("cargo::rustc-check-cfg=cfg(llb_rpc)");
    for var in ["LLB_CUDA", "LLB_CUDA_ARCHS", "LLB_VULKAN", "LLB_RPC", "LLB_METAL", "CUDA_PATH", "VULKAN_SDK"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // The tools checked below: a build that failed for want of one reruns anyway, these make a
    // changed choice count too.
    println!("cargo:rerun-if-env-changed=CMAKE");
    println!("cargo:rerun-if-env-changed=PIP");

    // Fail fast, before fetching or building anything, when a tool is missing.
    check_build_tools();
    let src = llama_source(&manifest, &out, &pin);
    println!("cargo:rustc-env=LLB_LLAMA_CPP_SRC={}", src.display());
    let backends = Backends::from_env();
    if switch("LLB_NO_BUNDLE_LLAMA") == Some(true) {
        // scripts/gpu-kit.sh: a staticlib without llama.cpp's archives, to be linked on another
        // machine against a llama.cpp built there (CUDA): no CMake build here at all.
        println!("cargo:rustc-env=LLB_LLAMA_BUILD=");
        link_llama_unbundled();
    } else if switch("LLB_CPU_VARIANTS") == Some(true) {
        // scripts/release-jar.sh: ggml as shared libraries with every CPU variant as a module
        // chosen at run time (docs/release.md).
        build_llama_dl(&manifest, &src, &out, &pin, &backends);
    } else {
        let build = build_llama(&src, &out, &pin, &backends);
        link_llama(&build, &backends);
    }
    build_shim(&manifest, &src);
    if backends.rpc {
        build_rpc(&src);
    }
    generate_header(&manifest, &out);
}

/// Stops the build with one clear line: cargo prints `error: llb@<version>: <msg>` and fails the
/// build because of the `cargo::error` line (exiting non-zero would add a dump of this script's
/// whole output, and a panic a backtrace).
fn fail(msg: impl std::fmt::Display) -> ! {
    println!("cargo::error={msg}");
    std::process::exit(0)
}

/// A line the user should see now. Cargo shows `cargo:warning` lines only once the build script
/// has finished, so when there is a terminal the line also goes straight to it.
fn progress(msg: &str) {
    println!("cargo:warning={msg}");
    if let Ok(mut tty) = fs::OpenOptions::new().write(true).open("/dev/tty") {
        let _ = writeln!(tty, "\r\x1b[2K     llb: {msg}");
    }
}

/// What a cold llama.cpp build takes (measured on the 2-core CI machine; see README).
const COLD_BUILD_TIME: &str = "15-25 minutes on 2 cores, a few minutes with a warm ccache";

const SETUP_HINT: &str = "(or run ./scripts/setup.sh, which installs what is missing on Debian/Ubuntu)";

/// The tools the native build runs: CMake >= 3.16, ninja or make, a C and a C++ compiler.
fn check_build_tools() {
    let cmake = env::var("CMAKE").unwrap_or_else(|_| "cmake".into());
    let version = Command::new(&cmake).arg("--version").output().ok().filter(|o| o.status.success());
    let Some(version) = version else {
        fail(format!(
            "llb needs CMake >= 3.16 to build llama.cpp and `{cmake} --version` did not run: install it with `sudo apt-get install cmake` {SETUP_HINT}"
        ));
    };
    let text = String::from_utf8_lossy(&version.stdout);
    let found = text.lines().next().and_then(|l| l.strip_prefix("cmake version ")).unwrap_or("").trim().to_string();
    let mut parts = found.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (3, 16) {
        fail(format!(
            "llb needs CMake >= 3.16 to build llama.cpp, found `{}`: install a newer one (`sudo apt-get install cmake`, or `pip install cmake`)",
            text.lines().next().unwrap_or("?")
        ));
    }
    if which("ninja").is_none() && which("make").is_none() {
        fail(format!("llb needs ninja or make to build llama.cpp: install it with `sudo apt-get install ninja-build` {SETUP_HINT}"));
    }
    for (var, names, what) in [("CC", ["cc", "gcc", "clang"], "C"), ("CXX", ["c++", "g++", "clang++"], "C++")] {
        let found = match env::var(var) {
            // CC/CXX may carry a launcher or flags ("ccache gcc"): the program is the first word.
            Ok(v) if !v.trim().is_empty() => {
                let prog = v.split_whitespace().next().unwrap().to_string();
                Path::new(&prog).is_file() || which(&prog).is_some()
            }
            _ => names.iter().any(|n| which(n).is_some()),
        };
        if !found {
            let which_one = match env::var(var) {
                Ok(v) if !v.trim().is_empty() => format!("{var}={v} is not a program here"),
                _ => format!("none of {} is on PATH", names.join(", ")),
            };
            fail(format!(
                "llb needs a {what} compiler to build llama.cpp and its shim ({which_one}): install one with `sudo apt-get install g++` {SETUP_HINT}"
            ));
        }
    }
}

/// `key=value` lines; `#` starts a comment.
fn read_pin(path: &Path) -> BTreeMap<String, String> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut pin = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("bad pin line: {line}"));
        pin.insert(k.trim().to_string(), v.trim().to_string());
    }
    for key in ["package", "version", "sha256", "subdir", "commit", "chat_stack"] {
        assert!(pin.contains_key(key), "native/llama-cpp.pin lacks `{key}`");
    }
    pin
}

fn is_llama_tree(dir: &Path) -> bool {
    dir.join("CMakeLists.txt").is_file() && dir.join("common/chat.h").is_file()
}

fn llama_source(manifest: &Path, out: &Path, pin: &BTreeMap<String, String>) -> PathBuf {
    if let Ok(dir) = env::var("LLB_LLAMA_CPP_DIR") {
        let dir = PathBuf::from(dir);
        if !is_llama_tree(&dir) {
            fail(format!(
                "LLB_LLAMA_CPP_DIR={} is not a llama.cpp tree (no CMakeLists.txt + common/chat.h)",
                dir.display()
            ));
        }
        return dir;
    }
    let local = manifest.join("native/llama.cpp");
    if !is_llama_tree(&local) {
        fetch_pinned(&local, out, pin);
    }
    local
}

/// Fetch the pinned sdist with pip, refuse it unless its sha256 matches, unpack the llama.cpp tree.
// Over 60 lines: one linear script (download, verify, unpack, move into place), each step with its
// own `fail` message; nothing in it is reused elsewhere.
fn fetch_pinned(dest: &Path, out: &Path, pin: &BTreeMap<String, String>) {
    use sha2::{Digest, Sha256};
    let dl = out.join("sdist");
    let _ = fs::remove_dir_all(&dl);
    fs::create_dir_all(&dl).unwrap();
    let spec = format!("{}=={}", pin["package"], pin["version"]);
    let pip = find_pip().unwrap_or_else(|| {
        fail(format!(
            "llb needs the llama.cpp {} source: install pip (`sudo apt-get install python3-pip`) so the build can fetch the pinned {spec} sdist, or set LLB_LLAMA_CPP_DIR to a llama.cpp {} tree",
            pin["chat_stack"], pin["chat_stack"]
        ))
    });
    progress(&format!(
        "llama.cpp source not found: fetching the pinned {spec} sdist with `{}` into {}",
        pip.join(" "),
        dest.display()
    ));
    let output = Command::new(&pip[0])
        .args(&pip[1..])
        .args(["download", "--no-deps", "--no-binary", &pin["package"], &spec, "-d"])
        .arg(&dl)
        .output();
    match output {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim();
            fail(format!(
                "`{} download {spec}` failed ({last}); fetch needs access to PyPI, or set LLB_LLAMA_CPP_DIR to a llama.cpp {} tree",
                pip.join(" "),
                pin["chat_stack"]
            ))
        }
        Err(e) => fail(format!("running `{} download` failed: {e}", pip.join(" "))),
    }
    let archive = fs::read_dir(&dl)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .unwrap_or_else(|| fail(format!("`{} download {spec}` produced no .tar.gz sdist", pip.join(" "))));
    let digest = Sha256::digest(fs::read(&archive).unwrap());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    if hex != pin["sha256"] {
        let _ = fs::remove_file(&archive);
        fail(format!("{} has sha256 {hex}, the pin says {}: refusing it", archive.display(), pin["sha256"]));
    }
    let unpack = out.join("sdist-unpacked");
    let _ = fs::remove_dir_all(&unpack);
    fs::create_dir_all(&unpack).unwrap();
    let status = Command::new("tar").arg("xzf").arg(&archive).arg("-C").arg(&unpack).status();
    if !matches!(status, Ok(s) if s.success()) {
        fail(format!("unpacking {} with tar failed", archive.display()));
    }
    let top = fs::read_dir(&unpack).unwrap().next().unwrap().unwrap().path();
    let tree = top.join(&pin["subdir"]);
    if !is_llama_tree(&tree) {
        fail(format!("{} holds no llama.cpp tree", tree.display()));
    }
    let _ = fs::remove_dir_all(dest);
    fs::create_dir_all(dest.parent().unwrap()).unwrap();
    if fs::rename(&tree, dest).is_err() {
        let status = Command::new("cp").arg("-a").arg(&tree).arg(dest).status().unwrap();
        assert!(status.success(), "copying llama.cpp into {} failed", dest.display());
    }
    let _ = fs::remove_dir_all(&unpack);
    let _ = fs::remove_dir_all(&dl);
}

/// `PIP`, else pip, pip3, `python3 -m pip`: the command words to run.
fn find_pip() -> Option<Vec<String>> {
    if let Ok(p) = env::var("PIP") {
        return (Path::new(&p).is_file() || which(&p).is_some()).then(|| vec![p]);
    }
    for p in ["pip", "pip3"] {
        if which(p).is_some() {
            return Some(vec![p.to_string()]);
        }
    }
    let python_pip = Command::new("python3").args(["-m", "pip", "--version"]).output();
    if matches!(python_pip, Ok(o) if o.status.success()) {
        return Some(["python3", "-m", "pip"].map(String::from).to_vec());
    }
    None
}

fn which(tool: &str) -> Option<PathBuf> {
    env::var_os("PATH").and_then(|paths| env::split_paths(&paths).map(|p| p.join(tool)).find(|p| p.is_file()))
}

/// FNV-1a: enough to key a build directory by its inputs, without another dependency.
fn fnv64(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0u8)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    format!("{h:016x}")
}

fn switch(var: &str) -> Option<bool> {
    env::var(var).ok().map(|v| !(v.is_empty() || v == "0" || v.eq_ignore_ascii_case("off")))
}

/// The ggml backends besides the CPU: `LLB_CUDA=1`, `LLB_VULKAN=1`; Metal is llama.cpp's default
/// on macOS (`LLB_METAL=0` turns it off). RPC is on by default (`LLB_RPC=0` turns it off) and is
/// not a CMake switch: ggml's RPC client is two C++ files compiled with the shim (build_rpc), so
/// the default llama.cpp build, its key and its cost stay those of the CPU-only build.
struct Backends {
    cuda: bool,
    vulkan: bool,
    rpc: bool,
    /// Some(on) on macOS, where llama.cpp builds Metal (and BLAS through Accelerate) by default.
    metal: Option<bool>,
}

impl Backends {
    fn from_env() -> Backends {
        let apple = env::var("CARGO_CFG_TARGET_OS").map(|o| o == "macos").unwrap_or(false);
        Backends {
            cuda: switch("LLB_CUDA").unwrap_or(false),
            vulkan: switch("LLB_VULKAN").unwrap_or(false),
            rpc: switch("LLB_RPC").unwrap_or(true),
            metal: apple.then(|| switch("LLB_METAL").unwrap_or(true)),
        }
    }

    /// CMake defines for the switched-on backends. Empty for the default build, whose build
    /// directory key therefore stays what it was before the switches existed.
    fn defines(&self) -> Vec<(&'static str, &'static str)> {
        let mut d = Vec::new();
        if self.cuda {
            d.push(("GGML_CUDA", "ON"));
            // LLB_CUDA_ARCHS=90 (H100), "89;90", native...: CMAKE_CUDA_ARCHITECTURES (docs/gpu.md);
            // unset, ggml's own list. A build script's process is short: the leak is its lifetime.
            if let Ok(archs) = env::var("LLB_CUDA_ARCHS") {
                d.push(("CMAKE_CUDA_ARCHITECTURES", Box::leak(archs.into_boxed_str())));
            }
        }
        if self.vulkan {
            d.push(("GGML_VULKAN", "ON"));
        }
        if self.metal == Some(false) {
            d.push(("GGML_METAL", "OFF"));
        }
        d
    }

    fn check_tools(&self) {
        if self.cuda && which("nvcc").is_none() && !Path::new(&cuda_root()).join("bin/nvcc").is_file() {
            fail(format!(
                "LLB_CUDA=1 needs the CUDA toolkit (nvcc, cuBLAS): none found on PATH or in {} (set CUDA_PATH)",
                cuda_root()
            ));
        }
        if self.vulkan && (which("glslc").is_none() || which("glslangValidator").is_none()) {
            fail(
                "LLB_VULKAN=1 needs the Vulkan headers and loader and the glslc and glslangValidator shader compilers and the SPIR-V headers: `sudo apt-get install libvulkan-dev glslc glslang-tools spirv-headers` (Debian 12), or the LunarG SDK",
            );
        }
        // ggml-vulkan at the pin uses VK_EXT_layer_settings (Vulkan-Headers 1.3.261+).
        let system_headers = Path::new("/usr/include/vulkan/vulkan_core.h");
        if self.vulkan
            && env::var_os("VULKAN_SDK").is_none()
            && fs::read_to_string(system_headers).is_ok_and(|h| !h.contains("VK_EXT_layer_settings"))
        {
            fail(
                "LLB_VULKAN=1: the system's Vulkan headers are older than 1.3.261 (no VK_EXT_layer_settings), which the pinned ggml-vulkan needs: scripts/vulkan-check.sh sets up newer ones in target/vulkan-sdk (then `export VULKAN_SDK=$PWD/target/vulkan-sdk`), or install the LunarG SDK",
            );
        }
    }
}

fn cuda_root() -> String {
    env::var("CUDA_PATH").unwrap_or_else(|_| "/usr/local/cuda".into())
}

/// What of llama.cpp's tree is built: the libraries and `common/`, no tools, servers, tests or
/// network clients (both the default build and the LLB_CPU_VARIANTS=1 one).
const LLAMA_PARTS: [(&str, &str); 9] = [
    ("LLAMA_BUILD_COMMON", "ON"),
    ("LLAMA_BUILD_TESTS", "OFF"),
    ("LLAMA_BUILD_TOOLS", "OFF"),
    ("LLAMA_BUILD_EXAMPLES", "OFF"),
    ("LLAMA_BUILD_SERVER", "OFF"),
    ("LLAMA_BUILD_APP", "OFF"),
    ("LLAMA_BUILD_UI", "OFF"),
    ("LLAMA_OPENSSL", "OFF"),
    ("LLAMA_CURL", "OFF"),
];

/// Configures and builds llama.cpp's static libraries with CMake into a directory keyed by the pin
/// and the options; returns it.
// Over 60 lines: most of it is the list of CMake defines, one per line, in one place on purpose.
fn build_llama(src: &Path, out: &Path, pin: &BTreeMap<String, String>, backends: &Backends) -> PathBuf {
    let native = env::var("LLB_PORTABLE").map(|v| v.is_empty() || v == "0").unwrap_or(true);
    let mut defines: Vec<(&str, &str)> = vec![("BUILD_SHARED_LIBS", "OFF"), ("CMAKE_POSITION_INDEPENDENT_CODE", "ON")];
    defines.extend(LLAMA_PARTS);
    defines.extend([
        // ggml's own thread pool: no libgomp for hosts to carry.
        ("GGML_OPENMP", "OFF"),
        ("GGML_NATIVE", if native { "ON" } else { "OFF" }),
    ]);
    let launcher = which("ccache");
    if launcher.is_some() {
        defines.push(("CMAKE_C_COMPILER_LAUNCHER", "ccache"));
        defines.push(("CMAKE_CXX_COMPILER_LAUNCHER", "ccache"));
    }
    let ninja = which("ninja").is_some();

    // One build per (source, options), shared by every cargo profile.
    let src_s = src.to_string_lossy();
    let mut key_parts: Vec<String> = vec![src_s.to_string(), pin["sha256"].clone(), ninja.to_string()];
    key_parts.extend(defines.iter().map(|(k, v)| format!("{k}={v}")));
    // The backend set is part of the key; the default (CPU only) adds nothing to it.
    backends.check_tools();
    key_parts.extend(backends.defines().iter().map(|(k, v)| format!("{k}={v}")));
    defines.extend(backends.defines());
    let key = fnv64(&key_parts.iter().map(String::as_str).collect::<Vec<_>>());
    let dir = match env::var("LLB_LLAMA_BUILD_DIR") {
        Ok(d) => PathBuf::from(d).join(&key),
        // OUT_DIR = <target>/<profile>/build/llb-<hash>/out
        Err(_) => out.ancestors().nth(4).unwrap_or(out).join("llama.cpp-build").join(&key),
    };
    fs::create_dir_all(&dir).unwrap();
    // scripts/rpc-server.sh links against this build (tests pass it as LLB_LLAMA_BUILD).
    println!("cargo:rustc-env=LLB_LLAMA_BUILD={}", dir.display());
    // A cold build is the long step of a first `cargo build`: say so, and how long it takes.
    let cold = !dir.join("build/src/libllama.a").is_file();
    if cold {
        progress(&format!(
            "building llama.cpp {} with CMake{} into {} (first build: {COLD_BUILD_TIME}; cached afterwards)",
            pin["chat_stack"],
            if launcher.is_some() { " and ccache" } else { "" },
            dir.display()
        ));
    }
    let started = Instant::now();

    let mut cfg = cmake::Config::new(src);
    cfg.out_dir(&dir)
        .profile("Release")
        // Flags from the cargo profile would make debug and release builds differ.
        .no_default_flags(true)
        .build_target("llama-common");
    if ninja {
        cfg.generator("Ninja");
    }
    for (k, v) in &defines {
        cfg.define(k, v);
    }
    // Parallelism: cargo's jobserver is not shared with ninja; use what cargo was given.
    if let Ok(jobs) = env::var("NUM_JOBS") {
        cfg.build_arg(format!("-j{jobs}"));
    }
    cfg.build();
    if cold {
        let secs = started.elapsed().as_secs();
        println!(
            "cargo:warning=built llama.cpp {} in {}m {:02}s; later builds reuse {}",
            pin["chat_stack"],
            secs / 60,
            secs % 60,
            dir.display()
        );
    }
    dir.join("build")
}

fn link_llama(build: &Path, backends: &Backends) {
    let search = ["common", "src", "ggml/src", "vendor/cpp-httplib"];
    for s in search {
        println!("cargo:rustc-link-search=native={}", build.join(s).display());
    }
    // ggml links its backends into the registry (ggml-backend-reg.cpp): they come before it.
    let mut libs = vec!["llama-common", "llama-common-base", "cpp-httplib", "llama", "ggml"];
    let mut extra = Vec::new();
    if backends.cuda {
        extra.push("ggml-cuda");
    }
    if backends.vulkan {
        extra.push("ggml-vulkan");
    }
    if backends.metal == Some(true) {
        extra.extend(["ggml-metal", "ggml-blas"]);
    }
    for lib in &extra {
        println!("cargo:rustc-link-search=native={}", build.join("ggml/src").join(lib).display());
    }
    libs.extend(extra);
    libs.extend(["ggml-cpu", "ggml-base"]);
    for lib in libs {
        println!("cargo:rustc-link-lib=static={lib}");
    }
    if backends.cuda {
        let root = cuda_root();
        for dir in ["lib64", "lib64/stubs", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"] {
            println!("cargo:rustc-link-search=native={root}/{dir}");
        }
        for lib in ["cudart", "cublas", "cublasLt", "cuda"] {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
    if backends.vulkan {
        println!("cargo:rustc-link-lib=dylib=vulkan");
    }
    if backends.metal == Some(true) {
        for fw in ["Foundation", "Metal", "MetalKit", "Accelerate"] {
            println!("cargo:rustc-link-lib=framework={fw}");
        }
        println!("cargo:rustc-link-lib=dylib=c++");
        return;
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-link-lib=dylib=pthread");
    println!("cargo:rustc-link-lib=dylib=dl");
    println!("cargo:rustc-link-lib=dylib=m");
}

/// `LLB_NO_BUNDLE_LLAMA=1`: the libraries `link_llama` names, as `static:-bundle` (a staticlib
/// records them without copying them in; the final link supplies a llama.cpp build of the same
/// tree, with whatever backends it has). The C++ shim and the RPC client stay bundled.
fn link_llama_unbundled() {
    for lib in ["llama-common", "llama-common-base", "cpp-httplib", "llama", "ggml", "ggml-cpu", "ggml-base"] {
        println!("cargo:rustc-link-lib=static:-bundle={lib}");
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
}

/// `LLB_CPU_VARIANTS=1`: llama.cpp's own portable layout (the one its releases ship), through
/// native/ggml-dl/CMakeLists.txt. ggml is built as shared libraries, `libggml-base` and `libggml`
/// (the backend registry), with `GGML_BACKEND_DL` and `GGML_CPU_ALL_VARIANTS`: one
/// `libggml-cpu-<variant>` module per CPU level (x64, sse42, sandybridge, haswell, skylakex, ...,
/// sapphirerapids on x86-64; armv8.0 to armv9.2 on aarch64), of which ggml's registry loads the
/// one that scores best on the running CPU (src/cpu_variant.rs). llama.cpp itself is built
/// against that ggml as static libraries linked into libllb as in the default build, so only C
/// interfaces cross a library boundary. libllb finds the ggml libraries next to itself
/// (`RUNPATH $ORIGIN`); scripts/release-jar.sh copies them there.
///
/// The CMake directories are keyed by the pin, the options, the target and the compilers (CC, CXX:
/// zig's for the glibc 2.28 floor), so the native, zig and cross builds never share one.
// Over 60 lines: the CMake configuration and the link lines, one linear sequence.
fn build_llama_dl(manifest: &Path, src: &Path, out: &Path, pin: &BTreeMap<String, String>, backends: &Backends) {
    backends.check_tools();
    let target = env::var("TARGET").unwrap_or_default();
    let ninja = which("ninja").is_some();
    let launcher = which("ccache").is_some();
    let tool = |name: &str| {
        let t = target.replace('-', "_");
        env::var(format!("{name}_{t}")).or_else(|_| env::var(name)).unwrap_or_default()
    };
    let mut key_parts: Vec<String> = vec![
        "cpu-variants-1".into(),
        src.to_string_lossy().into(),
        pin["sha256"].clone(),
        ninja.to_string(),
        target.clone(),
        tool("CC"),
        tool("CXX"),
    ];
    key_parts.extend(backends.defines().iter().map(|(k, v)| format!("{k}={v}")));
    let key = fnv64(&key_parts.iter().map(String::as_str).collect::<Vec<_>>());
    let dir = match env::var("LLB_LLAMA_BUILD_DIR") {
        Ok(d) => PathBuf::from(d).join(&key),
        Err(_) => out.ancestors().nth(4).unwrap_or(out).join("llama.cpp-build").join(&key),
    };
    fs::create_dir_all(&dir).unwrap();
    let cold = !dir.join("build/llama/src/libllama.a").is_file();
    if cold {
        progress(&format!(
            "building llama.cpp {} with ggml shared and every CPU variant, with CMake into {} (first build: 20-40 minutes on 2 cores; cached afterwards)",
            pin["chat_stack"],
            dir.display()
        ));
    }
    let started = Instant::now();

    // ggml-base's CPU buffer clear is the KV cache's memset: route it through native/zero_pages.c
    // as libllb's own are (build_zero_pages; its own hidden memset, zig's linker having no --wrap).
    // A copy at a fixed path keeps CMake's flags stable.
    let zero = zero_pages_object(manifest, true);
    let zero_copy = dir.join("zero_pages.o");
    if fs::read(&zero).ok() != fs::read(&zero_copy).ok() {
        fs::copy(&zero, &zero_copy).unwrap();
    }
    let wrap = zero_copy.display().to_string();

    println!("cargo:rerun-if-changed=native/ggml-dl/CMakeLists.txt");
    println!("cargo:rerun-if-changed=native/ggml-dl/cxx-launcher.sh");
    let mut cfg = cmake::Config::new(manifest.join("native/ggml-dl"));
    cfg.out_dir(&dir).profile("Release").no_default_flags(true).build_target("all");
    if ninja {
        cfg.generator("Ninja");
    }
    if launcher {
        cfg.define("CMAKE_C_COMPILER_LAUNCHER", "ccache");
    }
    // C++ through native/ggml-dl/cxx-launcher.sh: ccache where installed, and llamafile's
    // sgemm.cpp to the host's g++ on x86-64 (zig's clang makes its gemm ~8% slower).
    cfg.define("CMAKE_CXX_COMPILER_LAUNCHER", manifest.join("native/ggml-dl/cxx-launcher.sh"));
    if let Ok(jobs) = env::var("NUM_JOBS") {
        cfg.build_arg(format!("-j{jobs}"));
    }
    // LLB_CPU_VARIANT_LIST=x64,sse42,haswell: only these CPU modules (CI's portable check); unset,
    // every one (the release jar). Not part of the directory key: widening the list builds the
    // missing modules in the same directory.
    println!("cargo:rerun-if-env-changed=LLB_CPU_VARIANT_LIST");
    let variants = env::var("LLB_CPU_VARIANT_LIST").unwrap_or_default();
    let variants: Vec<&str> = variants.split([',', ' ', ';']).filter(|v| !v.is_empty()).collect();
    cfg.define("LLB_CPU_VARIANT_LIST", variants.join(";"));
    cfg.define("LLB_LLAMA_CPP", src)
        // libggml-base's memset (the KV clear) goes through native/zero_pages.c as libllb's does.
        .define("CMAKE_SHARED_LINKER_FLAGS", &wrap)
        .define("GGML_OPENMP", "OFF")
        .define("GGML_BUILD_TESTS", "OFF")
        .define("GGML_BUILD_EXAMPLES", "OFF");
    for (k, v) in LLAMA_PARTS.into_iter().chain([("CMAKE_POSITION_INDEPENDENT_CODE", "ON")]) {
        cfg.define(k, v);
    }
    for (k, v) in backends.defines() {
        cfg.define(k, v);
    }
    // zig's clang (19) builds for a baseline x86-64 CPU with its 512-bit vectors switched off
    // explicitly, which `-mavx512f` does not undo: the AVX-512 variants need `-mevex512` (a no-op
    // for the others).
    if target.starts_with("x86_64") && tool("CC").contains("zig") {
        cfg.cflag("-mevex512").cxxflag("-mevex512");
    }
    cfg.build();
    if cold {
        let secs = started.elapsed().as_secs();
        println!(
            "cargo:warning=built ggml's CPU variants and llama.cpp in {}m {:02}s; later builds reuse {}",
            secs / 60,
            secs % 60,
            dir.display()
        );
    }

    let build = dir.join("build/llama");
    let lib = dir.join("build/lib");
    println!("cargo:rustc-env=LLB_LLAMA_BUILD={}", build.display());
    // Where in-tree binaries (tests, examples) find the CPU modules; libllb looks next to itself first.
    println!("cargo:rustc-env=LLB_GGML_BACKEND_DIR={}", lib.display());
    println!("cargo:rustc-cfg=llb_backend_dl");
    for s in ["common", "src", "vendor/cpp-httplib"] {
        println!("cargo:rustc-link-search=native={}", build.join(s).display());
    }
    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in ["llama-common", "llama-common-base", "cpp-httplib", "llama"] {
        println!("cargo:rustc-link-lib=static={l}");
    }
    for l in ["ggml", "ggml-base"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
    for kind in ["bins", "tests", "examples"] {
        println!("cargo:rustc-link-arg-{kind}=-Wl,-rpath,{}", lib.display());
    }
    // LLB_CUDA=1 here makes libggml-cuda a module beside the CPU ones, loaded by ggml's registry
    // when the driver is there: libllb itself links no CUDA library.
    println!("cargo:rustc-link-lib=dylib={}", cxx_stdlib());
    println!("cargo:rustc-link-lib=dylib=pthread");
    println!("cargo:rustc-link-lib=dylib=dl");
    println!("cargo:rustc-link-lib=dylib=m");
}

/// The C++ standard library to link: `CXXSTDLIB` when set (as the cc crate reads it: `c++` with
/// zig's toolchain), else libstdc++.
fn cxx_stdlib() -> String {
    println!("cargo:rerun-if-env-changed=CXXSTDLIB");
    env::var("CXXSTDLIB").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "stdc++".into())
}

/// Whitespace- and comment-free text of `struct NAME { ... };` in a source file.
fn struct_tokens(text: &str, name: &str) -> Option<String> {
    let start = text.find(&format!("struct {name} {{"))?;
    let end = start + text[start..].find("};")? + 2;
    let body: String =
        text[start..end].lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join(" ");
    Some(body.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn build_shim(manifest: &Path, src: &Path) {
    // The shim re-declares structs private to llama.cpp; refuse a tree where they differ.
    for (name, layout, source) in [
        ("common_chat_templates", "native/chat_templates_layout.h", "common/chat.cpp"),
        ("llama_sampler_grammar", "native/grammar_layout.h", "src/llama-sampler.cpp"),
    ] {
        let ours = fs::read_to_string(manifest.join(layout)).unwrap();
        let theirs = fs::read_to_string(src.join(source)).unwrap();
        let (a, b) = (struct_tokens(&ours, name), struct_tokens(&theirs, name));
        if a.is_none() || a != b {
            fail(format!(
                "struct {name} in {} differs from {layout}: this llama.cpp tree is not the pinned one",
                src.join(source).display(),
            ));
        }
    }
    for f in [
        "native/shim.cpp",
        "native/isolate.cpp",
        "native/speculative.cpp",
        "native/state.cpp",
        "native/rpc_guard.cpp",
        "native/rpc_guard.h",
        "native/guard.h",
        "native/shim.h",
        "native/chat_templates_layout.h",
        "native/grammar_layout.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file(manifest.join("native/shim.cpp"))
        .file(manifest.join("native/isolate.cpp"))
        .file(manifest.join("native/speculative.cpp"))
        .file(manifest.join("native/state.cpp"))
        .file(manifest.join("native/rpc_guard.cpp"))
        .include(manifest.join("native"))
        .opt_level(2)
        .pic(true)
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        // llama.cpp's headers are not ours to warn about. `src` (last: common's unicode.h wins)
        // gives llama-grammar.h, the grammar stacks jump-forward decoding reads.
        .flags(
            ["include", "common", "ggml/include", "vendor", "src"]
                .iter()
                .flat_map(|d| ["-isystem".to_string(), src.join(d).display().to_string()]),
        )
        .compile("llb_shim");
    if switch("LLB_CPU_VARIANTS") == Some(true) && switch("LLB_NO_BUNDLE_LLAMA") != Some(true) {
        // ggml-cpu's threadpool entry points, reached through the CPU module (native/cpu_dl.c).
        println!("cargo:rerun-if-changed=native/cpu_dl.c");
        cc::Build::new()
            .file(manifest.join("native/cpu_dl.c"))
            .opt_level(2)
            .pic(true)
            .flags(["-isystem".to_string(), src.join("ggml/include").display().to_string()])
            .compile("llb_cpu_dl");
    }
    build_zero_pages(manifest);
}

/// Linux: memsets of zero over big private anonymous buffers (llama.cpp's KV clear) return the
/// pages instead of touching them (native/zero_pages.c), so a pool's KV budget is resident only
/// as far as it is used.
fn build_zero_pages(manifest: &Path) {
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rerun-if-changed=native/zero_pages.c");
    // The object itself goes on every link line (not in an archive): with --wrap, references to
    // memset from any object, the standard library's included, must find __wrap_memset
    // whatever the archive order, also in test binaries that do not use llb.
    // LLB_CPU_VARIANTS=1 builds (zig's linker has no --wrap) define a hidden memset instead.
    let own = switch("LLB_CPU_VARIANTS") == Some(true) && switch("LLB_NO_BUNDLE_LLAMA") != Some(true);
    println!("cargo:rustc-link-arg={}", zero_pages_object(manifest, own).display());
    if !own {
        println!("cargo:rustc-link-arg=-Wl,--wrap=memset");
    }
}

/// native/zero_pages.c compiled; `own_memset`: with the hidden memset definition that stands in for
/// `--wrap=memset` (see the end of that file).
fn zero_pages_object(manifest: &Path, own_memset: bool) -> PathBuf {
    let mut b = cc::Build::new();
    b.file(manifest.join("native/zero_pages.c")).opt_level(2).pic(true);
    if own_memset {
        b.define("LLB_ZERO_PAGES_OWN_MEMSET", None);
    }
    b.compile_intermediates().remove(0)
}

/// ggml's RPC client (`ggml/src/ggml-rpc`: the backend and its TCP transport, no dependencies),
/// compiled here rather than with `GGML_RPC=ON` so that it adds two files to the build, not a
/// second llama.cpp build. `LLB_HAS_RPC` tells src/backend.rs to register it with ggml's registry
/// (which is what `GGML_USE_RPC` would have done). scripts/rpc-server.sh links the server against
/// the same llama.cpp build.
fn build_rpc(src: &Path) {
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file(src.join("ggml/src/ggml-rpc/ggml-rpc.cpp"))
        .file(src.join("ggml/src/ggml-rpc/transport.cpp"))
        // The transport's one setsockopt call per connected socket goes to native/rpc_guard.cpp,
        // which adds keepalive and timeouts (a silent server must not block forever).
        .define("setsockopt", "llb_rpc_setsockopt")
        .opt_level(2)
        .pic(true)
        .warnings(false)
        .flags(
            ["ggml/include", "ggml/src"]
                .iter()
                .flat_map(|d| ["-isystem".to_string(), src.join(d).display().to_string()]),
        )
        .compile("llb_ggml_rpc");
    println!("cargo:rustc-cfg=llb_rpc");
}

/// cbindgen writes the public header to OUT_DIR; `LLB_BLESS_HEADER=1` also refreshes the
/// committed include/llb.h (a test compares the two).
fn generate_header(manifest: &Path, out: &Path) {
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=src");
    let config = cbindgen::Config::from_file(manifest.join("cbindgen.toml")).expect("reading cbindgen.toml");
    let generated =
        cbindgen::Builder::new().with_crate(manifest).with_config(config).generate().expect("cbindgen failed");
    generated.write_to_file(out.join("llb.h"));
    if env::var("LLB_BLESS_HEADER").map(|v| v == "1").unwrap_or(false) {
        generated.write_to_file(manifest.join("include/llb.h"));
    }
}
