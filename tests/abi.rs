//! The ABI's own promises: version JSON from Cargo.toml and the pin, the committed header equals
//! what cbindgen generates from the source, free(NULL) is safe, error codes are unique.

use serde_json::Value;
use std::collections::HashSet;
use std::ffi::CStr;
use std::path::Path;

fn take(p: *mut std::os::raw::c_char) -> Value {
    assert!(!p.is_null());
    // SAFETY: p is a live llb string, freed once here.
    unsafe {
        let v = serde_json::from_str(CStr::from_ptr(p).to_str().unwrap()).unwrap();
        llb::ffi::llb_string_free(p);
        v
    }
}

fn manifest_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

#[test]
fn version_reports_cargo_version_and_the_pin() {
    let v = take(llb::ffi::llb_version());
    let cargo = manifest_file("Cargo.toml");
    let version_line = cargo.lines().find(|l| l.starts_with("version = ")).unwrap();
    assert_eq!(version_line, format!("version = \"{}\"", v["llb"].as_str().unwrap()));
    assert_eq!(v["type"], "version");
    assert_eq!(v["abi"], 1);
    let pin: std::collections::HashMap<String, String> = manifest_file("native/llama-cpp.pin")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    assert_eq!(v["llama_cpp"]["commit"], pin["commit"].as_str());
    assert_eq!(v["llama_cpp"]["chat_stack"], pin["chat_stack"].as_str());
    assert_eq!(v["llama_cpp"]["source"], format!("{} {} sdist", pin["package"], pin["version"]).as_str());
    assert_eq!((pin["commit"].as_str(), pin["chat_stack"].as_str()), ("af6528e", "b9371"));
}

#[test]
fn committed_header_is_what_cbindgen_generates() {
    let generated = std::fs::read_to_string(concat!(env!("OUT_DIR"), "/llb.h")).unwrap();
    let committed = manifest_file("include/llb.h");
    assert!(
        generated == committed,
        "include/llb.h is stale: regenerate it with `LLB_BLESS_HEADER=1 cargo build` and commit it"
    );
    for f in ["llb_version", "llb_model_info", "llb_string_free"] {
        assert!(committed.contains(&format!("{f}(")), "{f} missing from the header");
    }
}

/// Only the ABI's own names reach the header (docs/STYLE.md §9): cbindgen also picks up inner
/// `pub` types (a struct with an associated const once put `ProbeLimits` there).
#[test]
fn the_header_declares_only_llb_names() {
    let header = manifest_file("include/llb.h");
    let code: Vec<&str> = header
        .lines()
        .map(str::trim)
        .filter(|l| !(l.starts_with('*') || l.starts_with("/*") || l.starts_with('#') || l.is_empty()))
        .collect();
    let mut named = 0;
    for l in code {
        // `typedef struct NAME NAME;`, `typedef RET (*NAME)(..);`, `RET *NAME(..);`
        let name = if let Some(rest) = l.strip_prefix("typedef struct ") {
            rest.split_whitespace().next()
        } else if l.starts_with("typedef ") {
            l.split("(*").nth(1).and_then(|r| r.split(')').next())
        } else if l.contains('(') && !l.starts_with("extern") && !l.starts_with('}') {
            l.split('(').next().and_then(|r| r.rsplit([' ', '*']).next())
        } else {
            None
        };
        if let Some(name) = name {
            named += 1;
            assert!(name.starts_with("llb_"), "include/llb.h declares `{name}`, not an ABI name: {l}");
        }
    }
    assert!(named > 10, "found {named} declarations in include/llb.h");
}

#[test]
fn string_free_accepts_null() {
    // SAFETY: NULL is documented as accepted.
    unsafe { llb::ffi::llb_string_free(std::ptr::null_mut()) };
}

#[test]
fn error_codes_are_unique_snake_case_and_documented() {
    let docs = manifest_file("docs/errors.md");
    let mut seen = HashSet::new();
    for c in llb::error::ErrorCode::ALL {
        let s = c.as_str();
        assert!(seen.insert(s), "duplicate code {s}");
        assert!(s.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'), "{s} is not snake_case");
        assert!(docs.contains(&format!("`{s}`")), "docs/errors.md does not document `{s}`");
    }
}
