//! The prompt cache's directory as an attacker who can write to it, and as bad luck, would use
//! it (issue 42): a planted symlink, a directory of another user's, a state filed under another
//! conversation's tokens, and states that pass the MAC but are wrong (too few cells, every
//! position 0, a cell at −1, NaN in V). None may change a reply, a file outside the directory,
//! or the next engine's behaviour; each bad state costs one cold read and one warning.

mod common;

use common::cabi::CEngine;
use common::cache_file::*;
use common::*;
use serde_json::{json, Value};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A cache directory of this test's own (gone first), and its secret's file beside it.
fn cache_dir(name: &str) -> (PathBuf, PathBuf) {
    let d = fixtures_dir().join(format!("prompt-cache-attack-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    let key = d.with_extension("key");
    let _ = std::fs::remove_file(&key);
    (d, key)
}

fn config(model: &Path, cache: Value) -> Value {
    json!({"model_path": model, "n_ctx": 4096, "n_threads": 1, "prompt_cache": cache})
}

fn engine(model: &Path, cache: Value) -> CEngine {
    CEngine::open(&config(model, cache)).unwrap_or_else(|e| panic!("create failed: {e}"))
}

fn at(model: &Path, dir: &Path, key: &Path) -> CEngine {
    engine(model, json!({"dir": dir, "secret_file": key}))
}

fn request(topic: &str, question: &str) -> Value {
    let text: Vec<String> = (0..400).map(|i| format!("{topic}{}", i % 37)).collect();
    let messages = [json!({"role": "system", "content": text.join(" ")}), json!({"role": "user", "content": question})];
    json!({"messages": messages, "max_tokens": 12, "temperature": 0})
}

fn content(resp: &Value) -> String {
    assert!(resp["error"].is_null(), "{resp}");
    resp["choices"][0]["message"]["content"].to_string()
}

fn restored(resp: &Value) -> u64 {
    resp["timings"]["cache_restored_n"].as_u64().unwrap_or_else(|| panic!("{resp}"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_directory_others_can_write_is_refused_and_files_are_private() {
    let m = model();
    let (dir, key) = cache_dir("modes");
    let e = at(&m, &dir, &key);
    e.infer(&request("quay", "Which berth?"));
    drop(e);
    let f = files(&dir);
    assert_eq!(f.len(), 1);
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&f[0]).unwrap().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(&key).unwrap().mode() & 0o777, 0o600);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = CEngine::open(&config(&m, json!({"dir": dir, "secret_file": key}))).err().expect("refused");
    assert!(err.to_string().contains("other users can write"), "{err}");
    if is_root() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let err = CEngine::open(&config(&m, json!({"dir": dir, "secret_file": key}))).err().expect("refused");
        assert!(err.to_string().contains("belongs to another user"), "{err}");
    }
    // Opting in to a shared directory opens it.
    engine(&m, json!({"dir": dir, "secret_file": key, "shared": true}));
}

/// An unprivileged user who can write to a shared directory plants symlinks where llb writes:
/// at the temporary names the old scheme used (`.NAME.PID-N.part`) and at the file's own name.
/// The file outside the directory they point to is never written.
#[test]
fn a_planted_symlink_clobbers_nothing() {
    let m = model();
    let (dir, key) = cache_dir("symlink");
    let req = request("vault", "Open it?");
    let cached = json!({"dir": dir, "secret_file": key, "shared": true});
    engine(&m, cached.clone()).infer(&req);
    let name = files(&dir).pop().unwrap();
    std::fs::remove_file(&name).unwrap();
    let victim = dir.with_extension("victim.conf");
    std::fs::write(&victim, b"root-only settings\n").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = name.file_name().unwrap().to_str().unwrap().to_owned();
    let mut links: Vec<String> = (0..4).map(|n| format!(".{file}.{}-{n}.part", std::process::id())).collect();
    links.push(file.clone());
    for l in &links {
        let mut ln = std::process::Command::new("ln");
        ln.arg("-s").arg(&victim).arg(dir.join(l));
        if is_root() {
            std::os::unix::process::CommandExt::uid(&mut ln, 65534); // the attacker is not root
        }
        assert!(ln.status().unwrap().success(), "planting {l}");
    }
    let e = engine(&m, cached.clone());
    let first = e.infer(&req);
    drop(e); // writes the conversation to the directory
    assert_eq!(std::fs::read(&victim).unwrap(), b"root-only settings\n", "the victim file is untouched");
    let meta = std::fs::symlink_metadata(&name).unwrap();
    assert!(meta.is_file(), "the cache file replaced the symlink");
    let again = engine(&m, cached).infer(&req);
    assert_eq!(content(&again), content(&first));
    assert!(restored(&again) > 0, "{again}");
}

/// Another conversation's state filed under the victim's tokens by someone who can write to the
/// directory but not read the secret: refused (MAC), the victim gets the cold reply, and what
/// llb writes afterwards answers right in the next engine.
#[test]
fn a_state_filed_under_another_conversations_tokens_is_refused() {
    let m = model();
    let (dir, key) = cache_dir("forged");
    let joke = request("cat", "Tell me a joke about a cat and a dog.");
    let victim = request("ledger", "Sum the ledger.");
    let cold = content(&engine(&m, json!({"ram_bytes": 0})).infer(&victim));
    at(&m, &dir, &key).infer(&joke);
    let joke_file = files(&dir).pop().unwrap();
    at(&m, &dir, &key).infer(&victim);
    let victim_file = files(&dir).into_iter().find(|f| *f != joke_file).unwrap();
    let (victim_tokens, _) = open_file(&victim_file);
    let (_, joke_state) = open_file(&joke_file);
    seal(&victim_file, &victim_file, &victim_tokens, &joke_state, None);
    let e = at(&m, &dir, &key);
    let resp = e.infer(&victim);
    assert_eq!(content(&resp), cold, "the forged state changes nothing");
    assert_eq!(restored(&resp), 0);
    assert!(resp["warnings"].to_string().contains("MAC"), "{}", resp["warnings"]);
    assert!(!victim_file.exists(), "deleted");
    drop(e);
    let next = at(&m, &dir, &key).infer(&victim);
    assert_eq!(content(&next), cold);
    assert!(restored(&next) > 0 && next["warnings"].is_null(), "{next}");
}

#[test]
fn a_wrong_state_costs_one_cold_read_and_one_warning_never_a_lasting_failure() {
    let m = model();
    let req = request("granary", "Count the sacks.");
    let hello = json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0});
    let cold = content(&engine(&m, json!({"ram_bytes": 0})).infer(&req));
    for how in [Wrong::TooFewCells, Wrong::EveryPositionZero, Wrong::PositionMinusOne, Wrong::NanInV] {
        let (dir, key) = cache_dir(&format!("{how:?}"));
        at(&m, &dir, &key).infer(&req);
        let file = files(&dir).pop().unwrap();
        let (mut tokens, mut state) = open_file(&file);
        make_wrong(how, &mut tokens, &mut state);
        seal(&file, &file, &tokens, &state, Some(&key));
        let e = at(&m, &dir, &key);
        let resp = e.infer(&req);
        assert_eq!(content(&resp), cold, "{how:?}: the cold reply");
        assert_eq!(restored(&resp), 0, "{how:?}");
        let w = resp["warnings"].to_string();
        assert!(w.contains("refused") && w.contains("deleted"), "{how:?}: {w}");
        assert!(!file.exists(), "{how:?}: the file is deleted");
        assert!(e.infer(&hello)["error"].is_null(), "{how:?}: the engine still answers");
        drop(e);
        // The next process: the state written at the last free is sound.
        let next = at(&m, &dir, &key).infer(&req);
        assert_eq!(content(&next), cold, "{how:?}");
        assert!(restored(&next) > 0 && next["warnings"].is_null(), "{how:?}: {next}");
    }
}
