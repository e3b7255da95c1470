//! The same request at temperature 0 gives the same reply (issue 46), on real weights
//! (SmolLM2-135M with a tool template, scripts/smollm2.sh) and a conversation past 512 KV cells,
//! where ggml's CPU flash attention has a thread-dependent path for a lone token.
//!
//! Replies are compared with their logprobs, bit for bit: a kernel that sums in another order
//! shows there long before it flips a token.
//!
//! - Replay mode (`"deterministic": true`, docs/design.md "Determinism"): cold three times while
//!   other processes load the cores, restored from RAM and from disk, in a pool beside other
//!   requests, with speculation configured, and per request on a default pool: one reply.
//! - The default mode: a reply does not depend on the thread count, and speculation leaves
//!   every token's logprobs as they are; an engine's reply is the cold one under load, going on
//!   with the first turn's cells, and restored from RAM and from disk.
//!
//! Without LLB_SMOLLM2_TOOLS the tests say so and pass, unless LLB_REQUIRE_REAL_WEIGHTS=1
//! (test-all.sh sets both).

mod common;

use common::cabi::{CEngine, CPool};
use common::fixtures_dir;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

/// One test at a time: the load one starts must not reach the other, and each reads long
/// prompts on every core.
static SERIAL: Mutex<()> = Mutex::new(());

fn model() -> Option<PathBuf> {
    common::real_weights("LLB_SMOLLM2_TOOLS")
}

/// A system prompt of rules, about 560 tokens: with the turns after it, past 512 cells.
fn system() -> Value {
    let words = ["river", "market", "engine", "window", "garden", "letter", "station", "winter", "copper", "signal"];
    let mut text = String::from("You are the harbor assistant. ");
    let mut i = 11usize;
    while text.len() < 2200 {
        i = (i * 7 + 3) % 1000;
        text.push_str(&format!("The harbor {} keeps rule {i} about the {}. ", words[i % 10], words[(i / 10) % 10]));
    }
    json!({"role": "system", "content": text})
}

fn turn1() -> Vec<Value> {
    vec![system(), json!({"role": "user", "content": "Which rule is about the copper window?"})]
}

fn turn2(reply: &str) -> Vec<Value> {
    let mut m = turn1();
    m.push(json!({"role": "assistant", "content": reply}));
    m.push(json!({"role": "user", "content": "And what does rule 7 say? Answer in one sentence."}));
    m
}

fn request(messages: &[Value], extra: Value) -> Value {
    let mut r = json!({"messages": messages, "max_tokens": 24, "temperature": 0, "logprobs": true, "top_logprobs": 2});
    r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    r
}

/// The reply's text with every token's logprob and alternatives, exactly as returned.
fn reply(resp: &Value) -> String {
    assert!(resp["error"].is_null(), "{resp}");
    let c = &resp["choices"][0];
    format!("{}\n{}", c["message"]["content"], c["logprobs"]["content"])
}

fn text(resp: &Value) -> String {
    resp["choices"][0]["message"]["content"].as_str().unwrap_or_else(|| panic!("{resp}")).to_string()
}

fn restored(resp: &Value) -> u64 {
    resp["timings"]["cache_restored_n"].as_u64().unwrap_or_else(|| panic!("{resp}"))
}

fn engine(m: &PathBuf, extra: Value) -> CEngine {
    let mut c = json!({"model_path": m, "n_ctx": 2048, "n_threads": 2});
    c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    CEngine::open(&c).unwrap_or_else(|e| panic!("create failed: {e}"))
}

/// Processes that keep every core busy while they live.
struct Load(Vec<Child>);

impl Load {
    fn start() -> Load {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        Load(
            (0..n)
                .map(|_| Command::new("sh").args(["-c", "while :; do :; done"]).stdout(Stdio::null()).spawn().unwrap())
                .collect(),
        )
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn cache_dir(name: &str) -> PathBuf {
    let d = fixtures_dir().join(format!("determinism-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `second`'s reply from cold engines (`config` over the defaults) on each of `threads`, while
/// other processes keep every core busy: asserted to be one reply, returned.
fn cold_under_load(m: &PathBuf, config: &Value, second: &Value, threads: &[usize]) -> String {
    let _load = Load::start();
    let cold: Vec<String> = threads
        .iter()
        .map(|&t| {
            let mut c = config.clone();
            c["n_threads"] = json!(t);
            reply(&engine(m, c).infer(second))
        })
        .collect();
    for (c, t) in cold.iter().zip(threads) {
        assert_eq!(c, &cold[0], "cold on {t} threads vs {}, under load", threads[0]);
    }
    cold.into_iter().next().unwrap()
}

/// Engine `e` answered the first turn of `second`'s conversation: going on with its cells,
/// restored from RAM after another conversation took its one sequence, and restored from disk
/// by a new engine (`on_disk`, the config `e` was made with), it gives the `cold` reply.
fn assert_kept_and_restored_give(cold: &str, m: &PathBuf, e: CEngine, on_disk: Value, second: &Value) {
    let kept = e.infer(second);
    let cached = kept["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached > 500, "the first turn's cells were reused: {}", kept["usage"]);
    assert_eq!(reply(&kept), cold, "the first turn's engine going on");

    e.infer(&request(&[json!({"role": "user", "content": "Say hello."})], json!({"max_tokens": 4})));
    let from_ram = e.infer(second);
    assert!(restored(&from_ram) > 500, "restored from RAM: {}", from_ram["timings"]);
    assert_eq!(reply(&from_ram), cold, "restored from RAM");

    // The first engine's states were written when it closed: a new one stands for a restart.
    drop(e);
    let from_disk = engine(m, on_disk).infer(second);
    assert!(restored(&from_disk) > 500, "restored from disk: {}", from_disk["timings"]);
    assert_eq!(reply(&from_disk), cold, "restored from disk");
}

/// Replay mode, with speculation configured: every way of reaching the second turn of one
/// conversation gives one reply, logprobs and all.
#[test]
fn replay_mode_gives_one_reply_cold_under_load_restored_pooled_and_per_request() {
    let Some(m) = model() else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let replay = json!({"deterministic": true, "speculative": {"type": "ngram-mod"}});
    let mut on_disk = replay.clone();
    on_disk["prompt_cache"] = json!({"dir": cache_dir("replay")});
    let e = engine(&m, on_disk.clone());
    let r1 = text(&e.infer(&request(&turn1(), json!({}))));
    let second = request(&turn2(&r1), json!({}));
    let cold = cold_under_load(&m, &replay, &second, &[2, 1, 2]);
    // The engine going on holds its reply's cells too, computed token by token.
    assert_kept_and_restored_give(&cold, &m, e, on_disk, &second);

    // In a pool, beside other requests; and per request in a default pool that speculates.
    for (label, config, extra) in [
        ("a replay-mode pool", replay.clone(), json!({})),
        ("a default pool, the request in replay mode", json!({}), json!({"deterministic": true})),
    ] {
        assert_eq!(reply(&beside_others(&m, config, &request(&turn2(&r1), extra))), cold, "{label}");
    }
}

/// The default mode of an engine: cold replies agree whatever the host's load, and the engine
/// that answered the first turn, a restore from RAM and one from disk give the cold reply.
#[test]
fn the_default_mode_gives_the_cold_reply_under_load_kept_and_restored() {
    let Some(m) = model() else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let on_disk = json!({"prompt_cache": {"dir": cache_dir("default")}});
    let e = engine(&m, on_disk.clone());
    let r1 = text(&e.infer(&request(&turn1(), json!({}))));
    let second = request(&turn2(&r1), json!({}));
    let cold = cold_under_load(&m, &json!({}), &second, &[2, 1]);
    assert_kept_and_restored_give(&cold, &m, e, on_disk, &second);
}

/// `req`'s response from a pool of three (`config` over its defaults) while two other requests
/// run beside it.
fn beside_others(m: &std::path::Path, config: Value, req: &Value) -> Value {
    let mut c = json!({"model_path": m, "n_ctx": 4096, "n_parallel": 3, "n_threads": 2});
    c.as_object_mut().unwrap().extend(config.as_object().unwrap().clone());
    let pool = CPool::open(&c).unwrap();
    std::thread::scope(|s| {
        let others: Vec<_> = ["Tell me about copper.", "Count from one to twenty."]
            .iter()
            .map(|q| {
                let pool = &pool;
                s.spawn(move || {
                    pool.infer(&request(&[json!({"role": "user", "content": q})], json!({"max_tokens": 40})))
                })
            })
            .collect();
        let got = pool.infer(req);
        others.into_iter().for_each(|h| assert!(h.join().unwrap()["error"].is_null()));
        got
    })
}

/// The default mode: the same reply on 1 and 2 threads (a lone token past 512 cells is not
/// computed in chunks of the thread count), and with speculation as without it.
#[test]
fn the_default_mode_gives_one_reply_on_any_thread_count_and_with_speculation() {
    let Some(m) = model() else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let plain = json!({"adaptive_threads": false, "prompt_cache": {"ram_bytes": 0}});
    let second = |extra: Value| request(&turn2("Rule 211 is about the copper window."), extra);
    let on = |threads: usize, extra: Value| {
        let mut c = plain.clone();
        c["n_threads"] = json!(threads);
        c["speculative"] = json!({"type": "ngram-mod", "adaptive": false});
        engine(&m, c).infer(&second(extra))
    };
    let two = reply(&on(2, json!({"speculative": false})));
    assert_eq!(reply(&on(1, json!({"speculative": false}))), two, "1 thread vs 2");
    let drafted = on(2, json!({"speculative": true}));
    assert!(drafted["timings"]["draft_n"].as_u64().unwrap() > 0, "nothing was drafted: {}", drafted["timings"]);
    assert_eq!(reply(&drafted), two, "speculation on vs off");
}
