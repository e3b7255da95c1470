//! The prompt cache (issue 33) through the C ABI: conversations that leave the context come back
//! from RAM or from disk without re-reading their prompt, across engines that stand for process
//! restarts, and give the replies reading them cold gives; bad files are ignored with a warning.

mod common;

use common::cabi::{CEngine, CPool};
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The Qwen2.5 template over a 32k-token SPM vocabulary (random weights): cheap to run.
fn model() -> PathBuf {
    let mut o = llb::fixture::FixtureOptions::new("llama-spm");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    fixture_with("pool-llama-spm-qwen2.5", &o)
}

/// A directory of this test's own, emptied first.
fn cache_dir(name: &str) -> PathBuf {
    let d = fixtures_dir().join(format!("prompt-cache-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.retain(|p| p.extension().is_some_and(|e| e == "llbkv"));
    v.sort();
    v
}

fn engine(model: &Path, cache: Value) -> CEngine {
    CEngine::open(&json!({"model_path": model, "n_ctx": 4096, "n_threads": 1, "prompt_cache": cache}))
        .unwrap_or_else(|e| panic!("create failed: {e}"))
}

/// A system prompt of about `words` words, different for each `topic`.
fn system(topic: &str, words: usize) -> Value {
    let text: Vec<String> = (0..words).map(|i| format!("{topic}{}", i % 37)).collect();
    json!({"role": "system", "content": text.join(" ")})
}

fn request(messages: &[Value]) -> Value {
    json!({"messages": messages, "max_tokens": 12, "temperature": 0})
}

/// The reply's content and calls (names and arguments: call ids are drawn per request).
fn content(resp: &Value) -> String {
    let m = &resp["choices"][0]["message"];
    assert!(resp["error"].is_null(), "{resp}");
    let calls: Vec<String> = m["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{}({})", c["function"]["name"], c["function"]["arguments"]))
        .collect();
    format!("{}|{}", m["content"], calls.join(","))
}

/// Prompt tokens the reply did not find in the KV cache (read), and those restored.
fn read_and_restored(resp: &Value) -> (u64, u64) {
    assert!(resp["error"].is_null(), "{resp}");
    let read = resp["usage"]["prompt_tokens"].as_u64().unwrap_or_else(|| panic!("{resp}"))
        - resp["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    (read, resp["timings"]["cache_restored_n"].as_u64().unwrap())
}

fn warnings(resp: &Value) -> String {
    resp["warnings"].to_string()
}

/// Two conversations with different long system prompts, alternating on one engine, three
/// turns each: from the second turn on each is restored, not re-read, and every reply is the
/// one an engine without the cache gives.
#[test]
fn an_engine_alternating_two_conversations_restores_each_instead_of_rereading_it() {
    let m = model();
    let cached = engine(&m, json!({}));
    let cold = engine(&m, json!({"ram_bytes": 0}));
    let mut convs = [vec![system("harbor", 300)], vec![system("orchard", 300)]];
    let mut last_prompt = [0u64; 2];
    for turn in 0..3 {
        for (c, conv) in convs.iter_mut().enumerate() {
            conv.push(json!({"role": "user", "content": format!("Question {turn} about topic {c}?")}));
            let a = cached.infer(&request(conv));
            let b = cold.infer(&request(conv));
            assert_eq!(content(&a), content(&b), "turn {turn}, conversation {c}: restored == recomputed");
            let (read, restored) = read_and_restored(&a);
            let (read_cold, _) = read_and_restored(&b);
            if turn > 0 {
                assert!(restored > 300, "turn {turn}/{c}: restored {restored}: {}", a["timings"]);
                // The turn's new tokens (the last reply's among them) or a tile's 64, whichever
                // is more: an engine keeps its prompt's cells and reads a prompt's end as a cold
                // read does (docs/design.md, "Determinism"); at most 0.2x the prompt.
                let total = a["usage"]["prompt_tokens"].as_u64().unwrap();
                assert_eq!(read, (total - last_prompt[c]).max(64), "turn {turn}/{c}: read of {total} tokens");
                assert!(read * 5 <= total, "turn {turn}/{c}: read {read} of {total} tokens");
                assert!(read_cold > 300, "without the cache every turn re-reads: {read_cold}");
            }
            last_prompt[c] = a["usage"]["prompt_tokens"].as_u64().unwrap();
            conv.push(a["choices"][0]["message"].clone());
        }
    }
}

/// An engine with a `dir` answers; a new engine on the same `dir` (a restarted process) gets
/// the same request's prompt from disk and the same reply.
#[test]
fn a_restarted_engine_reads_the_prompt_from_disk_and_answers_the_same() {
    let m = model();
    let dir = cache_dir("restart");
    let req = request(&[system("lighthouse", 500), json!({"role": "user", "content": "What is the answer?"})]);
    let first = {
        let e = engine(&m, json!({"dir": dir}));
        e.infer(&req)
    };
    assert_eq!(files(&dir).len(), 1, "written when the engine was freed");
    let e = engine(&m, json!({"dir": dir}));
    let second = e.infer(&req);
    assert_eq!(content(&first), content(&second));
    let n = second["usage"]["prompt_tokens"].as_u64().unwrap();
    let (read, restored) = read_and_restored(&second);
    assert!(restored * 10 >= n * 9 && read < n / 10, "restored {restored}, read {read} of {n}");
    assert!(second["timings"]["cache_restore_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(warnings(&second), "null");
}

/// What can happen to a file between processes.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Truncated,
    Corrupted,
    /// Another model's file under this model's name.
    ForeignModel,
    /// Written by another llb (its state format differs: another key in the header).
    OtherVersion,
}

fn damage(file: &Path, how: Damage, foreign: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    match how {
        Damage::Truncated => bytes.truncate(bytes.len() - 4096),
        Damage::Corrupted => {
            let at = bytes.len() - 777;
            bytes[at] ^= 0x40;
        }
        Damage::ForeignModel => bytes = std::fs::read(foreign).unwrap(),
        Damage::OtherVersion => bytes[20] ^= 1,
    }
    std::fs::write(file, bytes).unwrap();
}

/// Truncated, corrupted, foreign-model and other-version files: each ignored with a
/// `prompt_cache_ignored` warning (and event), deleted, and the request answered cold with the
/// reply it gets without a cache.
#[test]
fn bad_cache_files_are_ignored_with_a_warning_and_the_answer_is_the_cold_one() {
    let m = model();
    // The same vocabulary and template with other weights: the same tokens, another model.
    let mut o = llb::fixture::FixtureOptions::new("llama-spm");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    o.seed = 99;
    let other = fixture_with("prompt-cache-other-weights", &o);
    let req = request(&[system("granary", 400), json!({"role": "user", "content": "Count the sacks."})]);
    let cold = content(&engine(&m, json!({"ram_bytes": 0})).infer(&req));
    let foreign_dir = cache_dir("foreign");
    engine(&other, json!({"dir": foreign_dir})).infer(&req);
    let foreign = files(&foreign_dir).pop().expect("the other model's file");
    for how in [Damage::Truncated, Damage::Corrupted, Damage::ForeignModel, Damage::OtherVersion] {
        let dir = cache_dir(&format!("{how:?}"));
        engine(&m, json!({"dir": dir})).infer(&req);
        let file = files(&dir).pop().expect("a file");
        damage(&file, how, &foreign);
        let e = engine(&m, json!({"dir": dir}));
        let resp = e.infer(&req);
        assert_eq!(content(&resp), cold, "{how:?}: the cold answer");
        assert_eq!(read_and_restored(&resp).1, 0, "{how:?}: nothing restored");
        assert!(warnings(&resp).contains("prompt_cache_ignored"), "{how:?}: {}", warnings(&resp));
        assert!(!e.events.of_type("warning").is_empty(), "{how:?}: a warning event");
        assert!(!file.exists(), "{how:?}: deleted while the engine that found it runs");
    }
}

/// Restore is exact at temperature 0 in several template families: plain text, tool calls,
/// reasoning.
#[test]
fn a_restored_prompt_gives_the_reply_of_a_cold_one_in_several_families() {
    let tools = llb::fixture::sample_tools();
    let cases = [
        ("plain (Qwen2.5)", "Qwen-Qwen2.5-7B-Instruct", json!({})),
        ("tools (Llama-3.1)", "meta-llama-Llama-3.1-8B-Instruct", json!({"tools": tools, "tool_choice": "required"})),
        ("reasoning (Qwen3)", "Qwen-Qwen3-0.6B", json!({"tools": tools, "reasoning_format": "auto"})),
    ];
    for (label, template, extra) in cases {
        let m = corpus_fixture(template, false);
        let dir = cache_dir(&format!("family-{template}"));
        let mut req = request(&[system("meadow", 300), json!({"role": "user", "content": "Plan the day."})]);
        req.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        req["max_tokens"] = json!(24);
        let first = engine(&m, json!({"dir": dir})).infer(&req);
        let second = engine(&m, json!({"dir": dir})).infer(&req);
        assert!(read_and_restored(&second).1 > 300, "{label}: restored {}", second["timings"]);
        assert_eq!(content(&first), content(&second), "{label}");
        assert_eq!(
            first["choices"][0]["message"]["reasoning_content"], second["choices"][0]["message"]["reasoning_content"],
            "{label}"
        );
    }
}

/// A pool whose KV cache holds fewer conversations than it serves: evicted conversations come
/// back from RAM; the disk tier stays within its budget; stats report both tiers.
#[test]
fn a_pool_serving_more_conversations_than_it_holds_restores_evicted_ones_within_budget() {
    let m = model();
    let dir = cache_dir("pool");
    let budget = 3 * 1024 * 1024;
    let pool = CPool::open(&json!({"model_path": m, "n_ctx": 2048, "n_parallel": 2, "n_threads": 1,
        "prompt_cache": {"dir": dir, "disk_bytes": budget}}))
    .unwrap();
    let convs: Vec<Value> = (0..6).map(|i| system(&format!("topic{i}x"), 300)).collect();
    let (mut read_later, mut restored_later) = (0, 0);
    for round in 0..2 {
        for (i, s) in convs.iter().enumerate() {
            let resp = pool.infer(&request(&[s.clone(), json!({"role": "user", "content": format!("Hello {i}")})]));
            assert!(resp["error"].is_null(), "{resp}");
            if round == 1 {
                let (read, restored) = read_and_restored(&resp);
                read_later += read;
                restored_later += restored;
            }
            let bytes: u64 = files(&dir).iter().map(|f| f.metadata().unwrap().len()).sum();
            assert!(bytes <= budget, "disk {bytes} > budget {budget}");
        }
    }
    let stats = pool.stats();
    let pc = &stats["prompt_cache"];
    assert!(restored_later > 6 * 250, "the second round restored {restored_later}: {pc}");
    assert!(read_later < 6 * 60, "the second round read {read_later}");
    assert!(pc["hits_ram"].as_u64().unwrap() + pc["hits_disk"].as_u64().unwrap() >= 6, "{pc}");
    for k in ["ram_bytes", "ram_budget", "disk_bytes", "disk_budget", "misses", "ram_evictions", "disk_evictions"] {
        assert!(pc[k].is_u64(), "stats lack {k}: {pc}");
    }
    assert!(pc["disk_bytes"].as_u64().unwrap() <= budget);
}

#[test]
fn bad_prompt_cache_configs_are_refused_by_name() {
    let m = model();
    for (cache, field) in [
        (json!({"disk_bytes": 5}), "prompt_cache.disk_bytes"),
        (json!({"dir": ""}), "prompt_cache.dir"),
        (json!({"ram": 5}), "prompt_cache"),
        (json!({"dir": "/proc/llb-no-such-dir/x"}), "prompt_cache.dir"),
    ] {
        let err = CEngine::open(&json!({"model_path": m, "prompt_cache": cache})).err().expect("refused");
        assert!(err.to_string().contains(field), "{cache}: {err}");
    }
}

/// Two processes sharing one `dir`, each switching between its own conversations and one they
/// share: neither crashes, every file is whole, and a third process restores them all. The
/// children are this test binary run again with `LLB_PC_CHILD` set (see `child_writes_a_dir`).
#[test]
fn two_processes_writing_one_dir_at_once_lose_nothing() {
    let dir = cache_dir("two-processes");
    let me = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|k| {
            std::process::Command::new(&me)
                .args(["--exact", "child_writes_a_dir", "--ignored", "--nocapture", "--test-threads=1"])
                .env("LLB_PC_CHILD", format!("{}|{k}", dir.display()))
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a child failed");
    }
    assert_eq!(files(&dir).len(), 5, "2 own conversations each and the shared one: {:?}", files(&dir));
    let e = engine(&model(), json!({"dir": dir}));
    for k in ["shared", "own0-0", "own0-1", "own1-0", "own1-1"] {
        let resp = e.infer(&child_request(k));
        assert!(read_and_restored(&resp).1 > 250, "{k}: {}", resp["timings"]);
        assert_eq!(warnings(&resp), "null");
    }
}

fn child_request(topic: &str) -> Value {
    request(&[system(topic, 300), json!({"role": "user", "content": "Go on."})])
}

/// The child of `two_processes_writing_one_dir_at_once_lose_nothing` (does nothing otherwise).
#[test]
#[ignore = "run by two_processes_writing_one_dir_at_once_lose_nothing"]
fn child_writes_a_dir() {
    let Ok(arg) = std::env::var("LLB_PC_CHILD") else { return };
    let (dir, k) = arg.split_once('|').unwrap();
    let e = engine(&model(), json!({"dir": dir}));
    for round in 0..2 {
        for topic in ["shared".to_string(), format!("own{k}-0"), format!("own{k}-1")] {
            let resp = e.infer(&child_request(&topic));
            assert!(resp["error"].is_null(), "{resp}");
            if round == 1 {
                assert!(read_and_restored(&resp).1 > 250, "{topic}: {}", resp["timings"]);
            }
        }
    }
}

/// Issue 41's fast state path, run on the CPU as it runs on a GPU (tensor copies grouped on
/// every buffer): a pool's sequences, whose generated cells interleave in the unified KV cache,
/// leave it as the cache fills and come back into the cells left free between the others. Each
/// state crosses in fewer copies than it has pieces, and in replay mode every restored
/// conversation gives its first reply again.
#[test]
fn a_pools_scattered_sequences_cross_in_grouped_copies_and_give_their_replies_again() {
    llb::fault::group_state_copies_everywhere(true);
    let m = model();
    let pool = std::sync::Arc::new(
        CPool::open(&json!({"model_path": m, "n_ctx": 2048, "n_parallel": 4, "n_threads": 1, "deterministic": true}))
            .unwrap(),
    );
    let ask = |i: usize| {
        let mut r = request(&[system(&format!("field{i}y"), 120), json!({"role": "user", "content": format!("Hi {i}")})]);
        r["max_tokens"] = json!(24);
        r
    };
    // Four at once, so that their replies' cells interleave; then four more, and the first four
    // again: the KV cache holds about three of them, so each round evicts (and keeps) the one
    // before.
    let round = |from: usize| -> Vec<Value> {
        let hs: Vec<_> = (from..from + 4)
            .map(|i| {
                let (p, r) = (pool.clone(), ask(i));
                std::thread::spawn(move || p.infer(&r))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    };
    let first = round(0);
    round(4);
    let again = round(0);
    let restored: u64 = again.iter().map(|r| read_and_restored(r).1).sum();
    for (i, (a, b)) in first.iter().zip(&again).enumerate() {
        assert_eq!(content(a), content(b), "conversation {i}");
    }
    let stats = pool.stats();
    let costs = &stats["cost_model"];
    let (copies, pieces) = (costs["state_copies"].as_u64().unwrap(), costs["state_pieces"].as_u64().unwrap());
    let pc = &stats["prompt_cache"];
    assert!(restored > 2 * 500, "restored {restored}: {pc}");
    // The KV cache holds three of the four at once: the fourth's state does not fit beside the
    // running three, and is kept (refused for now), not deleted as if it were bad.
    assert_eq!(pc["states_rejected"], 0, "{pc}");
    assert!(pieces > 2 * copies, "{copies} copies for {pieces} pieces: not grouped ({costs})");
}
