//! The cost model's CPU figures (issue 41), side by side in one run: what the defaults (prompt
//! cache and speculation on, decided by src/cost.rs) give against the same with the feature off.
//!  (1) pools of 8 and 64 (`LLB_BENCH_POOLS`, default "8,64"), `LLB_BENCH_WAVES` (default 3)
//!      waves of the same 64 requests (T=0.7, `LLB_BENCH_TOKENS` tokens each, default 128):
//!      tokens/s per wave, default config / `"prompt_cache": {"ram_bytes": 0}` (goal: warm
//!      waves ≥ 0.97×), and the pool's `cost_model` stats; `LLB_BENCH_OFF_FIRST=1` creates the
//!      `ram_bytes: 0` pool first;
//!  (2) speculation by default / `"speculative": false` on a random-weight small model's text
//!      (goal ≥ 0.97×).
//! `LLB_BENCH_EMULATE=h200`: (2) at run C's H200 step costs (src/emulate.rs; docs/gpu.md).
//! Real SmolLM2 for (1) (`LLB_BENCH_MODEL`), a qwen2-vocabulary random-weight fixture for (2)
//! (written to `LLB_BENCH_FIXTURE` if missing). scripts/bench-costs.sh runs this, then
//! bench_prompt_cache (the alternation) and bench_speculative (story, pool half copying, repeat).

use llb::engine::{Engine, Pool};
use llb::request::EngineConfig;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config(model: &PathBuf, extra: Value) -> EngineConfig {
    let mut c = json!({"model_path": model, "n_threads": env_num("LLB_BENCH_THREADS", 2), "adaptive_threads": false});
    c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::from_value(c).unwrap()
}

const SYSTEM: &str = "You are the help desk of a harbor. Answer in two or three sentences, plainly, and say \
when you do not know. The harbor has three piers, a fuel dock, a chandlery that opens at seven, and a \
harbor master's office by the north gate. Moorings are booked by the night; visitors report on channel 12.";

/// The 64 requests of a wave: one system prompt, 64 questions.
fn wave_requests(tokens: usize) -> Vec<String> {
    (0..64)
        .map(|i| {
            json!({"messages": [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": format!("Question {i}: what should a visitor on boat number {} know about mooring {}?", i * 7 + 3, i % 9)}],
                "temperature": 0.7, "seed": i, "max_tokens": tokens})
            .to_string()
        })
        .collect()
}

/// A pool of `n` on `model` with the prompt cache `cache`, warmed by one request (the first
/// decode of a process pays for page faults and graph reservation).
fn pool(model: &PathBuf, n: usize, cache: Value) -> Pool {
    let p = Pool::create(config(model, json!({"n_parallel": n, "n_ctx": n * 768, "prompt_cache": cache}))).unwrap();
    p.infer(&json!({"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 4}).to_string(), &|_| true).unwrap();
    p
}

/// Tokens/s of one wave of `reqs` on `p`, and the share of its prompt tokens the pool did not
/// have to read (`cached_tokens` / `prompt_tokens`).
fn wave(p: &Pool, reqs: &[String]) -> (f64, f64) {
    let t = Instant::now();
    let usage: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = reqs.iter().map(|r| s.spawn(|| p.infer(r, &|_| true).unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()["usage"].clone()).collect()
    });
    let sum = |f: &dyn Fn(&Value) -> &Value| usage.iter().map(|u| f(u).as_u64().unwrap()).sum::<u64>() as f64;
    let tokens = sum(&|u| &u["completion_tokens"]);
    let cached = sum(&|u| &u["prompt_tokens_details"]["cached_tokens"]) / sum(&|u| &u["prompt_tokens"]).max(1.0);
    (tokens / t.elapsed().as_secs_f64(), cached)
}

/// Waves of the same 64 requests on a pool of 8 and of 64, the default config's pool and one
/// with `ram_bytes: 0` taking turns wave by wave, the first of each pair alternating (so the
/// machine's noise falls on both).
fn pools(model: &PathBuf) {
    let reqs = wave_requests(env_num("LLB_BENCH_TOKENS", 128));
    let sizes = std::env::var("LLB_BENCH_POOLS").unwrap_or_else(|_| "8,64".into());
    for n in sizes.split(',').filter_map(|n| n.trim().parse::<usize>().ok()) {
        let (on_pool, off_pool) = if std::env::var("LLB_BENCH_OFF_FIRST").is_ok_and(|v| v == "1") {
            let off = pool(model, n, json!({"ram_bytes": 0}));
            (pool(model, n, json!({})), off)
        } else {
            (pool(model, n, json!({})), pool(model, n, json!({"ram_bytes": 0})))
        };
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for w in 0..env_num("LLB_BENCH_WAVES", 3).max(2) {
            // Which goes first alternates, so that neither side always runs on a warmer machine.
            if w % 2 == 0 {
                on.push(wave(&on_pool, &reqs));
                off.push(wave(&off_pool, &reqs));
            } else {
                off.push(wave(&off_pool, &reqs));
                on.push(wave(&on_pool, &reqs));
            }
        }
        let fmt = |v: &[(f64, f64)]| v.iter().map(|x| format!("{:.0}", x.0)).collect::<Vec<_>>().join(" / ");
        let warm = on[1..].iter().map(|x| x.0).sum::<f64>() / off[1..].iter().map(|x| x.0).sum::<f64>();
        println!("(1) pool of {n}: waves {} tok/s default, {} with ram_bytes 0: warm waves {warm:.3}x (goal >= 0.97)", fmt(&on), fmt(&off));
        let shares = |v: &[(f64, f64)]| v.iter().map(|x| format!("{:.0}%", x.1 * 100.0)).collect::<Vec<_>>().join(" / ");
        println!("    prompt tokens not read (cached): {} default, {} with ram_bytes 0", shares(&on), shares(&off));
        let stats = on_pool.stats();
        let pc = &stats["prompt_cache"];
        println!("    prompt cache: stored {}, hits {}, restored tokens {}; cost model: {}", pc["stored"], pc["hits_ram"], pc["restored_tokens"], stats["cost_model"]);
        // Each pool learns its own draft decisions: how far they went apart explains much of a
        // run's spread between two pools doing the same work.
        println!("    speculation: default {}; ram_bytes 0 {}", stats["speculative"], off_pool.stats()["speculative"]);
    }
}

fn fixture() -> PathBuf {
    let path = std::env::var("LLB_BENCH_FIXTURE").map(PathBuf::from).unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/tmp".into());
        PathBuf::from(home).join(".cache/llb/bench-costs-qwen2-small.gguf")
    });
    if !path.exists() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut o = llb::fixture::FixtureOptions::new("qwen2");
        o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
        llb::fixture::write_fixture(&o, &path).unwrap();
    }
    path
}

/// (2) a random-weight model's text (repetitive): speculation on and off, alternately.
fn random_text() {
    let e = Engine::create(config(&fixture(), json!({"n_ctx": 4096})), None).unwrap();
    let req = |on: bool| {
        json!({"messages": [{"role": "user", "content": "Tell me about the sea."}], "temperature": 0, "max_tokens": 256,
            "speculative": on}).to_string()
    };
    // Decode tokens/s, or under an emulated GPU's costs, tokens over the reply's emulated time.
    let tps = |on: bool| {
        let (r, secs) = llb::emulate::clocked(|| e.infer(&req(on)).unwrap());
        let rate = match emulated() {
            true => r["usage"]["completion_tokens"].as_f64().unwrap() / secs,
            false => r["timings"]["predicted_per_second"].as_f64().unwrap(),
        };
        (r, rate)
    };
    let (mut on, mut off, mut last) = (Vec::new(), Vec::new(), Value::Null);
    for _ in 0..env_num("LLB_BENCH_REPS", 3) {
        let (a, a_tps) = tps(true);
        off.push(tps(false).1);
        on.push(a_tps);
        last = a;
    }
    on.sort_by(f64::total_cmp);
    off.sort_by(f64::total_cmp);
    let (on, off) = (on[on.len() / 2], off[off.len() / 2]);
    let t = &last["timings"];
    println!(
        "(2) random-weight text: {on:.1} / {off:.1} tokens/s = {:.3}x (goal >= 0.97); {} drafted, {} accepted",
        on / off,
        t["draft_n"],
        t["draft_accepted_n"]
    );
}

/// Whether `LLB_BENCH_EMULATE` names an emulated GPU's profile (src/emulate.rs): set for the
/// engines and pools opened from then on.
fn emulated() -> bool {
    llb::emulate::Profile::from_bench_env().is_some()
}

fn main() {
    let model = PathBuf::from(std::env::var("LLB_BENCH_MODEL").expect("LLB_BENCH_MODEL: SmolLM2 with a tool template"));
    let only = std::env::var("LLB_BENCH_ONLY").unwrap_or_default();
    println!("cost model, {} threads, {}", env_num("LLB_BENCH_THREADS", 2), model.display());
    if emulated() {
        llb::emulate::emulate(llb::emulate::Profile::from_bench_env());
        println!("steps charged at run C's H200 costs (LLB_BENCH_EMULATE=h200): emulated time, not this machine's");
    }
    if only.is_empty() || only.contains('1') {
        pools(&model);
    }
    if only.is_empty() || only.contains('2') {
        random_text();
    }
}
