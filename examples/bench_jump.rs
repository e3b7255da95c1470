//! Jump-forward decoding benchmark (issue #14), one run, ratios printed side by side: named and
//! required tool calls with 1, 3 and 10 arguments, greedy, each run with `jump_forward` on and
//! off on one engine. Figures: wall time of the generation phase (`timings.predicted_ms`, the
//! median of the repeats), completion tokens and how many of them were forced (evaluated in
//! batches, not sampled), and whether the call is the same on and off.
//!
//!   scripts/bench-jump.sh           # the SmolLM2 copy and the ~1 GB F16 fixture
//!   LLB_BENCH_MODEL=m.gguf cargo run --release --example bench_jump

use llb::engine::Engine;
use llb::request::EngineConfig;
use serde_json::{json, Value};

const ARGS: [&str; 10] =
    ["city", "country", "date", "unit", "hour", "person_name", "reason", "language", "priority", "notes"];

/// A tool with `n` required arguments: short strings, one enum and one integer among them.
fn tool(n: usize) -> Value {
    let props: serde_json::Map<String, Value> = ARGS[..n]
        .iter()
        .map(|&a| {
            let schema = match a {
                "unit" => json!({"type": "string", "enum": ["celsius", "fahrenheit"]}),
                "hour" => json!({"type": "integer", "minimum": 0, "maximum": 23}),
                _ => json!({"type": "string", "maxLength": 16}),
            };
            (a.to_string(), schema)
        })
        .collect();
    json!({"type": "function", "function": {"name": format!("record_{n}_fields"),
        "description": "Record the user's request in the booking system.",
        "parameters": {"type": "object", "properties": props, "required": &ARGS[..n]}}})
}

fn request(n: usize, named: bool, jump: bool) -> Value {
    let other = json!({"type": "function", "function": {"name": "get_time", "description": "Get the time",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 16}}, "required": ["timezone"]}}});
    let choice = if named {
        json!({"type": "function", "function": {"name": format!("record_{n}_fields")}})
    } else {
        json!("required")
    };
    json!({"messages": [{"role": "user", "content": "Book a table in Paris, France for tomorrow at 8 pm for Anna; \
        temperatures in celsius, English, high priority, a window seat."}],
        "tools": [tool(n), other], "tool_choice": choice, "parallel_tool_calls": false,
        "temperature": 0, "max_tokens": 400, "jump_forward": jump})
}

/// The median generation time (ms) over the repeats of `off` and of `on`, and the last
/// completion of each. The two alternate, so a change in the machine's load falls on both.
fn measure(e: &Engine, off: &Value, on: &Value, repeats: usize) -> [(f64, Value); 2] {
    let mut times = [Vec::new(), Vec::new()];
    let mut last = [Value::Null, Value::Null];
    for _ in 0..repeats {
        for (i, req) in [off, on].into_iter().enumerate() {
            last[i] = e.infer(&req.to_string()).expect("infer");
            times[i].push(last[i]["timings"]["predicted_ms"].as_f64().expect("timings"));
        }
    }
    let median = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let [t_off, t_on] = times;
    let [l_off, l_on] = last;
    [(median(t_off), l_off), (median(t_on), l_on)]
}

fn call(r: &Value) -> Value {
    let mut m = r["choices"][0]["message"].clone();
    for c in m["tool_calls"].as_array_mut().into_iter().flatten() {
        c["id"] = Value::Null;
    }
    m
}

fn main() {
    let model = std::env::var("LLB_BENCH_MODEL").expect("set LLB_BENCH_MODEL to a tool-capable GGUF");
    // One compute thread by default: on a shared machine ggml's spinning threads would measure
    // the neighbours (LLB_BENCH_THREADS overrides).
    let repeats = std::env::var("LLB_BENCH_REPEATS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let n_threads = std::env::var("LLB_BENCH_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let config =
        EngineConfig { model_path: model.clone(), n_ctx: Some(4096), n_threads: Some(n_threads), ..Default::default() };
    let e = Engine::create(config, None).expect("engine");
    println!("model {model}, {n_threads} thread(s)\ngeneration-phase wall time, median of {repeats} (on and off alternating); ratio = on / off (lower is better)");
    println!(
        "{:<9} {:>4} {:>10} {:>10} {:>6} {:>8} {:>8} {:>8} {:>9}",
        "choice", "args", "off ms", "on ms", "ratio", "off tok", "on tok", "forced", "same call"
    );
    for named in [true, false] {
        for n in [1, 3, 10] {
            e.infer(&request(n, named, true).to_string()).expect("warm-up"); // the prompt into the KV cache
            let [(off_ms, off), (on_ms, on)] =
                measure(&e, &request(n, named, false), &request(n, named, true), repeats);
            println!(
                "{:<9} {:>4} {:>10.1} {:>10.1} {:>6.2} {:>8} {:>8} {:>8} {:>9}",
                if named { "named" } else { "required" },
                n,
                off_ms,
                on_ms,
                on_ms / off_ms,
                off["usage"]["completion_tokens"].to_string(),
                on["usage"]["completion_tokens"].to_string(),
                on["timings"]["predicted_forced_n"].to_string(),
                if call(&on) == call(&off) { "yes" } else { "no" },
            );
            if std::env::var_os("LLB_BENCH_VERBOSE").is_some() {
                println!("  on:  {}\n  off: {}", call(&on), call(&off));
            }
        }
    }
}
