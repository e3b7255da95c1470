//! The chat engine through the C ABI: the tools_unsupported gate, create and request errors,
//! response shape, tool_choice semantics, parallel calls, ids, parse-failure fallback, UTF-8,
//! message adaptation, context limits, streaming, cancellation, busy, KV reuse, shared models.

mod common;

use common::cabi::{accumulate, assert_stream_matches, take, CEngine, CPool};
use common::*;
use llb::fixture::FixtureOptions;
use serde_json::{json, Value};
use std::ffi::CString;
use std::sync::{Arc, Barrier};

fn tools() -> Value {
    llb::fixture::sample_tools()
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn qwen() -> std::path::PathBuf {
    corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false)
}

fn calls(r: &Value) -> Vec<Value> {
    r["choices"][0]["message"]["tool_calls"].as_array().cloned().unwrap_or_default()
}

fn assert_code(v: &Value, code: &str) {
    assert_eq!(v["type"], "error", "expected an error, got {v}");
    assert_eq!(v["code"], code, "{v}");
}

#[test]
fn non_tool_model_is_refused_before_loading_with_the_exact_message() {
    let path = corpus_fixture("google-gemma-2-2b-it", false);
    let ev = CEngine::open(&json!({"model_path": path})).err().expect("a non-tool model must not load");
    let name = path.file_name().unwrap().to_str().unwrap();
    assert_eq!(ev["type"], "create_failure");
    assert_eq!(ev["code"], "tools_unsupported");
    assert_eq!(
        ev["message"],
        format!("Model {name} rejected: its chat template does not support tool calling (supports_tools=false, supports_tool_calls=false). Only tool-capable GGUFs can be loaded.")
    );
    assert_eq!(ev["caps"]["supports_tools"], false);
    assert_eq!(ev["caps"].as_object().unwrap().len(), 8, "the whole caps map: {}", ev["caps"]);
    // Refused on the template probe alone: the weights were never loaded.
    assert_eq!(llb::model::holders(&path), 0);
    // Without a callback the reason is lost, but nothing crashes.
    let c = CString::new(json!({"model_path": path}).to_string()).unwrap();
    // SAFETY: valid string, no callback.
    assert!(unsafe { llb::ffi::llb_chat_create(c.as_ptr(), None, std::ptr::null_mut()) }.is_null());
}

#[test]
fn create_failures_carry_precise_codes() {
    let dir = fixtures_dir();
    let text = dir.join("chat-not-a-model.txt");
    std::fs::write(&text, "not a model").unwrap();
    let cases = [
        (json!({"model_path": dir.join("missing.gguf")}).to_string(), "file_not_found", ""),
        (json!({"model_path": text}).to_string(), "not_a_gguf", ""),
        ("{not json".to_string(), "invalid_json", ""),
        (json!({"model_path": qwen(), "n_ctxx": 1}).to_string(), "invalid_argument", "n_ctxx"),
        (json!({"model_path": qwen(), "n_ctx": "big"}).to_string(), "invalid_argument", "n_ctx"),
        (json!({"model_path": qwen(), "n_ctx": 0}).to_string(), "invalid_argument", "n_ctx"),
        (json!({"n_ctx": 64}).to_string(), "invalid_argument", "model_path"),
        ("[1,2]".to_string(), "invalid_argument", ""),
    ];
    for (config, code, names) in cases {
        let ev = CEngine::open_text(&config).err().expect("must fail");
        assert_eq!(ev["type"], "create_failure", "{config}: {ev}");
        assert_eq!(ev["code"], code, "{config}: {ev}");
        assert!(ev["message"].as_str().unwrap().contains(names), "{config}: the message names `{names}`: {ev}");
    }
    // NULL config.
    // SAFETY: NULL is documented.
    assert!(unsafe { llb::ffi::llb_chat_create(std::ptr::null(), None, std::ptr::null_mut()) }.is_null());
}

#[test]
fn bad_requests_are_rejected_with_the_field_named() {
    let e = CEngine::open_model(&qwen());
    let cases = [
        (json!({"messages": user("hi"), "temprature": 0.5}), "invalid_argument", "temprature"),
        (json!({"messages": user("hi"), "max_tokens": "ten"}), "invalid_argument", "max_tokens"),
        (
            json!({"messages": user("hi"), "tools": tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "invalid_argument",
            "nope",
        ),
        (json!({"messages": user("hi"), "tool_choice": "required"}), "invalid_argument", "tool_choice"),
        (json!({"messages": [{"role": "wizard", "content": "x"}]}), "invalid_argument", "messages[0].role"),
        (json!({"messages": [{"role": "tool", "content": "x"}]}), "invalid_argument", "tool_call_id"),
        (json!({"messages": []}), "invalid_argument", "messages"),
        (json!({"messages": user("hi"), "temperature": 7}), "invalid_argument", "temperature"),
        (json!({"messages": user("hi"), "n": 2}), "invalid_argument", "n"),
    ];
    for (req, code, field) in cases {
        let r = e.infer(&req);
        assert_code(&r, code);
        assert!(r["message"].as_str().unwrap().contains(field), "{req}: message should name `{field}`: {r}");
    }
    assert_code(&e.infer_text("{\"messages\": ["), "invalid_json");
    assert_code(&e.infer_text("\"just a string\""), "invalid_argument");
    // SAFETY: NULL arguments are documented.
    unsafe {
        assert_code(
            &take(llb::ffi::llb_chat_infer(std::ptr::null_mut(), CString::new("{}").unwrap().as_ptr())),
            "invalid_argument",
        );
        assert_code(&take(llb::ffi::llb_chat_infer(e.raw, std::ptr::null())), "invalid_argument");
        llb::ffi::llb_chat_destroy(std::ptr::null_mut());
    }
    // The engine still works after all of that.
    let ok = e.infer(&json!({"messages": user("hi"), "max_tokens": 4}));
    assert_eq!(ok["object"], "chat.completion", "{ok}");
}

#[test]
fn completion_has_the_openai_shape() {
    let path = qwen();
    let e = CEngine::open_model(&path);
    let r = e.infer(&json!({"messages": user("hi"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 5, "model": "ignored", "user": "u1"}));
    assert!(r["id"].as_str().unwrap().starts_with("chatcmpl-"), "{r}");
    assert_eq!(r["object"], "chat.completion");
    assert!(r["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(r["model"], path.file_name().unwrap().to_str().unwrap());
    let c = &r["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert_eq!(c["finish_reason"], "tool_calls");
    assert!(c["message"]["content"].is_null(), "content is null when only tool calls: {r}");
    let call = &calls(&r)[0];
    assert_eq!(call["type"], "function");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args.is_object());
    let u = &r["usage"];
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
    for k in ["prompt_ms", "predicted_ms", "predicted_per_second"] {
        assert!(r["timings"][k].is_number(), "timings.{k}: {r}");
    }
}

#[test]
fn tool_choice_none_renders_tools_but_never_calls() {
    let e = CEngine::open_model(&qwen());
    let with_tools = |choice: &str, seed: u64| {
        e.infer(&json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": choice, "max_tokens": 40, "seed": seed}))
    };
    let plain = e.infer(&json!({"messages": user("Weather?"), "max_tokens": 1}));
    for seed in 0..4 {
        let r = with_tools("none", seed);
        assert!(calls(&r).is_empty(), "none produced calls: {r}");
        assert_ne!(r["choices"][0]["finish_reason"], "tool_calls");
        // The tools are in the prompt (same prompt as auto).
        let auto = with_tools("auto", seed);
        assert_eq!(r["usage"]["prompt_tokens"], auto["usage"]["prompt_tokens"]);
        assert!(r["usage"]["prompt_tokens"].as_u64() > plain["usage"]["prompt_tokens"].as_u64());
    }
}

#[test]
fn parallel_tool_calls_follow_the_request_and_the_template() {
    // Qwen2.5 supports parallel calls: several may come, each with a unique id.
    let e = CEngine::open_model(&qwen());
    let r = e.infer(&json!({"messages": user("Weather in Paris and Rome?"), "tools": tools(), "tool_choice": "required", "max_tokens": 160, "seed": 3}));
    let cs = calls(&r);
    assert!(!cs.is_empty(), "{r}");
    let ids: std::collections::HashSet<_> = cs.iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), cs.len(), "ids must be unique: {r}");
    // Asked for one: exactly one.
    for seed in 0..3 {
        let r = e.infer(&json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 300, "seed": seed}));
        assert_eq!(calls(&r).len(), 1, "{r}");
        assert_eq!(r["choices"][0]["finish_reason"], "tool_calls");
    }
    // Llama 3.1's template cannot render parallel calls: forced off even when asked.
    let llama = CEngine::open_model(&corpus_fixture("meta-llama-Llama-3.1-8B-Instruct", false));
    let r = llama.infer(&json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": true, "max_tokens": 300, "seed": 1}));
    assert_eq!(calls(&r).len(), 1, "{r}");
}

#[test]
fn a_reply_that_does_not_parse_is_returned_raw_with_a_warning() {
    let e = CEngine::open_model(&qwen());
    // A stop string cuts the call in the middle: the text cannot parse as a complete call.
    let r = e.infer(&json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 1, "stop": ["arguments"]}));
    let c = &r["choices"][0];
    assert_eq!(c["finish_reason"], "stop", "{r}");
    assert!(calls(&r).is_empty(), "{r}");
    let content = c["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("<tool_call>"), "the raw text is kept: {r}");
    assert!(r["warnings"][0]["message"].as_str().unwrap().contains("incomplete arguments"), "{r}");
    assert!(!content.contains("arguments"), "the stop string is cut: {r}");
    assert_eq!(r["warnings"][0]["code"], "tool_call_parse_failed", "{r}");
}

#[test]
fn outputs_are_valid_utf8_json_for_every_tokenizer_family() {
    // Random weights emit arbitrary byte tokens; every chunk and completion must stay valid UTF-8.
    for vocab in ["gemma-4", "llama-spm", "qwen2", "command-r"] {
        let mut o = FixtureOptions::new(vocab);
        o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
        let e = CEngine::open_model(&fixture_with(&format!("utf8-{vocab}"), &o));
        for seed in 0..3 {
            e.events.clear();
            // `take` and the callback fail the test on invalid UTF-8 or JSON.
            let r = e.infer(&json!({"messages": user("Écris un poème 日本語 😀"), "max_tokens": 96, "seed": seed, "temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "stream": true}));
            assert_eq!(r["object"], "chat.completion", "{vocab}: {r}");
            assert_stream_matches(vocab, &e.events.chunks(), &r);
        }
    }
}

#[test]
fn openai_legal_histories_do_not_raise_template_errors() {
    let seqs = [
        json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
        json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}, {"role": "system", "content": "late rule"}, {"role": "user", "content": "b"}]),
        json!([{"role": "assistant", "content": "hello"}, {"role": "user", "content": "b"}]),
        json!([{"role": "system", "content": "s1"}, {"role": "developer", "content": "s2"}, {"role": "user", "content": [{"type": "text", "text": "parts"}]}]),
        json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "user", "content": "b"}]),
    ];
    let mut problems = Vec::new();
    for t in tool_capable_templates() {
        let e = CEngine::open_model(&corpus_fixture(&t, false));
        for (i, msgs) in seqs.iter().enumerate() {
            let r = e.infer(&json!({"messages": msgs, "tools": tools(), "max_tokens": 2, "seed": 1}));
            if r["type"] == "error" {
                problems.push(format!("{t} sequence {i}: {r}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn tool_capable_templates() -> Vec<String> {
    corpus_templates()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| llb::model_info::model_info(&corpus_fixture(n, true)).unwrap()["supports_tools"] == true)
        .collect()
}

#[test]
fn context_limits_are_reported() {
    let e = CEngine::open(&json!({"model_path": qwen(), "n_ctx": 256, "n_batch": 64, "n_threads": 1})).unwrap();
    let long = "word ".repeat(400);
    let r = e.infer(&json!({"messages": user(&long), "max_tokens": 4}));
    assert_code(&r, "context_overflow");
    assert!(r["message"].as_str().unwrap().contains("256"), "{r}");
    // Generation that reaches the end of the context stops with `length`.
    let r = e.infer(&json!({"messages": user(&"word ".repeat(150)), "seed": 1, "temperature": 1.0}));
    assert_eq!(r["choices"][0]["finish_reason"], "length", "{r}");
    let u = &r["usage"];
    assert!(u["total_tokens"].as_u64().unwrap() >= 255, "{r}");
}

#[test]
fn streaming_follows_openai_and_rebuilds_the_final_message() {
    let e = CEngine::open_model(&qwen());
    let r = e.infer(&json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "required", "max_tokens": 160, "seed": 3, "stream": true, "stream_options": {"include_usage": true}}));
    let chunks = e.events.chunks();
    assert_stream_matches("qwen required", &chunks, &r);
    // The usage chunk comes last with empty choices.
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"], r["usage"]);
    // Tool-call ids are the same in the deltas and the completion.
    let rebuilt = accumulate(&chunks);
    assert_eq!(rebuilt["tool_calls"].as_array().unwrap().len(), calls(&r).len());
    // Content streams too (auto, no call).
    e.events.clear();
    let r = e.infer(&json!({"messages": user("hi"), "max_tokens": 48, "seed": 9, "stream": true}));
    assert!(e.events.chunks().len() > 3, "content arrives in several deltas");
    assert_stream_matches("qwen content", &e.events.chunks(), &r);
    assert!(e.events.chunks().iter().all(|c| c.get("usage").is_none()), "no usage chunk unless asked");
}

#[test]
fn cancellation_stops_promptly_and_the_engine_stays_usable() {
    let e = CEngine::open_model(&qwen());
    *e.events.cancel_after_chunks.lock().unwrap() = 4;
    let r = e.infer(&json!({"messages": user("hi"), "max_tokens": 400, "seed": 2, "stream": true}));
    assert_eq!(r["choices"][0]["finish_reason"], "cancelled", "{r}");
    let n = r["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(n < 40, "stopped promptly, not after {n} tokens");
    assert_eq!(e.events.chunks().iter().filter(|c| !c["choices"][0]["finish_reason"].is_null()).count(), 1);
    assert_stream_matches("cancelled content", &e.events.chunks(), &r);
    // Cancelled inside a forced call (3 chunks: role, name, the arguments begun): the call comes
    // back closed, and the deltas still add up to the completion's call.
    e.events.clear();
    *e.events.cancel_after_chunks.lock().unwrap() = 3;
    let r = e.infer(&json!({"messages": user("weather?"), "tools": tools(), "tool_choice": "required",
        "max_tokens": 400, "seed": 3, "temperature": 1.0, "stream": true, "jump_forward": false}));
    assert_eq!(r["choices"][0]["finish_reason"], "cancelled", "{r}");
    assert_stream_matches("cancelled call", &e.events.chunks(), &r);
    let args = r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()), "a cut call closes: {r}");
    // Cancelling a non-streamed request: the progress events are cancellation points.
    e.events.clear();
    *e.events.cancel_after_chunks.lock().unwrap() = 0;
    *e.events.on_event.lock().unwrap() = None;
    let r = e.infer(&json!({"messages": user("hi"), "max_tokens": 4, "seed": 2}));
    assert_eq!(r["choices"][0]["finish_reason"], "length", "usable after a cancel: {r}");
    assert!(!e.events.of_type("progress").is_empty(), "progress events are sent");
}

#[test]
fn a_busy_engine_answers_busy_and_other_engines_run_concurrently() {
    let e = Arc::new(CEngine::open_model(&qwen()));
    let started = Arc::new(Barrier::new(2));
    {
        let started = started.clone();
        let mut fired = false;
        *e.events.on_event.lock().unwrap() = Some(Box::new(move |ev: &Value| {
            if ev["type"] == "progress" && ev["stage"] == "generate" && !fired {
                fired = true;
                started.wait(); // the other thread may now call while this one generates
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }));
    }
    let runner = {
        let e = e.clone();
        std::thread::spawn(move || e.infer(&json!({"messages": user("hi"), "max_tokens": 64, "seed": 1})))
    };
    started.wait();
    let busy = e.infer(&json!({"messages": user("hi"), "max_tokens": 4}));
    assert_code(&busy, "busy");
    let first = runner.join().unwrap();
    assert_eq!(first["object"], "chat.completion", "the running request is unaffected: {first}");
    *e.events.on_event.lock().unwrap() = None;

    // Two engines, two threads, one shared model.
    let path = qwen();
    let a = Arc::new(CEngine::open_model(&path));
    let b = Arc::new(CEngine::open_model(&path));
    let go = Arc::new(Barrier::new(2));
    let handles: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .map(|eng| {
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                eng.infer(&json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 4}))
            })
        })
        .collect();
    for h in handles {
        let r = h.join().unwrap();
        assert_eq!(calls(&r).len(), 1, "{r}");
    }
}

#[test]
fn engines_on_one_file_share_the_model() {
    let mut o = FixtureOptions::new("qwen2");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    let path = fixture_with("shared-model", &o);
    let a = CEngine::open_model(&path);
    assert_eq!(llb::model::holders(&path), 1);
    let b = CEngine::open_model(&path);
    assert_eq!(llb::model::holders(&path), 2, "the second engine reuses the loaded model");
    drop(a);
    assert_eq!(llb::model::holders(&path), 1);
    let r = b.infer(&json!({"messages": user("hi"), "max_tokens": 4}));
    assert_eq!(r["object"], "chat.completion", "{r}");
    drop(b);
    assert_eq!(llb::model::holders(&path), 0, "freed with the last engine");
}

/// Token counts of a two-turn conversation with a tool call, and its second turn sent again:
/// (turn 1's prompt, its reply's evaluated tokens, [prompt, cached] of turn 2 and of the repeat).
fn two_turns(infer: &dyn Fn(&Value) -> Value, t: &str) -> (u64, u64, [[u64; 2]; 2]) {
    let mut messages = vec![
        json!({"role": "system", "content": "You are helpful."}),
        json!({"role": "user", "content": "Weather in Paris for 3 days?"}),
    ];
    let r1 = infer(&json!({"messages": messages, "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 1}));
    assert_eq!(r1["choices"][0]["finish_reason"], "tool_calls", "{t}: {r1}");
    let m1 = r1["choices"][0]["message"].clone();
    messages.push(m1.clone());
    messages.push(json!({"role": "tool", "tool_call_id": m1["tool_calls"][0]["id"], "content": "{\"temp_c\": 21}"}));
    let counts = |r: &Value| {
        let u = &r["usage"];
        [u["prompt_tokens"].as_u64().unwrap(), u["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap()]
    };
    let next = json!({"messages": messages, "tools": tools(), "max_tokens": 8, "seed": 1});
    let r2 = counts(&infer(&next));
    let r3 = counts(&infer(&next));
    // completion_tokens counts the end-of-turn token, which is never evaluated.
    (r1["usage"]["prompt_tokens"].as_u64().unwrap(), r1["usage"]["completion_tokens"].as_u64().unwrap() - 1, [r2, r3])
}

/// A pool keeps a conversation's cells, its generated reply's included, for the next turn.
#[test]
fn kv_cache_is_reused_across_turns_including_the_generated_reply() {
    for t in [
        "Qwen-Qwen2.5-7B-Instruct",
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
        "meta-llama-Llama-3.1-8B-Instruct",
    ] {
        let pool = CPool::open(&json!({"model_path": corpus_fixture(t, false), "n_ctx": 4096, "n_threads": 1, "n_parallel": 1}))
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        let (p1, g1, [[_, cached], [p3, cached3]]) = two_turns(&|r| pool.infer(r), t);
        assert!(cached >= p1 + g1, "{t}: turn 2 reused {cached} tokens, turn 1 had {p1} prompt + {g1} generated");
        assert_eq!(cached3, p3 - 1, "{t}: the same request again reuses everything but the last prompt token");
    }
}

/// An engine (one sequence, CPU) reuses only the cells a cold read computes the same way
/// (docs/design.md, "Determinism"): turn 1's prompt, read in tiled steps; the reply, computed a
/// token at a time, is read again with the next turn, and every prompt reads at least a tile
/// (64 tokens).
#[test]
fn an_engine_reuses_the_prompt_and_reads_the_reply_again_as_a_cold_read_would() {
    for t in ["Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct"] {
        let e = CEngine::open_model(&corpus_fixture(t, false));
        let (p1, g1, [[p2, cached], [p3, cached3]]) = two_turns(&|r| e.infer(r), t);
        assert!(p1 >= 64, "{t}: the test needs a longer prompt: {p1}");
        assert_eq!(cached, p1.min(p2 - 64), "{t}: turn 2 reuses turn 1's prompt ({p1}), not its {g1} generated tokens");
        assert_eq!(cached3, p3 - 64, "{t}: the same request again reads its last 64 tokens");
    }
}

/// At the pin, llama.cpp's own sampler throws for `required` with an SPM tokenizer and a
/// template whose generation prompt is plain text (its token pre-feed of the grammar skips the
/// first SPM piece). llb needs no pre-feed for tool calls and spells the prompt exactly where a
/// grammar does need it (`response_format`).
#[test]
fn spm_tokenizer_with_plain_text_generation_prompts_works() {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
        "n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["city", "n"], "additionalProperties": false});
    for t in ["meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen2.5-7B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407"] {
        let mut o = FixtureOptions::new("llama-spm");
        o.template = Some(llb::fixture::read_template(t).unwrap());
        let e = CEngine::open_model(&fixture_with(&format!("spm-{t}"), &o));
        let r = e.infer(&json!({"messages": user("Weather?"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 2}));
        assert_eq!(calls(&r).len(), 1, "{t} required: {r}");
        for (label, rf) in [
            ("json_schema", json!({"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})),
            ("json_object", json!({"type": "json_object"})),
        ] {
            let r = e.infer(&json!({"messages": user("A city?"), "response_format": rf, "max_tokens": 120, "seed": 3}));
            let content = r["choices"][0]["message"]["content"].as_str().unwrap_or_else(|| panic!("{t} {label}: {r}"));
            assert!(content.trim_start().starts_with('{'), "{t} {label}: the grammar makes an object: {r}");
            if label == "json_object" && r["choices"][0]["finish_reason"] == "length" {
                continue; // random weights may write one free-form key forever; any string is legal
            }
            let v: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{t} {label}: not JSON ({e}): {r}"));
            assert!(v.is_object(), "{t} {label}: {r}");
            if label == "json_schema" {
                assert!(["Paris", "Rome"].contains(&v["city"].as_str().unwrap_or("")), "{t}: {v}");
                assert!((1..=9).contains(&v["n"].as_i64().unwrap_or(0)), "{t}: {v}");
            }
            assert_eq!(r["choices"][0]["finish_reason"], "stop", "{t} {label}: {r}");
        }
    }
}

#[test]
fn reasoning_is_extracted_unless_asked_not_to() {
    // DeepSeek-R1's generation prompt opens the reasoning block: everything generated up to
    // `</think>` is reasoning.
    let e = CEngine::open_model(&corpus_fixture("llama-cpp-deepseek-r1", false));
    let req = |fmt: &str| json!({"messages": user("Think first."), "max_tokens": 24, "seed": 8, "reasoning_format": fmt, "stream": true});
    let r = e.infer(&req("auto"));
    let m = &r["choices"][0]["message"];
    assert!(m["reasoning_content"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
    assert_stream_matches("reasoning auto", &e.events.chunks(), &r);
    assert!(
        e.events.chunks().iter().any(|c| c["choices"][0]["delta"]["reasoning_content"].is_string()),
        "reasoning streams as reasoning_content"
    );
    e.events.clear();
    let r = e.infer(&req("none"));
    assert!(r["choices"][0]["message"].get("reasoning_content").is_none(), "{r}");
    assert!(r["choices"][0]["message"]["content"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
}

#[test]
fn stop_strings_seeds_and_sampling_fields_behave() {
    let e = CEngine::open_model(&qwen());
    let base = json!({"messages": user("Count."), "max_tokens": 48, "seed": 21, "temperature": 1.0, "top_k": 100, "top_p": 0.9, "min_p": 0.01});
    let a = e.infer(&base);
    let b = e.infer(&base);
    assert_eq!(a["choices"][0]["message"], b["choices"][0]["message"], "the same seed gives the same reply");
    // Stop at a character the reply is known to contain.
    let text = a["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let stop: String = text.chars().filter(|c| c.is_alphanumeric()).take(1).collect();
    if !stop.is_empty() {
        let mut req = base.clone();
        req["stop"] = json!([stop.clone(), "never-appears"]);
        let r = e.infer(&req);
        let got = r["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(r["choices"][0]["finish_reason"], "stop", "{r}");
        assert!(!got.contains(&stop), "{got:?} must end before {stop:?}");
        assert!(text.starts_with(got), "the same reply, cut at the stop string");
    }
    let greedy = json!({"messages": user("Count."), "max_tokens": 16, "temperature": 0});
    assert_eq!(
        e.infer(&greedy)["choices"][0]["message"],
        e.infer(&greedy)["choices"][0]["message"],
        "greedy is deterministic"
    );
}

/// Found with the fuzz target create_config (docs/fuzzing.md): configs that made llama.cpp
/// allocate absurd memory. n_threads above ggml's 512 allocated per thread (100000 threads:
/// a 4.9 GB allocation, then as many threads); n_batch was also the physical batch, whose
/// logits buffer is n_vocab × n_batch × 4 bytes (5 GB for qwen2's vocabulary at 8192); n_ctx
/// past the model's training context sized the KV cache from a u32. n_threads above the CPU
/// count is clamped to it (512 threads on 2 CPUs made a 2-token request take minutes).
#[test]
fn configs_that_would_allocate_absurd_memory_are_refused_or_bounded() {
    let path = qwen();
    for (config, field) in [
        (json!({"model_path": path, "n_threads": 100000}), "n_threads"),
        (json!({"model_path": path, "n_threads": 513}), "n_threads"),
        (json!({"model_path": path, "n_ctx": 8193}), "n_ctx"),
        (json!({"model_path": path, "n_ctx": u32::MAX}), "n_ctx"),
    ] {
        let ev = CEngine::open(&config).err().expect("must be refused");
        assert_eq!(ev["code"], "invalid_argument", "{config}: {ev}");
        assert!(ev["message"].as_str().unwrap().contains(field), "{config}: {ev}");
    }
    // The fixture's training context (8192) is the largest n_ctx; a batch that large opens with
    // a bounded physical batch, and 512 threads with as many as there are CPUs: it serves
    // requests promptly.
    let e = CEngine::open(&json!({"model_path": path, "n_ctx": 8192, "n_batch": 8192, "n_threads": 512})).unwrap();
    let r = e.infer(&json!({"messages": user("hi"), "max_tokens": 2}));
    assert_eq!(r["object"], "chat.completion", "{r}");
}

/// Found by fuzzing `llb_chat_infer`: a tool name holding a NUL made a grammar llama.cpp cannot
/// parse, reported as `internal`. Names follow OpenAI's rule; strings inside schemas (enum values
/// with control characters, odd property names) must never be `internal` either.
#[test]
fn odd_names_and_schema_strings_are_request_errors_not_internal() {
    let e = CEngine::open_model(&common::corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false));
    let tool =
        |name: &str, params: Value| json!({"type": "function", "function": {"name": name, "parameters": params}});
    let obj = json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
    for bad in ["tool-call\u{0}_time", "get weather", "browser.search", "名前", &"x".repeat(65)] {
        let r = e.infer(&json!({"messages": user("hi"), "tools": [tool("ok", obj.clone()), tool(bad, obj.clone())],
            "tool_choice": "required", "max_tokens": 8}));
        assert_eq!(r["code"], "invalid_argument", "{bad:?}: {r}");
        assert!(r["message"].as_str().unwrap().contains("tools[1].function.name"), "{r}");
    }
    for (label, params) in [
        (
            "NUL in an enum",
            json!({"type": "object", "properties": {"a": {"type": "string", "enum": ["x\u{0}y", "\u{1}"]}}, "required": ["a"]}),
        ),
        (
            "NUL in a property name",
            json!({"type": "object", "properties": {"a\u{0}b": {"type": "string"}}, "required": ["a\u{0}b"]}),
        ),
        (
            "quotes and backslashes",
            json!({"type": "object", "properties": {"\"\\": {"type": "string", "enum": ["\\\"", "\n"]}}, "required": ["\"\\"]}),
        ),
        (
            "a pattern",
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(\u{0}|[\\x00-\\x1f])+$"}}, "required": ["a"]}),
        ),
    ] {
        for choice in [json!("required"), json!("auto")] {
            let r = e.infer(&json!({"messages": user("hi"), "tools": [tool("t", params.clone())],
                "tool_choice": choice, "max_tokens": 16, "seed": 1}));
            assert_ne!(r["code"], "internal", "{label} ({choice}): {r}");
            assert!(r["object"] == "chat.completion" || r["code"] == "invalid_argument", "{label} ({choice}): {r}");
        }
    }
    // The engine is fine afterwards.
    let r = e.infer(&json!({"messages": user("hi"), "tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 5}));
    assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{r}");
}
