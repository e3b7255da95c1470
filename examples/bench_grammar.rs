//! Constraint-engine benchmark (issue 25): one run, figures side by side.
//!
//! 1. Masks alone, on the 151k-token fixture's vocabulary: llb's strict grammar for 1, 32, 128
//!    and 300 real tools (tests/data/tool-corpus.json), walked for 48 tokens at T=0 and T=1
//!    against random logits (a model that disagrees with the grammar: every step pays a full
//!    mask); median and p99 per mask, for the engine and for llama.cpp's GBNF sampler
//!    (LLB_GRAMMAR_ENGINE=gbnf's path) where it finishes in time.
//! 2. Grammar build: cold (a fresh engine) and cached, per tool count.
//! 3. End to end on the fixture: decode ms/token for `none` vs `required` (same prompt, 48
//!    tokens), and `response_format` json_schema vs plain, with each token's time broken down
//!    (model, sampler chain, grammar, llb's own).
//! 4. SmolLM2 real weights (LLB_BENCH_SMOL), 40 tools: required/none decode ratio.
//!
//!   scripts/bench-grammar.sh
//!   LLB_BENCH_MODEL=fixture.gguf [LLB_BENCH_SMOL=smol-tools.gguf] cargo run --release --example bench_grammar

use llb::engine::Engine;
use llb::grammar::engine::{Constraint, Engine as Masks};
use llb::grammar::llama::LlamaGrammar;
use llb::request::EngineConfig;
use llb::tokens::Vocab;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

const STEPS: usize = 48;

fn corpus_tools(n: usize) -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tool-corpus.json")).unwrap();
    let corpus: Value = serde_json::from_str(&text).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for src in corpus["sources"].as_array().unwrap() {
        for t in src["tools"].as_array().into_iter().flatten() {
            let name: String = t["name"].as_str().unwrap().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if out.len() < n && seen.insert(name.clone()) {
                out.push(json!({"type": "function", "function": {"name": name,
                    "description": t["description"], "parameters": t["parameters"]}}));
            }
        }
    }
    out
}

fn request(tools: &[Value], choice: &str, temperature: f64, extra: Value) -> Value {
    let mut r = json!({"messages": [{"role": "user", "content": "List the files in /tmp and tell me about the weather."}],
        "tools": tools, "tool_choice": choice, "temperature": temperature, "seed": 7,
        "max_tokens": STEPS, "jump_forward": false, "parallel_tool_calls": false});
    if let (Some(r), Some(e)) = (r.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    r
}

/// A reproducible stream of pseudo-random numbers in [0, 1).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Picks a token among `allowed` from random logits: the best (T=0) or drawn by softmax (T=1).
fn pick(allowed: &[i32], rng: &mut Lcg, t1: bool) -> i32 {
    let logits: Vec<f32> = allowed.iter().map(|_| rng.next() * 8.0).collect();
    if !t1 {
        let best = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        return allowed[best];
    }
    let w: Vec<f32> = logits.iter().map(|l| l.exp()).collect();
    let mut x = rng.next() * w.iter().sum::<f32>();
    for (i, wi) in w.iter().enumerate() {
        x -= wi;
        if x <= 0.0 {
            return allowed[i];
        }
    }
    *allowed.last().unwrap()
}

fn percentiles(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(f64::total_cmp);
    if us.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    (us[us.len() / 2], us[((us.len() as f64 * 0.99) as usize).min(us.len() - 1)])
}

/// Walks the engine's grammar for STEPS tokens; the time of each full mask (µs).
fn engine_masks(e: &Engine, masks: &Arc<Masks>, gbnf: &str, t1: bool) -> Vec<f64> {
    let (m, _) = masks.compile(gbnf, &|t| e.vocab().single_token(t).map(|t| t as u32)).expect("compile");
    let mut c = Constraint::new(masks.clone(), m, None);
    let mut rng = Lcg(if t1 { 11 } else { 3 });
    let mut out = Vec::new();
    for _ in 0..STEPS {
        let t0 = Instant::now();
        let allowed: Vec<i32> = {
            let mask = c.mask().unwrap().unwrap();
            let mut a = Vec::new();
            mask.iter_set_entries(|t| a.push(t as i32));
            a
        };
        out.push(t0.elapsed().as_secs_f64() * 1e6);
        let eog = allowed.iter().copied().find(|&t| masks.trie().token(t as u32).first() == Some(&0xff));
        if allowed.is_empty() || eog.is_some() && allowed.len() == 1 {
            break;
        }
        let tok = pick(&allowed, &mut rng, t1);
        if eog == Some(tok) {
            break;
        }
        c.accept(tok, masks.trie().token(tok as u32)).unwrap();
    }
    out
}

/// The same walk on llama.cpp's GBNF sampler, bounded in steps and time.
fn gbnf_masks(vocab: &Arc<Vocab>, gbnf: &str, t1: bool, budget_ms: f64) -> Vec<f64> {
    let spec = llb::grammar::GrammarSpec { gbnf: gbnf.to_string(), ..Default::default() };
    let mut g = LlamaGrammar::new(vocab.clone(), &spec).expect("gbnf");
    let mut rng = Lcg(if t1 { 11 } else { 3 });
    let mut out = Vec::new();
    let start = Instant::now();
    for _ in 0..STEPS {
        let mut cur: Vec<llb::sys::llama_token_data> =
            (0..vocab.n_tokens()).map(|id| llb::sys::llama_token_data { id, logit: 0.0, p: 0.0 }).collect();
        let t0 = Instant::now();
        g.constrain(&mut cur).unwrap();
        out.push(t0.elapsed().as_secs_f64() * 1e6);
        let allowed: Vec<i32> = cur.iter().map(|t| t.id).collect();
        if allowed.is_empty() || start.elapsed().as_secs_f64() * 1e3 > budget_ms {
            break;
        }
        let tok = pick(&allowed, &mut rng, t1);
        if vocab.is_eog(tok) {
            break;
        }
        if g.accept(tok).unwrap().is_some() {
            break;
        }
    }
    out
}

fn strict_gbnf(e: &Engine, tools: &[Value]) -> String {
    let req = e.resolve(&request(tools, "required", 0.0, json!({})).to_string()).expect("resolve");
    let (rendered, _) = e.prompter().plan(&req, None).expect("plan");
    e.prompter().finish(rendered, &req).expect("plan").grammar.expect("a strict grammar").gbnf
}

fn section_masks(e: &Engine) {
    let v = e.vocab();
    let vocab = v.n_tokens() as usize;
    println!("\n== 1-2. masks alone ({vocab}-token vocabulary), {STEPS} tokens, random logits");
    println!("tools | schema KB | build cold ms (convert+compile) | cached ms | engine T=0 p50/p99 µs | T=1 p50/p99 µs | GBNF T=0 p50/p99 µs | GBNF T=1 p50/p99 µs");
    for n in [1usize, 32, 128, 300] {
        let tools = corpus_tools(n);
        let kb = serde_json::to_string(&tools).unwrap().len() as f64 / 1024.0;
        let gbnf = strict_gbnf(e, &tools);
        // Cold: a fresh engine for the vocabulary (its trie is built outside the timing).
        let fresh = Arc::new(Masks::new(v).unwrap());
        let t0 = Instant::now();
        let (_, cold) = fresh.compile(&gbnf, &|t| v.single_token(t).map(|t| t as u32)).expect("compile");
        let cold_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t0 = Instant::now();
        let (_, again) = fresh.compile(&gbnf, &|t| v.single_token(t).map(|t| t as u32)).unwrap();
        let cached_ms = t0.elapsed().as_secs_f64() * 1e3;
        assert!(again.cached);
        let e0 = percentiles(engine_masks(e, &fresh, &gbnf, false));
        let e1 = percentiles(engine_masks(e, &fresh, &gbnf, true));
        let g0 = percentiles(gbnf_masks(v, &gbnf, false, 3000.0));
        let g1 = percentiles(gbnf_masks(v, &gbnf, true, 3000.0));
        println!(
            "{n} | {kb:.0} | {cold_ms:.1} ({:.1}+{:.1}) | {cached_ms:.3} | {:.0}/{:.0} | {:.0}/{:.0} | {:.0}/{:.0} | {:.0}/{:.0}",
            cold.convert_us as f64 / 1e3,
            cold.compile_us as f64 / 1e3,
            e0.0,
            e0.1,
            e1.0,
            e1.1,
            g0.0,
            g0.1,
            g1.0,
            g1.1
        );
    }
}

/// Per-token figures of one completion: (ms/token, model, chain, grammar, own).
fn per_token(r: &Value) -> [f64; 5] {
    let t = &r["timings"];
    let n = t["predicted_n"].as_f64().unwrap().max(1.0);
    let f = |k: &str| t[k].as_f64().unwrap_or(0.0) / n;
    let total = f("predicted_ms");
    let own = total - f("model_ms") - f("sampling_ms") - f("grammar_ms");
    [total, f("model_ms"), f("sampling_ms"), f("grammar_ms"), own]
}

fn median_of(e: &Engine, req: &Value, repeats: usize) -> ([f64; 5], Value) {
    let mut runs = Vec::new();
    let mut last = Value::Null;
    for _ in 0..repeats {
        last = e.infer(&req.to_string()).expect("infer");
        runs.push(per_token(&last));
    }
    runs.sort_by(|a, b| a[0].total_cmp(&b[0]));
    (runs[runs.len() / 2], last)
}

fn row(label: &str, f: [f64; 5], base: f64) {
    println!(
        "{label} | {:.2} | {:.2}x | {:.2} | {:.3} | {:.3} | {:.3}",
        f[0],
        f[0] / base,
        f[1],
        f[2],
        f[3],
        f[4]
    );
}

fn section_end_to_end(e: &Engine, tool_counts: &[usize], repeats: usize) {
    println!("request | ms/token | vs none | model | chain | grammar | llb's own (ms/token; median of {repeats})");
    for &n in tool_counts {
        let tools = corpus_tools(n);
        for t in [0.0, 1.0] {
            let none = request(&tools, "none", t, json!({}));
            let req = request(&tools, "required", t, json!({}));
            e.infer(&none.to_string()).expect("warm the prompt");
            let (a, _) = median_of(e, &none, repeats);
            let (b, r) = median_of(e, &req, repeats);
            row(&format!("{n} tools T={t} none"), a, a[0]);
            row(&format!("{n} tools T={t} required"), b, a[0]);
            println!("  overhead {:.3} ms/token; finish {}", b[0] - a[0], r["choices"][0]["finish_reason"]);
        }
    }
}

fn section_response_format(e: &Engine, repeats: usize) {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "days", "unit"]});
    for t in [0.0, 1.0] {
        let plain = json!({"messages": [{"role": "user", "content": "Weather in Paris for 3 days, as JSON."}],
            "temperature": t, "seed": 5, "max_tokens": STEPS, "jump_forward": false});
        let mut rf = plain.clone();
        rf["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "w", "schema": schema}});
        e.infer(&plain.to_string()).expect("warm");
        let (a, _) = median_of(e, &plain, repeats);
        let (b, _) = median_of(e, &rf, repeats);
        row(&format!("plain T={t}"), a, a[0]);
        row(&format!("response_format T={t}"), b, a[0]);
    }
}

fn open(model: &str, n_ctx: u32) -> Engine {
    let threads: u32 = std::env::var("LLB_BENCH_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let config: EngineConfig =
        serde_json::from_value(json!({"model_path": model, "n_ctx": n_ctx, "n_threads": threads})).unwrap();
    Engine::create(config, None).expect("create")
}

fn main() {
    let model = std::env::var("LLB_BENCH_MODEL").expect("set LLB_BENCH_MODEL to the 151k-token fixture");
    let repeats: usize = std::env::var("LLB_BENCH_REPEATS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let engine_name = std::env::var("LLB_GRAMMAR_ENGINE").unwrap_or_else(|_| "llguidance".into());
    println!("grammar engine for end-to-end rows: {engine_name}");
    let e = open(&model, 65536);
    // LLB_BENCH_END_TO_END_ONLY=1: the end-to-end rows alone (the script's GBNF comparison run).
    if std::env::var("LLB_BENCH_END_TO_END_ONLY").is_err() {
        section_masks(&e);
    }
    println!("\n== 3. end to end on the fixture");
    section_end_to_end(&e, &[1, 32, 128], repeats);
    println!("\n== response_format json_schema (3 properties) on the fixture");
    println!("request | ms/token | vs plain | model | chain | grammar | llb's own");
    section_response_format(&e, repeats);
    if let Ok(smol) = std::env::var("LLB_BENCH_SMOL") {
        println!("\n== 4. SmolLM2-135M real weights, 40 tools");
        drop(e);
        section_end_to_end(&open(&smol, 8192), &[40], repeats.max(5));
    }
}
