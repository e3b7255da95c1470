//! llama.cpp's RPC backend on loopback (issue #11): two `rpc-server`s built from the pinned tree
//! (scripts/rpc-server.sh, linked against llb's own llama.cpp build), a fixture split over them
//! and the local CPU gives the same greedy tool call as the local-only run; a server killed in
//! the middle of a request ends that request with `device_unavailable`, the host survives and
//! the pool keeps saying so; an unreachable server is refused at create, fast.
//!
//! One test function: the servers are started once and the steps depend on each other.

mod common;

use common::cabi::{CPool, Events};
use common::*;
use serde_json::{json, Value};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Qwen2.5 template, 2 layers.
fn small() -> PathBuf {
    let mut o = llb::fixture::FixtureOptions::new("llama-spm");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    o.size = llb::fixture::Size::Small;
    fixture_with("backends-small-qwen2.5", &o)
}

/// Builds (once, cached in the llama.cpp build directory) and returns the rpc-server binary.
fn rpc_server_binary() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/rpc-server.sh"))
        .env("LLB_LLAMA_CPP_DIR", env!("LLB_LLAMA_CPP_SRC"))
        .env("LLB_LLAMA_BUILD", env!("LLB_LLAMA_BUILD"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/rpc-server.sh");
    assert!(out.status.success(), "scripts/rpc-server.sh failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A running rpc-server on 127.0.0.1; killed when dropped.
struct Server {
    child: Child,
    endpoint: String,
}

impl Server {
    fn start(bin: &PathBuf) -> Server {
        // A port the kernel says is free now.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting rpc-server");
        let endpoint = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while TcpStream::connect(&endpoint).is_err() {
            assert!(started.elapsed() < Duration::from_secs(20), "rpc-server on {endpoint} did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, endpoint }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(path: &PathBuf, extra: Value) -> Value {
    let mut c = json!({"model_path": path, "n_ctx": 1024, "n_threads": 1, "n_parallel": 1});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn tool_call(stream: bool) -> Value {
    json!({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": llb::fixture::sample_tools(),
           "tool_choice": "required", "temperature": 0, "max_tokens": 48, "stream": stream})
}

fn message(r: &Value) -> Value {
    assert_eq!(r["object"], "chat.completion", "{r}");
    let mut m = r["choices"][0]["message"].clone();
    let calls = m["tool_calls"].as_array_mut().unwrap_or_else(|| panic!("no tool call: {r}"));
    assert!(!calls.is_empty(), "no tool call: {r}");
    // Call ids are random.
    calls.iter_mut().for_each(|c| c["id"] = Value::Null);
    m
}

#[test]
fn a_model_split_over_two_rpc_servers_matches_the_local_run_and_survives_losing_one() {
    if !cfg!(llb_rpc) {
        eprintln!("skipped: this llb was built with LLB_RPC=0 (no RPC backend)");
        return;
    }
    let started = Instant::now();
    let bin = rpc_server_binary();
    eprintln!("rpc-server ready in {:.1} s: {}", started.elapsed().as_secs_f64(), bin.display());
    let path = small();

    // An unreachable server: refused at create, quickly, naming the field and the endpoint.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = Instant::now();
    let f = CPool::open(&config(&path, json!({"rpc_servers": [format!("127.0.0.1:{dead}")]}))).err().unwrap();
    assert_eq!(f["code"], "device_unavailable", "{f}");
    assert!(f["message"].as_str().unwrap().contains(&format!("127.0.0.1:{dead}")), "{f}");
    assert!(t.elapsed() < Duration::from_secs(5), "refusing took {:?}", t.elapsed());

    let local = message(&CPool::open(&config(&path, json!({}))).unwrap().infer(&tool_call(false)));

    let a = Server::start(&bin);
    let b = Server::start(&bin);
    // Both layers on the servers (one each), the output layer and the sampling on the local CPU.
    let split = json!({"rpc_servers": [a.endpoint, b.endpoint], "n_gpu_layers": 2, "tensor_split": [1.0, 1.0]});
    let pool = CPool::open(&config(&path, split)).unwrap_or_else(|f| panic!("{f}"));
    // llb_devices lists the servers' devices once registered (llama.cpp names them RPC0, RPC1).
    let devices = common::cabi::take(llb::ffi::llb_devices());
    for s in [&a, &b] {
        let d = devices["devices"].as_array().unwrap().iter().find(|d| d["description"] == s.endpoint.as_str());
        assert!(d.is_some_and(|d| d["type"] == "gpu"), "{} is not listed: {devices}", s.endpoint);
    }
    let t = Instant::now();
    let remote = message(&pool.infer(&tool_call(false)));
    assert_eq!(pool.stats()["lost"], Value::Null);
    eprintln!("split run: {:.2} s", t.elapsed().as_secs_f64());
    assert_eq!(remote, local, "greedy output over RPC differs from the local run");

    // Kill server b once the streamed answer has started: that request fails, nothing crashes.
    let victim = Arc::new(Mutex::new(Some(b)));
    let events = Events::default();
    let v = victim.clone();
    *events.on_event.lock().unwrap() = Some(Box::new(move |e: &Value| {
        if e["type"] == "chunk" {
            if let Some(s) = v.lock().unwrap().take() {
                drop(s); // SIGKILL + wait
            }
        }
    }));
    let t = Instant::now();
    let r = pool.infer_with(&tool_call(true), &events);
    assert!(victim.lock().unwrap().is_none(), "the server was not killed: no chunk came ({r})");
    assert_eq!(r["type"], "error", "a request whose server died must fail: {r}");
    assert_eq!(r["code"], "device_unavailable", "{r}");
    assert!(r["message"].as_str().unwrap().contains("RPC"), "{r}");
    assert!(t.elapsed() < Duration::from_secs(30), "the failure took {:?}", t.elapsed());
    // The pool is unusable now and says so on every request, at once.
    let again = pool.infer(&tool_call(false));
    assert_eq!(again["code"], "device_unavailable", "{again}");
    let stats = pool.stats();
    assert_eq!(stats["lost"], r["message"], "{stats}");
    drop(pool);
    // The host is alive and serves local engines as before.
    assert_eq!(message(&CPool::open(&config(&path, json!({}))).unwrap().infer(&tool_call(false))), local);
    drop(a);
    eprintln!("rpc test: {:.1} s", started.elapsed().as_secs_f64());
}
