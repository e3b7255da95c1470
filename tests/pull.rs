//! `llb_model_pull` against a mock Hugging Face hub on 127.0.0.1 (tests/pull_support/mock_hub.rs):
//! the API, `resolve` with a 302 to a second "CDN" port, ranges, and the hub's error headers.
//! Every test starts its own hub and cache folder; nothing leaves the machine.

mod common;
mod pull_support;

use llb::error::ErrorCode;
use llb::pull::{self, Env, PullRequest};
use pull_support::mock_hub::{Fault, MockFile, MockHub, MockRepo, Route};
use pull_support::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

const MIB: u64 = 1 << 20;

fn snapshot(cache: &Path, repo: &str, commit: &str, file: &str) -> PathBuf {
    repo_dir(cache, repo).join("snapshots").join(commit).join(file)
}

// Over 60 lines: one scenario, step by step (pull, the files on disk, the refs, a second pull from
// the cache).
#[test]
fn public_repo_downloads_through_the_cdn_redirect_into_the_hf_layout() {
    let id = "acme/Tool-Model-GGUF";
    let bytes = tool_bytes();
    let sha = sha256_hex(&bytes);
    let r = repo(
        id,
        vec![MockFile::git("README.md", b"# model\n".to_vec()), MockFile::lfs("Tool-Model-Q4_K_M.gguf", bytes.clone())],
    );
    let commit = r.commit.clone();
    let (hub, cache) = setup("happy", r);
    hub.add_token(TOKEN);
    let mut req = request(&hub, &cache, id);
    req.token = Some(TOKEN.into());
    let run = run(&req);
    let v = run.ok();

    assert_eq!(v["type"], "pull_result");
    assert_eq!(v["repo"], id);
    assert_eq!(v["revision"], "main");
    assert_eq!(v["commit"], commit.as_str());
    assert_eq!(v["files"], json!(["Tool-Model-Q4_K_M.gguf"]));
    assert_eq!(v["sha256"], json!([sha]));
    assert_eq!(v["from_cache"], false);
    assert_eq!(v["bytes_downloaded"], bytes.len() as u64);
    assert_eq!(v["model_info"]["type"], "model_info");
    assert_eq!(v["model_info"]["supports_tools"], true);

    // The Hugging Face cache layout: snapshot link → blob named by sha256, and the ref.
    let path = snapshot(&cache, id, &commit, "Tool-Model-Q4_K_M.gguf");
    assert_eq!(v["path"], path.to_str().unwrap());
    assert_eq!(std::fs::read_link(&path).unwrap(), Path::new("../../blobs").join(&sha));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(std::fs::read_to_string(repo_dir(&cache, id).join("refs/main")).unwrap(), commit);
    let left: Vec<_> =
        files_under(&cache).into_iter().filter(|p| !p.starts_with(repo_dir(&cache, id).join("snapshots"))).collect();
    assert_eq!(
        left,
        vec![repo_dir(&cache, id).join("blobs").join(&sha), repo_dir(&cache, id).join("refs/main")],
        "no .incomplete or lock left"
    );

    // What the engine loads (llb_chat_create's loader) accepts the result's path.
    llb::init_backend();
    drop(llb::model::acquire(&path).unwrap());

    // The token went to the hub, never to the CDN the hub redirected to.
    let api = hub.requests(Route::Api);
    assert!(api.iter().all(|r| r.header("authorization") == Some(&format!("Bearer {TOKEN}"))));
    let resolve = hub.requests(Route::Resolve);
    assert_eq!(resolve.len(), 1);
    assert_eq!(resolve[0].status, 302);
    assert_eq!(resolve[0].header("authorization"), Some(format!("Bearer {TOKEN}").as_str()));
    assert!(
        resolve[0].target.contains(&format!("/resolve/{commit}/")),
        "downloads pin the listed commit: {}",
        resolve[0].target
    );
    let cdn = hub.requests(Route::Cdn);
    assert_eq!(cdn.len(), 1);
    assert_eq!(cdn[0].header("authorization"), None, "Authorization must be dropped when the redirect leaves the hub");
    assert_eq!(cdn[0].header("range"), None);

    // Events: resolved first, progress up to the total, no warnings.
    assert_eq!(run.events[0]["type"], "pull_resolved");
    assert_eq!(run.events[0]["files"][0]["name"], "Tool-Model-Q4_K_M.gguf");
    assert_eq!(run.events[0]["files"][0]["size"], bytes.len() as u64);
    assert_eq!(run.events[0]["files"][0]["cached"], false);
    let progress = run.of_type("pull_progress");
    assert!(!progress.is_empty());
    assert_eq!(progress.last().unwrap()["bytes"], bytes.len() as u64);
    assert_eq!(progress.last().unwrap()["total"], bytes.len() as u64);
    assert!(run.warnings().is_empty(), "{:?}", run.warnings());
}

#[test]
fn a_cached_model_is_used_without_downloading() {
    let id = "acme/cached-GGUF";
    let (hub, cache) = setup("cache-hit", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]));
    let req = request(&hub, &cache, id);
    let first = run(&req);
    assert_eq!(first.ok()["from_cache"], false);
    hub.clear_log();

    let second = run(&req);
    let v = second.ok();
    assert_eq!(v["from_cache"], true);
    assert_eq!(v["bytes_downloaded"], 0);
    assert_eq!(v["path"], first.ok()["path"]);
    assert_eq!(v["sha256"], first.ok()["sha256"]);
    assert!(hub.requests(Route::Resolve).is_empty(), "a cache hit must not resolve");
    assert!(hub.requests(Route::Cdn).is_empty());
    assert_eq!(second.events[0]["files"][0]["cached"], true);

    // A new commit on main with the same file: a new snapshot, the same blob, still no download.
    let new_commit = "1".repeat(40);
    hub.update_repo(id, |r| {
        r.commit = new_commit.clone();
        r.refs = vec![("main".into(), new_commit.clone())];
    });
    let third = run(&req);
    assert_eq!(third.ok()["commit"], new_commit.as_str());
    assert_eq!(third.ok()["from_cache"], true);
    assert!(hub.requests(Route::Cdn).is_empty());
    assert_eq!(std::fs::read_to_string(repo_dir(&cache, id).join("refs/main")).unwrap(), new_commit);
}

fn multi_quant_repo(id: &str) -> MockRepo {
    let b = tool_bytes();
    repo(
        id,
        vec![
            MockFile::lfs("Model-Q2_K.gguf", b.clone()),
            MockFile::lfs("Model-Q8_0.gguf", b.clone()),
            MockFile::lfs("Model-Q5_K_M.gguf", b.clone()),
            MockFile::lfs("Model-IQ4_XS.gguf", b.clone()),
            MockFile::lfs("Model-F16.gguf", b.clone()),
            MockFile::lfs("mmproj-Model-Q4_K_M.gguf", b),
        ],
    )
}

#[test]
fn quant_default_order_tag_and_missing_quant() {
    let id = "acme/multi-GGUF";
    let (hub, cache) = setup("quant", multi_quant_repo(id));

    // No quant: Q4_K_M is absent (the mmproj file does not count), Q5_K_M is next in the order.
    let v = run(&request(&hub, &cache, id)).ok().clone();
    assert_eq!(v["files"], json!(["Model-Q5_K_M.gguf"]));

    // An explicit quant, any case.
    let mut req = request(&hub, &cache, id);
    req.quant = Some("q8_0".into());
    assert_eq!(run(&req).ok()["files"], json!(["Model-Q8_0.gguf"]));

    // The CLI form REPO:QUANT, through parse_repo_arg and in the request's repo field.
    let arg = pull::parse_repo_arg(&format!("{id}:iq4_xs")).unwrap();
    assert_eq!((arg.repo.as_str(), arg.quant.as_deref()), (id, Some("iq4_xs")));
    let req = request(&hub, &cache, &format!("{id}:q2_k"));
    let v = run(&req).ok().clone();
    assert_eq!(v["files"], json!(["Model-Q2_K.gguf"]));
    assert_eq!(v["repo"], id);

    // A quant the repo does not have: the error lists what exists, and nothing is fetched.
    hub.clear_log();
    let mut req = request(&hub, &cache, id);
    req.quant = Some("Q4_K".into());
    let run = run(&req);
    let e = run.err();
    assert_eq!(e.code, ErrorCode::QuantNotFound);
    let extra = e.to_json();
    assert_eq!(extra["available"], json!(["F16", "IQ4_XS", "Q2_K", "Q5_K_M", "Q8_0"]));
    assert!(e.message.contains("Q5_K_M") && e.message.contains("Q4_K"), "{}", e.message);
    assert!(hub.requests(Route::Resolve).is_empty());
}

#[test]
fn several_ggufs_without_a_default_quant_ask_for_a_choice() {
    let id = "acme/float-GGUF";
    let b = tool_bytes();
    let (hub, cache) =
        setup("no-default", repo(id, vec![MockFile::lfs("m-F16.gguf", b.clone()), MockFile::lfs("m-BF16.gguf", b)]));
    let run = run(&request(&hub, &cache, id));
    let e = run.err();
    assert_eq!(e.code, ErrorCode::QuantNotFound);
    assert!(
        e.message.contains("BF16") && e.message.contains("F16") && e.message.contains("REPO:QUANT"),
        "{}",
        e.message
    );
}

#[test]
fn an_explicit_filename_wins() {
    let id = "acme/multi2-GGUF";
    let (hub, cache) = setup("filename", multi_quant_repo(id));
    let mut req = request(&hub, &cache, id);
    req.filename = Some("Model-F16.gguf".into());
    req.quant = Some("Q8_0".into());
    let r = run(&req);
    assert_eq!(r.ok()["files"], json!(["Model-F16.gguf"]));
    assert_eq!(r.warnings(), vec!["quant_ignored"]);

    req.quant = None;
    req.filename = Some("Model-Q3_K_M.gguf".into());
    let r = run(&req);
    assert_eq!(r.err().code, ErrorCode::FileNotFound);
    assert!(r.err().message.contains("Model-Q8_0.gguf"), "lists what exists: {}", r.err().message);

    req.filename = Some("README.md".into());
    assert_eq!(run(&req).err().code, ErrorCode::InvalidArgument);
}

#[test]
fn a_repo_with_one_gguf_takes_it_and_a_repo_without_fails() {
    let id = "acme/single";
    let b = tool_bytes();
    let (hub, cache) = setup(
        "single",
        repo(
            id,
            vec![
                MockFile::lfs("model.gguf", b.clone()),
                MockFile::lfs("mmproj-model-f16.gguf", b.clone()),
                MockFile::git("config.json", b"{}".to_vec()),
            ],
        ),
    );
    assert_eq!(run(&request(&hub, &cache, id)).ok()["files"], json!(["model.gguf"]));

    hub.add_repo(repo(
        "acme/no-gguf",
        vec![MockFile::git("README.md", b"hi".to_vec()), MockFile::lfs("model.safetensors", vec![0; 64])],
    ));
    let r = run(&request(&hub, &cache, "acme/no-gguf"));
    assert_eq!(r.err().code, ErrorCode::NoGguf);
}

// Over 60 lines: one scenario, step by step (split, serve, pull, load).
#[test]
fn a_split_gguf_pulls_every_shard_side_by_side_and_llama_cpp_loads_it() {
    let id = "acme/split-GGUF";
    let shards = split::split_gguf(&tool_fixture(), 3, "Q4_K_M/Split-Q4_K_M");
    assert_eq!(shards.len(), 3);
    let mut files: Vec<MockFile> = shards.iter().map(|(n, b)| MockFile::lfs(n, b.clone())).collect();
    files.push(MockFile::lfs("Split-Q8_0.gguf", tool_bytes()));
    let r = repo(id, files);
    let commit = r.commit.clone();
    let (hub, cache) = setup("split", r);

    let run1 = run(&request(&hub, &cache, id));
    let v = run1.ok();
    let names: Vec<&str> = shards.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(v["files"], json!(names));
    assert_eq!(v["sha256"], json!(shards.iter().map(|s| sha256_hex(&s.1)).collect::<Vec<_>>()));
    let first = snapshot(&cache, id, &commit, names[0]);
    assert_eq!(v["path"], first.to_str().unwrap());
    for (n, b) in &shards {
        let p = snapshot(&cache, id, &commit, n);
        assert_eq!(p.parent(), first.parent(), "shards side by side");
        assert_eq!(&std::fs::read(&p).unwrap(), b);
    }
    assert_eq!(run1.events[0]["files"].as_array().unwrap().len(), 3);
    assert_eq!(v["model_info"]["supports_tools"], true);
    // llama.cpp finds shards 2 and 3 next to the first (by name, through the snapshot links)
    // and loads the model from all three.
    llb::init_backend();
    let c = std::ffi::CString::new(first.to_str().unwrap()).unwrap();
    // SAFETY: plain llama.h calls on a valid path; the model is freed.
    unsafe {
        let model = llb::sys::llama_model_load_from_file(c.as_ptr(), llb::sys::llama_model_default_params());
        assert!(!model.is_null(), "llama.cpp could not load the pulled split (LLB_LOG=1 shows why)");
        assert_eq!(llb::sys::llama_model_n_layer(model), 2);
        llb::sys::llama_model_free(model);
    }
    // And an engine opens it from the snapshot path and runs a tool call (the snapshot link is
    // not resolved to its sha256-named blob, or llama.cpp could not find shards 2 and 3).
    let cfg = llb::request::EngineConfig {
        model_path: first.to_string_lossy().into_owned(),
        n_ctx: Some(1024),
        n_threads: Some(1),
        n_batch: None,
        seed: None,
        chat_template_kwargs: None,
        ..Default::default()
    };
    let engine = llb::engine::Engine::create(cfg, None).expect("an engine opens the pulled split");
    let r = engine
        .infer(&json!({"messages": [{"role": "user", "content": "Time?"}], "tools": [{"type": "function", "function": {"name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC"]}}, "required": ["tz"]}}}],
            "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 64}).to_string())
        .unwrap();
    assert_eq!(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time", "{r}");

    // Naming any shard pulls them all (here from the cache).
    let mut req = request(&hub, &cache, id);
    req.filename = Some(names[1].into());
    let v = run(&req).ok().clone();
    assert_eq!(v["files"], json!(names));
    assert_eq!(v["from_cache"], true);
}

#[test]
fn a_gated_repo_without_a_token_fails_before_any_download() {
    let id = "meta/gated-GGUF";
    let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
    r.gated = Some("manual");
    let (hub, cache) = setup("gated-anon", r);
    let r = run(&request(&hub, &cache, id));
    let e = r.err();
    assert_eq!(e.code, ErrorCode::AuthRequired);
    assert!(e.message.contains("HF_TOKEN") && e.message.contains(&format!("{}/{id}", hub.endpoint)), "{}", e.message);
    assert!(hub.requests(Route::Resolve).is_empty() && hub.requests(Route::Cdn).is_empty());
    assert!(files_under(&cache).is_empty());

    // The hub's own answer to an anonymous download of a gated file (401 GatedRepo) maps the same way.
    hub.update_repo(id, |r| r.hide_gated_in_listing = true);
    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::AuthRequired);
    assert_eq!(hub.requests(Route::Resolve)[0].status, 401);
    assert!(hub.requests(Route::Cdn).is_empty());
    assert!(files_under(&cache).is_empty(), "{:?}", files_under(&cache));
}

#[test]
fn a_gated_repo_whose_license_is_not_accepted_says_so() {
    let id = "meta/gated2-GGUF";
    let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
    r.gated = Some("manual");
    let (hub, cache) = setup("gated-license", r);
    hub.add_token(TOKEN);
    let mut req = request(&hub, &cache, id);
    req.token = Some(TOKEN.into());
    let run1 = run(&req);
    let e = run1.err();
    assert_eq!(e.code, ErrorCode::LicenseNotAccepted);
    assert!(e.message.contains("license") && e.message.contains(&format!("{}/{id}", hub.endpoint)), "{}", e.message);
    assert_eq!(hub.requests(Route::Resolve)[0].status, 403);
    assert!(hub.requests(Route::Cdn).is_empty());

    hub.grant(TOKEN, id);
    assert_eq!(run(&req).ok()["model_info"]["supports_tools"], true);
}

#[test]
fn a_bad_token_is_auth_failed() {
    let id = "acme/public-GGUF";
    let (hub, cache) = setup("bad-token", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]));
    let mut req = request(&hub, &cache, id);
    req.token = Some("hf_not_a_valid_token_000000000".into());
    let e = run(&req).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::AuthFailed);
    assert!(e.message.contains("HF_TOKEN") && e.message.contains("settings/tokens"), "{}", e.message);
}

#[test]
fn private_and_missing_repos_are_repo_not_found() {
    let id = "acme/private-GGUF";
    let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
    r.private = true;
    let (hub, cache) = setup("private", r);
    hub.add_token(TOKEN);

    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::RepoNotFound);
    assert!(e.message.contains("private") && e.message.contains("HF_TOKEN"), "{}", e.message);
    let e = run(&request(&hub, &cache, "acme/does-not-exist")).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::RepoNotFound);

    let mut req = request(&hub, &cache, "acme/does-not-exist");
    req.token = Some(TOKEN.into());
    let e = run(&req).result.unwrap_err();
    assert_eq!((e.code, e.to_json()["http_status"].clone()), (ErrorCode::RepoNotFound, json!(404)));

    // With access, a private repo is pulled like any other.
    hub.grant(TOKEN, id);
    let mut req = request(&hub, &cache, id);
    req.token = Some(TOKEN.into());
    run(&req).ok();
}

#[test]
fn a_listed_file_missing_on_download_is_file_not_found() {
    let id = "acme/missing-file-GGUF";
    let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
    r.missing_on_resolve = vec!["m-Q4_K_M.gguf".into()];
    let (hub, cache) = setup("missing-file", r);
    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::FileNotFound);
    assert!(e.message.contains("m-Q4_K_M.gguf"), "{}", e.message);
    assert!(files_under(&cache).is_empty(), "{:?}", files_under(&cache));
}

#[test]
fn revisions_branches_tags_and_unknown_ones() {
    let id = "acme/rev-GGUF";
    let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
    let commit = r.commit.clone();
    r.refs.push(("v1.0".into(), commit.clone()));
    let (hub, cache) = setup("revision", r);

    let mut req = request(&hub, &cache, id);
    req.revision = Some("no-such-branch".into());
    let e = run(&req).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::RevisionNotFound);
    assert!(e.message.contains("no-such-branch"), "{}", e.message);

    req.revision = Some("v1.0".into());
    assert_eq!(run(&req).ok()["commit"], commit.as_str());
    assert_eq!(std::fs::read_to_string(repo_dir(&cache, id).join("refs/v1.0")).unwrap(), commit);

    // A commit id resolves without a ref file (as huggingface_hub does).
    req.revision = Some(commit.clone());
    assert_eq!(run(&req).ok()["revision"], commit.as_str());
    assert!(!repo_dir(&cache, id).join("refs").join(&commit).exists());
}

#[test]
fn a_disabled_repo_is_repo_disabled() {
    let id = "acme/disabled-GGUF";
    let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
    r.disabled = true;
    let (hub, cache) = setup("disabled", r);
    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::RepoDisabled);
    assert!(hub.requests(Route::Resolve).is_empty());

    hub.update_repo(id, |r| r.disabled_api_403 = true);
    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::RepoDisabled);
}

#[test]
fn rate_limits_are_waited_out_a_bounded_number_of_times() {
    let id = "acme/busy-GGUF";
    let (hub, cache) = setup("rate-limit", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]));
    hub.fault(Route::Api, Fault::RateLimit(vec![("RateLimit".into(), "\"api\";r=0;t=1".into())]), 1);
    hub.fault(Route::Resolve, Fault::RateLimit(vec![("Retry-After".into(), "1".into())]), 1);
    let t = Instant::now();
    let r = run(&request(&hub, &cache, id));
    r.ok();
    assert!(t.elapsed().as_secs_f64() >= 2.0, "waits what Retry-After and RateLimit say: {:?}", t.elapsed());
    assert_eq!(r.warnings(), vec!["rate_limited", "rate_limited"]);

    // A hub that keeps answering 429: give up after the retries, with the wait in the error.
    let cache2 = temp_dir("rate-limit-2");
    hub.clear_log();
    hub.fault(Route::Api, Fault::RateLimit(vec![("Retry-After".into(), "0".into())]), 100);
    let e = run(&request(&hub, &cache2, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::RateLimited);
    assert_eq!(e.to_json()["retry_after"], 0);
    assert_eq!(hub.requests(Route::Api).len(), 4, "1 try + 3 retries");
}

#[test]
fn a_dropped_connection_resumes_with_range() {
    let id = "acme/flaky-GGUF";
    let bytes = tool_bytes();
    let sha = sha256_hex(&bytes);
    let (hub, cache) = setup("resume", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", bytes.clone())]));

    // Within one pull: the connection drops after 3 MiB, the retry asks for the rest.
    hub.fault(Route::Cdn, Fault::DropAfter(3 * MIB), 1);
    let v = run(&request(&hub, &cache, id)).ok().clone();
    assert_eq!(v["sha256"], json!([sha]));
    let cdn = hub.requests(Route::Cdn);
    assert_eq!(cdn.len(), 2);
    assert_eq!(cdn[0].sent, 3 * MIB);
    assert_eq!(cdn[1].header("range"), Some("bytes=3145728-"));
    assert_eq!(cdn[1].status, 206);
    assert_eq!(v["bytes_downloaded"], bytes.len() as u64);

    // Across pulls: the CDN drops after 2 MiB and then fails; the partial file stays, and the
    // next pull resumes from it.
    let cache = temp_dir("resume-2");
    hub.clear_log();
    hub.fault(Route::Cdn, Fault::DropAfter(2 * MIB), 1);
    hub.fault(Route::Cdn, Fault::Status(503), 100);
    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::Network);
    assert!(e.message.contains("resumes"), "{}", e.message);
    let partial = repo_dir(&cache, id).join("blobs").join(format!("{sha}.incomplete"));
    assert_eq!(std::fs::metadata(&partial).unwrap().len(), 2 * MIB);
    hub.clear_faults();
    hub.clear_log();
    let r = run(&request(&hub, &cache, id));
    assert_eq!(r.ok()["sha256"], json!([sha]));
    let cdn = hub.requests(Route::Cdn);
    assert_eq!(cdn.len(), 1);
    assert_eq!(cdn[0].header("range"), Some("bytes=2097152-"));
    assert_eq!(r.ok()["bytes_downloaded"], bytes.len() as u64 - 2 * MIB);
    assert_eq!(r.of_type("pull_progress")[0]["file_bytes"], 2 * MIB, "progress starts at the resumed offset");
    assert!(!partial.exists());
}

#[test]
fn a_server_ignoring_range_or_refusing_it_restarts_cleanly() {
    let id = "acme/norange-GGUF";
    let bytes = tool_bytes();
    let sha = sha256_hex(&bytes);
    let (hub, cache) = setup("ignore-range", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", bytes.clone())]));
    hub.fault(Route::Cdn, Fault::DropAfter(MIB), 1);
    hub.fault(Route::Cdn, Fault::IgnoreRange, 1);
    let r = run(&request(&hub, &cache, id));
    assert_eq!(r.ok()["sha256"], json!([sha]));
    assert_eq!(r.warnings(), vec!["resume_restarted"]);
    let cdn = hub.requests(Route::Cdn);
    assert_eq!((cdn[1].header("range"), cdn[1].status), (Some("bytes=1048576-"), 200));
    assert_eq!(std::fs::read(r.ok()["path"].as_str().unwrap()).unwrap(), bytes);

    // 416 to a resume: start over without Range.
    let cache = temp_dir("ignore-range-416");
    hub.clear_log();
    hub.fault(Route::Cdn, Fault::DropAfter(MIB), 1);
    hub.fault(Route::Cdn, Fault::Status(416), 1);
    let r = run(&request(&hub, &cache, id));
    assert_eq!(r.ok()["sha256"], json!([sha]));
    let cdn = hub.requests(Route::Cdn);
    assert_eq!(
        cdn.iter().map(|c| (c.header("range").map(str::to_string), c.status)).collect::<Vec<_>>(),
        vec![(None, 200), (Some("bytes=1048576-".into()), 416), (None, 200)]
    );
}

#[test]
fn corrupted_bytes_are_checksum_mismatch_and_leave_nothing_in_the_cache() {
    let id = "acme/corrupt-GGUF";
    let bytes = tool_bytes();
    let (hub, cache) = setup("corrupt", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", bytes.clone())]));
    hub.fault(Route::Cdn, Fault::Corrupt, 1);
    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::ChecksumMismatch);
    let j = e.to_json();
    assert_eq!(j["expected"], sha256_hex(&bytes).as_str());
    assert_ne!(j["actual"], j["expected"]);
    assert!(files_under(&cache).is_empty(), "left behind: {:?}", files_under(&cache));
    assert!(std::fs::read_dir(&cache).unwrap().next().is_none(), "not even empty folders");

    // The next pull starts from scratch and succeeds.
    run(&request(&hub, &cache, id)).ok();
}

#[test]
fn unsafe_names_in_the_listing_are_rejected_and_nothing_is_written() {
    let id = "evil/traversal-GGUF";
    let base = temp_dir("traversal");
    let cache = base.join("cache");
    let hub = MockHub::start();
    for bad in ["../../evil.gguf", "/tmp/evil.gguf", "ok/../../../evil.gguf", "..\\evil.gguf"] {
        let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
        r.extra_siblings = vec![json!({"rfilename": bad, "size": 10, "lfs": {"sha256": "0".repeat(64), "size": 10}})];
        hub.add_repo(r);
        let mut req = request(&hub, &cache, id);
        req.filename = Some("m-Q4_K_M.gguf".into());
        let e = run(&req).result.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRepoListing, "{bad}");
        assert!(e.message.contains("unsafe"), "{}", e.message);
    }
    // A checksum that is not hex would name a blob outside blobs/.
    let mut r = repo(id, vec![]);
    r.extra_siblings =
        vec![json!({"rfilename": "m-Q4_K_M.gguf", "size": 10, "lfs": {"sha256": "../../../../evil", "size": 10}})];
    hub.add_repo(r);
    assert_eq!(run(&request(&hub, &cache, id)).result.unwrap_err().code, ErrorCode::InvalidRepoListing);
    assert!(hub.requests(Route::Resolve).is_empty());
    assert!(files_under(&base).is_empty(), "{:?}", files_under(&base));
}

#[test]
fn a_model_without_tool_support_is_quarantined() {
    let id = "acme/chat-only-GGUF";
    let bytes = non_tool_bytes();
    let sha = sha256_hex(&bytes);
    let r = repo(id, vec![MockFile::lfs("gemma-Q4_K_M.gguf", bytes.clone())]);
    let commit = r.commit.clone();
    let (hub, cache) = setup("quarantine", r);
    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolsUnsupported);
    let j = e.to_json();
    assert_eq!(j["caps"]["supports_tool_calls"], false, "{j}");
    let q = cache.join("quarantine/models--acme--chat-only-GGUF");
    assert_eq!(
        j["quarantined"],
        json!([q.join("snapshots").join(&commit).join("gemma-Q4_K_M.gguf").to_str().unwrap()])
    );
    assert_eq!(std::fs::read(q.join("blobs").join(&sha)).unwrap(), bytes);
    assert!(!repo_dir(&cache, id).join("blobs").join(&sha).exists());
    assert!(!snapshot(&cache, id, &commit, "gemma-Q4_K_M.gguf").exists());

    // Pulled again: judged again from the quarantine, without a download.
    hub.clear_log();
    let e = run(&request(&hub, &cache, id)).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolsUnsupported);
    assert!(hub.requests(Route::Resolve).is_empty() && hub.requests(Route::Cdn).is_empty());
    assert!(q.join("blobs").join(&sha).exists());
}

#[test]
fn a_template_without_tools_on_the_hub_only_warns() {
    let id = "acme/stub-GGUF";
    let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
    r.gguf_template = Some(Some("{{ messages[0].content }}".into()));
    let (hub, cache) = setup("prefilter", r);
    let run1 = run(&request(&hub, &cache, id));
    run1.ok();
    assert_eq!(run1.warnings(), vec!["template_without_tools"]);
    hub.update_repo(id, |r| r.gguf_template = None);
    assert_eq!(run(&request(&hub, &cache, id)).warnings(), vec!["template_without_tools"]);
}

#[test]
fn offline_resolves_from_the_cache_only() {
    let id = "acme/offline-GGUF";
    let b = tool_bytes();
    let (hub, cache) =
        setup("offline", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", b.clone()), MockFile::lfs("m-Q8_0.gguf", b)]));
    let online = run(&request(&hub, &cache, id)).ok().clone();
    hub.clear_log();

    let mut req = request(&hub, &cache, id);
    req.offline = Some(true);
    let v = run(&req).ok().clone();
    assert_eq!(
        (v["path"].clone(), v["from_cache"].clone(), v["sha256"].clone()),
        (online["path"].clone(), json!(true), online["sha256"].clone())
    );
    // HF_HUB_OFFLINE=1 does the same.
    let v = run_env(&request(&hub, &cache, id), &Env::default().with("HF_HUB_OFFLINE", "1")).ok().clone();
    assert_eq!(v["path"], online["path"]);
    assert!(hub.log().is_empty(), "offline makes no request: {:?}", hub.log());

    req.quant = Some("Q8_0".into());
    let e = run(&req).result.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotCached);
    assert!(e.message.contains("Q8_0"), "{}", e.message);
    let mut other = request(&hub, &cache, "acme/never-pulled");
    other.offline = Some(true);
    assert_eq!(run(&other).result.unwrap_err().code, ErrorCode::NotCached);

    // Online with the hub unreachable: the cached copy serves, with a warning.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut req = request(&hub, &cache, id);
    req.endpoint = Some(format!("http://{}", dead.local_addr().unwrap()));
    drop(dead);
    let r = run(&req);
    assert_eq!(r.ok()["path"], online["path"]);
    assert_eq!(r.warnings(), vec!["offline_fallback"]);
}

// Over 60 lines: one scenario, step by step: every output and cached file is searched for the
// token.
#[test]
fn the_token_never_appears_in_outputs_or_the_cache() {
    let id = "meta/secret-GGUF";
    let mut r = repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]);
    r.gated = Some("manual");
    let (hub, cache) = setup("token-leak", r);
    hub.add_token(TOKEN);
    let home = temp_dir("token-leak-home");
    std::fs::write(home.join("token"), format!("{TOKEN}\n")).unwrap();
    let mut seen = String::new();

    // Token refused (license not accepted), by request, env and token file.
    let mut req = request(&hub, &cache, id);
    req.token = Some(TOKEN.into());
    for (req, env) in [
        (req.clone(), Env::default()),
        (request(&hub, &cache, id), Env::default().with("HF_TOKEN", TOKEN)),
        (request(&hub, &cache, id), Env::default().with("HF_HOME", home.to_str().unwrap())),
    ] {
        let r = run_env(&req, &env);
        assert_eq!(r.err().code, ErrorCode::LicenseNotAccepted);
        seen += &r.all_text();
    }
    // Accepted: a full download, a cache hit, an offline pull, a cancelled one.
    hub.grant(TOKEN, id);
    seen += &run(&req).all_text();
    seen += &run(&req).all_text();
    let mut off = req.clone();
    off.offline = Some(true);
    seen += &run(&off).all_text();
    // The same token, invalid now (a hub that no longer knows it).
    let (hub2, cache2) = setup("token-leak-2", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]));
    let mut bad = request(&hub2, &cache2, id);
    bad.token = Some(TOKEN.into());
    let r = run(&bad);
    assert_eq!(r.err().code, ErrorCode::AuthFailed);
    seen += &r.all_text();
    // The CLI, in both output modes, on success and failure.
    for (endpoint, json_mode) in
        [(&hub.endpoint, true), (&hub.endpoint, false), (&hub2.endpoint, true), (&hub2.endpoint, false)]
    {
        let args = pull::cli::PullArgs {
            repo: id.into(),
            file: None,
            revision: None,
            cache_dir: Some(cache.clone()),
            offline: false,
            json: json_mode,
        };
        let env = Env::default().with("HF_ENDPOINT", endpoint.as_str()).with("HF_TOKEN", TOKEN);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        pull::cli::run_with(&args, &env, &mut out, &mut err, false);
        seen += &String::from_utf8_lossy(&out);
        seen += &String::from_utf8_lossy(&err);
    }
    seen += &format!("{req:?}");

    assert!(
        hub.requests(Route::Api).iter().any(|r| r.header("authorization") == Some(&format!("Bearer {TOKEN}"))),
        "the token was used"
    );
    assert!(!seen.contains(TOKEN), "the token leaked into an output");
    assert!(seen.contains("pull_result") && seen.contains("license_not_accepted") && seen.contains("auth_failed"));
    for dir in [&cache, &cache2] {
        for f in files_under(dir) {
            let content = std::fs::symlink_metadata(&f).map(|m| m.file_type().is_symlink()).unwrap_or(false);
            let text = if content {
                std::fs::read_link(&f).unwrap().to_string_lossy().into_owned()
            } else {
                String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned()
            };
            assert!(!text.contains(TOKEN) && !f.to_string_lossy().contains(TOKEN), "the token is in {}", f.display());
        }
    }
    assert!(!files_under(&cache).is_empty());
}

#[test]
fn cancelling_from_the_event_callback_leaves_a_resumable_partial_file() {
    let id = "acme/cancel-GGUF";
    let bytes = tool_bytes();
    let sha = sha256_hex(&bytes);
    let (hub, cache) = setup("cancel", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", bytes.clone())]));
    hub.fault(Route::Cdn, Fault::Slow { chunk: 256 << 10, pause_ms: 20 }, 1);
    let r = run_with(&request(&hub, &cache, id), &Env::default(), |ev| {
        !(ev["type"] == "pull_progress" && ev["file_bytes"].as_u64().unwrap() > 0)
    });
    let e = r.err();
    assert_eq!(e.code, ErrorCode::Cancelled);
    assert!(e.message.contains("resumes"), "{}", e.message);
    let partial = repo_dir(&cache, id).join("blobs").join(format!("{sha}.incomplete"));
    let kept = std::fs::metadata(&partial).unwrap().len();
    assert!(kept > 0 && kept < bytes.len() as u64, "kept {kept}");
    assert!(!repo_dir(&cache, id).join("snapshots").exists());

    hub.clear_log();
    let r = run(&request(&hub, &cache, id));
    assert_eq!(r.ok()["sha256"], json!([sha]));
    assert_eq!(hub.requests(Route::Cdn)[0].header("range"), Some(format!("bytes={kept}-").as_str()));
}

#[test]
fn concurrent_pulls_of_one_file_download_it_once() {
    let id = "acme/shared-GGUF";
    let (hub, cache) = setup("concurrent", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]));
    hub.fault(Route::Cdn, Fault::Slow { chunk: 512 << 10, pause_ms: 50 }, 1);
    let req = request(&hub, &cache, id);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let started_tx = std::sync::Mutex::new(started_tx);
    let (first, second) = std::thread::scope(|s| {
        // The first pull downloads (slowly); the second starts once bytes are flowing.
        let a = s.spawn(|| {
            run_with(&req, &Env::default(), |ev| {
                if ev["type"] == "pull_progress" && ev["file_bytes"].as_u64().unwrap() > 0 {
                    let _ = started_tx.lock().unwrap().send(());
                }
                true
            })
        });
        started_rx.recv().unwrap();
        let b = s.spawn(|| run(&req));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(first.ok()["from_cache"], false);
    assert_eq!(second.warnings(), vec!["waiting_for_lock"]);
    assert_eq!(second.ok()["from_cache"], true, "the second pull found the blob the first one wrote");
    assert_eq!(second.ok()["path"], first.ok()["path"]);
    assert_eq!(hub.requests(Route::Cdn).len(), 1, "one download");
}

#[test]
fn a_file_stored_in_git_is_verified_by_its_blob_id() {
    let id = "acme/small-GGUF";
    let bytes = tool_bytes();
    let r = repo(id, vec![MockFile::git("small.gguf", bytes.clone())]);
    let oid = r.files[0].blob_id.clone();
    let (hub, cache) = setup("git-file", r);
    let v = run(&request(&hub, &cache, id)).ok().clone();
    assert_eq!(v["sha256"], json!([sha256_hex(&bytes)]));
    assert_eq!(std::fs::read_link(v["path"].as_str().unwrap()).unwrap(), Path::new("../../blobs").join(&oid));
    assert!(hub.requests(Route::Cdn).is_empty(), "served by the hub itself");
    // Corrupted: the blob id does not match.
    let cache = temp_dir("git-file-2");
    hub.fault(Route::Resolve, Fault::Corrupt, 1);
    assert_eq!(run(&request(&hub, &cache, id)).result.unwrap_err().code, ErrorCode::ChecksumMismatch);
}

#[test]
fn token_sources_request_env_and_token_file() {
    let id = "acme/auth-GGUF";
    let (hub, cache) = setup("token-sources", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]));
    hub.add_token(TOKEN);
    let home = temp_dir("token-sources-home");
    std::fs::write(home.join("token"), format!("  {TOKEN}\n")).unwrap();
    let bearer = Some(format!("Bearer {TOKEN}"));
    let last_auth =
        |hub: &MockHub| hub.requests(Route::Api).last().unwrap().header("authorization").map(str::to_string);

    run_env(&request(&hub, &cache, id), &Env::default().with("HF_TOKEN", TOKEN)).ok();
    assert_eq!(last_auth(&hub), bearer);
    run_env(&request(&hub, &cache, id), &Env::default().with("HF_HOME", home.to_str().unwrap())).ok();
    assert_eq!(last_auth(&hub), bearer);
    run_env(&request(&hub, &cache, id), &Env::default().with("HOME", "/nonexistent")).ok();
    assert_eq!(last_auth(&hub), None);
    // "" in the request means anonymous, whatever the environment says.
    let mut req = request(&hub, &cache, id);
    req.token = Some(String::new());
    run_env(&req, &Env::default().with("HF_TOKEN", TOKEN)).ok();
    assert_eq!(last_auth(&hub), None);
}

#[test]
fn request_json_errors_name_the_field() {
    let cb = |_: &Value| true;
    let e = pull::pull_json("not json", &cb).unwrap_err().to_json();
    assert_eq!(e["code"], "invalid_json");
    let e = pull::pull_json(r#"{"repo":"a/b","bogus":1}"#, &cb).unwrap_err().to_json();
    assert_eq!(e["code"], "invalid_argument");
    assert!(e["message"].as_str().unwrap().contains("bogus"), "{e}");
    let e = pull::pull_json(r#"{"repo":"a/b","quant":7}"#, &cb).unwrap_err().to_json();
    assert!(e["message"].as_str().unwrap().contains("quant"), "{e}");
    for bad in [
        r#"{"repo":"../etc"}"#,
        r#"{"repo":"a/b","revision":"../../x"}"#,
        r#"{"repo":"a/b","filename":"../x.gguf"}"#,
        r#"{}"#,
    ] {
        assert_eq!(pull::pull_json(bad, &cb).unwrap_err().to_json()["code"], "invalid_argument", "{bad}");
    }
    // The issue's full request shape parses.
    let req = pull::parse_request(r#"{"repo":"org/name","revision":"main","quant":"Q4_K_M","filename":null,"cache_dir":null,"token":null,"offline":false}"#).unwrap();
    assert_eq!((req.repo.as_str(), req.quant.as_deref()), ("org/name", Some("Q4_K_M")));
}

#[test]
fn the_cli_prints_exactly_the_json_with_json() {
    let id = "acme/cli-GGUF";
    let (hub, cache) = setup("cli", repo(id, vec![MockFile::lfs("m-Q4_K_M.gguf", tool_bytes())]));
    let env = Env::default().with("HF_ENDPOINT", hub.endpoint.as_str());
    let args = |repo: &str, json| pull::cli::PullArgs {
        repo: repo.into(),
        file: None,
        revision: None,
        cache_dir: Some(cache.clone()),
        offline: false,
        json,
    };

    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(pull::cli::run_with(&args(&format!("{id}:Q4_K_M"), true), &env, &mut out, &mut err, false), 0);
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 1);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], "pull_result");
    let err = String::from_utf8(err).unwrap();
    assert!(err.contains("downloading m-Q4_K_M.gguf: 100%"), "plain progress lines on stderr: {err}");

    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(pull::cli::run_with(&args("acme/nope", true), &env, &mut out, &mut err, false), 1);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!((v["type"].as_str(), v["code"].as_str()), (Some("error"), Some("repo_not_found")));

    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(pull::cli::run_with(&args(id, false), &env, &mut out, &mut err, false), 0);
    assert!(String::from_utf8(out).unwrap().contains("from the cache"));
    assert!(pull::is_repo_arg("acme/cli-GGUF:Q8_0") && !pull::is_repo_arg("./model.gguf"));
}

#[test]
fn every_error_code_is_documented() {
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/pull.md")).unwrap();
    for code in [
        "auth_required",
        "license_not_accepted",
        "auth_failed",
        "repo_not_found",
        "revision_not_found",
        "file_not_found",
        "repo_disabled",
        "rate_limited",
        "no_gguf",
        "quant_not_found",
        "checksum_mismatch",
        "network",
        "disk",
        "cancelled",
        "invalid_repo_listing",
        "not_cached",
    ] {
        assert!(docs.contains(&format!("`{code}`")), "docs/pull.md does not document `{code}`");
        assert!(llb::error::ErrorCode::ALL.iter().any(|c| c.as_str() == code), "ErrorCode has no {code}");
    }
    let _ = PullRequest::default();
}

#[test]
fn pull_args_plug_into_the_cli_as_a_subcommand() {
    use clap::{Parser, Subcommand};
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }
    #[derive(Subcommand)]
    enum Cmd {
        Pull(pull::cli::PullArgs),
    }
    let cli = Cli::try_parse_from([
        "llb",
        "pull",
        "org/name:Q8_0",
        "--file",
        "x.gguf",
        "--revision",
        "v1",
        "--cache-dir",
        "/tmp/c",
        "--json",
    ])
    .unwrap();
    let Cmd::Pull(args) = cli.cmd;
    assert!(args.json && !args.offline);
    let req = args.to_request();
    assert_eq!(
        (req.repo.as_str(), req.filename.as_deref(), req.revision.as_deref(), req.cache_dir.as_deref()),
        ("org/name:Q8_0", Some("x.gguf"), Some("v1"), Some("/tmp/c"))
    );
    assert!(Cli::try_parse_from(["llb", "pull"]).is_err(), "REPO is required");
}
