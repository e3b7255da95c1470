//! Build script: owns every native step (see STYLE §12).
//!
//! 1. Locate the pinned llama.cpp tree (`LLB_LLAMA_CPP_DIR`, else `native/llama.cpp/`, else fetch
//!    the pinned sdist with pip, verify its sha256 and unpack it).
//! 2. Build llama.cpp's static libraries with CMake, always Release, into a directory keyed by the
//!    pin and the options so that debug and release cargo profiles share one build.
//! 3. Compile the C++ shim (`native/shim.cpp`) with the cc crate.
//! 4. cbindgen: the public C header, written to `OUT_DIR/llb.h`; `include/llb.h` is the committed
//!    copy, refreshed when `LLB_BLESS_HEADER=1` and checked by a test.
//!
//! The Rust FFI for `llama.h`, `gguf.h` and `native/shim.h` is not generated here: bindgen's output
//! for the pinned tree is committed (`src/sys/bindings.rs`), so a build needs no libclang;
//! `tests/bindings.rs` regenerates it and compares where libclang is installed.

use std::collections::BTreeMap;
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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

    let src = llama_source(&manifest, &out, &pin);
    println!("cargo:rustc-env=LLB_LLAMA_CPP_SRC={}", src.display());
    let build = build_llama(&src, &out, &pin);
    link_llama(&build);
    build_shim(&manifest, &src);
    generate_header(&manifest, &out);
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
        assert!(
            is_llama_tree(&dir),
            "LLB_LLAMA_CPP_DIR={} is not a llama.cpp tree (no CMakeLists.txt + common/chat.h)",
            dir.display()
        );
        return dir;
    }
    let local = manifest.join("native/llama.cpp");
    if !is_llama_tree(&local) {
        fetch_pinned(&local, out, pin);
    }
    local
}

/// Fetch the pinned sdist with pip, refuse it unless its sha256 matches, unpack the llama.cpp tree.
fn fetch_pinned(dest: &Path, out: &Path, pin: &BTreeMap<String, String>) {
    use sha2::{Digest, Sha256};
    let dl = out.join("sdist");
    let _ = fs::remove_dir_all(&dl);
    fs::create_dir_all(&dl).unwrap();
    let spec = format!("{}=={}", pin["package"], pin["version"]);
    println!("cargo:warning=llama.cpp not found; fetching pinned source {spec} with pip");
    let pip = env::var("PIP").unwrap_or_else(|_| "pip".into());
    let status = Command::new(&pip)
        .args(["download", "--no-deps", "--no-binary", &pin["package"], &spec, "-d"])
        .arg(&dl)
        .status()
        .unwrap_or_else(|e| panic!("running `{pip} download` failed: {e}; install pip or set LLB_LLAMA_CPP_DIR"));
    assert!(status.success(), "`{pip} download {spec}` failed");
    let archive = fs::read_dir(&dl)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .expect("pip produced no .tar.gz sdist");
    let digest = Sha256::digest(fs::read(&archive).unwrap());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    if hex != pin["sha256"] {
        let _ = fs::remove_file(&archive);
        panic!("{} has sha256 {hex}, the pin says {}: refusing it", archive.display(), pin["sha256"]);
    }
    let unpack = out.join("sdist-unpacked");
    let _ = fs::remove_dir_all(&unpack);
    fs::create_dir_all(&unpack).unwrap();
    let status = Command::new("tar").arg("xzf").arg(&archive).arg("-C").arg(&unpack).status().unwrap();
    assert!(status.success(), "unpacking {} failed", archive.display());
    let top = fs::read_dir(&unpack).unwrap().next().unwrap().unwrap().path();
    let tree = top.join(&pin["subdir"]);
    assert!(is_llama_tree(&tree), "{} holds no llama.cpp tree", tree.display());
    let _ = fs::remove_dir_all(dest);
    fs::create_dir_all(dest.parent().unwrap()).unwrap();
    if fs::rename(&tree, dest).is_err() {
        let status = Command::new("cp").arg("-a").arg(&tree).arg(dest).status().unwrap();
        assert!(status.success(), "copying llama.cpp into {} failed", dest.display());
    }
    let _ = fs::remove_dir_all(&unpack);
    let _ = fs::remove_dir_all(&dl);
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

fn build_llama(src: &Path, out: &Path, pin: &BTreeMap<String, String>) -> PathBuf {
    let native = env::var("LLB_PORTABLE").map(|v| v.is_empty() || v == "0").unwrap_or(true);
    let mut defines: Vec<(&str, &str)> = vec![
        ("BUILD_SHARED_LIBS", "OFF"),
        ("CMAKE_POSITION_INDEPENDENT_CODE", "ON"),
        ("LLAMA_BUILD_COMMON", "ON"),
        ("LLAMA_BUILD_TESTS", "OFF"),
        ("LLAMA_BUILD_TOOLS", "OFF"),
        ("LLAMA_BUILD_EXAMPLES", "OFF"),
        ("LLAMA_BUILD_SERVER", "OFF"),
        ("LLAMA_BUILD_APP", "OFF"),
        ("LLAMA_BUILD_UI", "OFF"),
        ("LLAMA_OPENSSL", "OFF"),
        ("LLAMA_CURL", "OFF"),
        // ggml's own thread pool: no libgomp for hosts to carry.
        ("GGML_OPENMP", "OFF"),
        ("GGML_NATIVE", if native { "ON" } else { "OFF" }),
    ];
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
    let key = fnv64(&key_parts.iter().map(String::as_str).collect::<Vec<_>>());
    let dir = match env::var("LLB_LLAMA_BUILD_DIR") {
        Ok(d) => PathBuf::from(d).join(&key),
        // OUT_DIR = <target>/<profile>/build/llb-<hash>/out
        Err(_) => out.ancestors().nth(4).unwrap_or(out).join("llama.cpp-build").join(&key),
    };
    fs::create_dir_all(&dir).unwrap();

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
    dir.join("build")
}

fn link_llama(build: &Path) {
    let search = ["common", "src", "ggml/src", "vendor/cpp-httplib"];
    for s in search {
        println!("cargo:rustc-link-search=native={}", build.join(s).display());
    }
    for lib in ["llama-common", "llama-common-base", "cpp-httplib", "llama", "ggml", "ggml-cpu", "ggml-base"] {
        println!("cargo:rustc-link-lib=static={lib}");
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-link-lib=dylib=pthread");
    println!("cargo:rustc-link-lib=dylib=dl");
    println!("cargo:rustc-link-lib=dylib=m");
}

/// Whitespace- and comment-free text of `struct common_chat_templates { ... };` in a source file.
fn templates_struct_tokens(text: &str) -> Option<String> {
    let start = text.find("struct common_chat_templates {")?;
    let end = start + text[start..].find("};")? + 2;
    let body: String =
        text[start..end].lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join(" ");
    Some(body.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn build_shim(manifest: &Path, src: &Path) {
    // The shim re-declares a struct private to chat.cpp; refuse a tree where it differs.
    let ours = fs::read_to_string(manifest.join("native/chat_templates_layout.h")).unwrap();
    let theirs = fs::read_to_string(src.join("common/chat.cpp")).unwrap();
    let (a, b) = (templates_struct_tokens(&ours), templates_struct_tokens(&theirs));
    assert!(
        a.is_some() && a == b,
        "struct common_chat_templates in {} differs from native/chat_templates_layout.h: \
         this llama.cpp tree is not the pinned one (chat stack {})",
        src.join("common/chat.cpp").display(),
        env::var("LLB_PIN_CHAT_STACK").unwrap_or_default()
    );
    for f in ["native/shim.cpp", "native/isolate.cpp", "native/guard.h", "native/shim.h", "native/chat_templates_layout.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file(manifest.join("native/shim.cpp"))
        .file(manifest.join("native/isolate.cpp"))
        .include(manifest.join("native"))
        .opt_level(2)
        .pic(true)
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        // llama.cpp's headers are not ours to warn about.
        .flags(
            ["include", "common", "ggml/include", "vendor"]
                .iter()
                .flat_map(|d| ["-isystem".to_string(), src.join(d).display().to_string()]),
        )
        .compile("llb_shim");
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
