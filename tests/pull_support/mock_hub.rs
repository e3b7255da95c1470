//! A Hugging Face hub on 127.0.0.1 for the pull tests and benchmark: two real HTTP servers, the
//! hub (API + `resolve`) and a "CDN" on another port that `resolve` redirects LFS files to.
//!
//! It answers as the real hub does (as huggingface_hub's `hf_raise_for_status` expects):
//! - `GET /api/models/{org}/{name}[/revision/{rev}]?blobs=true` → the listing (`sha`, `gated`,
//!   `private`, `disabled`, `siblings[].{rfilename,size,blobId,lfs.{sha256,size}}`);
//!   `?expand=gguf` → `{"gguf":{"chat_template":...}}`.
//! - `GET /{org}/{name}/resolve/{rev}/{file}` → LFS: 302 to the CDN with `X-Repo-Commit`,
//!   `X-Linked-Etag`, `X-Linked-Size`; git files: 200 with the content and `ETag`.
//! - Errors with `X-Error-Code`/`X-Error-Message`: 401 `RepoNotFound` for a missing or private repo
//!   without a token (404 with one), 401 `GatedRepo` without a token, 403 `GatedRepo` for a token
//!   whose account has not accepted the license, 401 "Invalid credentials in Authorization
//!   header" for a bad token, 404 `RevisionNotFound` / `EntryNotFound`, 403 "Access to this
//!   resource is disabled.", 429 with `Retry-After` or `RateLimit`.
//! - The CDN honours `Range` (206 + `Content-Range`, 416 past the end).
//!
//! Faults (`MockHub::fault`) apply to the next requests of a route: drop the connection after N
//! bytes, ignore `Range`, corrupt a byte, answer a status, rate-limit, send slowly.
#![allow(dead_code)]

use serde_json::{json, Value};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn git_oid(data: &[u8]) -> String {
    let mut h = Sha1::new_with_prefix(format!("blob {}\0", data.len()));
    h.update(data);
    hex(&h.finalize())
}

#[derive(Clone)]
pub enum Body {
    Mem(Arc<Vec<u8>>),
    Disk(Arc<PathBuf>),
}

#[derive(Clone)]
pub struct MockFile {
    pub name: String,
    pub body: Body,
    pub size: u64,
    pub sha256: String,
    /// The git blob id: of the content for git files, of the LFS pointer for LFS files.
    pub blob_id: String,
    pub lfs: bool,
}

impl MockFile {
    /// An LFS file (how the hub stores GGUFs).
    pub fn lfs(name: &str, data: Vec<u8>) -> MockFile {
        let sha256 = hex(&Sha256::digest(&data));
        let pointer = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {}\n", data.len());
        MockFile {
            name: name.into(),
            size: data.len() as u64,
            sha256,
            blob_id: git_oid(pointer.as_bytes()),
            body: Body::Mem(Arc::new(data)),
            lfs: true,
        }
    }

    /// An LFS file served from disk (large fixtures); hashed once here.
    pub fn lfs_path(name: &str, path: &Path) -> MockFile {
        let mut f = File::open(path).unwrap();
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            size += n as u64;
            h.update(&buf[..n]);
        }
        let sha256 = hex(&h.finalize());
        let pointer = format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n");
        MockFile {
            name: name.into(),
            size,
            sha256,
            blob_id: git_oid(pointer.as_bytes()),
            body: Body::Disk(Arc::new(path.to_path_buf())),
            lfs: true,
        }
    }

    /// A file stored in git itself (no LFS): the listing has only its `blobId`.
    pub fn git(name: &str, data: Vec<u8>) -> MockFile {
        MockFile {
            name: name.into(),
            size: data.len() as u64,
            sha256: hex(&Sha256::digest(&data)),
            blob_id: git_oid(&data),
            body: Body::Mem(Arc::new(data)),
            lfs: false,
        }
    }
}

#[derive(Clone)]
pub struct MockRepo {
    pub id: String,
    pub commit: String,
    /// Branch/tag name → commit.
    pub refs: Vec<(String, String)>,
    pub files: Vec<MockFile>,
    /// `None`, `Some("auto")` or `Some("manual")`.
    pub gated: Option<&'static str>,
    pub private: bool,
    /// The listing says `gated: false` although downloads are gated (the hub's 401/403 then decide).
    pub hide_gated_in_listing: bool,
    pub disabled: bool,
    /// Answer the API itself with 403 "disabled" (instead of a listing with `disabled: true`).
    pub disabled_api_403: bool,
    /// `?expand=gguf`: None → no `gguf` object; Some(None) → no `chat_template` in it.
    pub gguf_template: Option<Option<String>>,
    /// Raw listing entries added after the files (e.g. unsafe names).
    pub extra_siblings: Vec<Value>,
    /// Listed, but `resolve` answers 404 EntryNotFound.
    pub missing_on_resolve: Vec<String>,
}

impl MockRepo {
    pub fn new(id: &str, files: Vec<MockFile>) -> MockRepo {
        let commit = hex(&Sha1::digest(format!("commit of {id}")));
        MockRepo {
            id: id.into(),
            refs: vec![("main".into(), commit.clone())],
            commit,
            files,
            gated: None,
            private: false,
            hide_gated_in_listing: false,
            disabled: false,
            disabled_api_403: false,
            gguf_template: None,
            extra_siblings: vec![],
            missing_on_resolve: vec![],
        }
    }

    fn commit_of(&self, rev: &str) -> Option<String> {
        if rev == self.commit {
            return Some(rev.to_string());
        }
        self.refs.iter().find(|(n, _)| n == rev).map(|(_, c)| c.clone())
    }
}

#[derive(Clone, Debug)]
pub enum Fault {
    /// 429 with these headers (e.g. `Retry-After: 1`, or `RateLimit: "api";r=0;t=1`).
    RateLimit(Vec<(String, String)>),
    /// This status, with an empty body.
    Status(u16),
    /// Send the headers (full length) and this many body bytes, then close the connection.
    DropAfter(u64),
    /// Answer 200 with the whole file even when a `Range` was asked for.
    IgnoreRange,
    /// Flip one byte in the middle of the file.
    Corrupt,
    /// Send `chunk` bytes, then pause.
    Slow { chunk: usize, pause_ms: u64 },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Route {
    Api,
    Resolve,
    Cdn,
}

#[derive(Clone, Debug)]
pub struct Logged {
    id: u64,
    pub route: Route,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub status: u16,
    /// Body bytes actually sent.
    pub sent: u64,
}

impl Logged {
    pub fn header(&self, k: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    repos: HashMap<String, MockRepo>,
    tokens: Vec<String>,
    /// (token, repo) pairs whose account accepted a gated repo's license / may see a private repo.
    access: Vec<(String, String)>,
    faults: Vec<(Route, Fault, usize)>,
    log: Vec<Logged>,
    next_id: u64,
}

pub struct MockHub {
    pub endpoint: String,
    pub cdn: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    ports: [u16; 2],
}

enum Payload {
    Bytes(Vec<u8>),
    File { body: Body, start: u64, len: u64, size: u64 },
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    payload: Payload,
}

impl Resp {
    fn new(status: u16) -> Resp {
        Resp { status, headers: vec![], payload: Payload::Bytes(vec![]) }
    }
    fn header(mut self, k: &str, v: impl Into<String>) -> Resp {
        self.headers.push((k.into(), v.into()));
        self
    }
    fn json(status: u16, v: &Value) -> Resp {
        Resp {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            payload: Payload::Bytes(v.to_string().into_bytes()),
        }
    }
    /// An error as the hub sends it.
    fn hub_error(status: u16, code: Option<&str>, msg: &str) -> Resp {
        let mut r = Resp::json(status, &json!({"error": msg})).header("X-Error-Message", msg);
        if let Some(c) = code {
            r = r.header("X-Error-Code", c);
        }
        r
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl MockHub {
    pub fn start() -> MockHub {
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let hub = TcpListener::bind("127.0.0.1:0").unwrap();
        let cdn = TcpListener::bind("127.0.0.1:0").unwrap();
        let ports = [hub.local_addr().unwrap().port(), cdn.local_addr().unwrap().port()];
        let endpoint = format!("http://127.0.0.1:{}", ports[0]);
        let cdn_url = format!("http://127.0.0.1:{}", ports[1]);
        for (listener, is_cdn) in [(hub, false), (cdn, true)] {
            let (state, stop, endpoint, cdn_url) = (state.clone(), stop.clone(), endpoint.clone(), cdn_url.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (state, endpoint, cdn_url) = (state.clone(), endpoint.clone(), cdn_url.clone());
                    std::thread::spawn(move || {
                        let _ = serve(conn, is_cdn, &state, &endpoint, &cdn_url);
                    });
                }
            });
        }
        MockHub { endpoint, cdn: cdn_url, state, stop, ports }
    }

    pub fn add_repo(&self, r: MockRepo) {
        self.state.lock().unwrap().repos.insert(r.id.clone(), r);
    }

    pub fn update_repo(&self, id: &str, f: impl FnOnce(&mut MockRepo)) {
        f(self.state.lock().unwrap().repos.get_mut(id).expect("repo"));
    }

    pub fn add_token(&self, token: &str) {
        self.state.lock().unwrap().tokens.push(token.into());
    }

    /// The token's account accepted the gated repo's license (or may see the private repo).
    pub fn grant(&self, token: &str, repo: &str) {
        self.state.lock().unwrap().access.push((token.into(), repo.into()));
    }

    /// Applies `fault` to the next `times` requests of `route` (faults queue in order).
    pub fn fault(&self, route: Route, fault: Fault, times: usize) {
        self.state.lock().unwrap().faults.push((route, fault, times));
    }

    pub fn clear_faults(&self) {
        self.state.lock().unwrap().faults.clear();
    }

    pub fn log(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }

    pub fn requests(&self, route: Route) -> Vec<Logged> {
        self.log().into_iter().filter(|l| l.route == route).collect()
    }

    pub fn clear_log(&self) {
        self.state.lock().unwrap().log.clear();
    }
}

impl Drop for MockHub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for p in self.ports {
            let _ = TcpStream::connect(("127.0.0.1", p));
        }
    }
}

// Over 60 lines: the mock hub's routing table, one branch per endpoint and fault.
fn serve(conn: TcpStream, is_cdn: bool, state: &Arc<Mutex<State>>, endpoint: &str, cdn_url: &str) -> io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let (path, query) =
        target.split_once('?').map(|(p, q)| (p.to_string(), q.to_string())).unwrap_or((target.clone(), String::new()));
    let route = if is_cdn {
        Route::Cdn
    } else if path.starts_with("/api/models/") {
        Route::Api
    } else {
        Route::Resolve
    };
    let range = get("range")
        .and_then(|r| r.strip_prefix("bytes=").and_then(|r| r.split('-').next()).and_then(|a| a.parse::<u64>().ok()));
    let (resp, fault, log_id) = {
        let mut st = state.lock().unwrap();
        let fault = match st.faults.iter().position(|(r, _, n)| *r == route && *n > 0) {
            Some(i) => {
                st.faults[i].2 -= 1;
                let f = st.faults[i].1.clone();
                if st.faults[i].2 == 0 {
                    st.faults.remove(i);
                }
                Some(f)
            }
            None => None,
        };
        let resp = match (&fault, method.as_str()) {
            (Some(Fault::RateLimit(h)), _) => {
                let mut r = Resp::hub_error(
                    429,
                    None,
                    "You have exceeded our hourly quotas for action 'resolve'. We invite you to retry later.",
                );
                for (k, v) in h {
                    r = r.header(k, v.clone());
                }
                r
            }
            (Some(Fault::Status(s)), _) => Resp::new(*s),
            (_, "GET") => {
                let token = get("authorization").and_then(|a| a.strip_prefix("Bearer ").map(str::to_string));
                let ignore_range = matches!(fault, Some(Fault::IgnoreRange));
                match route {
                    Route::Api => api(&st, &path, &query, token.as_deref()),
                    Route::Resolve => resolve(
                        &st,
                        &path,
                        token.as_deref(),
                        cdn_url,
                        endpoint,
                        if ignore_range { None } else { range },
                    ),
                    Route::Cdn => cdn(&st, &path, if ignore_range { None } else { range }),
                }
            }
            _ => Resp::new(405),
        };
        // Logged on arrival, so a client that has its answer always finds its request here.
        st.next_id += 1;
        let id = st.next_id;
        st.log.push(Logged {
            id,
            route,
            target: target.clone(),
            headers: headers.clone(),
            status: resp.status,
            sent: 0,
        });
        (resp, fault, id)
    };
    let mut out = conn;
    let mut head = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let body_len = match &resp.payload {
        Payload::Bytes(b) => b.len() as u64,
        Payload::File { len, .. } => *len,
    };
    head.push_str(&format!("Content-Length: {body_len}\r\nConnection: close\r\n\r\n"));
    out.write_all(head.as_bytes())?;
    let limit = match fault {
        Some(Fault::DropAfter(n)) => n.min(body_len),
        _ => body_len,
    };
    let sent = match resp.payload {
        Payload::Bytes(b) => {
            out.write_all(&b[..limit as usize])?;
            limit
        }
        Payload::File { body, start, size, .. } => send_file(&mut out, &body, start, limit, size, &fault)?,
    };
    out.flush()?;
    // Before the connection closes: a client that sees the close finds the count updated.
    if let Some(l) = state.lock().unwrap().log.iter_mut().find(|l| l.id == log_id) {
        l.sent = sent;
    }
    let _ = out.shutdown(Shutdown::Both);
    Ok(())
}

// Over 60 lines: one body sender with its three faults (corrupt, slow, cut) inline, next to the
// fast sendfile path they bypass.
fn send_file(
    out: &mut TcpStream,
    body: &Body,
    start: u64,
    len: u64,
    size: u64,
    fault: &Option<Fault>,
) -> io::Result<u64> {
    let corrupt_at = matches!(fault, Some(Fault::Corrupt)).then_some(size / 2);
    let slow = match fault {
        Some(Fault::Slow { chunk, pause_ms }) => Some((*chunk, *pause_ms)),
        _ => None,
    };
    if let (Body::Disk(p), None, None) = (body, corrupt_at, slow) {
        // sendfile(2): the page cache goes to the socket without a trip through user space, so
        // the server costs the machine little next to the client being measured (a real hub's
        // CPU is not on this machine at all).
        use std::os::unix::io::AsRawFd;
        let f = File::open(&**p)?;
        let mut off = start as libc::off_t;
        let end = start + len;
        while (off as u64) < end {
            let want = ((end - off as u64) as usize).min(1 << 30);
            // SAFETY: two open descriptors and a valid offset pointer.
            let n = unsafe { libc::sendfile(out.as_raw_fd(), f.as_raw_fd(), &mut off, want) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                break;
            }
        }
        return Ok(off as u64 - start);
    }
    let chunk = slow.map_or(1 << 20, |s| s.0);
    let mut buf = vec![0u8; chunk];
    let mut src: Box<dyn Read> = match body {
        Body::Mem(m) => Box::new(io::Cursor::new(m.clone()[start as usize..(start + len) as usize].to_vec())),
        Body::Disk(p) => {
            let mut f = File::open(&**p)?;
            f.seek(SeekFrom::Start(start))?;
            Box::new(f.take(len))
        }
    };
    let mut sent = 0u64;
    while sent < len {
        let n = src.read(&mut buf[..chunk.min((len - sent) as usize)])?;
        if n == 0 {
            break;
        }
        if let Some(at) = corrupt_at {
            if at >= start + sent && at < start + sent + n as u64 {
                buf[(at - start - sent) as usize] ^= 0xff;
            }
        }
        out.write_all(&buf[..n])?;
        sent += n as u64;
        if let Some((_, ms)) = slow {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
    Ok(sent)
}

enum Auth {
    Anonymous,
    Valid(String),
    Invalid,
}

fn auth(st: &State, token: Option<&str>) -> Auth {
    match token {
        None => Auth::Anonymous,
        Some(t) if st.tokens.iter().any(|x| x == t) => Auth::Valid(t.into()),
        Some(_) => Auth::Invalid,
    }
}

/// The checks the hub makes before it serves anything of a repo.
fn repo_access<'s>(st: &'s State, org_name: &str, token: Option<&str>, download: bool) -> Result<&'s MockRepo, Resp> {
    let a = auth(st, token);
    if let Auth::Invalid = a {
        return Err(Resp::hub_error(401, None, "Invalid credentials in Authorization header"));
    }
    let granted = |id: &str| matches!(&a, Auth::Valid(t) if st.access.iter().any(|(tt, r)| tt == t && r == id));
    let not_found = || {
        let status = if matches!(a, Auth::Valid(_)) { 404 } else { 401 };
        Resp::hub_error(status, Some("RepoNotFound"), "Repository not found")
    };
    let Some(repo) = st.repos.get(org_name) else { return Err(not_found()) };
    if repo.private && !granted(&repo.id) {
        return Err(not_found());
    }
    if repo.disabled && (download || repo.disabled_api_403) {
        return Err(Resp::hub_error(403, None, "Access to this resource is disabled."));
    }
    if download && repo.gated.is_some() && !granted(&repo.id) {
        return Err(match a {
            Auth::Anonymous => Resp::hub_error(
                401,
                Some("GatedRepo"),
                &format!("Access to model {} is restricted. You must have access to it and be authenticated to access it. Please log in.", repo.id),
            ),
            _ => Resp::hub_error(
                403,
                Some("GatedRepo"),
                &format!("Access to model {} is restricted and you are not in the authorized list. Visit https://huggingface.co/{} to ask for access.", repo.id, repo.id),
            ),
        });
    }
    Ok(repo)
}

fn api(st: &State, path: &str, query: &str, token: Option<&str>) -> Resp {
    let rest = path.trim_start_matches("/api/models/");
    let parts: Vec<&str> = rest.splitn(4, '/').collect();
    if parts.len() < 2 {
        return Resp::hub_error(404, None, "Not found");
    }
    let id = format!("{}/{}", parts[0], parts[1]);
    let rev = match parts.get(2) {
        Some(&"revision") => percent_decode(parts.get(3).copied().unwrap_or("")),
        _ => "main".into(),
    };
    let repo = match repo_access(st, &id, token, false) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let Some(commit) = repo.commit_of(&rev) else {
        return Resp::hub_error(404, Some("RevisionNotFound"), &format!("Invalid rev id: {rev}"));
    };
    if query.split('&').any(|q| q == "expand=gguf" || q == "expand%5B%5D=gguf") {
        let mut v = json!({"_id": "mock", "id": repo.id});
        if let Some(t) = &repo.gguf_template {
            let mut g = json!({"total": 1000, "architecture": "llama", "context_length": 8192});
            if let Some(t) = t {
                g["chat_template"] = json!(t);
            }
            v["gguf"] = g;
        }
        return Resp::json(200, &v);
    }
    let mut siblings: Vec<Value> = repo
        .files
        .iter()
        .map(|f| {
            let mut s = json!({"rfilename": f.name, "size": f.size, "blobId": f.blob_id});
            if f.lfs {
                s["lfs"] = json!({"sha256": f.sha256, "size": f.size, "pointerSize": 134});
            }
            s
        })
        .collect();
    siblings.extend(repo.extra_siblings.iter().cloned());
    let gated = match repo.gated {
        Some(g) if !repo.hide_gated_in_listing => json!(g),
        _ => json!(false),
    };
    Resp::json(
        200,
        &json!({
            "_id": "mock", "id": repo.id, "modelId": repo.id, "author": repo.id.split('/').next(),
            "sha": commit, "lastModified": "2025-01-01T00:00:00.000Z",
            "private": repo.private, "gated": gated, "disabled": repo.disabled,
            "tags": ["gguf"], "library_name": "gguf", "siblings": siblings,
        }),
    )
}

fn resolve(st: &State, path: &str, token: Option<&str>, cdn_url: &str, _endpoint: &str, range: Option<u64>) -> Resp {
    // /{org}/{name}/resolve/{rev}/{file...}
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    if parts.len() < 5 || parts[2] != "resolve" {
        return Resp::hub_error(404, None, "Not found");
    }
    let id = format!("{}/{}", parts[0], parts[1]);
    let (rev, file) = (percent_decode(parts[3]), percent_decode(parts[4]));
    let repo = match repo_access(st, &id, token, true) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let Some(commit) = repo.commit_of(&rev) else {
        return Resp::hub_error(404, Some("RevisionNotFound"), &format!("Invalid rev id: {rev}"));
    };
    let f = match repo.files.iter().find(|f| f.name == file) {
        Some(f) if !repo.missing_on_resolve.contains(&file) => f,
        _ => return Resp::hub_error(404, Some("EntryNotFound"), &format!("{file} does not exist on \"{rev}\"")),
    };
    if f.lfs {
        return Resp::new(302)
            .header("Location", format!("{cdn_url}/blobs/{}?X-Amz-Signature=mocksig&Expires=9999999999", f.sha256))
            .header("X-Repo-Commit", commit)
            .header("X-Linked-Etag", format!("\"{}\"", f.sha256))
            .header("X-Linked-Size", f.size.to_string())
            .header("ETag", format!("\"{}\"", f.blob_id));
    }
    ranged(f, range).header("X-Repo-Commit", commit).header("ETag", format!("\"{}\"", f.blob_id))
}

fn ranged(f: &MockFile, range: Option<u64>) -> Resp {
    match range {
        Some(a) if a >= f.size => Resp::new(416).header("Content-Range", format!("bytes */{}", f.size)),
        Some(a) => Resp {
            status: 206,
            headers: vec![],
            payload: Payload::File { body: f.body.clone(), start: a, len: f.size - a, size: f.size },
        }
        .header("Content-Range", format!("bytes {a}-{}/{}", f.size - 1, f.size)),
        None => Resp {
            status: 200,
            headers: vec![],
            payload: Payload::File { body: f.body.clone(), start: 0, len: f.size, size: f.size },
        },
    }
    .header("Accept-Ranges", "bytes")
}

fn cdn(st: &State, path: &str, range: Option<u64>) -> Resp {
    let sha = path.trim_start_matches("/blobs/");
    match st.repos.values().flat_map(|r| r.files.iter()).find(|f| f.sha256 == sha) {
        Some(f) => ranged(f, range).header("Content-Type", "application/octet-stream"),
        None => Resp::new(404),
    }
}
