//! Writes the seed corpora of the fuzz targets into `fuzz/corpus/<target>/` (run by
//! `scripts/fuzz.sh --seeds`; the output is committed). Deterministic: the same tree gives the
//! same files.
//!
//! - `infer_request`: the request bodies of tests/chat.rs, plus invalid UTF-8 and deep nesting.
//! - `create_config`: the configs of tests/chat.rs, with `"model_path":"model.gguf"` (the
//!   targets run inside their work folder, where the fixture has that name).
//! - `model_info_gguf`: small GGUFs from llb's fixture writer with real templates of
//!   `models/templates` and real vocabularies of `models/ggml-vocab-*.gguf`, cut to their first
//!   tokens so each seed is a few KB (one has tensors too).
//! - `pull_listing`: the listings the pull tests' mock hub (tests/pull_support/mock_hub.rs)
//!   serves, fetched from it over HTTP.

#[path = "../../../tests/pull_support/mock_hub.rs"]
mod mock_hub;

use llb::fixture::{self, FixtureOptions};
use llb::gguf::{self, GgufValue};
use mock_hub::{MockFile, MockHub, MockRepo};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

fn out_dir(target: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn put(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn tools() -> Value {
    llb::fixture::sample_tools()
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

// Over 60 lines: a list of seed requests, one per case.
fn infer_seeds() {
    let d = out_dir("infer_request");
    let call = json!({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"days\":3}"}});
    let schema = json!({"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
        "days": {"type": "integer"}}, "required": ["city"]});
    let seeds: Vec<(&str, Value)> = vec![
        ("plain", json!({"messages": user("hi"), "max_tokens": 4})),
        (
            "shape",
            json!({"messages": user("hi"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 5, "model": "ignored", "user": "u1"}),
        ),
        (
            "auto",
            json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "auto", "max_tokens": 40, "seed": 1}),
        ),
        ("none", json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "none", "max_tokens": 40})),
        (
            "named",
            json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": {"type": "function", "function": {"name": "get_time"}}, "max_tokens": 40}),
        ),
        (
            "parallel",
            json!({"messages": user("Weather in Paris and Rome?"), "tools": tools(), "tool_choice": "required", "max_tokens": 160, "seed": 3}),
        ),
        (
            "stop",
            json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 1, "stop": ["arguments"]}),
        ),
        (
            "utf8-stream",
            json!({"messages": user("Écris un poème 日本語 😀"), "max_tokens": 96, "seed": 7, "temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "stream": true}),
        ),
        (
            "two-users",
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "tools": tools(), "max_tokens": 2}),
        ),
        (
            "late-system",
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}, {"role": "system", "content": "late rule"}, {"role": "user", "content": "b"}], "max_tokens": 2}),
        ),
        (
            "assistant-first",
            json!({"messages": [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "b"}], "max_tokens": 2}),
        ),
        (
            "parts",
            json!({"messages": [{"role": "system", "content": "s1"}, {"role": "developer", "content": "s2"}, {"role": "user", "content": [{"type": "text", "text": "parts"}]}], "max_tokens": 2}),
        ),
        (
            "two-assistants",
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "user", "content": "b"}], "max_tokens": 2}),
        ),
        ("long", json!({"messages": user(&"word ".repeat(150)), "seed": 1, "temperature": 1.0})),
        (
            "usage",
            json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "required", "max_tokens": 160, "seed": 3, "stream": true, "stream_options": {"include_usage": true}}),
        ),
        (
            "tool-turn",
            json!({"messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Weather in Paris for 3 days?"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}],
            "tools": tools(), "max_tokens": 8, "seed": 1}),
        ),
        (
            "json-schema",
            json!({"messages": user("A city?"), "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}, "max_tokens": 120, "seed": 3}),
        ),
        (
            "json-object",
            json!({"messages": user("A city?"), "response_format": {"type": "json_object"}, "max_tokens": 120}),
        ),
        (
            "reasoning",
            json!({"messages": user("Think first."), "max_tokens": 24, "seed": 8, "reasoning_format": "none", "stream": true, "chat_template_kwargs": {"enable_thinking": false}}),
        ),
        (
            "sampling",
            json!({"messages": user("Count."), "max_tokens": 48, "seed": 21, "temperature": 1.0, "top_k": 100, "top_p": 0.9, "min_p": 0.01, "stop": ["3", "never-appears"]}),
        ),
        (
            "greedy",
            json!({"messages": user("Count."), "max_tokens": 16, "temperature": 0, "max_completion_tokens": 8, "n": 1}),
        ),
        ("bad-field", json!({"messages": user("hi"), "temprature": 0.5})),
        ("bad-role", json!({"messages": [{"role": "wizard", "content": "x"}]})),
        ("tool-no-id", json!({"messages": [{"role": "tool", "content": "x"}]})),
    ];
    for (name, v) in seeds {
        put(&d, &format!("{name}.json"), v.to_string().as_bytes());
    }
    put(&d, "invalid-json", b"{\"messages\": [");
    put(&d, "just-a-string", b"\"just a string\"");
    let mut bad = br#"{"messages":[{"role":"user","content":"caf"#.to_vec();
    bad.extend_from_slice(&[0xE9, 0xFF, 0xC3]);
    bad.extend_from_slice(br#""}]}"#);
    put(&d, "invalid-utf8", &bad);
    let deep = format!(
        r#"{{"messages":[{{"role":"user","content":"x"}}],"tools":[{{"type":"function","function":{{"name":"f","parameters":{{"type":"object","properties":{{"a":{}}}}}}}}}]}}"#,
        "{\"type\":\"array\",\"items\":".repeat(60) + "{\"type\":\"string\"}" + &"}".repeat(60)
    );
    put(&d, "deep-schema.json", deep.as_bytes());
    put(&d, "deep-arrays", format!("{}{}", "[".repeat(300), "]".repeat(300)).as_bytes());
}

fn create_seeds() {
    let d = out_dir("create_config");
    let m = llb_fuzz::MODEL_FILE;
    let seeds: Vec<(&str, String)> = vec![
        ("minimal", json!({"model_path": m}).to_string()),
        ("small", json!({"model_path": m, "n_ctx": 256, "n_batch": 64, "n_threads": 1}).to_string()),
        ("all", json!({"model_path": m, "n_ctx": 1024, "n_threads": 1, "n_batch": 128, "seed": 7, "chat_template_kwargs": {"enable_thinking": false}}).to_string()),
        ("null-fields", json!({"model_path": m, "n_ctx": null, "n_threads": null, "n_batch": null, "seed": null, "chat_template_kwargs": {}}).to_string()),
        ("typo", json!({"model_path": m, "n_ctxx": 1}).to_string()),
        ("string-ctx", json!({"model_path": m, "n_ctx": "big"}).to_string()),
        ("zero-ctx", json!({"model_path": m, "n_ctx": 0}).to_string()),
        ("no-path", json!({"n_ctx": 64}).to_string()),
        ("missing-file", json!({"model_path": "missing.gguf"}).to_string()),
        ("directory", json!({"model_path": "."}).to_string()),
        ("array", "[1,2]".to_string()),
        ("invalid-json", "{not json".to_string()),
    ];
    for (name, text) in seeds {
        put(&d, &format!("{name}.json"), text.as_bytes());
    }
}

/// A vocabulary of the pinned tree cut to its first `keep` tokens: the token arrays are cut,
/// BPE merges whose pieces are gone are dropped, and special-token ids past the cut removed.
fn cut_vocab(name: &str, keep: usize, out: &Path) -> PathBuf {
    let src = fixture::vocab_path(name);
    let meta = gguf::read_metadata(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut kept_tokens = std::collections::HashSet::new();
    if let Some((_, GgufValue::Array(_, toks))) = meta.iter().find(|(k, _)| k == "tokenizer.ggml.tokens") {
        for t in toks.iter().take(keep) {
            if let GgufValue::Str(b) = t {
                kept_tokens.insert(b.clone());
            }
        }
    }
    let mut kvs = Vec::new();
    for (k, v) in meta {
        let v = match (k.as_str(), v) {
            (
                "tokenizer.ggml.tokens" | "tokenizer.ggml.scores" | "tokenizer.ggml.token_type",
                GgufValue::Array(t, a),
            ) => GgufValue::Array(t, a.into_iter().take(keep).collect()),
            ("tokenizer.ggml.merges", GgufValue::Array(t, a)) => GgufValue::Array(
                t,
                a.into_iter()
                    .filter(|m| {
                        let GgufValue::Str(b) = m else { return false };
                        let s = String::from_utf8_lossy(b);
                        let Some((l, r)) = s.split_once(' ') else { return false };
                        [l.to_string(), r.to_string(), format!("{l}{r}")]
                            .iter()
                            .all(|p| kept_tokens.contains(p.as_bytes()))
                    })
                    .collect(),
            ),
            (k, GgufValue::Scalar(t, b)) if k.ends_with("_token_id") => {
                let mut id = [0u8; 8];
                id[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
                if u64::from_le_bytes(id) >= keep as u64 {
                    continue;
                }
                GgufValue::Scalar(t, b)
            }
            (_, v) => v,
        };
        kvs.push((k, v));
    }
    let path = out.join(format!("vocab-{name}-{keep}.gguf"));
    gguf::write(&path, &kvs, &[], 1).unwrap();
    path
}

fn gguf_seeds() {
    let d = out_dir("model_info_gguf");
    let tmp = llb_fuzz::work_dir().join("seeds");
    std::fs::create_dir_all(&tmp).unwrap();
    // (vocabulary, default template, tool_use template, with tensors)
    let cases: &[(&str, Option<&str>, Option<&str>, bool)] = &[
        ("qwen2", Some("Qwen-Qwen2.5-7B-Instruct"), None, false),
        ("llama-bpe", Some("meta-llama-Llama-3.1-8B-Instruct"), None, false),
        ("llama-spm", Some("mistralai-Mistral-Nemo-Instruct-2407"), None, true),
        ("llama-spm", Some("google-gemma-2-2b-it"), None, false),
        (
            "llama-bpe",
            Some("meta-llama-Llama-3.1-8B-Instruct"),
            Some("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use"),
            false,
        ),
        ("command-r", None, Some("CohereForAI-c4ai-command-r7b-12-2024-tool_use"), false),
        ("deepseek-llm", Some("llama-cpp-deepseek-r1"), None, false),
        ("phi-3", Some("microsoft-Phi-3.5-mini-instruct"), None, false),
        ("bert-bge", Some("Qwen-Qwen3-0.6B"), None, false),
        ("gpt-2", None, None, false),
    ];
    for (vocab, template, tool_use, tensors) in cases {
        let cut = cut_vocab(vocab, 300, &tmp);
        let mut o = FixtureOptions::new(cut.to_str().unwrap());
        o.template = template.map(|t| fixture::read_template(t).unwrap());
        o.tool_use_template = tool_use.map(|t| fixture::read_template(t).unwrap());
        o.vocab_only = !tensors;
        let name = format!(
            "{vocab}-{}{}{}",
            template.unwrap_or("no-template"),
            tool_use.map(|_| "-tool_use").unwrap_or(""),
            if *tensors { "-tensors" } else { "" }
        );
        let p = tmp.join(format!("{name}.gguf"));
        fixture::write_fixture(&o, &p).unwrap_or_else(|e| panic!("{name}: {e}"));
        // libFuzzer names do not matter; no .gguf suffix, which the repo's .gitignore excludes.
        put(&d, &name, &std::fs::read(&p).unwrap());
    }
    let _ = std::fs::remove_dir_all(&tmp);
    // Two files llama.cpp's own reader crashed on while llb's accepted them (docs/fuzzing.md):
    // an empty key (GGML_ASSERT) and a zero dimension (division by zero).
    let s = |x: &str| [&(x.len() as u64).to_le_bytes()[..], x.as_bytes()].concat();
    let head = |n_tensors: u64, n_kv: u64| {
        [&b"GGUF"[..], &3u32.to_le_bytes(), &n_tensors.to_le_bytes(), &n_kv.to_le_bytes()].concat()
    };
    let arch = [s("general.architecture"), 8u32.to_le_bytes().to_vec(), s("llama")].concat();
    let empty_key =
        [head(0, 2), arch.clone(), s(""), 4u32.to_le_bytes().to_vec(), 1u32.to_le_bytes().to_vec()].concat();
    put(&d, "hostile-empty-key", &empty_key);
    let mut zero_dim = [head(1, 1), arch, s("t"), 2u32.to_le_bytes().to_vec()].concat();
    for v in [32u64, 0] {
        zero_dim.extend_from_slice(&v.to_le_bytes());
    }
    zero_dim.extend_from_slice(&0u32.to_le_bytes());
    zero_dim.extend_from_slice(&0u64.to_le_bytes());
    zero_dim.resize(zero_dim.len().div_ceil(32) * 32 + 32, 0);
    put(&d, "hostile-zero-dimension", &zero_dim);
}

/// GET on the mock hub, returning the body.
fn http_get(endpoint: &str, path: &str) -> String {
    let addr = endpoint.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8(resp).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    body.to_string()
}

// Over 60 lines: a list of seed listings, one per case.
fn listing_seeds() {
    let d = out_dir("pull_listing");
    let hub = MockHub::start();
    let fake = |tag: &str| format!("GGUF fake model {tag}").into_bytes();
    let mut repos: Vec<MockRepo> = vec![
        MockRepo::new(
            "acme/single-GGUF",
            vec![MockFile::git("README.md", b"# model\n".to_vec()), MockFile::lfs("Tool-Model-Q4_K_M.gguf", fake("a"))],
        ),
        MockRepo::new(
            "acme/quants-GGUF",
            [
                "Model-Q2_K.gguf",
                "Model-Q8_0.gguf",
                "Model-Q5_K_M.gguf",
                "Model-IQ4_XS.gguf",
                "Model-F16.gguf",
                "mmproj-Model-Q4_K_M.gguf",
            ]
            .iter()
            .map(|n| MockFile::lfs(n, fake(n)))
            .collect(),
        ),
        MockRepo::new(
            "acme/no-default-GGUF",
            vec![MockFile::lfs("m-F16.gguf", fake("f")), MockFile::lfs("m-BF16.gguf", fake("b"))],
        ),
        MockRepo::new(
            "acme/aux-GGUF",
            vec![
                MockFile::lfs("model.gguf", fake("m")),
                MockFile::lfs("mmproj-model-f16.gguf", fake("p")),
                MockFile::git("config.json", b"{}".to_vec()),
            ],
        ),
        MockRepo::new(
            "acme/safetensors",
            vec![MockFile::git("README.md", b"hi".to_vec()), MockFile::lfs("model.safetensors", vec![0; 64])],
        ),
        MockRepo::new(
            "acme/split-GGUF",
            vec![
                MockFile::lfs("Q4_K_M/Split-Q4_K_M-00001-of-00003.gguf", fake("1")),
                MockFile::lfs("Q4_K_M/Split-Q4_K_M-00002-of-00003.gguf", fake("2")),
                MockFile::lfs("Q4_K_M/Split-Q4_K_M-00003-of-00003.gguf", fake("3")),
                MockFile::lfs("Split-Q8_0.gguf", fake("8")),
            ],
        ),
        MockRepo::new("acme/git-GGUF", vec![MockFile::git("m-Q4_K_M.gguf", fake("g"))]),
    ];
    let mut gated = MockRepo::new("acme/gated-GGUF", vec![MockFile::lfs("m-Q4_K_M.gguf", fake("g"))]);
    gated.gated = Some("manual");
    let mut private = MockRepo::new("acme/private-GGUF", vec![MockFile::lfs("m-Q4_K_M.gguf", fake("p"))]);
    private.private = true;
    let mut disabled = MockRepo::new("acme/disabled-GGUF", vec![MockFile::lfs("m-Q4_K_M.gguf", fake("d"))]);
    disabled.disabled = true;
    let mut evil = MockRepo::new("acme/evil-GGUF", vec![MockFile::lfs("m-Q4_K_M.gguf", fake("e"))]);
    evil.extra_siblings =
        vec![json!({"rfilename": "../../evil.gguf", "size": 10, "lfs": {"sha256": "0".repeat(64), "size": 10}})];
    let mut bad_sum = MockRepo::new("acme/badsum-GGUF", vec![]);
    bad_sum.extra_siblings =
        vec![json!({"rfilename": "m-Q4_K_M.gguf", "size": 10, "lfs": {"sha256": "../../../../evil", "size": 10}})];
    let mut missing_shard = MockRepo::new(
        "acme/missing-shard-GGUF",
        vec![MockFile::lfs("x-00001-of-00003.gguf", fake("1")), MockFile::lfs("x-00003-of-00003.gguf", fake("3"))],
    );
    missing_shard.gguf_template = None;
    repos.extend([gated, private, disabled, evil, bad_sum, missing_shard]);
    for r in repos {
        let id = r.id.clone();
        let mut r = r;
        // The listing route answers a private repo only with a token; the listing itself is what matters.
        let was_private = r.private;
        r.private = false;
        hub.add_repo(r);
        let mut body = http_get(&hub.endpoint, &format!("/api/models/{id}/revision/main?blobs=true"));
        if was_private {
            let mut v: Value = serde_json::from_str(&body).unwrap();
            v["private"] = json!(true);
            body = v.to_string();
        }
        put(&d, &format!("{}.json", id.replace('/', "_")), body.as_bytes());
    }
}

fn main() {
    let which: Vec<String> = std::env::args().skip(1).collect();
    let want = |t: &str| which.is_empty() || which.iter().any(|w| w == t);
    if want("infer_request") {
        infer_seeds();
    }
    if want("create_config") {
        create_seeds();
    }
    if want("model_info_gguf") {
        gguf_seeds();
    }
    if want("pull_listing") {
        listing_seeds();
    }
    for t in ["infer_request", "create_config", "model_info_gguf", "pull_listing"] {
        let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(t);
        let (n, bytes) = std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .flatten()
            .fold((0, 0), |(n, b), e| (n + 1, b + e.metadata().map(|m| m.len()).unwrap_or(0)));
        println!("{t}: {n} seeds, {bytes} bytes");
    }
}
