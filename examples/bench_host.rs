//! llb's host work per token and its first-request cost (issue 31), measured in one run:
//!  (a) host work per generated token — `predicted_ms − decode_ms` over `predicted_n`, everything
//!      llb does that is not `llama_decode` — on a fixture with the qwen2 vocabulary (151,936
//!      tokens) and a tiny body, at T=0 and at T=1 with top_p 0.95 (goals: ≤ 0.05 / ≤ 0.10 ms);
//!  (b) plain decode tokens/s, llb's engine against llama-server (`LLB_LLAMA_SERVER`, from the
//!      pinned tree: scripts/llama-server.sh) on the same fixture with the same threads;
//!  (c) a fresh engine's and a fresh pool's first strict request against their second (goal:
//!      ≤ 20 ms apart): everything but the prompt's evaluation;
//!  (d) response_format json_schema against plain decoding, ms per token at T=1 (goal ≤ 1.10×).
//!
//!   scripts/bench-host.sh          (or: cargo run --release --example bench_host)
//!   LLB_BENCH_THREADS=N            compute threads for both (default 2)
//!   LLB_BENCH_MODEL=m.gguf         another model (a tool template; scripts/bench-gpu.sh's shapes)
//!   LLB_BENCH_NGL=N                layers on the GPU for both (-1: all; default: each one's own)

#[path = "peer/llama_server.rs"]
mod llama_server;

use llama_server::LlamaServer;
use llb::engine::{Engine, Pool};
use llb::fixture::{self, FixtureOptions, Size};
use llb::request::EngineConfig;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

const REPS: usize = 5;
const MAX_TOKENS: u32 = 128;

fn threads() -> i32 {
    std::env::var("LLB_BENCH_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

fn ngl() -> Option<i32> {
    std::env::var("LLB_BENCH_NGL").ok().and_then(|v| v.parse().ok())
}

fn fixture_path() -> PathBuf {
    if let Ok(m) = std::env::var("LLB_BENCH_MODEL") {
        return PathBuf::from(m);
    }
    let dir = std::env::temp_dir().join("llb-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bench-host-qwen2-tiny.gguf");
    if !path.exists() {
        let mut o = FixtureOptions::new("qwen2");
        o.template = Some(fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
        o.size = Size::Tiny;
        fixture::write_fixture(&o, &path).unwrap();
    }
    path
}

fn config(path: &Path) -> EngineConfig {
    EngineConfig {
        model_path: path.to_string_lossy().into_owned(),
        n_ctx: Some(4096),
        n_threads: Some(threads()),
        adaptive_threads: Some(false),
        n_gpu_layers: ngl(),
        ..Default::default()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn plain(temperature: f64, user: &str) -> Value {
    json!({"messages": [{"role": "user", "content": user}], "temperature": temperature, "top_p": 0.95,
        "max_tokens": MAX_TOKENS, "seed": 7})
}

fn strict(user: &str) -> Value {
    json!({"messages": [{"role": "user", "content": user}], "tools": fixture::sample_tools(),
        "tool_choice": "required", "temperature": 0, "max_tokens": 48})
}

fn with_schema(mut req: Value) -> Value {
    req["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "w", "strict": true, "schema": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
        "notes": {"type": "array", "items": {"type": "string"}}}, "required": ["city", "days", "notes"]}}});
    req
}

fn infer(e: &Engine, req: &Value) -> Value {
    e.infer(&req.to_string()).unwrap()
}

/// (a) Host ms per token, decode ms per token and sampling ms per token, medians over REPS
/// requests, and the mean number of tokens.
fn host_work(e: &Engine, temperature: f64) -> (f64, f64, f64, f64) {
    let mut host = Vec::new();
    let mut decode = Vec::new();
    let mut sampling = Vec::new();
    let mut n = 0.0;
    for i in 0..REPS {
        let r = infer(e, &plain(temperature, &format!("Tell me a long story, number {i}.")));
        let t = &r["timings"];
        let tokens = t["predicted_n"].as_f64().unwrap().max(1.0);
        let (predicted, dec) = (t["predicted_ms"].as_f64().unwrap(), t["decode_ms"].as_f64().unwrap());
        host.push((predicted - dec) / tokens);
        decode.push(dec / tokens);
        sampling.push(t["sampling_ms"].as_f64().unwrap() / tokens);
        n += tokens;
    }
    (median(host), median(decode), median(sampling), n / REPS as f64)
}

/// llb's decode tokens/s (median), same requests as the peer's.
fn llb_rate(e: &Engine, temperature: f64) -> f64 {
    let rates = (0..REPS).map(|i| {
        let r = infer(e, &plain(temperature, &format!("Tell me a long story, number {i}.")));
        r["timings"]["predicted_per_second"].as_f64().unwrap()
    });
    median(rates.collect())
}

/// llama-server (the pinned tree's) on `model`, one slot, the benchmark's threads and layers.
fn start_peer(bin: &str, model: &Path) -> LlamaServer {
    let t = threads().to_string();
    let mut args: Vec<String> = ["-m", model.to_str().unwrap(), "-c", "4096", "--jinja", "--parallel", "1", "-t", &t, "-tb", &t]
        .map(String::from)
        .to_vec();
    if let Some(n) = ngl() {
        args.extend(["-ngl".to_string(), if n < 0 { "999".into() } else { n.to_string() }]);
    }
    LlamaServer::start(bin, &args)
}

/// The peer's rates.
struct Server(LlamaServer);

impl Server {
    fn rate(&self, temperature: f64) -> f64 {
        let rates = (0..REPS).map(|i| {
            let body = plain(temperature, &format!("Tell me a long story, number {i}.")).to_string();
            let v = self.0.chat(&serde_json::from_str(&body).unwrap());
            v["timings"]["predicted_per_second"].as_f64().expect("llama-server reported no timings")
        });
        median(rates.collect())
    }
}


/// Everything but the prompt's evaluation, in ms (what a request costs beyond reading it), and of
/// that the part that is not `llama_decode` (llb's own).
fn beyond_prompt(run: impl Fn() -> Value) -> (f64, f64) {
    let t = Instant::now();
    let r = run();
    let wall = t.elapsed().as_secs_f64() * 1e3;
    assert!(r["choices"][0]["message"]["tool_calls"].as_array().is_some_and(|c| !c.is_empty()), "no call: {r}");
    let beyond = wall - r["timings"]["prompt_ms"].as_f64().unwrap();
    (beyond, beyond - r["timings"]["decode_ms"].as_f64().unwrap())
}

/// (c) First and second strict request of a fresh engine, then of a fresh pool (ms).
fn first_requests(path: &Path) -> [((f64, f64), (f64, f64)); 2] {
    let e = Engine::create(config(path), None).unwrap();
    let engine = (beyond_prompt(|| infer(&e, &strict("Weather in Paris?"))), beyond_prompt(|| infer(&e, &strict("Weather in Rome?"))));
    drop(e);
    let mut cfg = config(path);
    cfg.n_parallel = Some(2);
    let p = Pool::create(cfg).unwrap();
    let run = |user: &str| p.infer(&strict(user).to_string(), &|_| true).unwrap();
    let pool = (beyond_prompt(|| run("Weather in Oslo?")), beyond_prompt(|| run("Weather in Lima?")));
    [engine, pool]
}

/// (d) ms per token with response_format json_schema and without, at T=1.
fn schema_ratio(e: &Engine) -> (f64, f64) {
    let per_token = |req: &Value| {
        let r = infer(e, req);
        let t = &r["timings"];
        t["predicted_ms"].as_f64().unwrap() / t["predicted_n"].as_f64().unwrap().max(1.0)
    };
    let mut plain_ms = Vec::new();
    let mut schema_ms = Vec::new();
    for i in 0..REPS {
        let user = format!("Describe the weather of city {i} as JSON.");
        plain_ms.push(per_token(&plain(1.0, &user)));
        schema_ms.push(per_token(&with_schema(plain(1.0, &user))));
    }
    (median(plain_ms), median(schema_ms))
}

fn main() {
    llb::init_backend();
    let path = fixture_path();
    println!("model: {}, {} threads, {MAX_TOKENS} tokens, median of {REPS}", path.display(), threads());
    // (c) first: a fresh process has built nothing for this model yet.
    let [(e1, e2), (p1, p2)] = first_requests(&path);
    let e = Engine::create(config(&path), None).unwrap();
    println!("\n(a) host work per token (predicted_ms - decode_ms) / predicted_n");
    for t in [0.0, 1.0] {
        let (host, decode, sampling, n) = host_work(&e, t);
        let goal = if t == 0.0 { 0.05 } else { 0.10 };
        println!("  T={t}: host {host:.3} ms/token (goal <= {goal}; of it sampling {sampling:.3}), decode {decode:.3} ms/token, {n:.0} tokens");
    }
    println!("\n(b) plain decode, tokens/s (same fixture, {} threads)", threads());
    let peer = std::env::var("LLB_LLAMA_SERVER").ok().map(|bin| Server(start_peer(&bin, &path)));
    for t in [0.0, 1.0] {
        let ours = llb_rate(&e, t);
        match &peer {
            Some(s) => {
                let theirs = s.rate(t);
                println!("  T={t}: llb {ours:.1}, llama-server {theirs:.1} -> llb {:.2}x", ours / theirs);
            }
            None => println!("  T={t}: llb {ours:.1} (set LLB_LLAMA_SERVER for the peer)"),
        }
    }
    println!("\n(c) strict request (required, 1 tool set), everything but prompt_ms, ms (model warmed up at create)");
    for (what, (a, b)) in [("fresh engine", (e1, e2)), ("fresh pool  ", (p1, p2))] {
        println!(
            "  {what}: first {:.1}, second {:.1} -> {:+.1} ms (goal <= 20); without llama_decode {:.1} vs {:.1} -> {:+.1} ms",
            a.0, b.0, a.0 - b.0, a.1, b.1, a.1 - b.1
        );
    }
    let (plain_ms, schema_ms) = schema_ratio(&e);
    println!("\n(d) T=1: plain {plain_ms:.3} ms/token, json_schema {schema_ms:.3} -> {:.2}x (goal <= 1.10)", schema_ms / plain_ms);
}
