//! Decode speed when the host wants the cores too (issue 23), one run, printed as a table:
//! one request at a time (96 tokens, temperature 0), median decode tok/s with the machine idle,
//! one core held by a busy loop, and every core held; llb with adaptive threads, llb with fixed
//! threads, and llama-server (`LLB_LLAMA_SERVER`, its default build: scripts/llama-server.sh)
//! on the same model; then two llb processes side by side.
//!
//!   LLB_BENCH_MODEL=model.gguf [LLB_LLAMA_SERVER=path] cargo run --release --example bench_contention
//!   (scripts/bench-contention.sh sets both up)
//!   ... --one [N]: one engine's median rate alone, adaptive or fixed at N threads (to probe a
//!   load by hand: start the busy loops yourself)

#[path = "peer/llama_server.rs"]
mod llama_server;

use llama_server::LlamaServer;
use llb::engine::Engine;
use llb::request::EngineConfig;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const REPS: usize = 5;
/// The longest one llama-server request runs before its rate so far is taken.
const PEER_DEADLINE: Duration = Duration::from_secs(30);

fn request() -> Value {
    json!({"messages": [{"role": "user", "content": "Write a long story about a cat."}],
           "tool_choice": "none", "max_tokens": 96, "temperature": 0,
           "tools": serde_json::from_str::<Value>(include_str!("weather-tools.json")).unwrap()})
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Median decode rate of `REPS` requests on an engine made with `adaptive_threads` (and
/// `n_threads` when given).
fn llb_rate(model: &str, adaptive: bool, n_threads: Option<i32>) -> f64 {
    let cfg = EngineConfig {
        model_path: model.into(),
        n_ctx: Some(2048),
        n_threads,
        adaptive_threads: Some(adaptive),
        ..Default::default()
    };
    let e = Engine::create(cfg, None).unwrap();
    let rates = (0..REPS)
        .map(|_| {
            let r = e.infer(&request().to_string()).unwrap();
            r["timings"]["predicted_per_second"].as_f64().unwrap()
        })
        .collect();
    median(rates)
}

/// Holds `n` cores with `while :; do :; done` until dropped.
struct Busy(Vec<Child>);
impl Busy {
    fn hold(n: usize) -> Busy {
        let kids = (0..n)
            .map(|_| Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        Busy(kids)
    }
}
impl Drop for Busy {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

/// llama-server (the pinned tree's) on `model`, one slot.
fn start_peer(bin: &str, model: &str) -> LlamaServer {
    let args = ["-m", model, "-c", "2048", "--jinja", "--parallel", "1"];
    LlamaServer::start(bin, &args.map(String::from))
}

/// The peer's rates.
struct Server(LlamaServer);

impl Server {
    /// Median decode rate of `REPS` requests. Each streams with llama-server's per-token timings
    /// and is cut after `PEER_DEADLINE` (the rate so far counts): with every core busy the
    /// default OpenMP build decodes well under one token a second.
    fn rate(&self) -> f64 {
        let rates = (0..REPS).map(|_| self.stream_rate().expect("llama-server streamed no timings")).collect();
        median(rates)
    }

    fn stream_rate(&self) -> Option<f64> {
        let mut body = request();
        body["stream"] = json!(true);
        body["timings_per_token"] = json!(true);
        let body = body.to_string();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", self.0.port())).ok()?;
        c.set_read_timeout(Some(PEER_DEADLINE)).ok()?;
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        c.write_all(head.as_bytes()).ok()?;
        c.write_all(body.as_bytes()).ok()?;
        let start = std::time::Instant::now();
        let mut rate = None;
        // Chunk-size lines and events split across chunks do not parse and are skipped.
        for line in BufReader::new(c).lines() {
            let Ok(line) = line else { break };
            let Some(data) = line.strip_prefix("data: ") else { continue };
            if data.trim() == "[DONE]" {
                break;
            }
            let t = serde_json::from_str::<Value>(data).map(|v| v["timings"].clone()).unwrap_or_default();
            if t["predicted_n"].as_u64().is_some_and(|n| n >= 2) {
                rate = t["predicted_per_second"].as_f64().or(rate);
            }
            if start.elapsed() > PEER_DEADLINE {
                break;
            }
        }
        rate
    }
}

/// Two copies of this program, each measuring llb alone, at once: their two rates.
fn two_processes() -> (f64, f64) {
    let me = std::env::current_exe().unwrap();
    let kids: Vec<Child> =
        (0..2).map(|_| Command::new(&me).arg("--one").stdout(Stdio::piped()).spawn().unwrap()).collect();
    let rates: Vec<f64> = kids
        .into_iter()
        .map(|k| String::from_utf8_lossy(&k.wait_with_output().unwrap().stdout).trim().parse().unwrap())
        .collect();
    (rates[0], rates[1])
}

fn main() {
    let model = std::env::var("LLB_BENCH_MODEL").expect("LLB_BENCH_MODEL: a tool-capable GGUF");
    // `--one [N]`: one engine's rate, adaptive, or fixed at N threads (for probing by hand).
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--one") {
        let fixed = args.get(i + 1).and_then(|n| n.parse().ok());
        println!("{}", llb_rate(&model, fixed.is_none(), fixed));
        return;
    }
    let server = std::env::var("LLB_LLAMA_SERVER").ok().map(|b| Server(start_peer(&b, &model)));
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    println!("| busy loops | llb adaptive tok/s | llb fixed threads tok/s | llama-server tok/s |");
    println!("|---|---|---|---|");
    let mut idle = [0.0f64; 3];
    for busy in [0, 1, cores] {
        let _hold = Busy::hold(busy);
        let r = [llb_rate(&model, true, None), llb_rate(&model, false, None), server.as_ref().map_or(f64::NAN, Server::rate)];
        if busy == 0 {
            idle = r;
        }
        let cell = |i: usize| format!("{:.1} ({:.2}× idle)", r[i], r[i] / idle[i]);
        println!("| {busy} | {} | {} | {} |", cell(0), cell(1), cell(2));
    }
    drop(server);
    let (a, b) = two_processes();
    println!("two llb processes at once: {a:.1} and {b:.1} tok/s ({:.2}× / {:.2}× idle)", a / idle[0], b / idle[0]);
}
