//! The prompt cache (issue 33), measured in one run on real weights (SmolLM2-135M with the
//! Qwen2.5 tool template: scripts/smollm2.sh):
//!  (a) one engine alternating two conversations with different ~2,000-token system prompts, six
//!      turns each: prompt tokens re-read on each later turn (goal ≤ 200), with the cache and
//!      without (`ram_bytes` 0);
//!  (b) restart: a ~2,500-token conversation answered by process 1, then sent again by process 2
//!      with the same `dir`: prompt time (goal ≤ 0.10× process 1's), tokens restored (≥ 90%),
//!      same reply;
//!  (c) a pool of 2 parallel slots (n_ctx 8192) serving 8 conversations round-robin, six rounds:
//!      prompt tokens read with the cache against without (goal ≤ 0.2× over the rounds after each
//!      conversation's first);
//!  (d) llama-server (`LLB_LLAMA_SERVER`, the pinned tree) with `--cache-ram` on (c).
//!
//!   scripts/bench-prompt-cache.sh      LLB_BENCH_THREADS=N (default 2)

#[path = "peer/llama_server.rs"]
mod llama_server;

use llama_server::LlamaServer;
use llb::engine::{Engine, Pool};
use llb::request::EngineConfig;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;

fn threads() -> i32 {
    std::env::var("LLB_BENCH_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

fn model() -> PathBuf {
    PathBuf::from(std::env::var("LLB_BENCH_MODEL").expect("LLB_BENCH_MODEL: SmolLM2 with a tool template"))
}

/// A system prompt of about `tokens` tokens on `topic`: sentences from a small vocabulary, so
/// that each topic's text differs from the first words on.
fn system(topic: &str, tokens: usize) -> Value {
    let words = ["river", "market", "engine", "window", "garden", "letter", "station", "winter", "copper", "signal"];
    let mut text = format!("You are the {topic} assistant. ");
    let mut i = topic.len();
    while text.len() < tokens * 4 {
        i = (i * 7 + 3) % 1000;
        text.push_str(&format!("The {topic} {} keeps rule {i} about the {}. ", words[i % 10], words[(i / 10) % 10]));
    }
    json!({"role": "system", "content": text})
}

fn request(messages: &[Value], max_tokens: u32) -> Value {
    json!({"messages": messages, "max_tokens": max_tokens, "temperature": 0})
}

fn config(cache: Value, n_ctx: u32) -> EngineConfig {
    serde_json::from_value(json!({"model_path": model(), "n_ctx": n_ctx, "n_threads": threads(),
        "adaptive_threads": false, "prompt_cache": cache}))
    .unwrap()
}

fn read(r: &Value) -> u64 {
    r["timings"]["prompt_n"].as_u64().unwrap_or_else(|| panic!("{r}"))
}

/// (a) Prompt tokens read on each turn after the first, per conversation, with and without.
fn alternating() {
    let run = |cache: Value| {
        let e = Engine::create(config(cache, 8192), None).unwrap();
        let mut convs = [vec![system("harbor", 2000)], vec![system("orchard", 2000)]];
        let mut later = Vec::new();
        for turn in 0..6 {
            for conv in convs.iter_mut() {
                conv.push(json!({"role": "user", "content": format!("What is rule {turn}?")}));
                let r = e.infer(&request(conv, 16).to_string()).unwrap();
                if turn > 0 {
                    later.push(read(&r));
                }
                conv.push(r["choices"][0]["message"].clone());
            }
        }
        later
    };
    let with = run(json!({}));
    let without = run(json!({"ram_bytes": 0}));
    println!("(a) one engine, two ~2,000-token conversations alternating, turns 2-6:");
    println!("    tokens re-read per turn with the cache:    max {:>5}  {:?}", with.iter().max().unwrap(), with);
    println!("    tokens re-read per turn without the cache: max {:>5}  {:?}", without.iter().max().unwrap(), without);
}

fn restart_request() -> Value {
    let mut m = vec![system("lighthouse", 2300)];
    for i in 0..3 {
        m.push(json!({"role": "user", "content": format!("Tell me about rule {i}.")}));
        m.push(json!({"role": "assistant", "content": format!("Rule {i} is kept by the keeper of the light.")}));
    }
    m.push(json!({"role": "user", "content": "And the last rule?"}));
    request(&m, 24)
}

/// (b) as a child process: answers the restart request with the cache in `dir`; prints the reply.
fn restart_child(dir: &str) {
    let e = Engine::create(config(json!({"dir": dir}), 4096), None).unwrap();
    let r = e.infer(&restart_request().to_string()).unwrap();
    drop(e); // writes what the context holds to `dir`
    println!("{}", json!({"timings": r["timings"], "usage": r["usage"], "message": r["choices"][0]["message"]}));
}

fn restart() {
    let dir = std::env::temp_dir().join(format!("llb-bench-prompt-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let me = std::env::current_exe().unwrap();
    let child = || {
        let out = Command::new(&me).args(["--restart-child", dir.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        serde_json::from_str::<Value>(text.lines().last().unwrap()).unwrap()
    };
    let (p1, p2) = (child(), child());
    let ms = |r: &Value| r["timings"]["prompt_ms"].as_f64().unwrap();
    let n = p2["usage"]["prompt_tokens"].as_u64().unwrap();
    let restored = p2["timings"]["cache_restored_n"].as_u64().unwrap();
    println!("(b) restart, a {n}-token conversation, the same dir:");
    println!("    process 1 prompt {:.1} ms; process 2 prompt {:.1} ms (restore {:.1} ms): {:.3}x", ms(&p1), ms(&p2),
        p2["timings"]["cache_restore_ms"].as_f64().unwrap(), ms(&p2) / ms(&p1));
    println!("    restored {restored} of {n} tokens ({:.1}%); same reply: {}", 100.0 * restored as f64 / n as f64,
        p1["message"] == p2["message"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The conversations of (c), turn by turn: 8 system prompts of ~1,500 tokens, one user turn per
/// round. Returns prompt tokens read in round 1 and in the later rounds.
fn round_robin(mut infer: impl FnMut(&Value) -> Value) -> (u64, u64) {
    let mut convs: Vec<Vec<Value>> = (0..8).map(|i| vec![system(&format!("desk{i}"), 1500)]).collect();
    let (mut first, mut later) = (0, 0);
    for round in 0..6 {
        for conv in convs.iter_mut() {
            conv.push(json!({"role": "user", "content": format!("Round {round}: what changed?")}));
            let r = infer(&request(conv, 8));
            *(if round == 0 { &mut first } else { &mut later }) += read(&r);
            conv.push(json!({"role": "assistant", "content": r["choices"][0]["message"]["content"].as_str().unwrap_or("")}));
        }
    }
    (first, later)
}

fn pools(server: Option<&str>) {
    let run = |cache: Value| {
        let mut cfg = config(cache, 8192);
        cfg.n_parallel = Some(2);
        let p = Pool::create(cfg).unwrap();
        round_robin(|req| p.infer(&req.to_string(), &|_| true).unwrap())
    };
    let with = run(json!({}));
    let without = run(json!({"ram_bytes": 0}));
    println!("(c) pool, 2 parallel slots, n_ctx 8192, 8 ~1,500-token conversations round-robin, 6 rounds:");
    println!("    prompt tokens read, round 1 / rounds 2-6: with the cache {} / {}; without {} / {}", with.0, with.1, without.0, without.1);
    println!("    rounds 2-6: {:.3}x without the cache; all rounds: {:.3}x", with.1 as f64 / without.1 as f64,
        (with.0 + with.1) as f64 / (without.0 + without.1) as f64);
    if let Some(bin) = server {
        let m = model();
        let t = threads().to_string();
        let args = ["-m", m.to_str().unwrap(), "-c", "8192", "--jinja", "--parallel", "2", "--cache-ram", "8192", "-t", &t, "-tb", &t];
        let s = LlamaServer::start(bin, &args.map(String::from));
        let peer = round_robin(|req| s.chat(req));
        println!("(d) llama-server --parallel 2 -c 8192 --cache-ram 8192 on (c): round 1 / rounds 2-6 read {} / {}", peer.0, peer.1);
        println!("    llb with the cache / llama-server, rounds 2-6: {:.3}x", with.1 as f64 / peer.1.max(1) as f64);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--restart-child") {
        return restart_child(&args[2]);
    }
    println!("prompt cache, {} threads, {}", threads(), model().display());
    alternating();
    restart();
    pools(std::env::var("LLB_LLAMA_SERVER").ok().as_deref());
}
