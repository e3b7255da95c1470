//! The disk tier's damage corpus (issue 42): each case damages a prompt-cache directory the way
//! bad luck or someone who can write to it would, then a fresh process (this test binary run
//! again) answers a request on it, and another fresh process after that. Every case must give:
//! no crash, the cold reply, at most one warning, no file outside the directory changed, and a
//! next process that restores the conversation and answers the same (no lasting failure).
//!
//! CI runs one case of each kind (`LLB_CORPUS_N`, default 13); scripts/prompt-cache-corpus.sh
//! runs the whole corpus (default 65 cases, 130+ processes) and prints the figures that
//! docs/reliability.md quotes.

mod common;

use common::cache_file::*;
use common::cabi::CEngine;
use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const KINDS: usize = 13;
const NAMES: [&str; KINDS] = [
    "a byte of the header flipped",
    "a byte of the tokens flipped",
    "a byte of the state flipped",
    "truncated",
    "junk appended",
    "another conversation's file under this name",
    "a symlink to a file outside the directory",
    "another conversation's state under these tokens, no secret",
    "too few cells, sealed with the secret",
    "every position 0, sealed with the secret",
    "a cell at position -1, sealed with the secret",
    "NaN in V, sealed with the secret",
    "a byte of the state flipped, read by two processes at once",
];

/// What case `i` does to the directory's one file (kind `i % KINDS`, seeded by `i / KINDS`).
fn damage(i: usize, file: &Path, other: &Path, victim: &Path, key: &Path) -> &'static str {
    let seed = (i / KINDS) as u64 * 7919 + 17;
    let mut b = std::fs::read(file).unwrap();
    let n = u32::from_le_bytes(b[40..44].try_into().unwrap()) as usize;
    let len = b.len();
    let pick = |lo: usize, hi: usize| lo + (seed as usize * 2654435761) % (hi - lo);
    let (tokens, mut state) = open_file(file);
    let (mut t2, name) = (tokens.clone(), NAMES[i % KINDS]);
    match i % KINDS {
        0 => b[pick(0, HEADER)] ^= 1 << (seed % 8),
        1 => b[pick(HEADER, HEADER + 4 * n)] ^= 1 << (seed % 8),
        2 | 12 => b[pick(HEADER + 4 * n, len)] ^= 1 << (seed % 8),
        3 => b.truncate(pick(1, len)),
        4 => b.extend((0..pick(1, 5000)).map(|k| (k as u64 * seed) as u8)),
        5 => b = std::fs::read(other).unwrap(),
        6 => {
            std::fs::remove_file(file).unwrap();
            std::os::unix::fs::symlink(victim, file).unwrap();
            return name;
        }
        7 => {
            let (_, other_state) = open_file(other);
            seal(file, file, &tokens, &other_state, None);
            return name;
        }
        k => {
            let how = [Wrong::TooFewCells, Wrong::EveryPositionZero, Wrong::PositionMinusOne, Wrong::NanInV][k - 8];
            make_wrong(how, &mut t2, &mut state);
            seal(file, file, &t2, &state, Some(key));
            return name;
        }
    }
    std::fs::write(file, b).unwrap();
    name
}

fn request() -> Value {
    let text: Vec<String> = (0..300).map(|i| format!("silo{}", i % 37)).collect();
    let messages = [json!({"role": "system", "content": text.join(" ")}), json!({"role": "user", "content": "Count the sacks."})];
    json!({"messages": messages, "max_tokens": 10, "temperature": 0})
}

fn cache(dir: &Path, key: &Path) -> Value {
    json!({"model_path": model(), "n_ctx": 2048, "n_threads": 1, "prompt_cache": {"dir": dir, "secret_file": key}})
}

/// Runs a fresh process that answers `request()` on `dir`; its reply (None: it crashed or
/// failed).
fn child(dir: &Path, key: &Path) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "corpus_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("LLB_CORPUS_CHILD", format!("{}|{}", dir.display(), key.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn reply_of(c: std::process::Child) -> Option<Value> {
    let out = c.wait_with_output().unwrap();
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find_map(|l| l.split_once("LLB_CORPUS_REPLY ").map(|(_, r)| r))?;
    serde_json::from_str(line).ok()
}

/// The child: one engine on the directory, one request, its reply on stdout.
#[test]
#[ignore = "run by the_damage_corpus"]
fn corpus_child() {
    let Ok(arg) = std::env::var("LLB_CORPUS_CHILD") else { return };
    let (dir, key) = arg.split_once('|').unwrap();
    let e = CEngine::open(&cache(Path::new(dir), Path::new(key))).unwrap();
    println!("LLB_CORPUS_REPLY {}", e.infer(&request()));
}

/// What went wrong in one case, if anything.
fn run_case(i: usize, cold: &str, other: &Path) -> Result<usize, String> {
    let base = fixtures_dir().join(format!("prompt-cache-corpus-{i}"));
    let (dir, key, victim) = (base.join("dir"), base.join("secret.key"), base.join("victim.conf"));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(&victim, b"outside the cache\n").unwrap();
    drop(CEngine::open(&cache(&dir, &key)).unwrap().infer(&request()));
    let file = files(&dir).pop().ok_or("no file written")?;
    let what = damage(i, &file, other, &victim, &key);
    let kids: Vec<_> = (0..if i % KINDS == 12 { 2 } else { 1 }).map(|_| child(&dir, &key)).collect();
    let mut processes = 0;
    for c in kids {
        processes += 1;
        let r = reply_of(c).ok_or(format!("case {i} ({what}): the process crashed or failed"))?;
        let content = r["choices"][0]["message"]["content"].to_string();
        let warnings = r["warnings"].as_array().map_or(0, Vec::len);
        // Of two racing processes, the later one may restore the state the other wrote after
        // it found the bad file: a sound state, restored.
        let restored_ok = r["timings"]["cache_restored_n"] == 0 || i % KINDS == 12;
        if content != cold || warnings > 1 || !restored_ok {
            return Err(format!("case {i} ({what}): {content} (cold {cold}), {warnings} warnings, {}", r["timings"]));
        }
    }
    if std::fs::read(&victim).unwrap() != b"outside the cache\n" {
        return Err(format!("case {i} ({what}): a file outside the directory changed"));
    }
    let next = reply_of(child(&dir, &key)).ok_or(format!("case {i} ({what}): the next process failed"))?;
    let content = next["choices"][0]["message"]["content"].to_string();
    if content != cold || !next["warnings"].is_null() || next["timings"]["cache_restored_n"] == 0 {
        return Err(format!("case {i} ({what}): the next process: {next}"));
    }
    let _ = std::fs::remove_dir_all(&base);
    Ok(processes + 1)
}

#[test]
fn the_damage_corpus() {
    let n: usize = std::env::var("LLB_CORPUS_N").ok().and_then(|v| v.parse().ok()).unwrap_or(KINDS);
    let m = model();
    let cold = CEngine::open(&json!({"model_path": m, "n_ctx": 2048, "n_threads": 1, "prompt_cache": {"ram_bytes": 0}}))
        .unwrap()
        .infer(&request())["choices"][0]["message"]["content"]
        .to_string();
    // Another conversation's file (cases 5 and 7): the same model, another prompt.
    let other_base = fixtures_dir().join("prompt-cache-corpus-other");
    let _ = std::fs::remove_dir_all(&other_base);
    let other_req = json!({"messages": [{"role": "system", "content": "granary ".repeat(300)}, {"role": "user", "content": "Hi."}], "max_tokens": 4});
    CEngine::open(&cache(&other_base.join("dir"), &other_base.join("key"))).unwrap().infer(&other_req);
    let other: PathBuf = files(&other_base.join("dir")).pop().unwrap();
    let t = std::time::Instant::now();
    let (mut processes, mut failures) = (0, Vec::new());
    for i in 0..n {
        match run_case(i, &cold, &other) {
            Ok(p) => processes += p,
            Err(e) => failures.push(e),
        }
    }
    println!(
        "prompt-cache damage corpus: {n} cases, {processes} fresh processes, {} failed, in {:.0} s",
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
