//! Speculative decoding (issue 32), measured in one run on real weights (SmolLM2-135M with the
//! Qwen2.5 tool template: scripts/smollm2.sh), every figure side by side:
//!  (a) a strict copy-heavy tool call (`edit_file` told to replace a word in a ~130-word
//!      passage): decode tokens/s with the default speculation / `"speculative": false`
//!      (goal ≥ 2.0), and whether the calls are identical;
//!  (b) free text with nothing to copy at T=0.8 (seeded): the same ratio (goal ≥ 0.97);
//!  (c) "repeat this passage", no tools, T=0: llb with its default against llama-server
//!      (`LLB_LLAMA_SERVER`, the pinned tree) with each of `--spec-type ngram-simple`,
//!      `ngram-map-k`, `ngram-mod` (goal ≥ 1.0× the best), and llama-server without;
//!  (d) a pool of 8 parallel conversations, half copying and half free text: aggregate tokens/s
//!      with speculation / without (goal ≥ 0.97, issue 41);
//!  (e) the same pool given 16 such conversations at once (`LLB_BENCH_QUEUED`), 8 of them
//!      waiting for a lane at first: the same ratio (goal ≥ 0.97).
//!      The pools also print each repetition's own ratio's median (runs alternate; a machine that
//!      drifts moves both runs of a pair alike).
//!      `LLB_BENCH_STORY_TOKENS` sets the pools' stories' length (default 200: the copies end
//!      first; 40: the copies outlive the stories).
//!
//!   scripts/bench-speculative.sh      LLB_BENCH_THREADS=N (default 2), LLB_BENCH_REPS=N (3),
//!                                     LLB_BENCH_SPECULATIVE='{"type":..}' (default: llb's)
//!
//! `LLB_BENCH_EMULATE=h200`: every step is charged what run C's H200 measured for SmolLM2
//! (src/emulate.rs; docs/gpu.md, "Emulated"): the cost model decides at a GPU's prices, and every
//! ratio is of the emulated time (wall time with each step's CPU time replaced by the profile's).

#[path = "peer/llama_server.rs"]
mod llama_server;

use llama_server::LlamaServer;
use llb::engine::{Engine, Pool};
use llb::request::EngineConfig;
use serde_json::{json, Value};
use std::path::PathBuf;

const PASSAGE: &str = "The old lighthouse stood on the northern cliff for more than two hundred years. \
Every evening the keeper climbed the narrow stairs, trimmed the wick and polished the great lens until it shone. \
Ships that passed the rocks at night watched for the lighthouse and turned away from danger when they saw its beam. \
In winter the storms threw salt water against the windows of the lighthouse, and the keeper wrote each storm in his log. \
When the keeper grew old, his daughter learned to tend the light, and she kept the lighthouse burning through the longest nights. \
Today the lighthouse is a museum, but on clear evenings the lamp is still lit, and people walk up the cliff to watch it turn.";

fn threads() -> i32 {
    std::env::var("LLB_BENCH_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

fn reps() -> usize {
    std::env::var("LLB_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(3)
}

fn model() -> PathBuf {
    PathBuf::from(std::env::var("LLB_BENCH_MODEL").expect("LLB_BENCH_MODEL: SmolLM2 with a tool template"))
}

/// The engine's `speculative` config: llb's default, or `LLB_BENCH_SPECULATIVE` (a JSON object) to
/// compare others.
fn speculative() -> Value {
    std::env::var("LLB_BENCH_SPECULATIVE").map(|v| serde_json::from_str(&v).expect("LLB_BENCH_SPECULATIVE: JSON")).unwrap_or(json!({}))
}

fn config(extra: Value) -> EngineConfig {
    let mut c = json!({"model_path": model(), "n_ctx": 4096, "n_threads": threads(), "adaptive_threads": false,
        "speculative": speculative()});
    c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::from_value(c).unwrap()
}

fn edit_request() -> Value {
    json!({
        "messages": [{"role": "user", "content": format!("{PASSAGE}\n\nReplace 'lighthouse' with 'beacon' in the whole text above.")}],
        "tools": [{"type": "function", "function": {"name": "edit_file", "description": "Replace text in a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old_text": {"type": "string"},
                "new_text": {"type": "string"}}, "required": ["path", "old_text", "new_text"], "additionalProperties": false}}}],
        "tool_choice": "required", "temperature": 0, "max_tokens": 400
    })
}

fn repeat_request() -> Value {
    json!({"messages": [{"role": "user", "content": format!("Repeat the following text exactly.\n\n{PASSAGE}")}],
        "temperature": 0, "max_tokens": 300})
}

fn story_request(seed: u64) -> Value {
    json!({"messages": [{"role": "user", "content": "Write a short story about a fox who learns to play the violin."}],
        "temperature": 0.8, "seed": seed, "max_tokens": 200})
}

/// A story of the pools (d) and (e): `LLB_BENCH_STORY_TOKENS` tokens at most (default 200, longer
/// than the copies, ~131 tokens: the stories end last).
fn pool_story(seed: u64) -> Value {
    let mut r = story_request(seed);
    if let Some(n) = std::env::var("LLB_BENCH_STORY_TOKENS").ok().and_then(|v| v.parse::<u64>().ok()) {
        r["max_tokens"] = json!(n);
    }
    r
}

fn with_spec(req: &Value, on: bool) -> String {
    let mut r = req.clone();
    r["speculative"] = json!(on);
    r.to_string()
}

/// Decode tokens/s of one reply (llama-server's `predicted_per_second`, from llb's timings).
fn tps(r: &Value) -> f64 {
    r["timings"]["predicted_per_second"].as_f64().unwrap_or_else(|| panic!("no timings: {r}"))
}

/// Whether `LLB_BENCH_EMULATE` names an emulated GPU's profile (else: this machine's costs).
fn emulated() -> bool {
    llb::emulate::Profile::from_bench_env().is_some()
}

/// One reply's tokens/s: its decode's (`tps`), or under emulation its tokens over its emulated
/// time (the prompt's included, the same with speculation and without).
fn reply_tps(e: &Engine, req: &str) -> (Value, f64) {
    let (r, secs) = llb::emulate::clocked(|| e.infer(req).unwrap());
    let rate = if emulated() { r["usage"]["completion_tokens"].as_f64().unwrap_or(0.0) / secs } else { tps(&r) };
    (r, rate)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median tokens/s of `req` with and without speculation, run alternately, and whether
/// every reply was the same message; the last reply with speculation.
fn on_off(e: &Engine, req: &Value) -> (f64, f64, bool, Value) {
    let (mut on, mut off, mut same, mut last) = (Vec::new(), Vec::new(), true, Value::Null);
    for _ in 0..reps() {
        let (a, a_tps) = reply_tps(e, &with_spec(req, true));
        let (b, b_tps) = reply_tps(e, &with_spec(req, false));
        same &= message(&a) == message(&b);
        on.push(a_tps);
        off.push(b_tps);
        last = a;
    }
    (median(on), median(off), same, last)
}

/// The reply's message without its call ids (random per reply).
fn message(r: &Value) -> Value {
    let mut m = r["choices"][0]["message"].clone();
    if let Some(calls) = m["tool_calls"].as_array_mut() {
        calls.iter_mut().for_each(|c| c["id"] = Value::Null);
    }
    m
}

fn drafts(r: &Value) -> String {
    let t = &r["timings"];
    format!(
        "{} tokens, {} drafted, {} accepted; {:.0} of {:.0} ms in llama_decode",
        t["predicted_n"], t["draft_n"], t["draft_accepted_n"], t["decode_ms"].as_f64().unwrap_or(0.0), t["predicted_ms"].as_f64().unwrap_or(0.0)
    )
}

/// (a) and (b) on one engine with the default speculation.
fn single(e: &Engine) {
    let (on, off, same, last) = on_off(e, &edit_request());
    println!("(a) strict copy-heavy call: {on:.1} / {off:.1} tokens/s = {:.2}x (goal >= 2.0), identical calls: {same}; {}", on / off, drafts(&last));
    let (on, off, same, last) = on_off(e, &story_request(7));
    println!("(b) free text T=0.8: {on:.1} / {off:.1} tokens/s = {:.3}x (goal >= 0.97), identical: {same}; {}", on / off, drafts(&last));
    if emulated() {
        let m = &e.stats()["cost_model"];
        println!(
            "    the engine's cost model: first step of a shape over its third {}, {} rows padded; repeated steps' ms by tokens {}",
            m["shape_first_over_third"], m["rows_padded"], m["batch_ms_shape_repeated"]
        );
    }
}

/// (c) "repeat this passage": llb against llama-server's n-gram types.
fn repeat(e: &Engine, server: Option<&str>) {
    let req = repeat_request();
    let (llb, off, same, last) = on_off(e, &req);
    println!("(c) repeat the passage: llb {llb:.1} tokens/s with speculation, {off:.1} without (identical: {same}); {}", drafts(&last));
    let Some(bin) = server else {
        println!("    llama-server: LLB_LLAMA_SERVER not set, skipped");
        return;
    };
    let mut best = 0f64;
    for spec in [None, Some("ngram-simple"), Some("ngram-map-k"), Some("ngram-mod")] {
        let mut args: Vec<String> = ["-m", &model().to_string_lossy(), "-c", "4096", "-t", &threads().to_string(), "-np", "1", "--jinja"]
            .map(String::from)
            .to_vec();
        if let Some(t) = spec {
            args.extend(["--spec-type".to_string(), t.to_string()]);
        }
        let s = LlamaServer::start(bin, &args);
        let runs: Vec<f64> = (0..reps()).map(|_| tps(&s.chat(&req))).collect();
        let t = median(runs);
        println!("    llama-server {}: {t:.1} tokens/s", spec.unwrap_or("(no speculation)"));
        if spec.is_some() {
            best = best.max(t);
        }
    }
    println!("    llb / best llama-server n-gram type: {:.3}x (goal >= 1.0)", llb / best);
}

/// (d) `n` conversations at once on a pool of 8, half copying, half free text: tokens/s overall.
fn pool(n: u64) {
    // Tokens per second, and with speculation what the pool's drafts did: drafted, accepted,
    // cut by the cost model, and the step costs it measured.
    let run = |on: bool| {
        let p = Pool::create(config(json!({"n_parallel": 8, "n_ctx": 16384, "max_queue": n}))).unwrap();
        let reqs: Vec<String> = (0..n)
            .map(|i| if i % 2 == 0 { with_spec(&repeat_request(), on) } else { with_spec(&pool_story(i), on) })
            .collect();
        let (replies, secs) = llb::emulate::clocked(|| -> Vec<Value> {
            std::thread::scope(|s| {
                let handles: Vec<_> = reqs.iter().map(|r| s.spawn(|| p.infer(r, &|_| true).unwrap())).collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            })
        });
        let sum = |at: &str| replies.iter().filter_map(|r| r.pointer(at)?.as_u64()).sum::<u64>();
        let tokens = sum("/usage/completion_tokens");
        let drafts = (sum("/timings/draft_n"), sum("/timings/draft_accepted_n"));
        (tokens as f64 / secs, drafts, p.stats()["cost_model"].clone())
    };
    let (mut on, mut off, mut last, mut off_model) = (Vec::new(), Vec::new(), None, Value::Null);
    // Each repetition runs the two in the other order, so that neither is always first on a
    // machine whose speed drifts.
    for i in 0..reps() {
        let mut without = || {
            let (tps, _, model) = run(false);
            off.push(tps);
            off_model = model;
        };
        if i % 2 == 1 {
            without();
        }
        let (tps, drafts, model) = run(true);
        on.push(tps);
        last = Some((drafts, model));
        if i % 2 == 0 {
            without();
        }
    }
    // Each repetition's own ratio: a machine that drifts moves both runs of a pair alike.
    let pairs: Vec<f64> = on.iter().zip(&off).map(|(a, b)| a / b).collect();
    let ahead = pairs.iter().filter(|&&r| r >= 1.0).count();
    let runs = format!(
        "pairs' median {:.3}x, on ahead in {ahead} of {}; runs with {on:.0?}, without {off:.0?}",
        median(pairs.clone()),
        pairs.len()
    );
    let (on, off) = (median(on), median(off));
    let (row, waiting) = if n > 8 { ('e', format!(", {} waiting at first", n - 8)) } else { ('d', String::new()) };
    println!("({row}) pool of 8, {n} requests{waiting}, half copying: {on:.1} / {off:.1} tokens/s overall = {:.2}x (goal >= 0.97); {runs}", on / off);
    if let Some(((drafted, accepted), m)) = last {
        println!(
            "    last run with speculation: {drafted} drafted, {accepted} accepted, {} cut by the cost model, {} decodes (without: {}); batch ms by rows {}",
            m["draft_tokens_cut"], m["decodes"], off_model["decodes"], m["batch_ms"]
        );
        if emulated() {
            println!("    steps of a repeated shape, ms by rows {}", m["batch_ms_shape_repeated"]);
        }
    }
}

fn main() {
    println!("speculative decoding, {} threads, {} reps (medians), {}", threads(), reps(), model().display());
    if emulated() {
        llb::emulate::emulate(llb::emulate::Profile::from_bench_env());
        println!("steps charged at run C's H200 costs (LLB_BENCH_EMULATE=h200): emulated time, not this machine's");
    }
    let e = Engine::create(config(json!({})), None).unwrap();
    let server = std::env::var("LLB_LLAMA_SERVER").ok();
    let only = std::env::var("LLB_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only.contains('a') || only.contains('b') {
        single(&e);
    }
    if only.is_empty() || only.contains('c') {
        repeat(&e, server.as_deref());
    }
    drop(e);
    if only.is_empty() || only.contains('d') {
        pool(8);
    }
    if only.is_empty() || only.contains('e') {
        pool(std::env::var("LLB_BENCH_QUEUED").ok().and_then(|v| v.parse().ok()).unwrap_or(16));
    }
}
