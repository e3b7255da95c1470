//! `tool_choice: "required"` and a named choice on every tool-capable template of the corpus,
//! with tiny random-weight fixtures and bounded argument schemas: each request yields exactly one
//! valid, schema-conforming tool call that llama.cpp's parser returns. The required request is
//! streamed and an `auto` reply too: concatenating the deltas must reproduce the final message
//! (the streaming property test, Gemma 4's native format included). The call and its result
//! then go back into the history for a second turn, which must render.

mod common;

use common::cabi::{assert_stream_matches, CEngine};
use common::*;
use serde_json::{json, Value};

pub fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "enum": ["Paris", "Rome", "Tokyo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "required": ["city", "days"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "description": "Get the time in a time zone",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
                "required": ["tz"], "additionalProperties": false}}}
    ])
}

/// Checks a call against the tools above; returns what is wrong.
pub fn schema_problem(name: &str, args: &str) -> Option<String> {
    let v: Value = match serde_json::from_str(args) {
        Ok(v) => v,
        Err(e) => return Some(format!("arguments are not JSON ({e}): {args:?}")),
    };
    let obj = v.as_object()?;
    let ok = match name {
        "get_weather" => {
            obj.len() == 2
                && ["Paris", "Rome", "Tokyo"].contains(&obj.get("city").and_then(Value::as_str).unwrap_or(""))
                && obj.get("days").is_some_and(|d| d.is_i64() || d.is_u64())
        }
        "get_time" => obj.len() == 1 && ["UTC", "CET"].contains(&obj.get("tz").and_then(Value::as_str).unwrap_or("")),
        _ => false,
    };
    (!ok).then(|| format!("{name}({args}) does not match its schema"))
}

pub fn tool_capable_corpus() -> Vec<String> {
    corpus_templates()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| {
            let info = llb::model_info::model_info(&corpus_fixture(n, true)).unwrap();
            info["supports_tools"] == true
        })
        .collect()
}

pub fn engine_for(template: &str) -> CEngine {
    CEngine::open_model(&corpus_fixture(template, false))
}

// Over 60 lines: one pass over the corpus with its tally; the checks of a reply read in the order
// a user would make them.
#[test]
fn required_and_named_yield_one_schema_conforming_call_on_every_tool_capable_template() {
    let templates = tool_capable_corpus();
    assert!(templates.len() >= 40, "expected most of the corpus to be tool-capable, got {}", templates.len());
    let mut problems = Vec::new();
    for t in &templates {
        let engine = engine_for(t);
        for (label, choice, want, stream) in [
            ("required", json!("required"), None, true),
            ("named", json!({"type": "function", "function": {"name": "get_time"}}), Some("get_time"), false),
        ] {
            engine.events.clear();
            let req = json!({
                "messages": [{"role": "system", "content": "You are a helpful assistant."},
                             {"role": "user", "content": "What's the weather in Paris for the next 3 days?"}],
                "tools": tools(), "tool_choice": choice, "parallel_tool_calls": false,
                "max_tokens": 512, "seed": 1234,
                // Random weights never end a reasoning block: test the strict path without one.
                "chat_template_kwargs": {"enable_thinking": false},
                "stream": stream,
            });
            let r = engine.infer(&req);
            if r["type"] == "error" {
                problems.push(format!("{t} [{label}]: error {r}"));
                continue;
            }
            if stream {
                let chunks = engine.events.chunks();
                if let Err(e) = std::panic::catch_unwind(|| assert_stream_matches(t, &chunks, &r)) {
                    problems.push(format!("{t} [{label}]: stream mismatch {:?}", e.downcast_ref::<String>()));
                }
            }
            let choice0 = &r["choices"][0];
            let calls = choice0["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
            if calls.len() != 1 || choice0["finish_reason"] != "tool_calls" {
                problems.push(format!(
                    "{t} [{label}]: {} calls, finish {}, warnings {}, content {:?}",
                    calls.len(),
                    choice0["finish_reason"],
                    r["warnings"],
                    choice0["message"]["content"]
                ));
                continue;
            }
            let f = &calls[0]["function"];
            let name = f["name"].as_str().unwrap_or("");
            if let Some(w) = want {
                if name != w {
                    problems.push(format!("{t} [{label}]: called {name}, not {w}"));
                }
            }
            if let Some(p) = schema_problem(name, f["arguments"].as_str().unwrap_or("")) {
                problems.push(format!("{t} [{label}]: {p}"));
            }
            if !calls[0]["id"].as_str().is_some_and(|id| id.starts_with("call_") && id.len() > 10) {
                problems.push(format!("{t} [{label}]: bad id {}", calls[0]["id"]));
            }
            // The next turn: the call and its result go back into the history.
            if label == "required" {
                let mut messages = req["messages"].as_array().unwrap().clone();
                messages.push(choice0["message"].clone());
                messages.push(json!({"role": "tool", "tool_call_id": calls[0]["id"], "content": "{\"ok\": true}"}));
                let r2 = engine.infer(&json!({"messages": messages, "tools": tools(), "max_tokens": 4, "seed": 1}));
                if r2["type"] == "error" {
                    problems.push(format!("{t} [turn 2]: {r2}"));
                }
            }
        }
        // A free reply, streamed: content (and reasoning, where the template has it) deltas.
        engine.events.clear();
        let r = engine.infer(&json!({"messages": [{"role": "user", "content": "Say hello."}], "tools": tools(),
            "max_tokens": 32, "seed": 77, "stream": true}));
        if r["type"] == "error" {
            problems.push(format!("{t} [auto]: error {r}"));
        } else if let Err(e) = std::panic::catch_unwind(|| assert_stream_matches(t, &engine.events.chunks(), &r)) {
            problems.push(format!("{t} [auto]: stream mismatch {:?}", e.downcast_ref::<String>()));
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} templates failed:\n{}",
        problems.len(),
        templates.len(),
        problems.join("\n")
    );
}
