//! The request fields OpenAI's SDKs send, through the C ABI: penalties, logit_bias, logprobs
//! (plain and streamed), reasoning_effort, fields accepted and ignored, and the clear errors for
//! what cannot work (n > 1, audio, image and audio content parts).

mod common;

use common::cabi::{assert_stream_matches, CEngine};
use common::*;
use serde_json::{json, Value};

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn qwen() -> CEngine {
    CEngine::open_model(&corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false))
}

fn content(r: &Value) -> String {
    r["choices"][0]["message"]["content"].as_str().unwrap_or_else(|| panic!("no content: {r}")).to_string()
}

/// The generated tokens' texts, from `logprobs.content`.
fn tokens(r: &Value) -> Vec<String> {
    let c = r["choices"][0]["logprobs"]["content"].as_array().unwrap_or_else(|| panic!("no logprobs: {r}"));
    c.iter().map(|e| e["token"].as_str().unwrap().to_string()).collect()
}

fn assert_invalid(r: &Value, names: &str) {
    assert_eq!(r["code"], "invalid_argument", "expected invalid_argument naming `{names}`: {r}");
    assert!(r["message"].as_str().unwrap().contains(names), "the message names `{names}`: {r}");
}

#[test]
fn frequency_penalty_breaks_a_repetitive_greedy_reply() {
    let e = qwen();
    // Greedy, the fixture repeats "\n" with near certainty (p > 1 - 1e-8): a penalty that grows
    // with the count breaks that.
    let base = json!({"messages": user("Count."), "max_tokens": 48, "temperature": 0, "logprobs": true});
    let toks = tokens(&e.infer(&base));
    assert!(distinct(&toks) < toks.len(), "the reply repeats tokens (what penalties act on): {toks:?}");
    let mut req = base.clone();
    req["frequency_penalty"] = json!(2.0);
    let r = e.infer(&req);
    assert_ne!(tokens(&r), toks, "frequency_penalty 2 changes the reply: {r}");
    assert_eq!(tokens(&e.infer(&req)), tokens(&r), "still deterministic");
    assert!(distinct(&tokens(&r)) > distinct(&toks), "more varied: {:?} vs {toks:?}", tokens(&r));
    req["frequency_penalty"] = json!(0);
    assert_eq!(tokens(&e.infer(&req)), toks, "a zero penalty is no penalty");
}

/// Presence subtracts a constant from every token that appeared: measured against the margin
/// by which the repeated token wins, narrowed to 1 with a logit_bias.
#[test]
fn presence_penalty_lowers_a_token_once_it_appeared() {
    let e = qwen();
    let base =
        json!({"messages": user("Count."), "max_tokens": 2, "temperature": 0, "logprobs": true, "top_logprobs": 2});
    let r = e.infer(&base);
    let lp = &r["choices"][0]["logprobs"]["content"];
    assert_eq!(lp[0]["token"], lp[1]["token"], "greedy repeats its first token: {r}");
    let top = |i: usize, k: usize| lp[i]["top_logprobs"][k]["logprob"].as_f64().unwrap();
    let (margin0, margin1) = (top(0, 0) - top(0, 1), top(1, 0) - top(1, 1));
    let bias = -(margin1 - 1.0); // the token still wins step 1, by 1
    assert!(margin0 + bias > 0.5, "and step 0: {margin0} {margin1}");
    let first = lp[0]["token"].as_str().unwrap().to_string();
    let ids = token_ids_of(&lp[0]);
    let mut req = base.clone();
    req["logit_bias"] = Value::Object(ids.iter().map(|t| (t.to_string(), json!(bias))).collect());
    assert_eq!(tokens(&e.infer(&req)), [first.clone(), first.clone()], "biased, it still wins both steps");
    req["presence_penalty"] = json!(0.5);
    assert_eq!(tokens(&e.infer(&req)), [first.clone(), first.clone()], "a penalty below the margin changes nothing");
    req["presence_penalty"] = json!(2.0);
    let t = tokens(&e.infer(&req));
    assert_eq!(t[0], first, "nothing to penalize at the first step");
    assert_ne!(t[1], first, "2 > the margin of 1: the token loses once it appeared");
}

fn distinct(toks: &[String]) -> usize {
    toks.iter().collect::<std::collections::HashSet<_>>().len()
}

#[test]
fn logit_bias_bans_and_forces_tokens() {
    let e = qwen();
    let base = json!({"messages": user("Say something."), "max_tokens": 16, "temperature": 0, "logprobs": true, "top_logprobs": 2});
    let plain = e.infer(&base);
    let lp = &plain["choices"][0]["logprobs"]["content"];
    let first = &lp[0]["top_logprobs"][0];
    let second = &lp[0]["top_logprobs"][1];
    assert_eq!(first["token"], lp[0]["token"], "greedy picks the most likely token: {plain}");
    let banned = token_ids_of(first);
    let bias: serde_json::Map<String, Value> = banned.iter().map(|t| (t.to_string(), json!(-100))).collect();
    // -100 bans: the greedy first token never appears, greedy or sampled.
    for (temp, seed) in [(0.0, 0), (1.0, 1), (1.0, 2)] {
        let mut req = base.clone();
        req["temperature"] = json!(temp);
        req["seed"] = json!(seed);
        req["logit_bias"] = Value::Object(bias.clone());
        let r = e.infer(&req);
        let toks = tokens(&r);
        assert!(!toks.contains(&first["token"].as_str().unwrap().to_string()), "banned {banned:?} appears: {toks:?}");
        if temp == 0.0 {
            assert_eq!(toks[0], second["token"].as_str().unwrap(), "the runner-up takes its place: {r}");
        }
    }
    // +100 forces a token the model would not pick.
    let (forced, piece) = token_of(" zebra");
    assert_ne!(tokens(&plain)[0], piece, "the model would not pick it first");
    let mut req = base.clone();
    req["logit_bias"] = json!({forced.to_string(): 100});
    req["temperature"] = json!(0.9);
    req["seed"] = json!(4);
    let r = e.infer(&req);
    let toks = tokens(&r);
    assert_eq!(toks.len(), 16, "{r}");
    assert!(toks.iter().all(|t| *t == piece), "every token is the forced one, {piece:?}: {toks:?}");
    assert_eq!(content(&r).trim(), piece.repeat(16).trim());
}

/// The ids of the qwen2 tokens whose bytes are a logprobs entry's `bytes`.
fn token_ids_of(entry: &Value) -> Vec<i32> {
    let bytes: Vec<u8> = entry["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
    let ids = tokens_where(&corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false), |p| p == bytes);
    assert!(!ids.is_empty(), "{entry}");
    ids
}

/// The first token of `text` in the qwen2 vocabulary: (id, its text).
fn token_of(text: &str) -> (i32, String) {
    let vocab = llb::tokens::Vocab::new(llb::model::acquire(&corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false)).unwrap());
    let ids = vocab.tokenize_literal(text).unwrap();
    let piece = vocab.piece(ids[0], false);
    (ids[0], String::from_utf8(piece).unwrap())
}

#[test]
fn logprobs_have_the_openai_shape_and_sane_values() {
    let e = qwen();
    let r = e.infer(&json!({"messages": user("hi"), "max_tokens": 24, "seed": 3, "temperature": 1.0, "logprobs": true, "top_logprobs": 5}));
    let lp = &r["choices"][0]["logprobs"];
    assert!(lp["refusal"].is_null(), "{lp}");
    let entries = lp["content"].as_array().unwrap();
    let n = r["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    let eog = (r["choices"][0]["finish_reason"] == "stop") as usize;
    assert_eq!(entries.len(), n - eog, "one entry per generated token but the end of turn: {r}");
    let mut text = Vec::new();
    for e in entries {
        let logprob = e["logprob"].as_f64().unwrap();
        assert!(logprob <= 0.0, "{e}");
        let bytes: Vec<u8> = e["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
        assert_eq!(String::from_utf8_lossy(&bytes), e["token"].as_str().unwrap(), "{e}");
        text.extend(bytes);
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 5, "{e}");
        let tl: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(tl.windows(2).all(|w| w[0] >= w[1]), "sorted, most likely first: {e}");
        assert!(tl.iter().all(|&l| l <= 0.0), "{e}");
        let mass: f64 = tl.iter().map(|l| l.exp()).sum();
        assert!(mass <= 1.0 + 1e-4, "the top 5 hold at most all the mass: {mass}");
        assert!(logprob <= tl[0] + 1e-6, "nothing beats the most likely token: {e}");
        if let Some(t) = top.iter().find(|t| t["token"] == e["token"]) {
            assert!((t["logprob"].as_f64().unwrap() - logprob).abs() < 1e-5, "one token, one logprob: {e}");
        } else {
            assert!(logprob <= tl[4] + 1e-6, "a token outside the top 5 is less likely than all of them: {e}");
        }
        for t in top {
            assert!(t["bytes"].is_array() && t["token"].is_string(), "{t}");
        }
    }
    assert_eq!(String::from_utf8_lossy(&text).trim(), content(&r).trim(), "the entries spell the reply");
    // Greedy: the chosen token is the most likely one.
    let g = e.infer(
        &json!({"messages": user("hi"), "max_tokens": 8, "temperature": 0, "logprobs": true, "top_logprobs": 1}),
    );
    for entry in g["choices"][0]["logprobs"]["content"].as_array().unwrap() {
        assert_eq!(entry["token"], entry["top_logprobs"][0]["token"], "{entry}");
    }
    // No top_logprobs: empty lists. No logprobs: null.
    let r = e.infer(&json!({"messages": user("hi"), "max_tokens": 4, "logprobs": true}));
    assert_eq!(r["choices"][0]["logprobs"]["content"][0]["top_logprobs"], json!([]), "{r}");
    let r = e.infer(&json!({"messages": user("hi"), "max_tokens": 4, "logprobs": false}));
    assert!(r["choices"][0]["logprobs"].is_null(), "{r}");
}

#[test]
fn streamed_logprobs_add_up_to_the_completions() {
    let e = qwen();
    let tools = llb::fixture::sample_tools();
    for (label, req) in [
        ("content", json!({"messages": user("hi"), "max_tokens": 32, "seed": 5, "temperature": 1.0})),
        (
            "required",
            json!({"messages": user("Weather?"), "tools": tools, "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 160, "seed": 3}),
        ),
    ] {
        e.events.clear();
        let mut req = req;
        req["stream"] = json!(true);
        req["logprobs"] = json!(true);
        req["top_logprobs"] = json!(3);
        let r = e.infer(&req);
        let chunks = e.events.chunks();
        assert_stream_matches(label, &chunks, &r);
        assert!(chunks[0]["choices"][0]["logprobs"].is_null(), "{label}: the role chunk carries none");
        let streamed: Vec<Value> = chunks
            .iter()
            .flat_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned().unwrap_or_default())
            .collect();
        let all = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
        assert!(!all.is_empty(), "{label}: {r}");
        assert_eq!(&streamed, all, "{label}: the chunks carry every entry once, in order");
        assert!(
            chunks.iter().filter(|c| c["choices"][0]["logprobs"]["content"].is_array()).count() > 1,
            "{label}: entries arrive as the reply streams"
        );
    }
}

#[test]
fn fields_without_local_meaning_are_accepted_and_ignored() {
    let e = qwen();
    let base = json!({"messages": user("hi"), "max_tokens": 12, "temperature": 0});
    let plain = e.infer(&base);
    let mut req = base.clone();
    for (k, v) in [
        ("store", json!(true)),
        ("metadata", json!({"team": "a"})),
        ("service_tier", json!("auto")),
        ("prompt_cache_key", json!("conv-1")),
        ("safety_identifier", json!("user-hash")),
        ("user", json!("u1")),
        ("model", json!("gpt-4o")),
        ("modalities", json!(["text"])),
        ("n", json!(1)),
        ("audio", Value::Null),
    ] {
        req[k] = v;
    }
    let r = e.infer(&req);
    assert_eq!(r["object"], "chat.completion", "{r}");
    assert_eq!(r["choices"][0]["message"], plain["choices"][0]["message"], "ignored fields change nothing");
}

#[test]
fn what_cannot_work_is_a_clear_error_naming_the_field_or_part() {
    let e = qwen();
    let img = json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}});
    let audio = json!({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}});
    let text = json!({"type": "text", "text": "what is this?"});
    let cases = [
        (json!({"n": 2}), "`n`"),
        (json!({"modalities": ["text", "audio"]}), "modalities[1]"),
        (json!({"audio": {"voice": "alloy", "format": "wav"}}), "`audio`"),
        (json!({"messages": [{"role": "user", "content": [text, img]}]}), "messages[0].content[1]"),
        (
            json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [audio]}]}),
            "messages[1].content[0]",
        ),
        (json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}), "messages[0].content[0].text"),
        (json!({"logit_bias": {"abc": 1}}), "logit_bias.abc"),
        (json!({"logit_bias": {"5": 101}}), "logit_bias.5"),
        (json!({"logit_bias": {"999999999": 5}}), "logit_bias.999999999"),
        (json!({"frequency_penalty": 2.5}), "frequency_penalty"),
        (json!({"presence_penalty": -3}), "presence_penalty"),
        (json!({"logprobs": true, "top_logprobs": 21}), "top_logprobs"),
        (json!({"top_logprobs": 2}), "top_logprobs"),
        (json!({"reasoning_effort": "extreme"}), "reasoning_effort"),
        (json!({"frobnicate": 1}), "frobnicate"),
    ];
    for (extra, names) in cases {
        let mut req = json!({"messages": user("hi"), "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let r = e.infer(&req);
        assert_invalid(&r, names);
    }
    let r = e
        .infer(&json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}));
    assert!(r["message"].as_str().unwrap().contains("image_url"), "the message names the part's type: {r}");
    // The engine works afterwards.
    assert_eq!(e.infer(&json!({"messages": user("hi"), "max_tokens": 2}))["object"], "chat.completion");
}

#[test]
fn reasoning_effort_switches_the_templates_thinking() {
    // Qwen3's template closes an empty think block in the prompt when enable_thinking is false.
    let e = CEngine::open_model(&corpus_fixture("Qwen-Qwen3-0.6B", false));
    let prompt_tokens = |extra: Value| {
        let mut req = json!({"messages": user("hi"), "max_tokens": 1});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let r = e.infer(&req);
        r["usage"]["prompt_tokens"].as_u64().unwrap_or_else(|| panic!("{r}"))
    };
    let on = prompt_tokens(json!({}));
    let off = prompt_tokens(json!({"chat_template_kwargs": {"enable_thinking": false}}));
    assert!(off > on, "the template has a thinking switch: {off} vs {on}");
    for (effort, want) in [("none", off), ("minimal", off), ("low", on), ("medium", on), ("high", on)] {
        assert_eq!(prompt_tokens(json!({"reasoning_effort": effort})), want, "reasoning_effort {effort}");
    }
    // The request's own chat_template_kwargs win.
    let r = prompt_tokens(json!({"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": false}}));
    assert_eq!(r, off);
    // A template without the switch still serves the request.
    let q = qwen();
    let r = q.infer(&json!({"messages": user("hi"), "max_tokens": 2, "reasoning_effort": "low"}));
    assert_eq!(r["object"], "chat.completion", "{r}");
}
