//! Talking to the hub: the model API, the `resolve` endpoint with its redirect to a CDN, the
//! hub's error headers (`X-Error-Code`, `X-Error-Message`) mapped to llb's codes, and bounded
//! retries for 429 and transient failures.
//!
//! Redirects are followed here, not by the HTTP client, so that the `Authorization` header is
//! dropped as soon as a redirect leaves the hub's origin (scheme, host, port) and the hub's
//! `X-Linked-*` headers can be read from the redirect itself.

use super::select;
use super::events::Events;
use crate::error::{Error, ErrorCode, Result};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;
use ureq::http::{HeaderMap, StatusCode};

/// 429s waited out before giving up, and the longest wait llb accepts.
const RATE_LIMIT_RETRIES: u32 = 3;
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);
/// Attempts for connection failures and 5xx answers (API calls and each download request).
pub(crate) const NETWORK_ATTEMPTS: u32 = 4;

pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(250 * (1 << attempt.min(4)))
}

/// The hub's model listing (`GET /api/models/{repo}/revision/{rev}?blobs=true`), the fields llb uses.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Listing {
    #[serde(default)]
    pub sha: Option<String>,
    #[serde(default)]
    pub private: bool,
    /// `false`, `"auto"` or `"manual"`.
    #[serde(default)]
    pub gated: Value,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default)]
    pub siblings: Vec<Sibling>,
}

impl Listing {
    pub fn is_gated(&self) -> bool {
        !matches!(&self.gated, Value::Null | Value::Bool(false))
    }
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Sibling {
    pub rfilename: String,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default, rename = "blobId")]
    pub blob_id: Option<String>,
    #[serde(default)]
    pub lfs: Option<Lfs>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Lfs {
    pub sha256: String,
    #[serde(default)]
    pub size: Option<u64>,
}

/// What a request was about, for error messages.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    Api,
    File(&'a str),
}

pub(crate) struct Hub {
    agent: ureq::Agent,
    pub endpoint: String,
    pub repo: String,
    pub revision: String,
    token: Option<String>,
}

/// A download response after redirects: status 200, 206 or 416, and the hub's metadata.
pub(crate) struct Fetch {
    pub status: u16,
    pub linked_etag: Option<String>,
    pub linked_size: Option<u64>,
    pub etag: Option<String>,
    pub content_range: Option<String>,
    pub content_length: Option<u64>,
    pub body: ureq::BodyReader<'static>,
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// `scheme://host:port`, lowercase, with the default port made explicit.
fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority).to_ascii_lowercase();
    let has_port = authority.rsplit_once(':').is_some_and(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        && !authority.ends_with(']');
    let scheme = scheme.to_ascii_lowercase();
    if has_port {
        format!("{scheme}://{authority}")
    } else {
        format!("{scheme}://{authority}:{}", if scheme == "https" { 443 } else { 80 })
    }
}

fn join_location(base: &str, loc: &str) -> String {
    if loc.starts_with("http://") || loc.starts_with("https://") {
        return loc.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(l) = loc.strip_prefix("//") {
        return format!("{scheme}://{l}");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if loc.starts_with('/') {
        return format!("{scheme}://{authority}{loc}");
    }
    let path = rest[authority.len()..].split(['?', '#']).next().unwrap_or("/");
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    format!("{scheme}://{authority}{}{loc}", if dir.is_empty() { "/" } else { dir })
}

/// A URL fit for messages: no query (CDN URLs carry signatures there).
pub(crate) fn display_url(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

/// Percent-encodes a path; `/` is kept when `keep_slash`.
pub(crate) fn encode_path(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn is_loopback(endpoint: &str) -> bool {
    let o = origin(endpoint);
    let host = o.split_once("://").map_or("", |x| x.1);
    let host = host.rsplit_once(':').map_or(host, |x| x.0);
    host == "localhost" || host.starts_with("127.") || host == "[::1]"
}

/// Seconds to wait: `Retry-After: N`, else the IETF draft's `RateLimit` header (the hub's
/// `"api";r=0;t=N`, or the older `limit=L, remaining=0, reset=N`), else `RateLimit-Reset: N`.
fn retry_after(h: &HeaderMap) -> Option<u64> {
    if let Some(s) = header(h, "retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some(s);
    }
    let from_rl = header(h, "ratelimit").and_then(|rl| {
        rl.split([';', ',']).find_map(|p| {
            let p = p.trim();
            p.strip_prefix("t=").or_else(|| p.strip_prefix("reset=")).and_then(|t| t.trim().parse::<u64>().ok())
        })
    });
    from_rl.or_else(|| header(h, "ratelimit-reset").and_then(|v| v.parse().ok()))
}

impl Hub {
    pub fn new(endpoint: &str, repo: &str, revision: &str, token: Option<&str>) -> Hub {
        let mut cfg = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(format!("llb/{}", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(Duration::from_secs(20)))
            .timeout_per_read(Some(Duration::from_secs(60)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .input_buffer_size(1 << 20);
        // A loopback hub (a local mirror, the test suite) is never reached through a proxy.
        if is_loopback(endpoint) {
            cfg = cfg.proxy(None);
        }
        Hub {
            agent: cfg.build().into(),
            endpoint: endpoint.trim_end_matches('/').to_string(),
            repo: repo.to_string(),
            revision: revision.to_string(),
            token: token.map(str::to_string),
        }
    }

    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    fn api_url(&self, query: &str) -> String {
        format!("{}/api/models/{}/revision/{}?{query}", self.endpoint, self.repo, encode_path(&self.revision, false))
    }

    pub fn resolve_url(&self, commit: &str, file: &str) -> String {
        format!("{}/{}/resolve/{commit}/{}", self.endpoint, self.repo, encode_path(file, true))
    }

    pub fn repo_url(&self) -> String {
        format!("{}/{}", self.endpoint, self.repo)
    }

    /// One GET with retries for transport errors, 5xx and 429. Other statuses are returned.
    fn get(
        &self,
        url: &str,
        auth: bool,
        range: Option<u64>,
        events: &Events,
        target: Target,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let mut failures = 0;
        let mut limited = 0;
        loop {
            let mut req = self.agent.get(url);
            if let (true, Some(t)) = (auth, &self.token) {
                req = req.header("Authorization", format!("Bearer {t}"));
            }
            if let Some(r) = range {
                req = req.header("Range", format!("bytes={r}-"));
            }
            match req.call() {
                Ok(resp) if resp.status() == StatusCode::TOO_MANY_REQUESTS => {
                    let wait = retry_after(resp.headers()).unwrap_or(1 << limited.min(5));
                    if limited >= RATE_LIMIT_RETRIES || Duration::from_secs(wait) > MAX_RATE_LIMIT_WAIT {
                        return Err(Error::new(
                            ErrorCode::RateLimited,
                            format!(
                                "the hub is rate-limiting requests (HTTP 429{}); retry in {wait} s{}",
                                if limited > 0 { format!(" after {limited} retries") } else { String::new() },
                                if self.token.is_none() {
                                    ", or set HF_TOKEN: authenticated requests get higher limits"
                                } else {
                                    ""
                                }
                            ),
                        )
                        .with_field("retry_after", json!(wait)));
                    }
                    limited += 1;
                    events.warning("rate_limited", format!("the hub answered 429 (rate limited); retrying in {wait} s ({limited}/{RATE_LIMIT_RETRIES})"))?;
                    std::thread::sleep(Duration::from_secs(wait));
                }
                Ok(resp) if resp.status().is_server_error() && failures + 1 < NETWORK_ATTEMPTS => {
                    std::thread::sleep(backoff(failures));
                    failures += 1;
                }
                Ok(resp) => return Ok(resp),
                Err(_) if failures + 1 < NETWORK_ATTEMPTS => {
                    std::thread::sleep(backoff(failures));
                    failures += 1;
                }
                Err(e) => return Err(self.network(url, &e.to_string(), target)),
            }
        }
    }

    pub fn network(&self, url: &str, what: &str, target: Target) -> Error {
        let about = match target {
            Target::Api => format!("listing {}", self.repo),
            Target::File(f) => format!("downloading {f}"),
        };
        Error::new(
            ErrorCode::Network,
            format!("{about}: {} failed: {what}; check the connection (or HF_ENDPOINT), then retry", display_url(url)),
        )
    }

    /// GET following redirects by hand; returns the final response and the first value of each
    /// `X-Linked-*`/`ETag` header seen on the way.
    fn get_following(
        &self,
        url: &str,
        range: Option<u64>,
        events: &Events,
        target: Target,
    ) -> Result<(ureq::http::Response<ureq::Body>, HeaderMap)> {
        let home = origin(url);
        let mut url = url.to_string();
        let mut auth = true;
        let mut seen = HeaderMap::new();
        for _ in 0..10 {
            auth &= origin(&url) == home;
            let resp = self.get(&url, auth, range, events, target)?;
            for k in ["x-linked-etag", "x-linked-size", "etag", "x-repo-commit"] {
                if let (false, Some(v)) = (seen.contains_key(k), resp.headers().get(k)) {
                    seen.insert(k, v.clone());
                }
            }
            if resp.status().is_redirection() {
                if let Some(loc) = header(resp.headers(), "location") {
                    url = join_location(&url, &loc);
                    continue;
                }
            }
            return Ok((resp, seen));
        }
        Err(self.network(&url, "too many redirects", target))
    }

    /// Maps a non-success answer to llb's error vocabulary, from the hub's headers.
    // Over 60 lines: one table of the hub's answers, an `if` per case with its message, in the
    // order they must be tested.
    pub fn error(&self, status: u16, headers: &HeaderMap, body: &str, target: Target) -> Error {
        let code = header(headers, "x-error-code").unwrap_or_default();
        let hub_msg = header(headers, "x-error-message")
            .or_else(|| serde_json::from_str::<Value>(body).ok().and_then(|v| v["error"].as_str().map(str::to_string)))
            .unwrap_or_default();
        let said = if hub_msg.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {hub_msg}") };
        let (repo, rev, page) = (&self.repo, &self.revision, self.repo_url());
        let token = self.has_token();
        let e = |c: ErrorCode, m: String| Error::new(c, m).with_field("http_status", json!(status));
        if hub_msg.contains("Invalid credentials") || (hub_msg.contains("Invalid username or password") && token) {
            return e(
                ErrorCode::AuthFailed,
                format!(
                    "the hub rejected the Hugging Face token ({said}); check HF_TOKEN (or the token file under HF_HOME) \
                     or create a new read token at {}/settings/tokens",
                    self.endpoint
                ),
            );
        }
        if code == "DisabledRepo" || hub_msg.contains("Access to this resource is disabled") {
            return e(
                ErrorCode::RepoDisabled,
                format!("{repo} has been disabled on the hub ({said}); its files cannot be downloaded"),
            );
        }
        match (code.as_str(), status) {
            ("GatedRepo", _) | ("", 401 | 403) if !token => e(
                ErrorCode::AuthRequired,
                format!(
                    "{repo} is gated or private and no Hugging Face token is set ({said}). Set HF_TOKEN to a read token \
                     of an account that has accepted the model's license at {page}"
                ),
            ),
            ("GatedRepo", _) => e(
                ErrorCode::LicenseNotAccepted,
                format!(
                    "your Hugging Face account has not been granted access to the gated repo {repo} ({said}). \
                     Accept its license at {page} (some repos review requests by hand), then retry"
                ),
            ),
            ("RepoNotFound", _) | ("", 404) if matches!(target, Target::Api) || code == "RepoNotFound" => {
                let hint = if token {
                    "or the token's account cannot see it; check the id"
                } else {
                    "or it is private: set HF_TOKEN for an account that can see it; check the id"
                };
                e(ErrorCode::RepoNotFound, format!("repository {repo} not found on {} ({said}), {hint}", self.endpoint))
            }
            ("RevisionNotFound", _) => e(ErrorCode::RevisionNotFound, format!("revision `{rev}` not found in {repo} ({said}); use a branch, tag or commit of the repo")),
            ("EntryNotFound", _) | ("", 404) => {
                let f = match target {
                    Target::File(f) => f,
                    Target::Api => "the file",
                };
                e(ErrorCode::FileNotFound, format!("{f} not found in {repo}@{rev} ({said})"))
            }
            (_, 401 | 403) => e(
                ErrorCode::AuthFailed,
                format!("the hub refused the request with the given token ({said}); check that the token may read {repo} (fine-grained tokens need read access to it)"),
            ),
            _ => e(ErrorCode::Network, format!("the hub answered {said} for {repo}; retry later")),
        }
    }

    fn read_error_body(resp: &mut ureq::http::Response<ureq::Body>) -> String {
        resp.body_mut().with_config().limit(64 * 1024).read_to_string().unwrap_or_default()
    }

    /// The listing of the revision, with file sizes and sha256s.
    pub fn listing(&self, events: &Events) -> Result<Listing> {
        let url = self.api_url("blobs=true");
        let (mut resp, _) = self.get_following(&url, None, events, Target::Api)?;
        let status = resp.status().as_u16();
        if status != 200 {
            let body = Self::read_error_body(&mut resp);
            return Err(self.error(status, resp.headers(), &body, Target::Api));
        }
        let text = resp
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .map_err(|e| self.network(&url, &e.to_string(), Target::Api))?;
        parse_listing(&text, &self.repo)
    }

    /// `gguf.chat_template` from `?expand=gguf`: `Some(None)` when the hub has none, `None` when
    /// the question could not be answered (the pre-filter is advisory: no retries, no errors).
    pub fn gguf_template(&self) -> Option<Option<String>> {
        let mut req = self.agent.get(&self.api_url("expand=gguf"));
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut resp = req.call().ok()?;
        if resp.status() != StatusCode::OK {
            return None;
        }
        let v: Value =
            serde_json::from_str(&resp.body_mut().with_config().limit(64 << 20).read_to_string().ok()?).ok()?;
        Some(v["gguf"]["chat_template"].as_str().map(str::to_string))
    }

    /// Starts downloading `file` at `commit`, from byte `from` (a `Range` request when > 0).
    pub fn fetch(&self, commit: &str, file: &str, from: u64, events: &Events) -> Result<Fetch> {
        let url = self.resolve_url(commit, file);
        let target = Target::File(file);
        let (mut resp, seen) = self.get_following(&url, (from > 0).then_some(from), events, target)?;
        let status = resp.status().as_u16();
        if !matches!(status, 200 | 206 | 416) {
            let body = Self::read_error_body(&mut resp);
            return Err(self.error(status, resp.headers(), &body, target));
        }
        let unquote = |s: String| s.trim_start_matches("W/").trim_matches('"').to_ascii_lowercase();
        let h = resp.headers();
        Ok(Fetch {
            status,
            linked_etag: header(&seen, "x-linked-etag").map(unquote),
            linked_size: header(&seen, "x-linked-size").and_then(|s| s.parse().ok()),
            etag: header(&seen, "etag").map(unquote),
            content_range: header(h, "content-range"),
            content_length: header(h, "content-length").and_then(|s| s.parse().ok()),
            body: resp.into_body().into_reader(),
        })
    }
}

/// The listing's JSON text → [`Listing`]; anything else is `invalid_repo_listing`.
pub(crate) fn parse_listing(text: &str, repo: &str) -> Result<Listing> {
    serde_json::from_str(text).map_err(|e| {
        Error::new(ErrorCode::InvalidRepoListing, format!("the hub's listing of {repo} is not the expected JSON: {e}"))
    })
}

/// Whether a listing entry's key is a usable blob name.
pub(crate) fn valid_key(k: &str) -> bool {
    select::is_sha256(k) || select::is_commit(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_locations() {
        assert_eq!(origin("https://huggingface.co/a/b"), "https://huggingface.co:443");
        assert_eq!(origin("http://127.0.0.1:8080/x?y"), "http://127.0.0.1:8080");
        assert_ne!(origin("http://127.0.0.1:8080/"), origin("http://127.0.0.1:8081/"));
        assert_eq!(join_location("https://h.co/a/b/c?x", "/d/e"), "https://h.co/d/e");
        assert_eq!(join_location("https://h.co/a/b/c", "d"), "https://h.co/a/b/d");
        assert_eq!(join_location("https://h.co/a", "https://cdn.x/y"), "https://cdn.x/y");
        assert!(is_loopback("http://127.0.0.1:9/"));
        assert!(!is_loopback("https://huggingface.co"));
    }

    #[test]
    fn retry_after_headers() {
        let mut h = HeaderMap::new();
        h.insert("ratelimit", "\"api\";r=0;t=55".parse().unwrap());
        assert_eq!(retry_after(&h), Some(55));
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(7));
        let mut h = HeaderMap::new();
        h.insert("ratelimit", "limit=500, remaining=0, reset=42".parse().unwrap());
        assert_eq!(retry_after(&h), Some(42));
    }
}
