//! The model cache, in the Hugging Face hub layout so that huggingface_hub, llama.cpp and llb
//! can share one folder:
//!
//! ```text
//! <root>/models--org--name/blobs/<sha256>               verified content (LFS files: the sha256)
//! <root>/models--org--name/blobs/<sha256>.incomplete    a download in progress (resumable)
//! <root>/models--org--name/snapshots/<commit>/<file>    relative symlink → ../../blobs/<sha256>
//! <root>/models--org--name/refs/<revision>              the commit the revision pointed to
//! <root>/.locks/models--org--name/<sha256>.lock         held while a blob is being downloaded
//! <root>/quarantine/models--org--name/{blobs,snapshots}  files the tool gate refused
//! ```
//!
//! Every path is built from validated parts (repo id, 40-hex commit, hex blob key, listing names
//! checked by `select::validate_rfilename`), and [`RepoCache::inside`] re-checks each one, so
//! nothing is written outside the root.

use crate::error::{Error, ErrorCode, Result};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

pub(crate) fn disk_error(what: &str, path: &Path, e: &io::Error) -> Error {
    let hint = if e.raw_os_error() == Some(libc::ENOSPC) { " (no space left on the device)" } else { "" };
    Error::new(ErrorCode::Disk, format!("{what} {}: {e}{hint}", path.display()))
        .with_field("path", path.to_string_lossy().into())
}

pub(crate) struct RepoCache {
    pub root: PathBuf,
    pub dir: PathBuf,
    pub quarantine: PathBuf,
    pub locks: PathBuf,
}

impl RepoCache {
    pub fn new(root: &Path, repo: &str) -> RepoCache {
        let folder = format!("models--{}", repo.replace('/', "--"));
        RepoCache {
            root: root.to_path_buf(),
            dir: root.join(&folder),
            quarantine: root.join("quarantine").join(&folder),
            locks: root.join(".locks").join(&folder),
        }
    }

    /// Lexical containment: `p` is below the root and has no `..`.
    fn inside(&self, p: &Path) -> Result<()> {
        let ok = p.starts_with(&self.root)
            && p.strip_prefix(&self.root).is_ok_and(|r| r.components().all(|c| matches!(c, Component::Normal(_))));
        if !ok {
            return Err(Error::new(
                ErrorCode::Internal,
                format!("refusing to write outside the cache: {}", p.display()),
            ));
        }
        Ok(())
    }

    pub fn blobs_dir(&self) -> PathBuf {
        self.dir.join("blobs")
    }

    pub fn blob(&self, key: &str) -> PathBuf {
        self.dir.join("blobs").join(key)
    }

    pub fn incomplete(&self, key: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{key}.incomplete"))
    }

    pub fn snapshot_dir(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    pub fn snapshot(&self, commit: &str, file: &str) -> PathBuf {
        self.snapshot_dir(commit).join(file)
    }

    fn q_blob(&self, key: &str) -> PathBuf {
        self.quarantine.join("blobs").join(key)
    }

    fn q_snapshot(&self, commit: &str, file: &str) -> PathBuf {
        self.quarantine.join("snapshots").join(commit).join(file)
    }

    pub fn read_ref(&self, rev: &str) -> Option<String> {
        let s = fs::read_to_string(self.dir.join("refs").join(rev)).ok()?;
        let s = s.trim();
        super::select::is_commit(s).then(|| s.to_string())
    }

    pub fn write_ref(&self, rev: &str, commit: &str) -> Result<()> {
        let path = self.dir.join("refs").join(rev);
        self.inside(&path)?;
        if fs::read_to_string(&path).is_ok_and(|s| s.trim() == commit) {
            return Ok(());
        }
        let dir = path.parent().expect("refs/<rev> has a parent");
        fs::create_dir_all(dir).map_err(|e| disk_error("cannot create", dir, &e))?;
        let tmp = dir.join(format!(".{}.tmp{}", path.file_name().unwrap().to_string_lossy(), std::process::id()));
        fs::write(&tmp, commit).map_err(|e| disk_error("cannot write", &tmp, &e))?;
        fs::rename(&tmp, &path).map_err(|e| disk_error("cannot write", &path, &e))
    }

    /// The blob at `blobs/<key>` when it exists with `size` bytes (None: size unknown). A blob of
    /// another size is damaged: it is removed so that it is fetched again.
    pub fn has_blob(&self, key: &str, size: Option<u64>) -> Result<bool> {
        let p = self.blob(key);
        match fs::metadata(&p) {
            Ok(m) if m.is_file() && size.is_none_or(|s| s == m.len()) => Ok(true),
            Ok(m) if m.is_file() => {
                fs::remove_file(&p).map_err(|e| disk_error("cannot remove damaged blob", &p, &e))?;
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// Points `snapshots/<commit>/<file>` at `blobs/<key>` with a relative symlink (as
    /// huggingface_hub does), replacing whatever is there atomically.
    pub fn link(&self, commit: &str, file: &str, key: &str) -> Result<PathBuf> {
        link_in(&self.dir, commit, file, key, |p| self.inside(p))
    }

    /// Moves refused files to `quarantine/` (blob and snapshot link); returns the quarantined paths.
    pub fn quarantine(&self, commit: &str, files: &[(String, String)]) -> Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for (file, key) in files {
            let (src, dst) = (self.blob(key), self.q_blob(key));
            self.inside(&dst)?;
            let dir = dst.parent().unwrap();
            fs::create_dir_all(dir).map_err(|e| disk_error("cannot create", dir, &e))?;
            fs::rename(&src, &dst).map_err(|e| disk_error("cannot move to quarantine", &src, &e))?;
            let _ = fs::remove_file(self.snapshot(commit, file));
            out.push(link_in(&self.quarantine, commit, file, key, |p| self.inside(p))?);
        }
        self.tidy(commit);
        Ok(out)
    }

    /// Brings a previously refused blob back so the (possibly newer) gate can judge it again
    /// without a download. Returns whether it was there.
    pub fn restore(&self, commit: &str, file: &str, key: &str, size: Option<u64>) -> Result<bool> {
        let q = self.q_blob(key);
        let ok = fs::metadata(&q).is_ok_and(|m| m.is_file() && size.is_none_or(|s| s == m.len()));
        if !ok {
            return Ok(false);
        }
        let dst = self.blob(key);
        self.inside(&dst)?;
        let dir = dst.parent().unwrap();
        fs::create_dir_all(dir).map_err(|e| disk_error("cannot create", dir, &e))?;
        fs::rename(&q, &dst).map_err(|e| disk_error("cannot restore from quarantine", &q, &e))?;
        let _ = fs::remove_file(self.q_snapshot(commit, file));
        remove_empty_dirs(&self.quarantine.join("snapshots").join(commit), &self.quarantine);
        let _ = fs::remove_dir(self.quarantine.join("blobs"));
        let _ = fs::remove_dir(self.quarantine.join("snapshots"));
        let _ = fs::remove_dir(&self.quarantine);
        let _ = fs::remove_dir(self.root.join("quarantine"));
        Ok(true)
    }

    /// Files of a cached snapshot (and of its quarantined part): `(name, blob key)`.
    pub fn snapshot_files(&self, commit: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for base in [self.snapshot_dir(commit), self.quarantine.join("snapshots").join(commit)] {
            walk(&base, &base, &mut out);
        }
        out.sort();
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }

    /// Removes the folders a failed pull may have left empty (never files).
    pub fn tidy(&self, commit: &str) {
        remove_empty_dirs(&self.snapshot_dir(commit), &self.dir);
        for d in [
            self.dir.join("snapshots"),
            self.dir.join("blobs"),
            self.dir.join("refs"),
            self.dir.clone(),
            self.locks.clone(),
            self.root.join(".locks"),
        ] {
            let _ = fs::remove_dir(d);
        }
    }

    /// Takes the download lock of one blob (the file huggingface_hub locks for the same blob).
    /// Waits while another process or thread holds it; `on_wait` runs once when it has to wait
    /// and may cancel.
    pub fn lock(&self, key: &str, mut on_wait: impl FnMut() -> Result<()>) -> Result<BlobLock> {
        let path = self.locks.join(format!("{key}.lock"));
        self.inside(&path)?;
        let mut waited = false;
        loop {
            fs::create_dir_all(&self.locks).map_err(|e| disk_error("cannot create", &self.locks, &e))?;
            let f = match OpenOptions::new().create(true).truncate(false).write(true).open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // the folder was just tidied away
                Err(e) => return Err(disk_error("cannot create lock", &path, &e)),
            };
            // SAFETY: a valid open descriptor; flock has no memory effects.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                // The holder before us unlinks the file before unlocking: make sure we locked the
                // file that is at the path now, not an orphan.
                let same = match (fs::metadata(&path), f.metadata()) {
                    (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                    _ => false,
                };
                if same {
                    return Ok(BlobLock { _file: f, path });
                }
                continue;
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(disk_error("cannot lock", &path, &err));
            }
            if !waited {
                waited = true;
                on_wait()?;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Held while a blob is fetched; dropping it removes the lock file, then unlocks.
pub(crate) struct BlobLock {
    _file: File,
    path: PathBuf,
}

impl Drop for BlobLock {
    fn drop(&mut self) {
        // Unlink while still holding the lock (see RepoCache::lock); `_file` closes after this.
        let _ = fs::remove_file(&self.path);
        if let Some(dir) = self.path.parent() {
            let _ = fs::remove_dir(dir);
            if let Some(up) = dir.parent() {
                let _ = fs::remove_dir(up);
            }
        }
    }
}

fn link_in(
    repo_dir: &Path,
    commit: &str,
    file: &str,
    key: &str,
    inside: impl Fn(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let link = repo_dir.join("snapshots").join(commit).join(file);
    inside(&link)?;
    let depth = file.split('/').count() + 1; // <file parts> + <commit>, under snapshots/
    let target: PathBuf = std::iter::repeat_n("..", depth).collect::<PathBuf>().join("blobs").join(key);
    if fs::read_link(&link).is_ok_and(|t| t == target) {
        return Ok(link);
    }
    let dir = link.parent().unwrap();
    fs::create_dir_all(dir).map_err(|e| disk_error("cannot create", dir, &e))?;
    let tmp = dir.join(format!(".{}.link{}", link.file_name().unwrap().to_string_lossy(), std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&target, &tmp).map_err(|e| disk_error("cannot create link", &tmp, &e))?;
    fs::rename(&tmp, &link).map_err(|e| disk_error("cannot create link", &link, &e))?;
    Ok(link)
}

/// Removes `dir` and its parents while they are empty, stopping at `stop`.
fn remove_empty_dirs(dir: &Path, stop: &Path) {
    // Depth first: nested snapshot folders of files in subfolders.
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&e.path(), dir);
            }
        }
    }
    let mut d = dir.to_path_buf();
    while d.starts_with(stop) && d != stop {
        if fs::remove_dir(&d).is_err() {
            break;
        }
        if !d.pop() {
            break;
        }
    }
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            walk(base, &p, out);
            continue;
        }
        let name = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
        if name.split('/').any(|c| c.starts_with('.')) {
            continue; // our temporary link names
        }
        // A symlink names its blob; a plain file (a cache written by hand) is its own content.
        let key = fs::read_link(&p)
            .ok()
            .and_then(|t| t.file_name().map(|f| f.to_string_lossy().into_owned()))
            .unwrap_or_default();
        out.push((name, key));
    }
}
