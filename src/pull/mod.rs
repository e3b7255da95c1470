//! `llb_model_pull`: a verified, tool-capable GGUF from the Hugging Face hub, by repo id.
//!
//! Flow: list the revision (`/api/models/{repo}/revision/{rev}?blobs=true`) → refuse early when
//! the repo is gated/private and no token is set → warn when the hub's GGUF metadata shows a
//! template without tools → choose the file(s) → download each missing blob with resume and
//! sha256 verification into the Hugging Face cache layout → link the snapshot → run the same
//! tool gate as `llb_chat_create` on the first shard, quarantining refused files.
//!
//! The ABI (`llb_model_pull`) and the CLI (`llb pull`) are thin fronts over [`pull_json`] and
//! [`pull`]. docs/pull.md describes the cache, the error codes and the token rules.

mod cache;
pub mod cli;
mod download;
mod events;
mod hub;
mod select;

pub use select::{is_repo_arg, parse_repo_arg, quant_label, RepoArg, DEFAULT_QUANTS};

use crate::error::{bail, Error, ErrorCode, Result};
use cache::RepoCache;
use download::{Expect, Job, Progress};
use events::{redact, redact_error, Events};
use hub::Hub;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The public hub, unless `HF_ENDPOINT` or the request's `endpoint` says otherwise.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// `llb_model_pull`'s request. Unknown fields are `invalid_argument` errors.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullRequest {
    /// `org/name` (a `:QUANT` suffix is accepted too and fills `quant`).
    pub repo: String,
    /// Branch, tag or commit; default `main`.
    #[serde(default)]
    pub revision: Option<String>,
    /// Quant tag, matched case-insensitively against file names (`Q4_K_M`, `q8_0`, `IQ4_XS`).
    #[serde(default)]
    pub quant: Option<String>,
    /// An exact file of the repo; wins over `quant`. A shard name pulls every shard.
    #[serde(default)]
    pub filename: Option<String>,
    /// Cache root; default `LLB_MODEL_CACHE`, else `~/.chatbot_models`.
    #[serde(default)]
    pub cache_dir: Option<String>,
    /// Hugging Face token; default `HF_TOKEN`, else the token file. `""` means anonymous.
    #[serde(default)]
    pub token: Option<String>,
    /// Resolve from the cache only (as `HF_HUB_OFFLINE=1`).
    #[serde(default)]
    pub offline: Option<bool>,
    /// Hub URL; default `HF_ENDPOINT`, else <https://huggingface.co> (mirrors, tests).
    #[serde(default)]
    pub endpoint: Option<String>,
}

impl std::fmt::Debug for PullRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullRequest")
            .field("repo", &self.repo)
            .field("revision", &self.revision)
            .field("quant", &self.quant)
            .field("filename", &self.filename)
            .field("cache_dir", &self.cache_dir)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("offline", &self.offline)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl PullRequest {
    pub fn new(repo: &str) -> Self {
        PullRequest { repo: repo.to_string(), ..Default::default() }
    }
}

/// Parses the request JSON (`invalid_json`, or `invalid_argument` naming the field).
pub fn parse_request(text: &str) -> Result<PullRequest> {
    crate::request::parse(text, "pull request")
}

/// The environment variables a pull reads, captured once so that tests (and embedders) can pass
/// their own instead of the process's.
#[derive(Clone, Default)]
pub struct Env {
    vars: HashMap<String, String>,
}

impl Env {
    pub const KEYS: &'static [&'static str] = &[
        "HF_ENDPOINT",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HOME",
        "XDG_CACHE_HOME",
        "HOME",
        "HF_HUB_OFFLINE",
        "LLB_MODEL_CACHE",
    ];

    pub fn from_process() -> Env {
        let vars = Self::KEYS.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))).collect();
        Env { vars }
    }

    /// An empty environment plus `(key, value)` pairs.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Env {
        self.vars.insert(key.to_string(), value.into());
        self
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.vars.get(k).map(|s| s.as_str()).filter(|s| !s.trim().is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        self.get("HOME").map(PathBuf::from)
    }

    /// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
    fn hf_home(&self) -> Option<PathBuf> {
        self.get("HF_HOME")
            .map(PathBuf::from)
            .or_else(|| self.get("XDG_CACHE_HOME").map(|x| Path::new(x).join("huggingface")))
            .or_else(|| self.home().map(|h| h.join(".cache/huggingface")))
    }

    /// The token huggingface_hub would use: `HF_TOKEN`, then the token file.
    fn token(&self) -> Option<String> {
        if let Some(t) = self.get("HF_TOKEN").or_else(|| self.get("HUGGING_FACE_HUB_TOKEN")) {
            return Some(t.trim().to_string());
        }
        let file = self.get("HF_TOKEN_PATH").map(PathBuf::from).or_else(|| self.hf_home().map(|h| h.join("token")))?;
        let t = std::fs::read_to_string(file).ok()?;
        let t = t.trim();
        (!t.is_empty()).then(|| t.to_string())
    }

    fn offline(&self) -> bool {
        self.get("HF_HUB_OFFLINE")
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "on" | "yes" | "true"))
    }

    fn cache_root(&self) -> Result<PathBuf> {
        if let Some(c) = self.get("LLB_MODEL_CACHE") {
            return Ok(PathBuf::from(c));
        }
        match self.home() {
            Some(h) => Ok(h.join(".chatbot_models")),
            None => bail!(InvalidArgument, "no cache folder: set LLB_MODEL_CACHE (HOME is not set)"),
        }
    }
}

/// The request with defaults and the environment applied, validated.
struct Settings {
    repo: String,
    revision: String,
    quant: Option<String>,
    filename: Option<String>,
    endpoint: String,
    cache_root: PathBuf,
    token: Option<String>,
    offline: bool,
}

fn settings(req: &PullRequest, env: &Env) -> Result<Settings> {
    let arg = parse_repo_arg(&req.repo)?;
    let quant = match (&req.quant, arg.quant) {
        (Some(q), _)
            if q.trim().is_empty() || !q.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) =>
        {
            bail!(InvalidArgument, "field `quant`: `{q}` is not a quant tag like Q4_K_M")
        }
        (Some(q), _) => Some(q.clone()),
        (None, q) => q,
    };
    let revision = req.revision.clone().unwrap_or_else(|| "main".into());
    select::validate_revision(&revision)?;
    if let Some(f) = &req.filename {
        select::validate_rfilename(f).map_err(|_| {
            Error::new(
                ErrorCode::InvalidArgument,
                format!("field `filename`: `{f}` must be a relative path inside the repo"),
            )
        })?;
    }
    let endpoint = req
        .endpoint
        .clone()
        .or_else(|| env.get("HF_ENDPOINT").map(str::to_string))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.into());
    let endpoint = endpoint.trim().trim_end_matches('/').to_string();
    if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) || endpoint.contains('?') {
        bail!(InvalidArgument, "field `endpoint` (or HF_ENDPOINT): `{endpoint}` is not an http(s) URL");
    }
    let cache_root = match &req.cache_dir {
        Some(c) if c.trim().is_empty() => bail!(InvalidArgument, "field `cache_dir`: empty"),
        Some(c) => PathBuf::from(c),
        None => env.cache_root()?,
    };
    let cache_root = if cache_root.is_absolute() {
        cache_root
    } else {
        std::env::current_dir()
            .map_err(|e| Error::new(ErrorCode::Disk, format!("current folder: {e}")))?
            .join(cache_root)
    };
    let token = match &req.token {
        Some(t) if t.trim().is_empty() => None,
        Some(t) => Some(t.trim().to_string()),
        None => env.token(),
    };
    Ok(Settings {
        repo: arg.repo,
        revision,
        quant,
        filename: req.filename.clone(),
        endpoint,
        cache_root,
        token,
        offline: req.offline.unwrap_or(false) || env.offline(),
    })
}

/// Pulls a model: the `pull_result` JSON, or an error. `events` receives `pull_resolved`,
/// `pull_progress` and `pull_warning` events; returning `false` cancels (a partial download
/// stays resumable). Reads the process environment (`HF_TOKEN`, `HF_ENDPOINT`, ...).
///
/// Threads: any thread; pulls run concurrently, and two pulls of the same file wait for each
/// other (one downloads, the other then finds it in the cache).
pub fn pull(req: &PullRequest, events: &dyn Fn(&Value) -> bool) -> Result<Value> {
    pull_with_env(req, &Env::from_process(), events)
}

/// [`pull`] with an explicit environment instead of the process's.
pub fn pull_with_env(req: &PullRequest, env: &Env, events: &dyn Fn(&Value) -> bool) -> Result<Value> {
    // The token may come from the request or the environment: scrub whichever is used, and
    // any the request carries even if unused.
    let s = settings(req, env).map_err(|e| redact_error(e, req.token.as_deref()))?;
    let secret = s.token.clone();
    let ev = Events::new(events, secret.as_deref());
    let cache = RepoCache::new(&s.cache_root, &s.repo);
    let r = if s.offline { from_cache(&s, &cache, &ev, None) } else { online(&s, &cache, &ev) };
    match r {
        Ok(mut v) => {
            if let Some(t) = &secret {
                redact(&mut v, t);
            }
            Ok(v)
        }
        Err(e) => Err(redact_error(e, secret.as_deref())),
    }
}

/// `llb_model_pull`: the request's JSON text parsed, then [`pull`].
pub fn pull_json(request_json: &str, events: &dyn Fn(&Value) -> bool) -> Result<Value> {
    pull(&parse_request(request_json)?, events)
}

/// One file to pull.
struct FileSpec {
    name: String,
    size: u64,
    expect: Expect,
    cached: bool,
}

fn online(s: &Settings, cache: &RepoCache, ev: &Events) -> Result<Value> {
    let hub = Hub::new(&s.endpoint, &s.repo, &s.revision, s.token.as_deref());
    let listing = match hub.listing(ev) {
        Ok(l) => l,
        Err(e) if e.code == ErrorCode::Network => {
            // The hub is unreachable: a cached copy of the revision still serves, as with
            // huggingface_hub.
            let why = format!("the hub could not be reached ({}); using the cached copy", e.message);
            return from_cache(s, cache, ev, Some(why)).map_err(|_| e);
        }
        Err(e) => return Err(e),
    };
    let what = format!("{}@{}", s.repo, s.revision);
    let commit = check_listing(&listing, &s.repo, &what)?;
    if (listing.is_gated() || listing.private) && !hub.has_token() {
        let (kind, who) = if listing.private {
            ("private", "that can see it".to_string())
        } else {
            ("gated", format!("that has accepted the model's license at {}", hub.repo_url()))
        };
        bail!(
            AuthRequired,
            "{} is {kind}: downloading it needs a Hugging Face token. Set HF_TOKEN to a read token of an account {who} \
             (nothing was downloaded)",
            s.repo
        );
    }
    // Advisory pre-filter: the hub's view of the template. The file itself is the judge.
    if let Some(t) = hub.gguf_template() {
        let stub = t.as_deref().is_none_or(|t| !t.to_ascii_lowercase().contains("tool"));
        if stub {
            let about =
                if t.is_none() { "shows no chat template" } else { "shows a chat template without tool support" };
            ev.warning(
                "template_without_tools",
                format!("the hub's GGUF metadata for {} {about}; downloading anyway, since the file may carry a tool_use template variant (checked after download)", s.repo),
            )?;
        }
    }
    let (choice, planned) = plan_files(&listing, s.quant.as_deref(), s.filename.as_deref(), &what)?;
    for (code, msg) in &choice.warnings {
        ev.warning(code, msg.clone())?;
    }
    let mut files = Vec::new();
    for (name, size, expect) in planned {
        let cached =
            cache.has_blob(expect.key(), Some(size))? || cache.restore(&commit, &name, expect.key(), Some(size))?;
        files.push(FileSpec { name, size, expect, cached });
    }
    let r = fetch_all(s, cache, &hub, &commit, &mut files, ev);
    if r.is_err() {
        cache.tidy(&commit);
    }
    let (sha256, downloaded) = r?;
    finish(s, cache, &commit, &files, sha256, downloaded)
}

/// The listing's own checks, before anything else is asked of the hub: not disabled, a valid
/// commit id, only safe file names. Returns the commit.
fn check_listing(listing: &hub::Listing, repo: &str, what: &str) -> Result<String> {
    if listing.disabled {
        bail!(RepoDisabled, "{repo} has been disabled on the hub; its files cannot be downloaded");
    }
    let commit = match listing.sha.as_deref().map(str::to_ascii_lowercase) {
        Some(c) if select::is_commit(&c) => c,
        other => bail!(InvalidRepoListing, "the hub's listing of {what} has no valid commit id ({other:?})"),
    };
    for sib in &listing.siblings {
        select::validate_rfilename(&sib.rfilename)?;
    }
    Ok(commit)
}

/// One file of a plan: its name, size and expected checksum.
type PlannedFile = (String, u64, Expect);

/// The file plan: the chosen model's files with the size and checksum the listing gives each.
fn plan_files(
    listing: &hub::Listing,
    quant: Option<&str>,
    filename: Option<&str>,
    what: &str,
) -> Result<(select::Choice, Vec<PlannedFile>)> {
    let names: Vec<String> = listing.siblings.iter().map(|x| x.rfilename.clone()).collect();
    let choice = select::choose(&names, quant, filename, what)?;
    let mut files = Vec::new();
    for name in &choice.group.files {
        let sib = listing.siblings.iter().find(|x| &x.rfilename == name).expect("chosen from the listing");
        let size = sib.lfs.as_ref().and_then(|l| l.size).or(sib.size);
        let Some(size) = size else {
            bail!(InvalidRepoListing, "the hub's listing of {what} gives no size for {name}")
        };
        let expect = match (&sib.lfs, &sib.blob_id) {
            (Some(l), _) => Expect::Sha256(l.sha256.to_ascii_lowercase()),
            (None, Some(b)) => Expect::GitSha1(b.to_ascii_lowercase()),
            (None, None) => bail!(InvalidRepoListing, "the hub's listing of {what} gives no checksum for {name}"),
        };
        if !hub::valid_key(expect.key()) {
            return Err(Error::new(
                ErrorCode::InvalidRepoListing,
                format!("the hub's listing of {what} gives an invalid checksum for {name}"),
            )
            .with_field("file", json!(name)));
        }
        files.push((name.clone(), size, expect));
    }
    Ok((choice, files))
}

/// The listing parser and file planner on their own, for the fuzz target `pull_listing`: the hub's
/// listing JSON text → the files [`pull`] would download (`{"commit","files":[{"name","size",
/// "sha256"|"git_sha1"}],"warnings"}`), or the error it would return. Touches no network or disk.
#[doc(hidden)]
pub fn plan_from_listing(listing_json: &str, quant: Option<&str>, filename: Option<&str>) -> Result<Value> {
    let (repo, what) = ("fuzz/listing", "fuzz/listing@main");
    let listing = hub::parse_listing(listing_json, repo)?;
    let commit = check_listing(&listing, repo, what)?;
    let (choice, files) = plan_files(&listing, quant, filename, what)?;
    Ok(json!({
        "commit": commit,
        "gated": listing.is_gated(),
        "files": files.iter().map(|(name, size, e)| match e {
            Expect::Sha256(h) => json!({"name": name, "size": size, "sha256": h}),
            Expect::GitSha1(h) => json!({"name": name, "size": size, "git_sha1": h}),
        }).collect::<Vec<_>>(),
        "warnings": choice.warnings.iter().map(|(c, m)| json!({"code": c, "message": m})).collect::<Vec<_>>(),
    }))
}

/// Downloads what is missing; links the snapshot and the ref. Returns (sha256s, bytes fetched).
fn fetch_all(
    s: &Settings,
    cache: &RepoCache,
    hub: &Hub,
    commit: &str,
    files: &mut [FileSpec],
    ev: &Events,
) -> Result<(Vec<String>, u64)> {
    let total: u64 = files.iter().map(|f| f.size).sum();
    let to_fetch: u64 = files.iter().filter(|f| !f.cached).map(|f| f.size).sum();
    ev.emit(json!({
        "type": "pull_resolved",
        "repo": s.repo,
        "revision": s.revision,
        "commit": commit,
        "files": files.iter().map(|f| json!({
            "name": f.name,
            "size": f.size,
            "sha256": match &f.expect { Expect::Sha256(h) => json!(h), Expect::GitSha1(_) => Value::Null },
            "cached": f.cached,
        })).collect::<Vec<_>>(),
        "total": total,
        "to_download": to_fetch,
    }))?;
    let mut progress = Progress::new(ev, total, files.iter().filter(|f| f.cached).map(|f| f.size).sum());
    let mut sha256 = Vec::new();
    for f in files.iter_mut() {
        if f.cached {
            sha256.push(blob_sha256(cache, &f.expect)?);
            continue;
        }
        let key = f.expect.key().to_string();
        let _lock = cache.lock(&key, || {
            ev.warning(
                "waiting_for_lock",
                format!("{}: another download of this file is running; waiting for it", f.name),
            )
        })?;
        if cache.has_blob(&key, Some(f.size))? {
            // Another process finished it while we waited.
            f.cached = true;
            progress.done += f.size;
            sha256.push(blob_sha256(cache, &f.expect)?);
            continue;
        }
        let job = Job { file: &f.name, size: f.size, expect: f.expect.clone(), incomplete: cache.incomplete(&key) };
        let (sha, final_key) = download::download(hub, commit, &job, &cache.blobs_dir(), ev, &mut progress)?;
        f.expect = if select::is_sha256(&final_key) { Expect::Sha256(final_key) } else { Expect::GitSha1(final_key) };
        progress.done += f.size;
        sha256.push(sha);
    }
    for f in files.iter() {
        cache.link(commit, &f.name, f.expect.key())?;
    }
    if s.revision != commit {
        cache.write_ref(&s.revision, commit)?;
    }
    Ok((sha256, progress.downloaded))
}

fn blob_sha256(cache: &RepoCache, e: &Expect) -> Result<String> {
    match e {
        Expect::Sha256(h) => Ok(h.clone()),
        Expect::GitSha1(k) => download::sha256_file(&cache.blob(k)),
    }
}

/// Resolves the request from the cache alone (offline, or the hub unreachable).
fn from_cache(s: &Settings, cache: &RepoCache, ev: &Events, fallback: Option<String>) -> Result<Value> {
    let what = format!("{}@{}", s.repo, s.revision);
    let not_cached = |detail: &str| {
        Error::new(
            ErrorCode::NotCached,
            format!(
                "offline (HF_HUB_OFFLINE=1 or offline:true) and {detail} in the cache {}; pull it once online first",
                s.cache_root.display()
            ),
        )
    };
    let commit = if select::is_commit(&s.revision) { Some(s.revision.clone()) } else { cache.read_ref(&s.revision) };
    let Some(commit) = commit else { return Err(not_cached(&format!("{what} is not"))) };
    let entries = cache.snapshot_files(&commit);
    if entries.is_empty() {
        return Err(not_cached(&format!("{what} is not")));
    }
    let names: Vec<String> = entries.iter().map(|e| e.0.clone()).collect();
    let choice = select::choose(&names, s.quant.as_deref(), s.filename.as_deref(), &format!("the cached {what}"))
        .map_err(|e| match e.code {
            ErrorCode::FileNotFound | ErrorCode::QuantNotFound | ErrorCode::NoGguf => {
                Error { code: ErrorCode::NotCached, message: format!("offline: {}", e.message), extra: e.extra }
            }
            _ => e,
        })?;
    let mut files = Vec::new();
    let mut sha256 = Vec::new();
    for name in &choice.group.files {
        let key = &entries.iter().find(|e| &e.0 == name).expect("listed").1;
        if !hub::valid_key(key) {
            return Err(not_cached(&format!("{name} of {what} is not a blob link")));
        }
        if !cache.has_blob(key, None)? && !cache.restore(&commit, name, key, None)? {
            return Err(not_cached(&format!("the content of {name} ({what}) is not")));
        }
        cache.link(&commit, name, key)?;
        let expect = if select::is_sha256(key) { Expect::Sha256(key.clone()) } else { Expect::GitSha1(key.clone()) };
        sha256.push(blob_sha256(cache, &expect)?);
        let size = std::fs::metadata(cache.blob(key)).map(|m| m.len()).unwrap_or(0);
        files.push(FileSpec { name: name.clone(), size, expect, cached: true });
    }
    if let Some(w) = fallback {
        ev.warning("offline_fallback", w)?;
    }
    for (code, msg) in &choice.warnings {
        ev.warning(code, msg.clone())?;
    }
    let total: u64 = files.iter().map(|f| f.size).sum();
    ev.emit(json!({
        "type": "pull_resolved",
        "repo": s.repo,
        "revision": s.revision,
        "commit": commit,
        "files": files.iter().zip(&sha256).map(|(f, h)| json!({"name": f.name, "size": f.size, "sha256": h, "cached": true})).collect::<Vec<_>>(),
        "total": total,
        "to_download": 0,
    }))?;
    finish(s, cache, &commit, &files, sha256, 0)
}

/// The tool gate on the first shard, then the result; refused files go to quarantine.
fn finish(
    s: &Settings,
    cache: &RepoCache,
    commit: &str,
    files: &[FileSpec],
    sha256: Vec<String>,
    downloaded: u64,
) -> Result<Value> {
    let first = cache.snapshot(commit, &files[0].name);
    match gate(&first) {
        Ok(info) => Ok(json!({
            "type": "pull_result",
            "repo": s.repo,
            "revision": s.revision,
            "commit": commit,
            "files": files.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
            "path": first.to_string_lossy(),
            "sha256": sha256,
            "from_cache": files.iter().all(|f| f.cached),
            "bytes_downloaded": downloaded,
            "model_info": info,
        })),
        Err(e) if matches!(e.code, ErrorCode::ToolsUnsupported | ErrorCode::NotAGguf | ErrorCode::TemplateError) => {
            let pairs: Vec<(String, String)> =
                files.iter().map(|f| (f.name.clone(), f.expect.key().to_string())).collect();
            let moved = cache.quarantine(commit, &pairs)?;
            let list: Vec<String> = moved.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            Err(Error {
                message: format!(
                    "{} Moved to {} (a later pull re-checks it there without downloading).",
                    e.message, list[0]
                ),
                ..e
            }
            .with_field("quarantined", json!(list)))
        }
        Err(e) => Err(e),
    }
}

/// `llb_chat_create`'s gate: model_info's `supports_tools` is `probe.supports_tools()`.
fn gate(path: &Path) -> Result<Value> {
    let info = crate::model_info::model_info(path)?;
    if info["supports_tools"] != Value::Bool(true) {
        let ins = crate::model_info::inspect(path)?;
        return Err(crate::model_info::tools_unsupported(path, &ins.probe));
    }
    Ok(info)
}
