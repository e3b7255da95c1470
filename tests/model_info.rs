//! llb_model_info through the C ABI: the header-only path agrees with llama.cpp's own probe on a
//! loaded (vocab_only) model for every corpus template, known templates report what their text
//! says, and bad input gets precise error codes.

mod common;

use common::*;
use llb::fixture::{self, FixtureOptions};
use llb::shim::{Probe, Templates};
use llb::sys;
use serde_json::{json, Value};
use std::ffi::{CStr, CString};
use std::path::Path;

/// Calls the exported function exactly as a C host does.
fn model_info_c(arg: &[u8]) -> Value {
    let c = CString::new(arg).unwrap();
    // SAFETY: c is a valid NUL-terminated string; the result is freed once.
    unsafe {
        let p = llb::ffi::llb_model_info(c.as_ptr());
        assert!(!p.is_null(), "llb_model_info returned NULL");
        let v = serde_json::from_str(CStr::from_ptr(p).to_str().unwrap()).unwrap();
        llb::ffi::llb_string_free(p);
        v
    }
}

fn model_info(path: &Path) -> Value {
    model_info_c(path.to_str().unwrap().as_bytes())
}

/// llama.cpp's path: a vocab_only load, then common_chat_templates_init(model, "").
fn reference_probe(path: &Path) -> Probe {
    llb::init_backend();
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: plain llama.h calls; the model is freed after the templates.
    unsafe {
        let mut params = sys::llama_model_default_params();
        params.vocab_only = true;
        let model = sys::llama_model_load_from_file(c.as_ptr(), params);
        assert!(!model.is_null(), "vocab_only load of {} failed", path.display());
        let probe = Templates::from_model(model).and_then(|t| t.probe());
        sys::llama_model_free(model);
        probe.unwrap_or_else(|e| panic!("reference probe of {}: {e}", path.display()))
    }
}

fn assert_same_as_reference(label: &str, info: &Value, r: &Probe, problems: &mut Vec<String>) {
    if info["type"] != "model_info" {
        problems.push(format!("{label}: error {info}"));
        return;
    }
    let mut check = |field: &str, got: &Value, want: Value| {
        if *got != want {
            problems.push(format!("{label}: {field}: header path {got}, llama.cpp {want}"));
        }
    };
    check("caps", &info["caps"], Value::Object(r.caps.clone()));
    check("caps_source", &info["caps_source"], json!(r.caps_source));
    check("has_tool_use_template", &info["has_tool_use_template"], json!(r.has_tool_use_template));
    check("chat_template", &info["chat_template"], json!(r.chat_template));
    check("chat_format", &info["chat_format"], json!(r.chat_format));
    check("tool_parser_error", &info["tool_parser_error"], json!(r.tool_parser_error));
    check("supports_tools", &info["supports_tools"], json!(r.supports_tools()));
}

#[test]
fn every_corpus_template_matches_llama_cpp_probe() {
    let corpus = corpus_templates();
    assert!(corpus.len() >= 50, "expected the pinned tree's template corpus, found {}", corpus.len());
    let mut problems = Vec::new();
    for (name, _) in &corpus {
        let path = corpus_fixture(name, true);
        let info = model_info(&path);
        assert_same_as_reference(name, &info, &reference_probe(&path), &mut problems);
    }
    assert!(problems.is_empty(), "{} mismatches:\n{}", problems.len(), problems.join("\n"));
}

/// The BOS/EOS text read from the header equals what llama.cpp's vocab gives, for every
/// tokenizer of the corpus (templates render `bos_token`/`eos_token`).
#[test]
fn header_special_tokens_match_llama_cpp_for_every_vocab() {
    let tmpl = "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{{ eos_token }}";
    let mut problems = Vec::new();
    for vocab in corpus_vocabs() {
        let mut o = FixtureOptions::new(&vocab);
        o.template = Some(tmpl.to_string());
        o.vocab_only = true;
        let path = fixture_with(&format!("specials-{vocab}"), &o);
        let header = llb::gguf::read_header(&path).unwrap();
        let ours = Templates::from_header(&header).unwrap().probe().unwrap();
        let theirs = reference_probe(&path);
        if (ours.bos_token.as_str(), ours.eos_token.as_str()) != (theirs.bos_token.as_str(), theirs.eos_token.as_str())
        {
            problems.push(format!(
                "{vocab}: header bos/eos {:?}/{:?}, llama.cpp {:?}/{:?}",
                ours.bos_token, ours.eos_token, theirs.bos_token, theirs.eos_token
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Expectations read from the templates' own text.
#[test]
fn well_known_templates_report_what_their_text_says() {
    // (template, supports_tools gate, parallel tool calls, system role, why)
    let cases: &[(&str, bool, bool, bool, &str)] = &[
        ("Qwen-Qwen2.5-7B-Instruct", true, true, true, "renders <tool_call> blocks for every call"),
        ("Qwen-Qwen3-0.6B", true, true, true, "Qwen3 keeps Qwen2.5's tool format"),
        ("meta-llama-Llama-3.1-8B-Instruct", true, false, true, "raises 'only supports single tool-calls at once'"),
        ("meta-llama-Llama-3.2-3B-Instruct", true, false, true, "same single-call rule"),
        ("meta-llama-Llama-3.3-70B-Instruct", true, false, true, "same single-call rule"),
        ("mistralai-Mistral-Nemo-Instruct-2407", true, true, true, "[AVAILABLE_TOOLS] and [TOOL_CALLS]"),
        ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", true, true, true, "the Hermes <tools> format"),
        ("google-gemma-4-31B-it", true, true, true, "native <|tool_call> format"),
        ("openai-gpt-oss-120b", true, false, true, "harmony: one call per turn"),
        ("google-gemma-2-2b-it", false, false, false, "no tools; raises 'System role not supported'"),
        ("microsoft-Phi-3.5-mini-instruct", false, false, true, "never mentions tools"),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", false, true, true, "renders tool_calls but never describes tools"),
        ("ibm-granite-granite-3.3-2B-Instruct", false, false, true, "describes tools but never renders tool_calls"),
        ("fireworks-ai-llama-3-firefunction-v2", false, true, true, "describes `functions`, not `tools`"),
        ("llama-cpp-rwkv-world", false, false, true, "plain chat"),
    ];
    for (name, tools, parallel, system, why) in cases {
        let info = model_info(&corpus_fixture(name, true));
        assert_eq!(info["type"], "model_info", "{name}: {info}");
        assert_eq!(info["supports_tools"], json!(tools), "{name} ({why}): {}", info["caps"]);
        assert_eq!(info["caps"]["supports_parallel_tool_calls"], json!(parallel), "{name} ({why})");
        assert_eq!(info["caps"]["supports_system_role"], json!(system), "{name} ({why})");
        assert_eq!(info["caps_source"], "default", "{name}");
        assert_eq!(info["has_tool_use_template"], false, "{name}");
    }
    let gemma = model_info(&corpus_fixture("google-gemma-4-31B-it", true));
    assert_eq!(gemma["chat_format"], "peg-gemma4");
}

#[test]
fn model_info_reports_the_header_facts() {
    let path = corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false);
    let info = model_info(&path);
    assert_eq!(info["architecture"], "llama");
    assert_eq!(info["name"], "llb fixture (qwen2)");
    assert_eq!(info["n_ctx_train"], 8192);
    assert_eq!(info["n_vocab"], 151936);
    assert_eq!(info["file_size"], std::fs::metadata(&path).unwrap().len());
    assert_eq!(info["path"], path.to_str().unwrap());
    // token_embd 64x151936 + output_norm 64 + 2 layers x (2x64 norms + q,o 64x64 + k,v 64x32 + 3 x 64x128)
    let layer = 2 * 64 + 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128;
    assert_eq!(info["n_params"], 64 * 151936 + 64 + 2 * layer);
    // The source llama.cpp renders: its lexer drops the final newline (keep_trailing_newline=False).
    let raw = fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap();
    assert_eq!(info["chat_template"], raw.strip_suffix('\n').unwrap_or(&raw));
}

#[test]
fn no_template_falls_back_to_chatml_and_is_not_tool_capable() {
    for (key, template) in [("none", None), ("literal-chatml", Some("chatml"))] {
        let mut o = FixtureOptions::new("qwen2");
        o.template = template.map(str::to_string);
        o.vocab_only = true;
        let path = fixture_with(&format!("chatml-{key}"), &o);
        let info = model_info(&path);
        assert_eq!(info["caps_source"], "chatml_fallback", "{key}: {info}");
        assert_eq!(info["supports_tools"], false, "{key}");
        let mut problems = Vec::new();
        assert_same_as_reference(key, &info, &reference_probe(&path), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
    }
}

#[test]
fn tool_use_variant_is_preferred() {
    let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
                  {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    let hermes = fixture::read_template("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use").unwrap();
    // A ChatML default with a Hermes-2-Pro tool_use variant; the variant alone; a broken variant.
    let cases = [
        ("chatml+hermes", Some(chatml.to_string()), Some(hermes.clone()), true, "tool_use"),
        ("only-hermes", None, Some(hermes.clone()), true, "tool_use"),
        ("chatml+broken", Some(chatml.to_string()), Some("{% if %}".to_string()), false, "default"),
    ];
    for (key, default, tool_use, tools, source) in cases {
        let mut o = FixtureOptions::new("llama-bpe");
        o.template = default;
        o.tool_use_template = tool_use;
        o.vocab_only = true;
        let path = fixture_with(&format!("variant-{key}"), &o);
        let info = model_info(&path);
        assert_eq!(info["supports_tools"], tools, "{key}: {info}");
        assert_eq!(info["caps_source"], source, "{key}");
        assert_eq!(info["has_tool_use_template"], true, "{key}");
        if tools {
            let variant = hermes.strip_suffix('\n').unwrap_or(&hermes);
            assert_eq!(info["chat_template"], json!(variant), "{key}: caps come from the variant");
        }
        let mut problems = Vec::new();
        assert_same_as_reference(key, &info, &reference_probe(&path), &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
    }
}

fn assert_error(v: &Value, code: &str) {
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
}

#[test]
fn bad_input_gets_precise_errors() {
    let dir = fixtures_dir();
    assert_error(&model_info(&dir.join("does-not-exist.gguf")), "file_not_found");
    assert_error(&model_info_c(b""), "file_not_found");
    assert_error(&model_info(&dir), "invalid_argument");
    let text = dir.join("not-a-model.txt");
    std::fs::write(&text, "hello, not a GGUF").unwrap();
    assert_error(&model_info(&text), "not_a_gguf");
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, "").unwrap();
    assert_error(&model_info(&empty), "not_a_gguf");
    // SAFETY: NULL is part of the documented contract.
    let v: Value = unsafe {
        let p = llb::ffi::llb_model_info(std::ptr::null());
        let v = serde_json::from_str(CStr::from_ptr(p).to_str().unwrap()).unwrap();
        llb::ffi::llb_string_free(p);
        v
    };
    assert_error(&v, "invalid_argument");
    assert_error(&model_info_c(b"/tmp/\xff\xfe.gguf"), "invalid_argument");
}

#[test]
fn truncated_gguf_is_not_a_gguf_at_every_cut() {
    let full = corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false);
    let bytes = std::fs::read(&full).unwrap();
    let header_len = {
        let h = llb::gguf::read_header(&full).unwrap();
        assert!(h.n_tensors > 0);
        // the data section starts after the header; cut in the KV area, the tensor infos and the data
        bytes.len() / 2
    };
    let cuts = [4, 8, 20, 24, 100, 5_000, 1_000_000, header_len, bytes.len() - 1];
    for cut in cuts {
        let p = fixtures_dir().join(format!("truncated-{cut}.gguf"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let v = model_info(&p);
        assert_error(&v, "not_a_gguf");
    }
}

/// Writes a GGUF from raw parts: (key, type, value bytes) pairs and tensor infos, data zeroed.
fn raw_gguf(name: &str, kvs: &[(&str, u32, Vec<u8>)], tensors: &[(&str, &[u64])]) -> std::path::PathBuf {
    let s = |x: &str| [&(x.len() as u64).to_le_bytes()[..], x.as_bytes()].concat();
    let mut b =
        [&b"GGUF"[..], &3u32.to_le_bytes(), &(tensors.len() as u64).to_le_bytes(), &(kvs.len() as u64).to_le_bytes()]
            .concat();
    for (k, t, v) in kvs {
        b.extend(s(k));
        b.extend(t.to_le_bytes());
        b.extend(v);
    }
    for (n, dims) in tensors {
        b.extend(s(n));
        b.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
        b.extend(0u32.to_le_bytes()); // F32
        b.extend(0u64.to_le_bytes()); // offset
    }
    b.resize(b.len().div_ceil(32) * 32 + 256, 0);
    let p = fixtures_dir().join(name);
    std::fs::write(&p, b).unwrap();
    p
}

/// Found by the fuzz target model_info_gguf (docs/fuzzing.md): files llb's header reader
/// accepted and llama.cpp's gguf_init_from_file then aborted on (an empty key: GGML_ASSERT) or
/// killed the process with SIGFPE (a zero dimension divides its overflow check). llb refuses
/// both before llama.cpp reads them, so llb_chat_create never hands them over.
#[test]
fn files_that_crash_llama_cpps_gguf_reader_are_not_a_gguf() {
    let arch = ("general.architecture", 8u32, [&5u64.to_le_bytes()[..], b"llama"].concat());
    let empty_key = raw_gguf("hostile-empty-key.gguf", &[arch.clone(), ("", 4, 1u32.to_le_bytes().to_vec())], &[]);
    let zero_dim = raw_gguf("hostile-zero-dim.gguf", std::slice::from_ref(&arch), &[("t", &[32, 0])]);
    let control = raw_gguf("hostile-control.gguf", &[arch], &[("t", &[32, 1])]);
    for (p, what) in [(&empty_key, "empty key"), (&zero_dim, "zero dimension")] {
        let v = model_info(p);
        assert_error(&v, "not_a_gguf");
        assert!(v["message"].as_str().unwrap().contains(what), "{v}");
        let ev = common::cabi::CEngine::open(&json!({"model_path": p})).err().expect("must not open");
        assert_eq!(ev["code"], "not_a_gguf", "{ev}");
    }
    // The same file with a non-zero dimension is read by both readers.
    assert!(llb::gguf::read_header(&control).is_ok());
    let c = CString::new(control.to_str().unwrap()).unwrap();
    // SAFETY: a valid path; the context is freed once.
    unsafe {
        let g =
            sys::gguf_init_from_file(c.as_ptr(), sys::gguf_init_params { no_alloc: true, ctx: std::ptr::null_mut() });
        assert!(!g.is_null());
        sys::gguf_free(g);
    }
}

/// Found by the fuzz target model_info_gguf: a template holding invalid UTF-8 (read as U+FFFD)
/// made the caps probe's error text hold a cut multi-byte sequence, and the probe's JSON dump
/// threw: llb_model_info answered `internal`.
#[test]
fn probe_errors_quoting_non_ascii_template_text_are_not_internal() {
    let src = fixture::read_template("mistralai-Mistral-Nemo-Instruct-2407").unwrap();
    let needle = "            {{- ', \"id\": \"' + tool_call.id";
    assert!(src.contains(needle));
    let t = src.replacen(needle, &format!("          \u{FFFD} {}", needle.trim_start()), 1);
    let mut o = FixtureOptions::new("llama-spm");
    o.template = Some(t);
    o.vocab_only = true;
    let v = model_info(&fixture_with("fuzz-probe-error-non-ascii", &o));
    assert_ne!(v["code"], "internal", "{v}");
    assert_eq!(v["type"], "model_info", "{v}");
}
