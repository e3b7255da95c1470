//! The installation's secret, the MAC key of the disk tier's files (src/prompt_cache/file.rs),
//! and the checks that keep the cache's directory and files private.
//!
//! The secret is 32 random bytes in a file of its own, outside the cache's directory: by
//! default `$XDG_CONFIG_HOME/llb/prompt-cache.key` (else `~/.config/llb/prompt-cache.key`),
//! `prompt_cache.secret_file` to choose another. It is made once, 0600 in a 0700 directory,
//! published with `link(2)` so that two processes starting at once agree on one secret. Whoever
//! can write the cache's directory but not read this file cannot make a file llb accepts.

use super::file::Secret;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the secret lives when the config does not say.
pub fn default_path() -> io::Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(h) => PathBuf::from(h).join(".config"),
            None => {
                return Err(io::Error::other(
                    "neither XDG_CONFIG_HOME nor HOME is set: say where the cache's secret lives with prompt_cache.secret_file",
                ))
            }
        },
    };
    Ok(base.join("llb").join("prompt-cache.key"))
}

/// The secret at `path`, made there first if there is none. `shared`: the file may be readable
/// by the group (a cache shared by several users, who then share this file too).
pub fn load_or_create(path: &Path, shared: bool) -> io::Result<Secret> {
    for _ in 0..50 {
        match read(path, shared) {
            Ok(Some(s)) => return Ok(s),
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)), // being made
            Err(e) if e.kind() == io::ErrorKind::NotFound => create(path)?,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!("{}: not 32 bytes long", path.display())))
}

fn read(path: &Path, shared: bool) -> io::Result<Option<Secret>> {
    let mut f = File::options().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let meta = f.metadata()?;
    let loose = if shared { 0o007 } else { 0o077 };
    if !meta.is_file() || meta.uid() != euid() && !shared || meta.mode() & loose != 0 {
        return Err(io::Error::other(format!(
            "{}: the prompt cache's secret must be a file of this user's that no other user can read (it is mode {:o}, owner {})",
            path.display(),
            meta.mode() & 0o777,
            meta.uid()
        )));
    }
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(<[u8; 32]>::try_from(buf.as_slice()).ok().map(Secret))
}

/// Writes 32 random bytes to a private temporary file beside `path` and links it to `path`
/// (which fails, harmlessly, when another process got there first).
fn create(path: &Path) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let tmp = dir.join(format!(".prompt-cache.key.{}", super::file::hex(&random::<8>()?)));
    let mut f = create_private(&tmp, 0o600)?;
    let written = f.write_all(&random::<32>()?).and_then(|_| f.sync_all());
    let linked = written.and_then(|_| fs::hard_link(&tmp, path));
    let _ = fs::remove_file(&tmp);
    match linked {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Creates a new file at `path` with `mode`: never through a symlink, never over an existing
/// file (`O_EXCL | O_NOFOLLOW`).
pub fn create_private(path: &Path, mode: u32) -> io::Result<File> {
    File::options()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// `N` bytes from the kernel's random source.
pub fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    let mut got = 0;
    while got < N {
        // SAFETY: writes at most N - got bytes into the rest of `buf`.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), N - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        got += n as usize;
    }
    Ok(buf)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Makes `dir` (0700, parents too) and checks that nobody else can plant files in it: it must
/// belong to this user and be writable by nobody else, unless `shared` (documented opt-in).
pub fn private_dir(dir: &Path, shared: bool) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let meta = fs::metadata(dir)?;
    if shared {
        return Ok(());
    }
    if meta.uid() != euid() {
        return Err(io::Error::other(format!(
            "it belongs to another user (uid {}): another user could plant or change files there; \
             use a directory of your own, or set prompt_cache.shared: true to share it on purpose",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "other users can write to it (mode {:o}): they could plant or change files there; \
             chmod go-w it, or set prompt_cache.shared: true to share it on purpose",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("llb-secret-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn a_secret_is_made_once_private_and_read_back() {
        let d = temp("make");
        let path = d.join("sub").join("prompt-cache.key");
        let a = load_or_create(&path, false).unwrap();
        let b = load_or_create(&path, false).unwrap();
        assert_eq!(a, b);
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777, 0o700);
        // Readable by others: refused, not used.
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        assert!(load_or_create(&path, false).unwrap_err().to_string().contains("no other user can read"));
        let _ = fs::remove_dir_all(d);
    }

    #[test]
    fn create_private_neither_follows_a_symlink_nor_truncates() {
        let d = temp("link");
        fs::create_dir_all(&d).unwrap();
        let victim = d.join("victim.conf");
        fs::write(&victim, b"keep me").unwrap();
        let planted = d.join(".x.part");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert!(create_private(&planted, 0o600).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"keep me");
        let _ = fs::remove_dir_all(d);
    }

    #[test]
    fn a_directory_others_can_write_is_refused_unless_shared() {
        let d = temp("dir");
        private_dir(&d, false).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        assert!(private_dir(&d, false).unwrap_err().to_string().contains("other users can write"));
        private_dir(&d, true).unwrap();
        let _ = fs::remove_dir_all(d);
    }
}
