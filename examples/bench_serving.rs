//! Serving benchmark (issue #10), one run, ratios printed side by side: N conversations at once,
//! each the same system prompt and 6 tools plus its own user turn (`tool_choice` auto,
//! `max_tokens` 96, temperature 0, streamed), on
//!  - an llb pool (`n_parallel` N, default threads: the process budget),
//!  - llama-server `--parallel N` built from the pinned tree (scripts/llama-server.sh), same GGUF,
//!    same threads,
//!  - N independent llb engines with default settings (the shared thread budget at work).
//!
//! Cold (a fresh pool / server) then warm (the same requests again): wall time, aggregate output
//! tokens/s, mean and p95 time to first token, peak RSS. Every configuration runs in its own
//! process (this binary re-run with `--child`), so RSS and "cold" mean what they say.
//!
//!   scripts/bench-serving.sh        # fetches the models, builds llama-server, runs this
//!   LLB_BENCH_MODEL=m.gguf LLB_LLAMA_SERVER=path cargo run --release --example bench_serving -- [N...]

use llb::engine::{Engine, Pool};
use llb::request::EngineConfig;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MAX_TOKENS: u32 = 96;
const USERS: [&str; 8] = [
    "What's the weather in Paris tomorrow?",
    "Book a table for two at an Italian place in Lyon tonight at 8.",
    "Convert 250 US dollars to euros.",
    "Remind me to call my mother at 6 pm.",
    "How long does it take to drive from Berlin to Munich?",
    "Find me a flight from Madrid to Rome next Friday.",
    "Translate 'good morning' into Japanese.",
    "What time is it in Tokyo right now?",
];

fn tools() -> Value {
    let f = |name: &str, desc: &str, props: Value, req: &[&str]| {
        json!({"type":"function","function":{"name":name,"description":desc,
            "parameters":{"type":"object","properties":props,"required":req}}})
    };
    json!([
        f(
            "get_weather",
            "Get the current weather or the forecast for a city. Use for any question about \
           temperature, rain, wind or sunshine.",
            json!({"city":{"type":"string","description":"City name"},
           "date":{"type":"string","description":"ISO date, default today"},
           "unit":{"type":"string","enum":["celsius","fahrenheit"]}}),
            &["city"]
        ),
        f(
            "book_restaurant",
            "Reserve a table at a restaurant.",
            json!({"city":{"type":"string"},
           "cuisine":{"type":"string"},"party_size":{"type":"integer","minimum":1,"maximum":20},
           "time":{"type":"string","description":"HH:MM, 24h"}}),
            &["city", "party_size", "time"]
        ),
        f(
            "convert_currency",
            "Convert an amount between currencies at today's rate.",
            json!({"amount":{"type":"number"},"from":{"type":"string","description":"ISO 4217 code"},
           "to":{"type":"string","description":"ISO 4217 code"}}),
            &["amount", "from", "to"]
        ),
        f(
            "set_reminder",
            "Create a reminder that notifies the user at a given time.",
            json!({"text":{"type":"string"},"time":{"type":"string","description":"ISO date-time"}}),
            &["text", "time"]
        ),
        f(
            "get_route",
            "Driving, walking or transit route between two places with duration.",
            json!({"from":{"type":"string"},"to":{"type":"string"},
           "mode":{"type":"string","enum":["driving","walking","transit"]}}),
            &["from", "to"]
        ),
        f(
            "search_flights",
            "Search flights between two airports or cities on a date.",
            json!({"from":{"type":"string"},"to":{"type":"string"},"date":{"type":"string"},
           "passengers":{"type":"integer","minimum":1}}),
            &["from", "to", "date"]
        ),
    ])
}

const SYSTEM: &str = "You are a helpful assistant for a travel and lifestyle app. You can call tools to \
    look up weather, book restaurants, convert currencies, set reminders, plan routes and search \
    flights. Call a tool whenever it can answer the user's request; ask for missing details only \
    when a required argument cannot be guessed. Answer briefly and politely, in the user's language. \
    Never invent prices, times or availability: those come from tools. Dates are ISO 8601; times \
    are 24-hour. When the user asks several things, call several tools.";

fn request(i: usize) -> Value {
    json!({"model":"m","messages":[{"role":"system","content":SYSTEM},
        {"role":"user","content":format!("{} (request {i})", USERS[i % USERS.len()])}],
        "tools":tools(),"tool_choice":"auto","max_tokens":MAX_TOKENS,"temperature":0,"stream":true,
        "stream_options":{"include_usage":true}})
}

/// One request's figures: seconds to the first streamed token, output tokens, cached prompt tokens.
#[derive(Clone, Copy, Default)]
struct Sample {
    ttft: f64,
    tokens: u64,
    cached: u64,
}

fn usage_sample(usage: &Value, ttft: f64) -> Sample {
    Sample {
        ttft,
        tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
        cached: usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0),
    }
}

/// A chunk that carries model output (text, reasoning or a tool call).
fn has_output(chunk: &Value) -> bool {
    let d = &chunk["choices"][0]["delta"];
    ["content", "reasoning_content", "tool_calls"].iter().any(|k| !d[k].is_null())
}

/// Runs `n` requests at once with `one` (a thread each); returns wall seconds and samples.
fn batch(n: usize, one: &(dyn Fn(usize) -> Sample + Sync)) -> Value {
    let out = Mutex::new(Vec::new());
    let t = Instant::now();
    std::thread::scope(|s| {
        for i in 0..n {
            let out = &out;
            s.spawn(move || {
                let r = one(i);
                out.lock().unwrap().push(r);
            });
        }
    });
    let wall = t.elapsed().as_secs_f64();
    let samples = out.into_inner().unwrap();
    let mut ttft: Vec<f64> = samples.iter().map(|s| s.ttft).collect();
    ttft.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let tokens: u64 = samples.iter().map(|s| s.tokens).sum();
    json!({"wall": wall, "tok_s": tokens as f64 / wall, "tokens": tokens,
        "ttft_mean": ttft.iter().sum::<f64>() / n as f64,
        "ttft_p95": ttft[((n as f64 * 0.95).ceil() as usize).clamp(1, n) - 1],
        "cached": samples.iter().map(|s| s.cached).sum::<u64>()})
}

fn config(model: &str, n_parallel: Option<u32>) -> EngineConfig {
    EngineConfig { model_path: model.into(), n_parallel, ..Default::default() }
}

/// A streaming infer call: request JSON and an event callback (false stops) in, completion out.
type Infer<'a> = dyn Fn(&str, &dyn Fn(&Value) -> bool) -> Value + 'a;

fn llb_one(infer: &Infer, i: usize) -> Sample {
    let t = Instant::now();
    let first = Mutex::new(None::<f64>);
    let emit = |ev: &Value| {
        if ev["type"] == "chunk" && has_output(&ev["data"]) {
            first.lock().unwrap().get_or_insert(t.elapsed().as_secs_f64());
        }
        true
    };
    let v = infer(&request(i).to_string(), &emit);
    let ttft = first.into_inner().unwrap().unwrap_or(t.elapsed().as_secs_f64());
    usage_sample(&v["usage"], ttft)
}

fn peak_rss_mb(pid: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok());
    kb.unwrap_or(0.0) / 1024.0
}

/// `--child pool|engines N MODEL`: one configuration, cold then warm; prints one JSON line.
fn child(kind: &str, n: usize, model: &str) {
    let result = match kind {
        "pool" => {
            let pool = Pool::create(config(model, Some(n as u32))).unwrap();
            let infer = |r: &str, e: &dyn Fn(&Value) -> bool| pool.infer(r, e).unwrap();
            let one = |i| llb_one(&infer, i);
            json!({"cold": batch(n, &one), "warm": batch(n, &one)})
        }
        "engines" | "engines1" => {
            // engines1: the host divides the cores itself (n_threads 1 each), the reference.
            let threads = (kind == "engines1").then_some(1);
            let cfg = || EngineConfig { n_threads: threads, ..config(model, None) };
            let engines: Vec<Engine> = (0..n).map(|_| Engine::create(cfg(), None).unwrap()).collect();
            let one = |i: usize| {
                let infer = |r: &str, _e: &dyn Fn(&Value) -> bool| engines[i].infer(r).unwrap();
                llb_one(&infer, i)
            };
            json!({"cold": batch(n, &one), "warm": batch(n, &one)})
        }
        _ => panic!("unknown child kind {kind}"),
    };
    let mut r = result;
    r["rss_mb"] = json!(peak_rss_mb("self"));
    println!("{r}");
}

fn run_child(kind: &str, n: usize, model: &str) -> Value {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--child", kind, &n.to_string(), model])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "child {kind} {n} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).unwrap()
}

/// llama-server `--parallel n` on a free port, same model and threads; killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(bin: &str, model: &str, n: usize, threads: usize) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = threads.to_string();
    let child = Command::new(bin)
        .args(["-m", model, "--host", "127.0.0.1", "--port", &port.to_string(), "--jinja", "-np", &n.to_string()])
        .args(["-c", &(4096 * n).to_string(), "-t", &t, "-tb", &t, "-b", "512", "-ub", "512"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start llama-server");
    let url = format!("http://127.0.0.1:{port}");
    let agent = ureq::Agent::new_with_defaults();
    let deadline = Instant::now() + Duration::from_secs(120);
    while agent.get(&format!("{url}/health")).call().is_err() {
        assert!(Instant::now() < deadline, "llama-server did not become healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    Server { child, url }
}

fn server_one(url: &str, i: usize) -> Sample {
    let agent = ureq::Agent::new_with_defaults();
    let t = Instant::now();
    let resp = agent
        .post(&format!("{url}/v1/chat/completions"))
        .header("Content-Type", "application/json")
        .send(request(i).to_string())
        .expect("llama-server request failed");
    let mut ttft = None;
    let mut sample = Sample::default();
    for line in BufReader::new(resp.into_body().into_reader()).lines() {
        let line = line.unwrap();
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data.trim() == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        if ttft.is_none() && has_output(&chunk) {
            ttft = Some(t.elapsed().as_secs_f64());
        }
        if chunk["usage"].is_object() {
            sample = usage_sample(&chunk["usage"], 0.0);
            sample.cached = chunk["timings"]["cache_n"].as_u64().unwrap_or(sample.cached);
        }
    }
    sample.ttft = ttft.unwrap_or(t.elapsed().as_secs_f64());
    sample
}

fn run_server(bin: &str, model: &str, n: usize) -> Value {
    let threads = std::thread::available_parallelism().map(|p| p.get()).unwrap_or(2);
    let server = start_server(bin, model, n, threads);
    let one = |i| server_one(&server.url, i);
    let mut r = json!({"cold": batch(n, &one), "warm": batch(n, &one)});
    r["rss_mb"] = json!(peak_rss_mb(&server.child.id().to_string()));
    r
}

fn row(name: &str, n: usize, phase: &str, r: &Value, peer: &Value) {
    let (a, b) = (&r[phase], &peer[phase]);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "{name:<22} N={n:<2} {phase:<4}  wall {:7.2} s ({:.2}x)  {:6.1} tok/s ({:.2}x)  ttft mean {:6.2} s  p95 {:6.2} s  cached {:6}  rss {:5.0} MB",
        f(a, "wall"),
        f(a, "wall") / f(b, "wall"),
        f(a, "tok_s"),
        f(a, "tok_s") / f(b, "tok_s"),
        f(a, "ttft_mean"),
        f(a, "ttft_p95"),
        a["cached"],
        f(r, "rss_mb"),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        return child(&args[2], args[3].parse().unwrap(), &args[4]);
    }
    let model = std::env::var("LLB_BENCH_MODEL").expect("set LLB_BENCH_MODEL to a tool-capable GGUF");
    let server = std::env::var("LLB_LLAMA_SERVER").expect("set LLB_LLAMA_SERVER (scripts/llama-server.sh prints it)");
    let ns: Vec<usize> = args[1..].iter().map(|a| a.parse().expect("N")).collect();
    let ns = if ns.is_empty() { vec![1, 4, 8, 16] } else { ns };
    let engines_n: usize = std::env::var("LLB_BENCH_ENGINES").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    println!("model {model}\nratios: llb / llama-server, same run (wall: lower is better; tok/s: higher is better)");
    for &n in &ns {
        let peer = run_server(&server, &model, n);
        let pool = run_child("pool", n, &model);
        for phase in ["cold", "warm"] {
            row("llama-server", n, phase, &peer, &peer);
            row("llb pool", n, phase, &pool, &peer);
        }
        if n == engines_n {
            let engines = run_child("engines", n, &model);
            let engines1 = run_child("engines1", n, &model);
            for phase in ["cold", "warm"] {
                row("llb engines (default)", n, phase, &engines, &peer);
                row("llb engines (1 thread)", n, phase, &engines1, &peer);
            }
            let wall = |r: &Value, phase: &str| r[phase]["wall"].as_f64().unwrap_or(f64::NAN);
            println!(
                "default engines / 1-thread engines, N={n}: cold wall {:.2}x, warm wall {:.2}x (goal <= 1.1x)",
                wall(&engines, "cold") / wall(&engines1, "cold"),
                wall(&engines, "warm") / wall(&engines1, "warm")
            );
        }
    }
}
