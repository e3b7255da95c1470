//! Shared helpers for the integration tests: generated fixtures, cached per test binary run.
#![allow(dead_code)]

pub mod cabi;
pub mod cache_file;

use llb::fixture::{self, FixtureOptions};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// Six template families, one per call format (label, corpus template): JSON in tags, Llama-3
/// JSON, Mistral, Gemma 4, raw-text XML, gpt-oss.
pub const FAMILIES: [(&str, &str); 6] = [
    ("json-in-tags (Qwen2.5)", "Qwen-Qwen2.5-7B-Instruct"),
    ("llama-3 json (Llama-3.1)", "meta-llama-Llama-3.1-8B-Instruct"),
    ("mistral (Mistral-Nemo)", "mistralai-Mistral-Nemo-Instruct-2407"),
    ("gemma 4", "google-gemma-4-31B-it"),
    ("xml raw-text (Qwen3-Coder)", "Qwen3-Coder"),
    ("gpt-oss", "openai-gpt-oss-120b"),
];

/// This process's fixture folder; folders of test processes that are gone are removed first.
pub fn fixtures_dir() -> PathBuf {
    static CLEAN: Once = Once::new();
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("llb-fixtures");
    CLEAN.call_once(|| {
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let pid = e.file_name().to_string_lossy().into_owned();
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(&pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    });
    let d = base.join(std::process::id().to_string());
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn templates_dir() -> PathBuf {
    fixture::llama_cpp_dir().join("models/templates")
}

/// Every corpus template: (name without .jinja, source).
pub fn corpus_templates() -> Vec<(String, String)> {
    let mut v: Vec<_> = std::fs::read_dir(templates_dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    v.sort();
    v
}

/// Every vocabulary of the pinned tree (`models/ggml-vocab-NAME.gguf`).
pub fn corpus_vocabs() -> Vec<String> {
    let mut v: Vec<_> = std::fs::read_dir(fixture::llama_cpp_dir().join("models"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix("ggml-vocab-").and_then(|s| s.strip_suffix(".gguf")).map(str::to_string)
        })
        .collect();
    v.sort();
    v
}

/// The tokenizer a template's model family ships with, among the corpus vocabularies.
pub fn vocab_for(template: &str) -> &'static str {
    let t = template.to_lowercase();
    if t.contains("gemma-4") {
        "gemma-4"
    } else if t.contains("qwen3.5") {
        "qwen35"
    } else if t.contains("qwen") || t.contains("qwq") || t.contains("mimo") || t.contains("hermes") {
        // Hermes-2-Pro/3 GGUFs add the ChatML tokens; qwen2's vocabulary has them.
        "qwen2"
    } else if t.contains("mistral") || t.contains("devstral") || t.contains("gemma-2") {
        "llama-spm"
    } else if t.contains("phi-3") {
        "phi-3"
    } else if t.contains("command-r") {
        "command-r"
    } else if t.contains("deepseek-v3") {
        "deepseek-llm"
    } else {
        "llama-bpe"
    }
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
}

/// Writes (once per process) a fixture with these options under a name derived from `key`.
pub fn fixture_with(key: &str, opts: &FixtureOptions) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = fixtures_dir().join(format!("{}.gguf", sanitize(key)));
    if !path.exists() {
        // Written aside, then renamed: a test process of its own (tests/rpc.rs runs one) may ask
        // for the same fixture at the same time, and must never read half a file.
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        fixture::write_fixture(opts, &tmp).unwrap_or_else(|e| panic!("fixture {key}: {e}"));
        std::fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("fixture {key}: {e}"));
    }
    path
}

/// A fixture with a corpus template (by name) and its family's tokenizer.
pub fn corpus_fixture(template: &str, vocab_only: bool) -> PathBuf {
    let mut o = FixtureOptions::new(vocab_for(template));
    o.template = Some(fixture::read_template(template).unwrap());
    o.vocab_only = vocab_only;
    fixture_with(&format!("{template}-{}", if vocab_only { "vocab" } else { "tiny" }), &o)
}

/// The ids of `model`'s tokens whose piece (special tokens not rendered) satisfies `pred`.
pub fn tokens_where(model: &Path, pred: impl Fn(&[u8]) -> bool) -> Vec<i32> {
    let vocab = llb::tokens::Vocab::new(llb::model::acquire(model).unwrap());
    (0..vocab.n_tokens()).filter(|&t| pred(&vocab.piece(t, false))).collect()
}

/// Bytes this process holds through glibc's malloc, every arena summed (chunks in use plus
/// mmapped chunks): allocation, not residency, so it moves only when memory is allocated or
/// freed, never when the allocator keeps or returns pages.
pub fn malloc_in_use() -> u64 {
    // SAFETY: mallinfo2 has no preconditions.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}

/// Runs test `name` of this test binary again in a child process whose glibc keeps no
/// per-thread cache of freed chunks (tcache): a leak check on [`malloc_in_use`] counts such
/// chunks as in use, and a long-lived thread's cache fills slowly over thousands of requests
/// (up to 7 chunks per size class), which reads as a leak of tens of bytes per request that is
/// none. True in the parent once the child passed (it panics if the child failed); false in the
/// child, which runs the test's body.
pub fn rerun_without_thread_caches(name: &str) -> bool {
    const CHILD: &str = "LLB_TEST_NO_TCACHE_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return false;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .env("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    print!("{text}");
    assert!(out.status.success() && text.contains("1 passed"), "{name} failed in its child process");
    true
}

/// The real-weights model at env var `var` (LLB_SMOLLM2, LLB_SMOLLM2_TOOLS, LLB_GEMMA3: test-all.sh
/// sets them from scripts/smollm2.sh and scripts/gemma3.sh). Unset: None, and the test says it
/// skipped, unless LLB_REQUIRE_REAL_WEIGHTS=1 (CI), where it fails.
pub fn real_weights(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var("LLB_REQUIRE_REAL_WEIGHTS").as_deref() == Ok("1") => {
            panic!("{var} is not set (scripts/smollm2.sh and scripts/gemma3.sh print the paths)")
        }
        None => {
            eprintln!("skipped: {var} is not set (test-all.sh sets it from scripts/smollm2.sh, scripts/gemma3.sh)");
            None
        }
    }
}
