//! One file's download: resume from `blobs/<key>.incomplete` with `Range`, hash while writing,
//! verify, rename into place.
//!
//! Three threads pass a small pool of 1 MiB buffers along: the calling thread reads the socket
//! (and reports progress), a writer thread writes the file, a hasher thread hashes. Hashing
//! (sha256) is the costliest step, so it overlaps the I/O instead of adding to it.

use super::cache::disk_error;
use super::hub::{backoff, Hub, NETWORK_ATTEMPTS};
use super::events::Events;
use crate::error::{Error, ErrorCode, Result};
use serde_json::json;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CHUNK: usize = 1 << 20;
const BUFFERS: usize = 4;
/// Requests per file before giving up on a server that keeps dropping the connection.
const MAX_FETCHES: u32 = 50;
/// Progress events at most this often (plus one at the start and end of each file).
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// What the content must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expect {
    /// An LFS file: sha256 of the content (`lfs.sha256`, `X-Linked-Etag`).
    Sha256(String),
    /// A file stored in git: its blob id, sha1 of `"blob <size>\0" + content`.
    GitSha1(String),
}

impl Expect {
    pub fn key(&self) -> &str {
        match self {
            Expect::Sha256(k) | Expect::GitSha1(k) => k,
        }
    }
}

pub(crate) struct Job<'a> {
    pub file: &'a str,
    pub size: u64,
    pub expect: Expect,
    pub incomplete: PathBuf,
}

/// Throttled `pull_progress` events over all the files of one pull.
pub(crate) struct Progress<'e> {
    events: &'e Events<'e>,
    pub total: u64,
    pub done: u64,
    pub downloaded: u64,
    last: Option<Instant>,
}

impl<'e> Progress<'e> {
    pub fn new(events: &'e Events<'e>, total: u64, done: u64) -> Self {
        Progress { events, total, done, downloaded: 0, last: None }
    }

    pub fn report(&mut self, file: &str, file_bytes: u64, file_total: u64, force: bool) -> Result<()> {
        let now = Instant::now();
        if !force && self.last.is_some_and(|t| now.duration_since(t) < PROGRESS_EVERY) {
            return Ok(());
        }
        self.last = Some(now);
        self.events.emit(json!({
            "type": "pull_progress",
            "file": file,
            "bytes": self.done + file_bytes,
            "total": self.total,
            "file_bytes": file_bytes,
            "file_total": file_total,
        }))
    }
}

/// The `.incomplete` file and the hashes of what it holds.
struct Sink {
    file: File,
    sha256: Sha256,
    sha1: Option<Sha1>,
    size: u64,
    written: u64,
}

fn git_header(size: u64) -> Vec<u8> {
    format!("blob {size}\0").into_bytes()
}

impl Sink {
    /// Opens (or creates) the partial file and hashes what it already holds, so a download
    /// resumes where any earlier process stopped.
    fn open(path: &Path, size: u64, git: bool) -> Result<Sink> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| disk_error("cannot create", dir, &e))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| disk_error("cannot open", path, &e))?;
        let len = file.metadata().map_err(|e| disk_error("cannot read", path, &e))?.len();
        let mut s = Sink {
            file,
            sha256: Sha256::new(),
            sha1: git.then(|| Sha1::new_with_prefix(git_header(size))),
            size,
            written: 0,
        };
        if len > size {
            s.reset().map_err(|e| disk_error("cannot truncate", path, &e))?;
            return Ok(s);
        }
        let mut buf = vec![0u8; CHUNK];
        let mut left = len;
        while left > 0 {
            let n = s
                .file
                .read(&mut buf[..(left.min(CHUNK as u64) as usize)])
                .map_err(|e| disk_error("cannot read", path, &e))?;
            if n == 0 {
                break;
            }
            s.hash(&buf[..n]);
            left -= n as u64;
            s.written += n as u64;
        }
        s.file.seek(SeekFrom::Start(s.written)).map_err(|e| disk_error("cannot seek", path, &e))?;
        s.file.set_len(s.written).map_err(|e| disk_error("cannot truncate", path, &e))?;
        Ok(s)
    }

    fn hash(&mut self, b: &[u8]) {
        self.sha256.update(b);
        if let Some(h) = &mut self.sha1 {
            h.update(b);
        }
    }

    fn reset(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.sha256 = Sha256::new();
        if self.sha1.is_some() {
            self.sha1 = Some(Sha1::new_with_prefix(git_header(self.size)));
        }
        self.written = 0;
        Ok(())
    }

    fn digests(self) -> (String, Option<String>) {
        (hex(&self.sha256.finalize()), self.sha1.map(|h| hex(&h.finalize())))
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// sha256 of a file (for cached files whose blob is not named by it).
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(|e| disk_error("cannot read", path, &e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = f.read(&mut buf).map_err(|e| disk_error("cannot read", path, &e))?;
        if n == 0 {
            return Ok(hex(&h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

enum End {
    /// The body ended (check `written` against the size).
    Eof,
    Read(io::Error),
    Write(io::Error),
    /// The progress callback said stop (cancelled).
    Stopped(Error),
}

/// Copies `body` into the sink: this thread reads, a scoped thread hashes and writes.
/// Copies `body` into the sink through a three-stage pipeline over a small pool of buffers: this
/// thread reads the socket (and reports progress), a writer thread writes the file, a hasher
/// thread hashes what was written. Reads at most `limit + 1` bytes, so that a server sending
/// more than it should is noticed.
///
/// sha256 costs about as much as reading and writing together; as its own stage it runs beside
/// the I/O instead of after it. Only bytes that reached the file are hashed and counted, so the
/// sink stays consistent whatever fails.
// Over 60 lines: the reader, writer and hasher are three threads of one scope sharing its
// channels and buffer pool; splitting them apart would thread all of those through arguments.
fn stream(
    body: &mut (dyn Read + Send),
    sink: Sink,
    limit: u64,
    mut on_chunk: impl FnMut(u64) -> Result<()>,
) -> (Sink, End) {
    let Sink { file, sha256, sha1, size, written } = sink;
    let write_failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (to_writer, writer_rx) = mpsc::channel::<(Vec<u8>, usize)>();
        let (to_hasher, hasher_rx) = mpsc::channel::<(Vec<u8>, usize)>();
        let (to_pool, pool) = mpsc::channel::<Vec<u8>>();
        for _ in 0..BUFFERS {
            to_pool.send(vec![0u8; CHUNK]).unwrap();
        }
        let write_failed = &write_failed;
        let back_to_pool = to_pool.clone();
        let writer = s.spawn(move || {
            let (mut file, mut written, mut err) = (file, written, None);
            for (buf, n) in writer_rx {
                if err.is_none() {
                    match file.write_all(&buf[..n]) {
                        Ok(()) => {
                            written += n as u64;
                            let _ = to_hasher.send((buf, n));
                            continue;
                        }
                        Err(e) => {
                            write_failed.store(true, Ordering::Relaxed);
                            err = Some(e);
                        }
                    }
                }
                // Not written, so not hashed: straight back, or the reader could wait forever.
                let _ = back_to_pool.send(buf);
            }
            (file, written, err)
        });
        let hasher = s.spawn(move || {
            let (mut a, mut b) = (sha256, sha1);
            for (buf, n) in hasher_rx {
                a.update(&buf[..n]);
                if let Some(b) = &mut b {
                    b.update(&buf[..n]);
                }
                let _ = to_pool.send(buf);
            }
            (a, b)
        });
        let mut received = 0u64;
        let end = loop {
            let Ok(mut buf) = pool.recv() else { break End::Eof };
            if write_failed.load(Ordering::Relaxed) {
                break End::Eof; // the writer's error is reported below
            }
            let cap = (limit + 1 - received).min(CHUNK as u64) as usize;
            let mut n = 0;
            let mut read_err = None;
            while n < cap {
                match body.read(&mut buf[n..cap]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        read_err = Some(e);
                        break;
                    }
                }
            }
            received += n as u64;
            if n > 0 {
                to_writer.send((buf, n)).unwrap();
            }
            if let Some(e) = read_err {
                break End::Read(e);
            }
            if n < cap || received > limit {
                break End::Eof;
            }
            if let Err(e) = on_chunk(received) {
                break End::Stopped(e);
            }
        };
        drop(to_writer);
        let (file, written, werr) = writer.join().expect("writer thread");
        let (sha256, sha1) = hasher.join().expect("hasher thread");
        let sink = Sink { file, sha256, sha1, size, written };
        match werr {
            Some(e) => (sink, End::Write(e)),
            None => (sink, end),
        }
    })
}

fn mismatch(file: &str, msg: String) -> Error {
    Error::new(
        ErrorCode::ChecksumMismatch,
        format!(
            "{file}: {msg}; the partial file was deleted. Retry the pull; if it fails again the hub's copy is damaged"
        ),
    )
    .with_field("file", json!(file))
}

/// `bytes a-b/total` → (a, total).
fn parse_content_range(s: &str) -> Option<(u64, Option<u64>)> {
    let r = s.strip_prefix("bytes ")?;
    let (span, total) = r.split_once('/')?;
    let (a, _) = span.split_once('-')?;
    Some((a.trim().parse().ok()?, total.trim().parse().ok()))
}

/// Downloads one file into `job.incomplete`, verifies it and renames it to `blob_dir/<key>`.
/// Returns (sha256, final blob key).
pub(crate) fn download(
    hub: &Hub,
    commit: &str,
    job: &Job,
    blob_dir: &Path,
    events: &Events,
    progress: &mut Progress,
) -> Result<(String, String)> {
    let r = download_inner(hub, commit, job, blob_dir, events, progress);
    if r.is_err() && fs::metadata(&job.incomplete).is_ok_and(|m| m.len() == 0) {
        // Nothing to resume (refused before any byte): leave no trace.
        let _ = fs::remove_file(&job.incomplete);
    }
    r
}

/// One file's download with its retries: fetch (resuming), stream, verify; returns the sha256 and
/// the key it was stored under.
// Over 60 lines: one retry loop whose branches (resume refused or restarted, a response that
// contradicts the listing, a network or disk error, a cancel) each decide what happens to the
// partial file; they read and update the same sink and counters.
fn download_inner(
    hub: &Hub,
    commit: &str,
    job: &Job,
    blob_dir: &Path,
    events: &Events,
    progress: &mut Progress,
) -> Result<(String, String)> {
    let Job { file, size, incomplete, .. } = job;
    let (file, size) = (*file, *size);
    let mut expect = job.expect.clone();
    let mut sink = Sink::open(incomplete, size, matches!(expect, Expect::GitSha1(_)))?;
    let resumed_from = sink.written;
    let kept = |written: u64| {
        format!("{written} of {size} bytes are kept in {} and the next pull resumes from there", incomplete.display())
    };
    progress.report(file, sink.written, size, true).map_err(|e| cancelled(e, &kept(resumed_from)))?;
    let mut failures = 0;
    let mut fetches = 0;
    let mut first = true;
    while sink.written < size {
        let from = sink.written;
        fetches += 1;
        if fetches > MAX_FETCHES {
            return Err(hub.network(
                &hub.resolve_url(commit, file),
                &format!("gave up after {MAX_FETCHES} interrupted requests; {}", kept(from)),
                super::hub::Target::File(file),
            ));
        }
        let fetch = match hub.fetch(commit, file, from, events) {
            Ok(f) => f,
            Err(e) if e.code == ErrorCode::Cancelled || (e.code == ErrorCode::Network && from > 0) => {
                let msg = format!("{}; {}", e.message, kept(from));
                return Err(Error { message: msg, ..e });
            }
            Err(e) => return Err(e),
        };
        if first {
            first = false;
            if let Err(why) = check_against_listing(&fetch, size, &mut expect, &mut sink) {
                drop(sink);
                let _ = fs::remove_file(incomplete);
                return Err(mismatch(file, why));
            }
        }
        let restart = |sink: &mut Sink, why: &str| -> Result<()> {
            events.warning("resume_restarted", format!("{file}: {why}; downloading it again from the start"))?;
            sink.reset().map_err(|e| disk_error("cannot truncate", incomplete, &e))
        };
        match resumption(&fetch, from, size) {
            Resume::Read => {}
            Resume::RestartAndRead(why) => restart(&mut sink, why)?,
            Resume::Restart(why) => {
                restart(&mut sink, why)?;
                continue;
            }
            Resume::Refused => {
                return Err(hub.network(
                    &hub.resolve_url(commit, file),
                    "the server answered 416 to a request for the whole file",
                    super::hub::Target::File(file),
                ));
            }
        }
        let mut body = fetch.body;
        let expect_len = size - sink.written;
        if let Some(cl) = fetch.content_length.filter(|cl| *cl > expect_len) {
            drop(sink);
            let _ = fs::remove_file(incomplete);
            return Err(mismatch(file, format!("the server sent {cl} bytes where {expect_len} were expected")));
        }
        let base = sink.written;
        let (s, end) = stream(&mut body, sink, size - base, |n| progress.report(file, base + n, size, false));
        sink = s;
        let got = sink.written - base;
        progress.downloaded += got;
        match end {
            End::Eof if sink.written >= size => {}
            End::Eof | End::Read(_) => {
                failures = if got > 0 { 1 } else { failures + 1 };
                if failures >= NETWORK_ATTEMPTS {
                    let why = match end {
                        End::Read(e) => e.to_string(),
                        _ => "the connection closed early".into(),
                    };
                    return Err(hub.network(
                        &hub.resolve_url(commit, file),
                        &format!("{why}; {}", kept(sink.written)),
                        super::hub::Target::File(file),
                    ));
                }
                std::thread::sleep(backoff(failures - 1));
            }
            End::Write(e) => return Err(disk_error("cannot write", incomplete, &e)),
            End::Stopped(e) => {
                let _ = sink.file.flush();
                return Err(cancelled(e, &kept(sink.written)));
            }
        }
    }
    if sink.written > size {
        drop(sink);
        let _ = fs::remove_file(incomplete);
        return Err(mismatch(file, format!("received more than the listed {size} bytes")));
    }
    // A cancel here keeps the complete file: the next pull verifies it without a request.
    progress.report(file, size, size, true).map_err(|e| cancelled(e, &kept(size)))?;
    verify_and_place(job, &expect, sink, resumed_from, blob_dir)
}

/// What a response's status says about reading it as the file from byte `from` on.
enum Resume {
    /// The body is the file from `from`.
    Read,
    /// The body is the whole file: start again from 0 and read it.
    RestartAndRead(&'static str),
    /// The body is not the file from `from`: start again from 0 with a new request.
    Restart(&'static str),
    /// The server refused a request for the whole file.
    Refused,
}

fn resumption(fetch: &super::hub::Fetch, from: u64, size: u64) -> Resume {
    match fetch.status {
        416 if from == 0 => Resume::Refused,
        // The partial file is longer than what the server has: it is not a prefix.
        416 => Resume::Restart("the server refused to resume (416)"),
        200 if from > 0 => Resume::RestartAndRead("the server ignored the Range request (200 instead of 206)"),
        206 => match fetch.content_range.as_deref().and_then(parse_content_range) {
            Some((a, total)) if a == from && total.is_none_or(|t| t == size) => Resume::Read,
            _ => Resume::Restart("the server resumed at the wrong offset"),
        },
        _ => Resume::Read,
    }
}

/// The first response against the listing: a different sha256 or blob id, or another size, is
/// the mismatch's text. A file listed as a git blob but served from LFS is then expected by its
/// sha256 (the download's is the truth), and no git blob id is computed.
fn check_against_listing(
    fetch: &super::hub::Fetch,
    size: u64,
    expect: &mut Expect,
    sink: &mut Sink,
) -> std::result::Result<(), String> {
    match (&*expect, fetch.linked_etag.as_deref()) {
        (Expect::Sha256(want), Some(got)) if super::select::is_sha256(got) && got != want => {
            return Err(format!("the hub's listing says sha256 {want} but its download says {got}"));
        }
        (Expect::GitSha1(_), Some(got)) if super::select::is_sha256(got) => {
            *expect = Expect::Sha256(got.to_string());
            sink.sha1 = None;
        }
        (Expect::GitSha1(want), None)
            if fetch.etag.as_deref().is_some_and(|e| super::select::is_commit(e) && e != want) =>
        {
            let got = fetch.etag.as_deref().unwrap_or("");
            return Err(format!("the hub's listing says blob {want} but its download says {got}"));
        }
        _ => {}
    }
    match fetch.linked_size.filter(|s| *s != size) {
        Some(ls) => Err(format!("the hub lists {size} bytes but serves {ls}")),
        None => Ok(()),
    }
}

/// The whole file against what the hub lists; a match is moved into the blob directory under
/// its key, a mismatch is deleted. Returns (sha256, key).
fn verify_and_place(
    job: &Job,
    expect: &Expect,
    sink: Sink,
    resumed_from: u64,
    blob_dir: &Path,
) -> Result<(String, String)> {
    let (file, incomplete) = (job.file, &job.incomplete);
    let (sha256, sha1) = sink.digests();
    let (ok, got, kind) = match expect {
        Expect::Sha256(w) => (&sha256 == w, sha256.clone(), "sha256"),
        Expect::GitSha1(w) => (sha1.as_deref() == Some(w), sha1.clone().unwrap_or_default(), "git blob id"),
    };
    if !ok {
        let _ = fs::remove_file(incomplete);
        let resumed = if resumed_from > 0 { format!(" (resumed at byte {resumed_from})") } else { String::new() };
        return Err(mismatch(file, format!("{kind} is {got} but the hub lists {}{resumed}", expect.key()))
            .with_field("expected", json!(expect.key()))
            .with_field("actual", json!(got)));
    }
    let key = expect.key().to_string();
    let blob = blob_dir.join(&key);
    fs::rename(incomplete, &blob).map_err(|e| disk_error("cannot move into place", &blob, &e))?;
    Ok((sha256, key))
}

fn cancelled(e: Error, kept: &str) -> Error {
    if e.code != ErrorCode::Cancelled {
        return e;
    }
    Error::new(ErrorCode::Cancelled, format!("{}; {kept}", e.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range() {
        assert_eq!(parse_content_range("bytes 100-199/200"), Some((100, Some(200))));
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, None)));
        assert_eq!(parse_content_range("items 1-2/3"), None);
    }

    #[test]
    fn a_write_error_stops_the_stream_without_hanging() {
        let dir = std::env::temp_dir().join(format!("llb-pull-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ro.bin");
        fs::write(&path, b"").unwrap();
        let size = 20 * CHUNK as u64;
        let sink = Sink { file: File::open(&path).unwrap(), sha256: Sha256::new(), sha1: None, size, written: 0 };
        let mut body = io::Cursor::new(vec![1u8; size as usize]);
        let (sink, end) = stream(&mut body, sink, size, |_| Ok(()));
        assert!(matches!(end, End::Write(_)));
        assert_eq!(sink.written, 0);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_pipeline_hashes_exactly_what_it_writes() {
        let dir = std::env::temp_dir().join(format!("llb-pull-unit2-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.bin");
        let data: Vec<u8> = (0..(5 * CHUNK + 123)).map(|i| (i * 7 % 251) as u8).collect();
        let size = data.len() as u64;
        let sink = Sink::open(&path, size, true).unwrap();
        let (sink, end) = stream(&mut io::Cursor::new(data.clone()), sink, size, |_| Ok(()));
        assert!(matches!(end, End::Eof));
        assert_eq!(sink.written, size);
        let (sha256, sha1) = sink.digests();
        assert_eq!(sha256, hex(&Sha256::digest(&data)));
        let mut g = Sha1::new_with_prefix(git_header(size));
        g.update(&data);
        assert_eq!(sha1, Some(hex(&g.finalize())));
        assert_eq!(fs::read(&path).unwrap(), data);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn git_blob_id() {
        // `git hash-object` of "hello\n".
        let mut h = Sha1::new_with_prefix(git_header(6));
        h.update(b"hello\n");
        assert_eq!(hex(&h.finalize()), "ce013625030ba8dba906f756967f9e9ca394464a");
    }
}
