//! Pools through the C ABI (issue #10): many conversations at once on one batched context,
//! prompt prefixes shared across them, a KV budget with eviction, cancellation of one request
//! among many, a bounded queue, and the panic boundary with a scheduler.
//!
//! Tests here run one at a time (a static mutex): they measure KV reuse and RSS, and each pool
//! already runs many requests at once.

mod common;

use common::cabi::{assert_stream_matches, CPool, Events};
use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::time::Instant;

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Qwen2.5 template over a 32k-token SPM vocabulary (random weights): cheap to sample.
fn model() -> PathBuf {
    let mut o = llb::fixture::FixtureOptions::new("llama-spm");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    fixture_with("pool-llama-spm-qwen2.5", &o)
}

fn pool(n_parallel: u32, n_ctx: u32) -> CPool {
    // One compute thread: the fixture is tiny, and ggml's spinning threads slow down many times
    // over when a second one finds no free core (other tests or builds on a 2-core machine).
    CPool::open(&json!({"model_path": model(), "n_ctx": n_ctx, "n_parallel": n_parallel, "n_threads": 1}))
        .unwrap_or_else(|e| panic!("pool create failed: {e}"))
}

fn tools() -> Value {
    llb::fixture::sample_tools()
}

/// A long system prompt every conversation shares (with the tool list: ~600 tokens).
fn system() -> Value {
    json!({"role": "system", "content": "You are the assistant of a weather service. ".repeat(40)})
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Required,
    Named,
    Auto,
    /// A second turn: the call of a first turn and its result.
    SecondTurn,
}

fn request(kind: Kind, user: usize, stream: bool) -> Value {
    let mut messages = vec![system(), json!({"role": "user", "content": format!("Weather in city number {user}?")})];
    let tc = match kind {
        Kind::Required => json!("required"),
        Kind::Named => json!({"type": "function", "function": {"name": "get_time"}}),
        Kind::Auto => json!("auto"),
        Kind::SecondTurn => {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{user}"),
                "type": "function", "function": {"name": "get_weather", "arguments": format!("{{\"city\":\"C{user}\"}}")}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": format!("call_{user}"), "content": "sunny, 21 C"}));
            json!("required")
        }
    };
    json!({"messages": messages, "tools": tools(), "tool_choice": tc, "temperature": 0, "max_tokens": 64,
        "parallel_tool_calls": false, "stream": stream})
}

/// A complete, well-formed completion whose calls (required and named: exactly one) parse.
fn check(label: &str, r: &Value, kind: Kind) {
    assert_eq!(r["object"], "chat.completion", "{label}: {r}");
    let finish = r["choices"][0]["finish_reason"].as_str().unwrap_or_default();
    let calls = r["choices"][0]["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
    if !matches!(kind, Kind::Auto) {
        assert_eq!(finish, "tool_calls", "{label}: {r}");
        assert_eq!(calls.len(), 1, "{label}: {r}");
        let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(args.is_object(), "{label}: {r}");
    }
    if matches!(kind, Kind::Named) {
        assert_eq!(calls[0]["function"]["name"], "get_time", "{label}: {r}");
    }
    assert!(["stop", "length", "tool_calls"].contains(&finish), "{label}: {r}");
}

/// What must not change when a request runs among others: the message the model produced.
fn message(r: &Value) -> Value {
    let mut m = r["choices"][0]["message"].clone();
    for c in m["tool_calls"].as_array_mut().into_iter().flatten() {
        c["id"] = Value::Null; // ids are random
    }
    m
}

fn kind_of(i: usize) -> Kind {
    [Kind::Required, Kind::Named, Kind::Auto, Kind::SecondTurn][i % 4]
}

#[test]
fn sixteen_concurrent_conversations_are_valid_and_match_their_solo_runs() {
    let _s = serial();
    let p = Arc::new(pool(16, 16 * 1024));
    // Each request alone first (its solo result), on a fresh sequence each.
    let reqs: Vec<Value> = (0..16).map(|i| request(kind_of(i), i, i % 2 == 0)).collect();
    let solo: Vec<Value> = reqs.iter().map(|r| p.infer(r)).collect();
    let t = Instant::now();
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let (p, b, req) = (p.clone(), barrier.clone(), reqs[i].clone());
            std::thread::spawn(move || {
                let ev = Events::default();
                b.wait();
                let r = p.infer_with(&req, &ev);
                (r, ev.chunks())
            })
        })
        .collect();
    let mut equal = 0;
    for (i, h) in handles.into_iter().enumerate() {
        let (r, chunks) = h.join().unwrap();
        let label = format!("request {i} ({:?})", kind_of(i));
        check(&label, &r, kind_of(i));
        if i % 2 == 0 {
            assert_stream_matches(&label, &chunks, &r);
        }
        equal += (message(&r) == message(&solo[i])) as usize;
    }
    println!("16 concurrent requests in {:.2} s; {equal}/16 equal to their solo runs", t.elapsed().as_secs_f64());
    // Greedy decoding of the same tokens: batching changes only the order of floating-point
    // sums (docs/design.md), which on these fixtures does not flip a single argmax.
    assert_eq!(equal, 16, "batched greedy results equal the solo ones");
}

#[test]
fn a_prefix_shared_by_eight_cold_requests_is_evaluated_once() {
    let _s = serial();
    let p = Arc::new(pool(8, 8 * 1024));
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (p, b) = (p.clone(), barrier.clone());
            std::thread::spawn(move || {
                b.wait();
                p.infer(&request(Kind::Required, i, false))
            })
        })
        .collect();
    let results: Vec<Value> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let prompt = |r: &Value| r["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = |r: &Value| r["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    for (i, r) in results.iter().enumerate() {
        check(&format!("request {i}"), r, Kind::Required);
    }
    let evaluated: u64 = results.iter().map(|r| prompt(r) - cached(r)).sum();
    let longest = results.iter().map(prompt).max().unwrap();
    let sharing = results.iter().filter(|r| cached(r) * 10 >= prompt(r) * 9).count();
    println!("8 cold requests of ~{longest} prompt tokens: {evaluated} evaluated, {sharing} reused ≥ 90%");
    assert!(sharing >= 7, "all but the first reuse the shared prefix: {results:?}");
    assert!(evaluated < longest + 8 * 40, "the shared prefix was evaluated once: {evaluated} tokens");
}

#[test]
fn cancelling_one_of_eight_leaves_the_other_seven_complete_and_correct() {
    let _s = serial();
    let p = Arc::new(pool(8, 8 * 1024));
    let solo: Vec<Value> = (0..8).map(|i| p.infer(&request(Kind::Required, i, true))).collect();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (p, b) = (p.clone(), barrier.clone());
            std::thread::spawn(move || {
                let ev = Events::default();
                if i == 3 {
                    *ev.cancel_after_chunks.lock().unwrap() = 2;
                }
                b.wait();
                let r = p.infer_with(&request(Kind::Required, i, true), &ev);
                (r, ev.chunks())
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let (r, chunks) = h.join().unwrap();
        assert_stream_matches(&format!("request {i}"), &chunks, &r);
        if i == 3 {
            assert_eq!(r["choices"][0]["finish_reason"], "cancelled", "{r}");
        } else {
            check(&format!("request {i}"), &r, Kind::Required);
            assert_eq!(message(&r), message(&solo[i]), "request {i} is unaffected by the cancellation");
        }
    }
    check("after", &p.infer(&request(Kind::Named, 9, false)), Kind::Named);
}

/// A request waiting for a place says so (`"stage":"queued"` progress events, every 50 ms), so a
/// host's timeout cancels it there: it leaves the queue at once, not when its turn comes.
#[test]
fn a_queued_request_cancelled_by_its_host_leaves_the_queue_at_once() {
    let _s = serial();
    let p = Arc::new(pool(1, 4096));
    let long = json!({"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 100000,
                      "temperature": 1});
    let holder = {
        let (p, ev) = (p.clone(), Arc::new(Events::default()));
        *ev.cancel_at.lock().unwrap() = Some(Instant::now() + std::time::Duration::from_secs(3));
        std::thread::spawn(move || p.infer_with(&long, &ev))
    };
    while p.stats()["running"] != 1 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let ev = Events::default();
    let t = Instant::now();
    *ev.cancel_at.lock().unwrap() = Some(t + std::time::Duration::from_millis(200));
    let r = p.infer_with(&request(Kind::Named, 1, false), &ev);
    let took = t.elapsed();
    assert_eq!(r["choices"][0]["finish_reason"], "cancelled", "{r}");
    // At once: within the next queued event (50 ms) of the 200 ms timeout, with room for a loaded
    // CI machine; the request it waits behind runs for 3 s.
    assert!(took.as_millis() < 500, "cancelled within {took:?}");
    assert!(ev.of_type("progress").iter().any(|e| e["stage"] == "queued"), "it said it was queued");
    assert_eq!(p.stats()["queued"], 0, "its place is free");
    assert_eq!(p.stats()["running"], 1, "the holder runs on");
    assert_eq!(holder.join().unwrap()["choices"][0]["finish_reason"], "cancelled");
}

/// Conversations whose prompts do not fit the KV budget together: idle ones are evicted, running
/// ones parked and rebuilt, and every result is still right.
#[test]
fn a_small_kv_budget_evicts_idle_sequences_and_rebuilds_them() {
    let _s = serial();
    // ~700 prompt tokens each, no prefix shared: the budget holds two conversations, not four.
    let p = Arc::new(pool(4, 1536));
    let request = |kind, i: usize, stream| {
        let mut r = request(kind, i, stream);
        r["messages"][0]["content"] = json!(format!("{i} {}", r["messages"][0]["content"].as_str().unwrap()));
        r
    };
    let solo: Vec<Value> = (0..4).map(|i| p.infer(&request(Kind::Required, i, false))).collect();
    let held = |p: &CPool| p.stats()["tokens_held"].as_array().unwrap().iter().filter(|v| v.as_u64() > Some(0)).count();
    assert!(held(&p) <= 2, "idle sequences were evicted to fit: {}", p.stats());
    // The first conversation comes back after it was evicted: rebuilt, same answer.
    let again = p.infer(&request(Kind::Required, 0, false));
    assert_eq!(message(&again), message(&solo[0]));
    // Four at once: some are parked while the others finish; all complete correctly.
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let (p, req) = (p.clone(), request(Kind::Required, i, false));
            std::thread::spawn(move || p.infer(&req))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = h.join().unwrap();
        check(&format!("request {i}"), &r, Kind::Required);
        assert_eq!(message(&r), message(&solo[i]), "request {i}");
    }
    // A prompt larger than the whole budget is context_overflow, and the pool goes on.
    let mut big = request(Kind::Required, 0, false);
    big["messages"][0]["content"] = json!("weather ".repeat(2000));
    let e = p.infer(&big);
    assert_eq!(e["code"], "context_overflow", "{e}");
    check("after overflow", &p.infer(&request(Kind::Named, 1, false)), Kind::Named);
}

#[test]
fn a_full_queue_is_queue_full_at_once() {
    let _s = serial();
    let p = Arc::new(
        CPool::open(&json!({"model_path": model(), "n_ctx": 4096, "n_parallel": 1, "max_queue": 1, "n_threads": 1}))
            .unwrap(),
    );
    // The first request holds the pool: its callback blocks until released.
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let release = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let first = {
        let (p, release) = (p.clone(), release.clone());
        std::thread::spawn(move || {
            let ev = Events::default();
            let tx = Mutex::new(Some(started_tx));
            *ev.on_event.lock().unwrap() = Some(Box::new(move |_| {
                if let Some(tx) = tx.lock().unwrap().take() {
                    tx.send(()).unwrap();
                    let (m, cv) = &*release;
                    let _g = cv.wait_while(m.lock().unwrap(), |r| !*r).unwrap();
                }
            }));
            p.infer_with(&request(Kind::Required, 0, false), &ev)
        })
    };
    started_rx.recv().unwrap();
    let second = {
        let p = p.clone();
        std::thread::spawn(move || p.infer(&request(Kind::Named, 1, false)))
    };
    // The second is queued (the stats show it) before the third arrives.
    while p.stats()["queued"] != 1 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let third = p.infer(&request(Kind::Named, 2, false));
    assert_eq!(third["code"], "queue_full", "{third}");
    *release.0.lock().unwrap() = true;
    release.1.notify_all();
    check("first", &first.join().unwrap(), Kind::Required);
    check("second", &second.join().unwrap(), Kind::Named);
}

/// 200 requests from 8 threads, a third of them cancelled at a random point: no deadlock, every
/// result well-formed, and the pool's memory flat.
#[test]
fn random_joins_leaves_and_cancels() {
    let _s = serial();
    let p = Arc::new(pool(4, 8 * 1024));
    let rss0 = rss_kb();
    let handles: Vec<_> = (0..8u64)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                let mut x = t * 0x9E37_79B9 + 1;
                for n in 0..25 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let kind = kind_of((x % 4) as usize);
                    let ev = Events::default();
                    let cancel = x % 3 == 0;
                    if cancel {
                        *ev.cancel_after_chunks.lock().unwrap() = 1 + (x % 6) as usize;
                    }
                    // Short replies: this test is about joining and leaving, not about calls.
                    let mut req = request(kind, (x % 50) as usize, true);
                    req["max_tokens"] = json!(16);
                    let r = p.infer_with(&req, &ev);
                    let label = format!("thread {t} request {n} ({kind:?}, cancel {cancel})");
                    assert_stream_matches(&label, &ev.chunks(), &r);
                    let finish = r["choices"][0]["finish_reason"].as_str().unwrap_or_default();
                    assert!(["stop", "length", "tool_calls", "cancelled"].contains(&finish), "{label}: {r}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = p.stats();
    assert_eq!((s["running"].as_u64(), s["queued"].as_u64()), (Some(0), Some(0)), "{s}");
    check("after", &p.infer(&request(Kind::Required, 1, false)), Kind::Required);
    println!("RSS {} → {} kB over 200 requests", rss0, rss_kb());
}

/// Anonymous resident memory (heap, KV cache, buffers): what a leak grows. File-backed pages of
/// the mmapped weights come and go with the tokens the requests touch, and are not counted.
fn rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap()
}

/// 1,000 conversations opened and closed on one pool: memory stays flat.
#[test]
fn rss_is_flat_over_a_thousand_conversations() {
    let _s = serial();
    if rerun_without_thread_caches("rss_is_flat_over_a_thousand_conversations") {
        return;
    }
    let p = Arc::new(pool(4, 4 * 1024));
    // Each conversation its own prompt (no prefix shared beyond a few tokens), so sequences are
    // taken, evicted and reused all the time; short replies without a grammar keep it quick.
    let one = |i: usize| {
        let mut r = request(Kind::Auto, i, false);
        r["messages"][0]["content"] = json!(format!("Conversation {i}. You answer questions about the weather."));
        r["max_tokens"] = json!(8);
        r
    };
    let run = |from: usize, to: usize| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in (from..to).filter(|i| i % 4 == t) {
                        let r = p.infer(&one(i));
                        assert_eq!(r["object"], "chat.completion", "{r}");
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
    };
    let t = Instant::now();
    let mut samples = Vec::new();
    for (from, to) in [(0, 100), (100, 550), (550, 1000)] {
        run(from, to);
        // The prompt cache keeps a state of each conversation that leaves (~90 KB here) in a
        // RAM tier bounded by its budget: full after warm-up, its fill level still moves by up
        // to a state. The leak check is on everything else.
        let pc = &p.stats()["prompt_cache"];
        assert!(pc["stored"].as_u64() > Some(to as u64 / 2), "conversations leaving are kept: {pc}");
        let kept = pc["ram_bytes"].as_u64().unwrap();
        samples.push((to, malloc_in_use() - kept, rss_kb()));
    }
    println!(
        "1000 conversations in {:.1} s; (conversation, malloc'd bytes besides the prompt cache's states, RssAnon kB): {samples:?}",
        t.elapsed().as_secs_f64()
    );
    // As in tests/stress.rs: what malloc holds is the strict check (it moves only with
    // allocation), RSS the loose one (glibc keeps pages and adds arenas in steps; the cache's
    // states are part of it).
    let [(_, _, warm), (mid, mid_heap, _), (end, end_heap, end_rss)] = samples[..] else { unreachable!() };
    let late = (end_heap as f64 - mid_heap as f64) / (end - mid) as f64;
    assert!(late < 64.0, "malloc'd bytes grew {late:.1} per conversation from {mid} to {end}: a leak");
    let growth = (end_rss as f64 - warm as f64) / warm as f64;
    assert!(growth < 0.10, "RSS grew {:.1} % over 900 conversations", growth * 100.0);
}

#[test]
fn a_panic_in_one_pool_request_is_internal_and_the_others_go_on() {
    let _s = serial();
    let p = Arc::new(pool(4, 8 * 1024));
    let others: Vec<_> = (0..3)
        .map(|i| {
            let p = p.clone();
            std::thread::spawn(move || p.infer(&request(Kind::Required, i, true)))
        })
        .collect();
    llb::fault::arm_panic("infer");
    let e = p.infer(&request(Kind::Required, 7, false));
    assert_eq!(e["code"], "internal", "{e}");
    for (i, h) in others.into_iter().enumerate() {
        check(&format!("other {i}"), &h.join().unwrap(), Kind::Required);
    }
    check("after", &p.infer(&request(Kind::Named, 7, false)), Kind::Named);
}

#[test]
fn pool_configs_are_validated() {
    let _s = serial();
    for (cfg, field) in [
        (json!({"model_path": model(), "n_parallel": 0}), "n_parallel"),
        (json!({"model_path": model(), "n_parallel": 1000}), "n_parallel"),
        (json!({"model_path": model(), "n_parallel": "4"}), "n_parallel"),
        (json!({"model_path": model(), "max_queue": -1}), "max_queue"),
    ] {
        let e = CPool::open(&cfg).err().unwrap_or_else(|| panic!("{cfg} opened"));
        assert_eq!(e["code"], "invalid_argument", "{cfg}: {e}");
        assert!(e["message"].as_str().unwrap().contains(field), "{cfg}: {e}");
    }
    // An engine runs one request at a time: n_parallel > 1 points at pools.
    let e = common::cabi::CEngine::open(&json!({"model_path": model(), "n_parallel": 4})).err().unwrap();
    assert!(e["message"].as_str().unwrap().contains("llb_pool_create"), "{e}");
    // A model without tools is refused by pools too.
    let mut o = llb::fixture::FixtureOptions::new("llama-spm");
    o.template = Some("{% for m in messages %}{{ m.content }}{% endfor %}".into());
    let plain = fixture_with("pool-plain", &o);
    let e = CPool::open(&json!({"model_path": plain})).err().unwrap();
    assert_eq!(e["code"], "tools_unsupported", "{e}");
}

/// Issue 36: 64 threads released by one barrier on `n_parallel` 2 + `max_queue` 1. Exactly 3
/// are accepted (the accepted ones hold their turn until every other call has returned, so the
/// count cannot depend on timing), the 61 others are `queue_full` within 50 ms each, and the
/// stats, sampled all along, never show more than the bound.
#[test]
// Over 60 lines: one burst scenario, its hold, sampler and checks read best in one place.
fn a_burst_of_64_gets_exactly_the_bound_and_the_rest_at_once() {
    let _s = serial();
    const N: usize = 64;
    let p = Arc::new(
        CPool::open(&json!({"model_path": model(), "n_ctx": 4096, "n_parallel": 2, "max_queue": 1, "n_threads": 1}))
            .unwrap(),
    );
    // Answers that came back (accepted ones count when they finish, refusals at once).
    let answered = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
    let barrier = Arc::new(Barrier::new(N));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut worst = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let s = p.stats();
                let held = s["running"].as_u64().unwrap() + s["queued"].as_u64().unwrap();
                assert!(held <= 3, "stats over the bound: {s}");
                worst = worst.max(held);
            }
            worst
        })
    };
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let (p, answered, barrier) = (p.clone(), answered.clone(), barrier.clone());
            std::thread::spawn(move || {
                let ev = Events::default();
                let hold = answered.clone();
                // An accepted request waits, at its first event, until the 61 others answered
                // (bounded: a broken bound fails the count below instead of hanging).
                *ev.on_event.lock().unwrap() = Some(Box::new(move |_| {
                    let (m, cv) = &*hold;
                    let deadline = std::time::Duration::from_secs(20);
                    let _g = cv.wait_timeout_while(m.lock().unwrap(), deadline, |n| *n < N - 3).unwrap();
                }));
                let req = request(Kind::Named, i, true);
                barrier.wait();
                let t = Instant::now();
                let r = p.infer_with(&req, &ev);
                let took = t.elapsed();
                let (m, cv) = &*answered;
                *m.lock().unwrap() += 1;
                cv.notify_all();
                (r, took)
            })
        })
        .collect();
    let results: Vec<(Value, std::time::Duration)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let worst = sampler.join().unwrap();
    let refused: Vec<_> = results.iter().filter(|(r, _)| r["code"] == "queue_full").collect();
    let accepted: Vec<_> = results.iter().filter(|(r, _)| r["object"] == "chat.completion").collect();
    assert_eq!((accepted.len(), refused.len()), (3, N - 3), "{:?}", results.iter().map(|r| &r.0["code"]).collect::<Vec<_>>());
    for (r, took) in &refused {
        assert!(took.as_millis() <= 50, "a refusal took {took:?}: {r}");
    }
    for (r, _) in &accepted {
        check("accepted in the burst", r, Kind::Named);
    }
    assert!(worst <= 3, "{worst}");
    let s = p.stats();
    assert_eq!((s["running"].as_u64(), s["queued"].as_u64(), s["preparing"].as_u64()), (Some(0), Some(0), Some(0)), "{s}");
}

/// Issue 31: what a constrained request needs per vocabulary is built when the engine or pool
/// opens, once per vocabulary, and shared: counted work, not a timer. A fresh engine's first
/// strict request builds no constraint engine; a second handle on the same model builds none at
/// create either, and its first request reuses the grammar the first handle compiled.
#[test]
fn a_fresh_handles_first_strict_request_builds_nothing_per_vocabulary() {
    let _s = serial();
    use llb::grammar::engine::{builds, compiles};
    let mut o = llb::fixture::FixtureOptions::new("qwen2");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    let path = fixture_with("pool-first-request-qwen2", &o);
    let config = json!({"model_path": path, "n_ctx": 2048, "n_parallel": 1, "n_threads": 1});
    let before = builds();
    let a = CPool::open(&config).unwrap();
    assert_eq!(builds(), before + 1, "the first handle on a new vocabulary builds its engine at create");
    let compiled = compiles();
    check("first", &a.infer(&request(Kind::Required, 1, false)), Kind::Required);
    assert_eq!(builds(), before + 1, "a request never builds an engine");
    assert_eq!(compiles(), compiled + 1, "the first request compiles its tool set's grammar, once");
    let b = CPool::open(&config).unwrap();
    check("second handle", &b.infer(&request(Kind::Required, 2, false)), Kind::Required);
    assert_eq!((builds(), compiles()), (before + 1, compiled + 1), "the second handle shares both");
    drop((a, b));
    // The model is freed with its last handle; its vocabulary's engine is kept for the next.
    let c = CPool::open(&config).unwrap();
    check("after a reload", &c.infer(&request(Kind::Required, 3, false)), Kind::Required);
    assert_eq!((builds(), compiles()), (before + 1, compiled + 1));
}
