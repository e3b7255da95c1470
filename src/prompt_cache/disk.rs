//! The disk tier: one file per cached prompt in a directory that processes may share
//! (src/prompt_cache/file.rs has the format). Files are written by a background thread, to a
//! temporary name first and then renamed, so a reader sees a whole file or none; the directory
//! stays within its byte budget by deleting the files used least recently (their modification
//! time, renewed on every hit) before a new one is written, whoever's they are.
//!
//! An index of this key's files (name → tokens) is refreshed from the directory on every lookup,
//! so files another process wrote are found; a file that fails any check is deleted and reported
//! once.
//!
//! The directory is private (src/prompt_cache/secret.rs): made 0700, refused when another user
//! owns it or can write to it (unless `shared`); files are created 0600 under unpredictable
//! temporary names with `O_EXCL | O_NOFOLLOW`, so a planted symlink cannot redirect a write; only
//! llb's own file names are ever listed, evicted or deleted. What the writer could not do (a full
//! disk, a state larger than the budget) is reported once, as a warning of the next lookup.

use super::file::{self, Key, Secret, EXT};
use super::secret;
use crate::tokens::Token;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Writes waiting for the writer thread; a stash that finds the queue full is not written (the
/// scheduler thread never waits for the disk while requests run).
const QUEUE: usize = 4;
/// A temporary file older than this was left by a process that died while writing it.
const STALE_PART: Duration = Duration::from_secs(600);

/// The directory, its budget and index, shared by the tier and its writer thread.
struct Inner {
    dir: PathBuf,
    budget: u64,
    key: Key,
    secret: Secret,
    /// Files readable by the group (a cache shared on purpose) instead of private.
    shared: bool,
    /// The flags of the files it writes; it reads only files that have them all.
    flags: u32,
    index: Mutex<Index>,
    /// Warnings of the writer thread not yet handed to a request, and the kinds already
    /// reported (each once).
    pending: Mutex<(Vec<String>, HashSet<&'static str>)>,
    written: AtomicU64,
    evicted: AtomicU64,
    skipped: AtomicU64,
    ignored: AtomicU64,
}

#[derive(Default)]
struct Index {
    /// This key's good files: name → tokens, bytes of state, flags.
    files: HashMap<String, (Vec<Token>, u64, u32)>,
    /// Names already found bad (reported once).
    bad: HashSet<String>,
}

enum Work {
    Write(Vec<Token>, Arc<Vec<u8>>),
    Flush(SyncSender<()>),
}

/// How long stats reuse a listing of the directory (hosts may poll stats on every request).
const USAGE_TTL: Duration = Duration::from_millis(500);

pub struct Disk {
    inner: Arc<Inner>,
    /// The last listing for stats: when, bytes, files.
    usage: Mutex<(Option<std::time::Instant>, u64, usize)>,
    queue: Option<SyncSender<Work>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Disk {
    /// Opens (creates, 0700) `dir`, refused when others could plant files there (unless
    /// `shared`), and starts the writer. `flags`: of the files it writes, and that a file must
    /// have to be read.
    pub fn open(dir: &Path, budget: u64, key: Key, secret: Secret, shared: bool, flags: u32) -> std::io::Result<Disk> {
        secret::private_dir(dir, shared)?;
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            budget,
            key,
            secret,
            shared,
            flags,
            index: Mutex::new(Index::default()),
            pending: Mutex::default(),
            written: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
        });
        let (tx, rx) = sync_channel(QUEUE);
        let w = inner.clone();
        let thread = std::thread::Builder::new().name("llb-cache-writer".into()).spawn(move || w.serve(rx))?;
        if budget == 0 {
            inner.warn_once("budget0", format!("prompt_cache.disk_bytes is 0: nothing is written to {}", dir.display()));
        }
        Ok(Disk { inner, usage: Mutex::new((None, 0, 0)), queue: Some(tx), thread: Some(thread) })
    }

    /// The file of this key sharing the longest prefix with `prompt` (at most `limit` tokens),
    /// if it shares at least `at_least`; and what was wrong with files found bad meanwhile.
    /// Returns its name, the shared tokens and its state's bytes.
    pub fn best(&self, prompt: &[Token], limit: usize, at_least: usize) -> (Option<(String, usize, u64)>, Vec<String>) {
        let mut warnings = self.inner.refresh();
        warnings.append(&mut lock(&self.inner.pending).0);
        let index = lock(&self.inner.index);
        let best = index
            .files
            .iter()
            .filter(|(_, (_, _, flags))| flags & self.inner.flags == self.inner.flags)
            .map(|(name, (tokens, bytes, _))| (name, crate::tokens::common_prefix(tokens, prompt).min(limit), *bytes))
            .filter(|&(_, n, _)| n >= at_least)
            .max_by_key(|&(name, n, _)| (n, std::cmp::Reverse(name)));
        (best.map(|(name, n, bytes)| (name.clone(), n, bytes)), warnings)
    }

    /// Reads file `name` whole (MAC verified) and renews its place in the LRU order. A file
    /// that fails is deleted; the error says why.
    pub fn load(&self, name: &str) -> Result<(Vec<Token>, Vec<u8>), String> {
        let path = self.inner.dir.join(name);
        match file::open_nofollow(&path).and_then(|mut f| {
            let got = file::read(&mut f, &self.inner.key, &self.inner.secret)?;
            let _ = f.set_modified(SystemTime::now());
            Ok(got)
        }) {
            Ok(got) => Ok(got),
            Err(e) => {
                self.inner.forget(name, true);
                Err(format!("prompt-cache file {} ignored: {e}", path.display()))
            }
        }
    }

    /// Deletes file `name`: its state was found bad once restored (reported by the caller).
    pub fn reject(&self, name: &str) {
        self.inner.forget(name, true);
    }

    /// The name of the file of `tokens`.
    pub fn name_of(&self, tokens: &[Token]) -> String {
        file::name(&self.inner.key, tokens)
    }

    /// Queues `tokens` and their state for writing. `wait`: block for room in the queue
    /// (shutting down); otherwise a full queue skips the write.
    pub fn put(&self, tokens: Vec<Token>, state: Arc<Vec<u8>>, wait: bool) {
        let Some(q) = &self.queue else { return };
        let work = Work::Write(tokens, state);
        let sent = if wait { q.send(work).is_ok() } else { !matches!(q.try_send(work), Err(TrySendError::Full(_))) };
        if !sent {
            self.inner.skipped.fetch_add(1, Relaxed);
            let why = format!("the disk writer is {QUEUE} states behind: a state was not written to {}", self.inner.dir.display());
            self.inner.warn_once("queue", why);
        }
    }

    /// Waits until every queued write is done.
    pub fn flush(&self) {
        let Some(q) = &self.queue else { return };
        let (tx, rx) = sync_channel(1);
        if q.send(Work::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// Bytes and files of prompt-cache files in the directory (every key's; listed at most once
    /// per [`USAGE_TTL`]), and the counters.
    pub fn stats(&self) -> serde_json::Value {
        let (bytes, files) = {
            let mut usage = lock(&self.usage);
            if usage.0.is_none_or(|t| t.elapsed() > USAGE_TTL) {
                let l = self.inner.listing();
                *usage = (Some(std::time::Instant::now()), l.iter().map(|f| f.bytes).sum(), l.len());
            }
            (usage.1, usage.2)
        };
        serde_json::json!({
            "dir": self.inner.dir,
            "disk_budget": self.inner.budget,
            "disk_bytes": bytes,
            "disk_files": files,
            "disk_written": self.inner.written.load(Relaxed),
            "disk_evictions": self.inner.evicted.load(Relaxed),
            "disk_writes_skipped": self.inner.skipped.load(Relaxed),
            "disk_files_ignored": self.inner.ignored.load(Relaxed),
        })
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        self.queue = None; // the writer finishes what is queued, then ends
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether `name` is one of llb's temporary files: `.NAME.RANDOM.part`.
fn is_part(name: &str) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".part")) else { return false };
    let Some((stem, rand)) = inner.rsplit_once('.') else { return false };
    rand.len() == 16 && rand.bytes().all(|c| c.is_ascii_hexdigit()) && file::is_name(stem)
}

/// A prompt-cache file in the directory.
struct Listed {
    path: PathBuf,
    bytes: u64,
    modified: SystemTime,
}

impl Inner {
    fn serve(&self, rx: Receiver<Work>) {
        for work in rx {
            match work {
                Work::Write(tokens, state) => self.write(&tokens, &state),
                Work::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    /// Every prompt-cache file in the directory, and temporary files left by dead writers.
    fn listing(&self) -> Vec<Listed> {
        let Ok(rd) = fs::read_dir(&self.dir) else { return Vec::new() };
        let now = SystemTime::now();
        rd.filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let meta = e.metadata().ok()?; // lstat: a symlink is not a file here
            let modified = meta.modified().ok()?;
            let stale_part = is_part(&name) && now.duration_since(modified).is_ok_and(|d| d > STALE_PART);
            (meta.is_file() && (file::is_name(&name) || stale_part))
                .then(|| Listed { path: e.path(), bytes: meta.len(), modified })
        })
        .collect()
    }

    /// Brings the index up to date with the directory: reads the head of this key's new files,
    /// drops the ones gone. Returns what was wrong with new bad ones (deleted).
    fn refresh(&self) -> Vec<String> {
        let prefix = format!("{}-", self.key.prefix());
        let names: HashSet<String> = self
            .listing()
            .into_iter()
            .filter_map(|l| l.path.file_name()?.to_str().map(str::to_owned))
            .filter(|n| n.starts_with(&prefix) && n.ends_with(EXT))
            .collect();
        let mut index = lock(&self.index);
        index.files.retain(|n, _| names.contains(n));
        let mut warnings = Vec::new();
        for name in names {
            if index.files.contains_key(&name) || index.bad.contains(&name) {
                continue;
            }
            let path = self.dir.join(&name);
            match file::open_nofollow(&path).and_then(|mut f| file::read_head(&mut f, &self.key)) {
                Ok(head) => {
                    index.files.insert(name, (head.tokens, head.state_len, head.flags));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    warnings.push(format!("prompt-cache file {} ignored: {e}", path.display()));
                    index.bad.insert(name);
                    self.ignored.fetch_add(1, Relaxed);
                    let _ = fs::remove_file(&path);
                }
            }
        }
        warnings
    }

    /// Drops `name` from the index; `bad`: it failed a check (deleted, reported).
    fn forget(&self, name: &str, bad: bool) {
        let mut index = lock(&self.index);
        index.files.remove(name);
        if bad {
            index.bad.insert(name.to_owned());
            self.ignored.fetch_add(1, Relaxed);
        }
        let _ = fs::remove_file(self.dir.join(name));
    }

    /// Writes one file (temporary name, then rename) after making room for it, and deletes this
    /// key's files whose tokens it extends and flags it has (it serves every prompt they serve).
    fn write(&self, tokens: &[Token], state: &[u8]) {
        let size = (file::HEADER_LEN + tokens.len() * 4 + state.len()) as u64;
        let name = file::name(&self.key, tokens);
        if size > self.budget {
            self.skipped.fetch_add(1, Relaxed);
            let why = format!("a state of {size} bytes does not fit prompt_cache.disk_bytes ({}): not written", self.budget);
            return self.warn_once("budget", why);
        }
        if !self.make_room(size, &name) {
            self.skipped.fetch_add(1, Relaxed);
            return self.warn_once("room", format!("{} holds files llb may not delete: not written", self.dir.display()));
        }
        if let Err(e) = self.write_file(&name, tokens, state) {
            self.skipped.fetch_add(1, Relaxed);
            return self.warn_once("write", format!("cannot write to {} ({e}): states are not kept on disk", self.dir.display()));
        }
        self.written.fetch_add(1, Relaxed);
        let dominated: Vec<String> = {
            let mut index = lock(&self.index);
            index.files.insert(name.clone(), (tokens.to_vec(), state.len() as u64, self.flags));
            index
                .files
                .iter()
                .filter(|(n, (t, _, f))| {
                    **n != name && t.len() < tokens.len() && tokens.starts_with(t) && f & self.flags == *f
                })
                .map(|(n, _)| n.clone())
                .collect()
        };
        dominated.iter().for_each(|n| self.forget(n, false));
    }

    /// Writes file `name` under an unpredictable temporary name, created new and private (never
    /// through a symlink), then renames it into place.
    fn write_file(&self, name: &str, tokens: &[Token], state: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let part = self.dir.join(format!(".{name}.{}.part", file::hex(&secret::random::<8>()?)));
        let mode = if self.shared { 0o640 } else { 0o600 };
        let done = secret::create_private(&part, mode).and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            file::write(&mut w, &self.key, &self.secret, tokens, state, self.flags)?;
            w.flush()
        });
        let done = done.and_then(|_| fs::rename(&part, self.dir.join(name)));
        if done.is_err() {
            let _ = fs::remove_file(&part);
        }
        done
    }

    /// Reports `why` once per `kind`, with the next lookup's warnings.
    fn warn_once(&self, kind: &'static str, why: String) {
        let mut p = lock(&self.pending);
        if p.1.insert(kind) {
            p.0.push(format!("prompt cache: {why}"));
        }
    }

    /// Deletes the files used least recently until `size` more bytes fit the budget (never
    /// `keep`, the name about to be replaced). False if they cannot.
    fn make_room(&self, size: u64, keep: &str) -> bool {
        let mut files = self.listing();
        files.retain(|f| f.path.file_name().is_some_and(|n| n != keep));
        files.sort_by_key(|f| f.modified);
        let mut total: u64 = files.iter().map(|f| f.bytes).sum();
        for f in &files {
            if total + size <= self.budget {
                break;
            }
            if fs::remove_file(&f.path).is_ok() {
                self.evicted.fetch_add(1, Relaxed);
            }
            total -= f.bytes;
            if let Some(n) = f.path.file_name().and_then(|n| n.to_str()) {
                lock(&self.index).files.remove(n);
            }
        }
        total + size <= self.budget
    }
}
