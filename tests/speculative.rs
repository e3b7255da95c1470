//! Speculative decoding (src/speculate/): drafts from llama.cpp's n-gram drafters are verified in
//! one decode, and the reply is token for token the reply without speculation (the same rows, the
//! same sampler, grammar and random draws). Across template families, for strict and auto calls,
//! response_format, streams (the same deltas) and a pool; seeded sampling reproduces; the switch
//! and the config are checked by name; a draft model of the same vocabulary drafts (draft-simple), one of
//! another is refused.
//!
//! Identity holds where llama.cpp's kernels give a token decoded alone the same logits as the
//! same token verified in a batch: on a CPU with flash attention (llb's default), for KV windows
//! under 512 cells (docs/design.md, "Speculative decoding"). The conversations here stay under it.

mod common;

use common::cabi::{assert_stream_matches, CEngine, CPool, Events};
use common::*;
use llb::fixture::FixtureOptions;
use serde_json::{json, Value};

/// Drafting on whatever repeats (random weights loop): ngram-simple on 2-grams, drafts of up to 8.
/// Drafts verified whole (`"adaptive": false`): these tests are about the mechanics, which the
/// cost model would rarely exercise on random weights and a CPU.
fn config(path: &std::path::Path) -> Value {
    json!({"model_path": path, "n_ctx": 2048, "n_threads": 1,
        "speculative": {"type": "ngram-simple", "ngram_size": 2, "draft_max": 8, "adaptive": false}})
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "note", "description": "Write a note",
        "parameters": {"type": "object", "properties": {"title": {"type": "string", "maxLength": 60},
            "body": {"type": "string"}}, "required": ["title", "body"]}}}])
}

fn request(kind: &str, spec: bool) -> Value {
    let mut r = json!({"messages": [{"role": "user", "content": "Copy this: the red fox ran; the red fox ran; the red fox ran."}],
        "temperature": 0, "max_tokens": 90, "speculative": spec});
    match kind {
        "required" | "auto" => {
            r["tools"] = tools();
            r["tool_choice"] = json!(kind);
        }
        "response_format" => {
            let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
            r["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "t", "schema": schema}});
        }
        _ => {}
    }
    r
}

fn drafted(r: &Value) -> (u64, u64) {
    let t = &r["timings"];
    let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("no timings.{k}: {r}"));
    (n("draft_n"), n("draft_accepted_n"))
}

/// The reply without what differs by run (ids, times): message, finish reason, usage counts.
fn reply(r: &Value) -> Value {
    let mut m = r["choices"][0]["message"].clone();
    if let Some(calls) = m["tool_calls"].as_array_mut() {
        calls.iter_mut().for_each(|c| c["id"] = Value::Null);
    }
    json!([m, r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]])
}

/// What each streamed chunk says (its deltas and finish reason), without ids and times.
fn deltas(chunks: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = chunks.iter().map(|c| json!([c["choices"][0]["delta"], c["choices"][0]["finish_reason"]])).collect();
    for d in &mut out {
        if let Some(calls) = d[0]["tool_calls"].as_array_mut() {
            calls.iter_mut().filter(|c| c.get("id").is_some()).for_each(|c| c["id"] = Value::Null);
        }
    }
    out
}

/// A strict call streamed with and without speculation: each stream matches its reply, and the
/// chunks are the same, delta for delta.
fn assert_same_deltas(e: &CEngine, label: &str) {
    let mut streams = Vec::new();
    for spec in [true, false] {
        e.events.clear();
        let mut req = request("required", spec);
        req["stream"] = json!(true);
        let r = e.infer(&req);
        assert_stream_matches(&format!("{label} stream {spec}"), &e.events.chunks(), &r);
        streams.push(deltas(&e.events.chunks()));
    }
    assert_eq!(streams[0], streams[1], "{label}: the deltas with speculation are the deltas without");
}

#[test]
fn replies_and_streams_are_the_same_with_and_without_speculation_across_families() {
    let mut accepted = 0;
    for (family, t) in FAMILIES {
        let e = CEngine::open(&config(&corpus_fixture(t, false))).unwrap_or_else(|f| panic!("{f}"));
        for kind in ["required", "auto", "response_format", "text"] {
            let label = format!("{family} {kind}");
            let on = e.infer(&request(kind, true));
            let off = e.infer(&request(kind, false));
            assert!(on.get("code").is_none(), "{label}: {on}");
            assert_eq!(reply(&on), reply(&off), "{label}: with speculation\n{on}\nwithout\n{off}");
            assert_eq!(drafted(&off), (0, 0), "{label}: {off}");
            let (n, a) = drafted(&on);
            assert!(a <= n, "{label}: {on}");
            accepted += a;
        }
        assert_same_deltas(&e, family);
    }
    assert!(accepted > 0, "no draft was ever accepted: the comparison tested nothing");
}

#[test]
fn seeded_sampling_reproduces_and_equals_the_reply_without_speculation() {
    let e = CEngine::open(&config(&corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false))).unwrap_or_else(|f| panic!("{f}"));
    for kind in ["required", "text"] {
        let req = |spec: bool| {
            let mut r = request(kind, spec);
            r["temperature"] = json!(0.9);
            r["seed"] = json!(42);
            r
        };
        let (a, b, off) = (e.infer(&req(true)), e.infer(&req(true)), e.infer(&req(false)));
        assert_eq!(reply(&a), reply(&b), "{kind}: a seeded run reproduces");
        assert_eq!(reply(&a), reply(&off), "{kind}: the same draws as without speculation");
    }
}

/// Concurrent pool requests with speculation: each reply equals its solo run without it.
#[test]
fn pool_requests_speculate_side_by_side_and_match_their_solo_runs() {
    let path = corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false);
    let mut c = config(&path);
    c["n_parallel"] = json!(3);
    let pool = CPool::open(&c).unwrap_or_else(|f| panic!("{f}"));
    let kinds = ["required", "text", "response_format"];
    let solo: Vec<Value> = kinds.iter().map(|k| reply(&pool.infer(&request(k, false)))).collect();
    let together: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = kinds.iter().map(|k| s.spawn(|| pool.infer(&request(k, true)))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((k, want), got) in kinds.iter().zip(&solo).zip(&together) {
        assert_eq!(&reply(got), want, "{k}: {got}");
    }
    let events = Events::default();
    let mut req = request("text", true);
    req["stream"] = json!(true);
    let r = pool.infer_with(&req, &events);
    assert_stream_matches("pool stream", &events.chunks(), &r);
    // The pool's cost model followed its steps' shapes (tokens, logits rows); on the host it
    // never pads a draft with filler, whose rows a CPU pays in full.
    let costs = &pool.stats()["cost_model"];
    assert!(costs["shape_runs"].as_u64().unwrap() > 0, "{costs}");
    assert_eq!(costs["rows_padded"], 0, "{costs}");
}

#[test]
fn real_weights_copy_a_passage_into_a_strict_call_with_drafts_accepted() {
    let Some(path) = std::env::var("LLB_SMOLLM2_TOOLS").ok() else {
        assert!(std::env::var("LLB_REQUIRE_REAL_WEIGHTS").as_deref() != Ok("1"), "LLB_SMOLLM2_TOOLS is not set");
        eprintln!("skipped: LLB_SMOLLM2_TOOLS is not set (scripts/smollm2.sh)");
        return;
    };
    // The engine's defaults: llb's default drafter.
    let e = CEngine::open(&json!({"model_path": path, "n_ctx": 2048, "n_threads": 1})).unwrap_or_else(|f| panic!("{f}"));
    let passage = "The keeper climbed the narrow stairs every evening, trimmed the wick and polished the great lens \
        until it shone, and the ships that passed the rocks at night watched for the light.";
    let req = |spec: bool| {
        json!({"messages": [{"role": "user", "content": format!("{passage}\n\nReplace 'keeper' with 'guard' in the text above.")}],
            "tools": [{"type": "function", "function": {"name": "edit_file", "description": "Replace text in a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old_text": {"type": "string"},
                    "new_text": {"type": "string"}}, "required": ["path", "old_text", "new_text"]}}}],
            "tool_choice": "required", "temperature": 0, "max_tokens": 160, "speculative": spec})
    };
    let (on, off) = (e.infer(&req(true)), e.infer(&req(false)));
    assert_eq!(reply(&on), reply(&off), "with speculation\n{on}\nwithout\n{off}");
    let (n, a) = drafted(&on);
    assert!(a >= 20 && a <= n, "the copied passage was drafted and accepted: {on}");
}

#[test]
fn the_switch_and_the_config_are_checked_by_name() {
    let path = corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false);
    let base = json!({"model_path": path, "n_ctx": 1024, "n_threads": 1});
    let refused = |spec: Value, field: &str| {
        let mut c = base.clone();
        c["speculative"] = spec.clone();
        let f = CEngine::open(&c).err().unwrap_or_else(|| panic!("{spec} was accepted"));
        assert_eq!(f["code"], "invalid_argument", "{spec}: {f}");
        assert!(f["message"].as_str().unwrap().contains(field), "{spec}: {f}");
    };
    for n in [json!(0), json!(-3), json!(100000)] {
        refused(json!({"draft_max": n}), "speculative.draft_max");
    }
    refused(json!({"draft_max": 4, "draft_min": 5}), "speculative.draft_min");
    refused(json!({"draft_min": -1}), "speculative.draft_min");
    refused(json!({"type": "ngram-fast"}), "speculative.type");
    refused(json!({"type": "draft-simple"}), "speculative.draft_model_path");
    refused(json!({"type": "ngram-mod", "draft_model_path": path}), "speculative.draft_model_path");
    refused(json!({"draft_n_gpu_layers": 4}), "speculative.draft_n_gpu_layers");
    refused(json!({"draft_model_path": path, "draft_n_gpu_layers": -2}), "speculative.draft_n_gpu_layers");
    refused(json!({"type": "draft-mtp", "draft_model_path": path}), "draft-mtp");
    refused(json!({"type": "draft-eagle3"}), "draft-eagle3");
    refused(json!({"ngram_size": 0}), "speculative.ngram_size");
    refused(json!({"draft_max": "many"}), "speculative.draft_max");
    // "none": off unless a request asks; a request's field wins either way.
    let mut c = config(&path);
    c["speculative"]["type"] = json!("none");
    let e = CEngine::open(&c).unwrap_or_else(|f| panic!("{f}"));
    let mut unset = request("text", true);
    unset.as_object_mut().unwrap().remove("speculative");
    assert_eq!(drafted(&e.infer(&unset)).0, 0, "none: no drafts");
    let r = e.infer(&request("text", true));
    assert!(drafted(&r).1 > 0, "the request's true drafts with the default drafter: {r}");
    // "none" with a draft model: the draft model drafts for the requests that ask.
    let mut c = config(&path);
    c["speculative"] = json!({"type": "none", "draft_model_path": path});
    let d = CEngine::open(&c).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(drafted(&d.infer(&unset)).0, 0, "none + a draft model: no drafts unless asked");
    let asked = d.infer(&request("text", true));
    assert!(drafted(&asked).1 > 0, "asked, the draft model drafts: {asked}");
    let r = e.infer(&json!({"messages": [{"role": "user", "content": "hi"}], "speculative": "yes"}));
    assert_eq!(r["code"], "invalid_argument", "{r}");
    assert!(r["message"].as_str().unwrap().contains("speculative"), "{r}");
}

/// A pool too small for its requests parks and rebuilds sequences that hold drafts, and a stream
/// cancelled mid-draft ends cancelled: every request finishes, nothing hangs, the pool goes on.
#[test]
fn drafts_survive_parking_and_cancellation() {
    let path = corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false);
    let mut c = config(&path);
    c["n_parallel"] = json!(3);
    c["n_ctx"] = json!(640);
    let pool = CPool::open(&c).unwrap_or_else(|f| panic!("{f}"));
    let kinds = ["required", "text", "response_format", "text", "required", "auto"];
    let replies: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = kinds.iter().map(|k| s.spawn(|| pool.infer(&request(k, true)))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (k, r) in kinds.iter().zip(&replies) {
        let finish = r["choices"][0]["finish_reason"].as_str().unwrap_or_else(|| panic!("{k}: {r}"));
        assert!(["length", "stop", "tool_calls"].contains(&finish), "{k}: {r}");
        let (n, a) = drafted(r);
        assert!(a <= n, "{k}: {r}");
    }
    let events = Events::default();
    *events.cancel_after_chunks.lock().unwrap() = 5;
    let mut req = request("text", true);
    req["stream"] = json!(true);
    let r = pool.infer_with(&req, &events);
    assert_eq!(r["choices"][0]["finish_reason"], "cancelled", "{r}");
    assert_eq!(reply(&pool.infer(&request("required", true))), reply(&pool.infer(&request("required", false))));
}

/// A draft model of the same vocabulary (`draft-simple`): the same fixture drafts what the model
/// says (nearly every draft accepted), another one (other weights) drafts what it would say; either
/// way the reply is the one without speculation, solo, streamed and in a pool.
#[test]
fn a_draft_model_drafts_and_the_reply_is_the_one_without_speculation() {
    let path = corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false);
    let mut other = FixtureOptions::new("qwen2");
    other.seed = 7;
    let other = fixture_with("draft-qwen2-seed7", &other);
    for (draft, same) in [(&path, true), (&other, false)] {
        let mut c = json!({"model_path": path, "n_ctx": 2048, "n_threads": 1,
            "speculative": {"draft_model_path": draft, "draft_max": 6}});
        let e = CEngine::open(&c).unwrap_or_else(|f| panic!("{f}"));
        for kind in ["required", "text"] {
            let (on, off) = (e.infer(&request(kind, true)), e.infer(&request(kind, false)));
            assert_eq!(reply(&on), reply(&off), "{kind}, draft {draft:?}: with\n{on}\nwithout\n{off}");
            let (n, a) = drafted(&on);
            assert!(n > 0 && a <= n, "{kind}: the draft model drafted: {on}");
            if same {
                assert!(a * 10 >= n * 9, "{kind}: the model itself drafts what it says: {a} of {n} accepted");
            }
        }
        assert_same_deltas(&e, "draft model");
        // The pool verifies every draft whole: its four requests run at once with none waiting,
        // where the cost model drafts only rows that cost nothing (a timing, not this test's
        // subject: the draft model's drafts in a pool).
        c["n_parallel"] = json!(4);
        c["speculative"]["adaptive"] = json!(false);
        let pool = CPool::open(&c).unwrap_or_else(|f| panic!("{f}"));
        let kinds = ["required", "text", "required", "text"];
        let solo: Vec<Value> = kinds.iter().map(|k| reply(&e.infer(&request(k, false)))).collect();
        let together: Vec<Value> = std::thread::scope(|s| {
            let handles: Vec<_> = kinds.iter().map(|k| s.spawn(|| pool.infer(&request(k, true)))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for ((k, want), got) in kinds.iter().zip(&solo).zip(&together) {
            assert_eq!(&reply(got), want, "pool {k}: {got}");
            assert!(drafted(got).0 > 0, "pool {k}: the draft model drafted: {got}");
        }
        // The drafter is the pool's (its scheduler's): its asks and the runs that drafted them,
        // lanes that asked at once sharing a run (and its draft decodes).
        let spec = &pool.stats()["speculative"];
        let (asks, runs) = (spec["draft_asks"].as_u64().unwrap(), spec["draft_runs"].as_u64().unwrap());
        assert!(asks > 0 && runs > 0 && runs <= asks, "{spec}");
        eprintln!("draft {draft:?}: {asks} asks in {runs} runs");
    }
}

/// A draft model of another vocabulary is refused at create, with llama.cpp's check and words.
#[test]
fn a_draft_model_of_another_vocabulary_is_refused_at_create() {
    let path = corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false);
    let spm = fixture_with("draft-llama-spm", &FixtureOptions::new("llama-spm"));
    let f = CEngine::open(&json!({"model_path": path, "n_ctx": 1024, "n_threads": 1,
        "speculative": {"type": "draft-simple", "draft_model_path": spm}}))
    .err()
    .expect("a draft model of another vocabulary was accepted");
    assert_eq!(f["code"], "invalid_argument", "{f}");
    let m = f["message"].as_str().unwrap();
    assert!(m.contains("draft model") && m.contains("vocab"), "{f}");
    let missing = CEngine::open(&json!({"model_path": path, "n_ctx": 1024, "n_threads": 1,
        "speculative": {"draft_model_path": "/no/such/draft.gguf"}}))
    .err()
    .expect("a missing draft model was accepted");
    assert_eq!(missing["code"], "io_error", "{missing}");
    assert!(missing["message"].as_str().unwrap().contains("draft_model_path"), "{missing}");
}
