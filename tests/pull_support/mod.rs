//! Helpers of tests/pull.rs: the mock hub, real split fixtures, pulls that record their events.
#![allow(dead_code)]

pub mod mock_hub;
pub mod split;

use crate::common;
use llb::error::Error;
use llb::fixture::{self, FixtureOptions};
use llb::pull::{Env, PullRequest};
use mock_hub::{MockFile, MockHub, MockRepo};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The secret the token tests look for everywhere.
pub const TOKEN: &str = "hf_mockSECRETtoken_7f3a9c1e5b2d4680";

/// A tool-capable model (Qwen2.5's template, qwen2 tokenizer).
pub fn tool_fixture() -> PathBuf {
    let mut o = FixtureOptions::new("qwen2");
    o.template = Some(fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    common::fixture_with("pull-tool-qwen2", &o)
}

/// A model whose template cannot call tools (Gemma 2).
pub fn non_tool_fixture() -> PathBuf {
    let mut o = FixtureOptions::new("llama-spm");
    o.template = Some(fixture::read_template("google-gemma-2-2b-it").unwrap());
    common::fixture_with("pull-notool-gemma2", &o)
}

pub fn tool_bytes() -> Vec<u8> {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| std::fs::read(tool_fixture()).unwrap()).clone()
}

pub fn non_tool_bytes() -> Vec<u8> {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| std::fs::read(non_tool_fixture()).unwrap()).clone()
}

pub fn tool_template() -> String {
    fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap()
}

/// A fresh, empty folder for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = common::fixtures_dir().join("pull").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A repo whose hub metadata shows the tool-capable template (so no pre-filter warning).
pub fn repo(id: &str, files: Vec<MockFile>) -> MockRepo {
    let mut r = MockRepo::new(id, files);
    r.gguf_template = Some(Some(tool_template()));
    r
}

/// A hub holding one repo, and a fresh cache folder.
pub fn setup(test: &str, r: MockRepo) -> (MockHub, PathBuf) {
    let hub = MockHub::start();
    hub.add_repo(r);
    (hub, temp_dir(test))
}

/// An anonymous request to the mock hub, caching under `cache`.
pub fn request(hub: &MockHub, cache: &Path, repo: &str) -> PullRequest {
    PullRequest {
        repo: repo.into(),
        endpoint: Some(hub.endpoint.clone()),
        cache_dir: Some(cache.to_string_lossy().into_owned()),
        ..Default::default()
    }
}

pub struct Run {
    pub result: Result<Value, Error>,
    pub events: Vec<Value>,
}

impl Run {
    pub fn ok(&self) -> &Value {
        match &self.result {
            Ok(v) => v,
            Err(e) => panic!("pull failed: {}", e.to_json()),
        }
    }

    pub fn err(&self) -> &Error {
        match &self.result {
            Ok(v) => panic!("pull succeeded, expected an error: {v}"),
            Err(e) => e,
        }
    }

    pub fn of_type(&self, ty: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == ty).collect()
    }

    pub fn warnings(&self) -> Vec<String> {
        self.of_type("pull_warning").iter().map(|w| w["code"].as_str().unwrap().to_string()).collect()
    }

    /// Everything the host saw, as text.
    pub fn all_text(&self) -> String {
        let mut s = match &self.result {
            Ok(v) => v.to_string(),
            Err(e) => e.to_json().to_string(),
        };
        for e in &self.events {
            s.push_str(&e.to_string());
        }
        s
    }
}

/// Pulls with an empty environment (no HF_TOKEN, no HF_HUB_OFFLINE from the machine).
pub fn run(req: &PullRequest) -> Run {
    run_env(req, &Env::default())
}

pub fn run_env(req: &PullRequest, env: &Env) -> Run {
    run_with(req, env, |_| true)
}

/// Pulls, recording events; `on_event` decides whether to continue.
pub fn run_with(req: &PullRequest, env: &Env, on_event: impl Fn(&Value) -> bool) -> Run {
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let result = llb::pull::pull_with_env(req, env, &move |v: &Value| {
        ev.lock().unwrap().push(v.clone());
        on_event(v)
    });
    let events = events.lock().unwrap().clone();
    Run { result, events }
}

/// Every file and link under `dir` (links not followed).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

pub fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}
