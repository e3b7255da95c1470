//! llama.cpp's RPC backend on loopback (issue #11): two `rpc-server`s built from the pinned tree
//! (scripts/rpc-server.sh, linked against llb's own llama.cpp build), a fixture split over them
//! and the local CPU gives the same greedy tool call as the local-only run; a server killed in
//! the middle of a request ends that request with `device_unavailable`, the host survives and
//! the pool keeps saying so; an unreachable server, or one whose process does not answer, is
//! refused at create, fast; a server whose network vanishes silently (no FIN, no RST) ends the
//! running request within `LLB_RPC_PEER_TIMEOUT` instead of blocking it forever.
//!
//! The loopback steps are one test function: the servers are started once and the steps depend on
//! each other. The vanishing network is a second one, in network namespaces of its own.

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

/// Builds (once, cached in the llama.cpp build directory) and returns the rpc-server binary; once
/// per test process, whichever test asks first.
fn rpc_server_binary() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(build_rpc_server).clone()
}

fn build_rpc_server() -> PathBuf {
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
        Server::spawn(Command::new(bin), "127.0.0.1", port)
    }

    /// `cmd` runs rpc-server (it may wrap it, as nsenter does), on `host:port`.
    fn spawn(mut cmd: Command, host: &str, port: u16) -> Server {
        let child = cmd
            .args(["-H", host, "-p", &port.to_string(), "-t", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting rpc-server");
        let endpoint = format!("{host}:{port}");
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

// Over 60 lines: one scenario, step by step (two servers, a local run, the split run, one server
// killed).
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

    // A server whose process accepts connections but never answers (stopped): refused at create
    // once the handshake's 5 s are up, not a create that hangs.
    let frozen = Server::start(&bin);
    signal(&frozen.child, "STOP");
    let t = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let cfg = config(&path, json!({"rpc_servers": [frozen.endpoint]}));
    std::thread::spawn(move || tx.send(CPool::open(&cfg).err()));
    let f = rx.recv_timeout(Duration::from_secs(60)).expect("create hung on a stopped server").unwrap();
    assert_eq!(f["code"], "device_unavailable", "{f}");
    assert!(f["message"].as_str().unwrap().contains(&frozen.endpoint), "{f}");
    assert!(t.elapsed() < Duration::from_secs(12), "refusing a stopped server took {:?}", t.elapsed());
    drop(frozen); // SIGKILL ends a stopped process too

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

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status();
    assert!(ok.is_ok_and(|s| s.success()), "kill -{sig} {}", child.id());
}

fn sh(cmd: &str) {
    let st = Command::new("sh").args(["-c", cmd]).status().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(st.success(), "`{cmd}` failed");
}

/// The veth pair between this test's network namespace and the server's: link-local addresses
/// that exist only inside the two namespaces.
const HERE: &str = "169.254.77.1";
const THERE: &str = "169.254.77.2";
const PEER_TIMEOUT_S: u64 = 4;

/// A server whose machine drops off the network (its link set down: nothing is closed, no packet
/// answers) while a request streams: the request ends with `device_unavailable` within about
/// `LLB_RPC_PEER_TIMEOUT` seconds (TCP keepalive and TCP_USER_TIMEOUT on ggml's sockets), and
/// the pool reports the loss. Without them the request blocked forever.
// Over 60 lines: one scenario, step by step (a proxy, a streaming request, the network cut, the
// bounded end).
#[test]
fn a_server_whose_network_vanishes_ends_the_request_in_bounded_time() {
    const NAME: &str = "a_server_whose_network_vanishes_ends_the_request_in_bounded_time";
    if !cfg!(llb_rpc) {
        eprintln!("skipped: this llb was built with LLB_RPC=0 (no RPC backend)");
        return;
    }
    if std::env::var_os("LLB_RPC_IN_NETNS").is_none() {
        return rerun_in_own_network_namespace(NAME);
    }
    sh("ip link set lo up");
    let bin = PathBuf::from(std::env::var("LLB_RPC_SERVER_BIN").unwrap());
    // The server's namespace: held open by a sleeping process, entered with nsenter.
    // Both processes die with this one, however it ends (setpriv: a parent-death signal).
    let dies_with_me = ["setpriv", "--pdeathsig", "KILL", "--"];
    let holder = Server {
        child: Command::new("unshare").args(["-n"]).args(dies_with_me).args(["sleep", "600"]).spawn().expect("unshare"),
        endpoint: String::new(),
    };
    let pid = holder.child.id();
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).ok();
    let t = Instant::now();
    while ns(&pid.to_string()) == ns("self") {
        assert!(t.elapsed() < Duration::from_secs(10), "unshare did not enter a new namespace");
        std::thread::sleep(Duration::from_millis(10));
    }
    sh(&format!("ip link add llbA type veth peer name llbB netns {pid}"));
    sh(&format!("ip addr add {HERE}/30 dev llbA && ip link set llbA up"));
    sh(&format!(
        "nsenter -t {pid} -n sh -c 'ip link set lo up && ip addr add {THERE}/30 dev llbB && ip link set llbB up'"
    ));
    let mut cmd = Command::new("nsenter");
    cmd.args(["-t", &pid.to_string(), "-n", "--"]).args(dies_with_me).arg(&bin);
    let server = Server::spawn(cmd, THERE, 50052);

    let all_remote = json!({"rpc_servers": [server.endpoint], "n_gpu_layers": 2});
    let pool = CPool::open(&config(&small(), all_remote)).unwrap_or_else(|f| panic!("{f}"));
    message(&pool.infer(&tool_call(false)));
    let events = Events::default();
    let cut = Arc::new(Mutex::new(false));
    let c = cut.clone();
    *events.on_event.lock().unwrap() = Some(Box::new(move |e: &Value| {
        let mut cut = c.lock().unwrap();
        if e["type"] == "chunk" && !*cut {
            // No panic here: this runs inside llb's event callback.
            let down = Command::new("nsenter")
                .args(["-t", &pid.to_string(), "-n", "ip", "link", "set", "llbB", "down"])
                .status();
            *cut = down.is_ok_and(|s| s.success());
        }
    }));
    let t = Instant::now();
    let r = pool.infer_with(&tool_call(true), &events);
    let took = t.elapsed();
    assert!(*cut.lock().unwrap(), "the link was not cut: no chunk came ({r})");
    assert_eq!(r["code"], "device_unavailable", "a request whose server vanished must fail: {r}");
    assert!(r["message"].as_str().unwrap().contains("RPC"), "{r}");
    let bound = Duration::from_secs(3 * PEER_TIMEOUT_S);
    assert!(took < bound, "the loss took {took:?} to notice (LLB_RPC_PEER_TIMEOUT={PEER_TIMEOUT_S})");
    eprintln!("a vanished server ended the request after {:.1} s", took.as_secs_f64());
    assert_eq!(pool.stats()["lost"], r["message"]);
    assert_eq!(pool.infer(&tool_call(false))["code"], "device_unavailable");
    drop((server, holder));
}

/// Runs test `name` of this binary again in a network namespace of its own (`unshare`, as root),
/// with a short peer timeout: the namespaces and the veth pair vanish with its processes, which
/// die with it (`--kill-child`, and the test's parent-death signals). Fails if it fails or runs
/// past 120 s.
fn rerun_in_own_network_namespace(name: &str) {
    let unshare = ["-n", "--fork", "--kill-child"];
    if !Command::new("unshare").args(unshare).arg("true").status().is_ok_and(|s| s.success()) {
        assert!(std::env::var_os("LLB_REQUIRE_NETNS").is_none(), "LLB_REQUIRE_NETNS is set, but `unshare -n` fails");
        eprintln!("skipped: `unshare -n` fails here (it needs root): no network namespace to cut");
        return;
    }
    let bin = rpc_server_binary();
    let mut child = Command::new("unshare")
        .args(unshare)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env("LLB_RPC_IN_NETNS", "1")
        .env("LLB_RPC_PEER_TIMEOUT", PEER_TIMEOUT_S.to_string())
        .env("LLB_RPC_SERVER_BIN", &bin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare -n");
    // Its output is relayed line by line with a prefix, so that its own harness summary is not
    // read as one of this binary's.
    let relays: Vec<_> = [
        child.stdout.take().map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|r| {
        std::thread::spawn(move || {
            use std::io::BufRead;
            std::io::BufReader::new(r).lines().map_while(Result::ok).for_each(|l| eprintln!("[netns] {l}"));
        })
    })
    .collect();
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            relays.into_iter().for_each(|r| r.join().unwrap());
            assert!(st.success(), "the test in its own network namespace failed (its output is above)");
            return;
        }
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the test in its own network namespace hung: still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
