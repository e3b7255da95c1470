//! One cached prompt on disk: a fixed header, the tokens, llama.cpp's sequence state, and a
//! keyed MAC over all of it. Little-endian:
//!
//! ```text
//! offset  size  field
//! 0       8     magic "LLBKV\0\0" and the format version (3)
//! 8       32    key: sha256 of the model's fingerprint and the state format (see `Key`)
//! 40      4     n_tokens
//! 44      8     state bytes
//! 52      4     flags: bit 0 [`AS_COLD`]
//! 56      32    MAC: BLAKE3 keyed with the installation's secret, over bytes 0..56, the tokens
//!               and the state (see `Secret`)
//! 88      4n    tokens (i32 each)
//! ...           state (llama_state_seq_get_data)
//! ```
//!
//! Reading never trusts a file: the magic, the key, the length the header announces against the
//! file's, and (before the state is used) the MAC, which binds the tokens to the state: a file
//! whose tokens or state were changed, or that was written without the secret, is refused.
//! Anything else is an error whose message says what was wrong; the caller ignores the file with
//! a warning.

use crate::tokens::Token;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

/// The magic and format version (part of every [`Key`], so another version's files are another
/// key's).
pub const MAGIC: [u8; 8] = *b"LLBKV\0\0\x03";
/// Bytes of the header the MAC covers (everything before the MAC itself).
const SIGNED_HEAD: usize = 56;
/// A flag: every cell of the state was computed as a cold read of its tokens computes it (an
/// engine reusing as cold wrote it; src/scheduler/slots.rs): such an engine restores no other.
pub const AS_COLD: u32 = 1;
pub const HEADER_LEN: usize = SIGNED_HEAD + 32;
/// The file name's ending.
pub const EXT: &str = "llbkv";

/// What a file's state is valid for: a model (its fingerprint) and a state format (llb's and
/// llama.cpp's versions, the KV cache's types and layout). Files of another key are someone
/// else's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key(pub [u8; 32]);

impl Key {
    /// The first 8 bytes in hex: the prefix of every file name of this key.
    pub fn prefix(&self) -> String {
        hex(&self.0[..8])
    }
}

/// The installation's secret: the MAC key of every file (src/prompt_cache/secret.rs keeps it
/// outside the cache's directory). Whoever can write the directory but not read the secret
/// cannot make a file llb accepts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret(pub [u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The header and tokens of a file, read without its state (the tokens are not verified yet:
/// [`read`] verifies them with the state).
#[derive(Debug)]
pub struct Head {
    pub tokens: Vec<Token>,
    pub state_len: u64,
    pub flags: u32,
    head: [u8; HEADER_LEN],
}

/// The file name of `tokens` under `key`: the key's prefix and a hash of the tokens, so the
/// same prefix written by two processes is one file.
pub fn name(key: &Key, tokens: &[Token]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    format!("{}-{}.{EXT}", key.prefix(), hex(&h.finalize()[..12]))
}

/// Whether `name` is a file name [`name`] makes (of any key).
pub fn is_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(&format!(".{EXT}")) else { return false };
    let b = stem.as_bytes();
    b.len() == 16 + 1 + 24 && b[16] == b'-' && b.iter().enumerate().all(|(i, c)| i == 16 || c.is_ascii_hexdigit())
}

fn mac(secret: &Secret, signed_head: &[u8], tokens: &[u8], state: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(&secret.0);
    h.update(signed_head);
    h.update(tokens);
    h.update(state);
    *h.finalize().as_bytes()
}

fn token_bytes(tokens: &[Token]) -> Vec<u8> {
    tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
}

/// Writes a file of `tokens` and `state` with `flags` to `out`, sealed with `secret`.
pub fn write(out: &mut impl Write, key: &Key, secret: &Secret, tokens: &[Token], state: &[u8], flags: u32) -> io::Result<()> {
    let mut head = Vec::with_capacity(HEADER_LEN);
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&key.0);
    head.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    head.extend_from_slice(&(state.len() as u64).to_le_bytes());
    head.extend_from_slice(&flags.to_le_bytes());
    let tokens = token_bytes(tokens);
    let tag = mac(secret, &head, &tokens, state);
    head.extend_from_slice(&tag);
    out.write_all(&head)?;
    out.write_all(&tokens)?;
    out.write_all(state)
}

fn bad(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// Reads a file's header and tokens, checking them against `key` and the file's length.
pub fn read_head(file: &mut File, key: &Key) -> io::Result<Head> {
    let len = file.metadata()?.len();
    let mut h = [0u8; HEADER_LEN];
    file.read_exact(&mut h).map_err(|_| bad(format!("{len} bytes: shorter than a header")))?;
    if h[..8] != MAGIC {
        return Err(bad("not an llb prompt-cache file of this format (magic)"));
    }
    if h[8..40] != key.0 {
        return Err(bad("made for another model or state format (key)"));
    }
    let n = u32::from_le_bytes(h[40..44].try_into().unwrap()) as u64;
    let state_len = u64::from_le_bytes(h[44..52].try_into().unwrap());
    let flags = u32::from_le_bytes(h[52..56].try_into().unwrap());
    let want = (HEADER_LEN as u64).checked_add(n * 4).and_then(|x| x.checked_add(state_len)).unwrap_or(u64::MAX);
    if len < want {
        return Err(bad(format!("{len} bytes where the header announces {want} (truncated)")));
    }
    if len > want {
        return Err(bad(format!("{len} bytes where the header announces {want} ({} bytes appended)", len - want)));
    }
    let mut raw = vec![0u8; n as usize * 4];
    file.read_exact(&mut raw)?;
    let tokens = raw.chunks_exact(4).map(|c| Token::from_le_bytes(c.try_into().unwrap())).collect();
    Ok(Head { tokens, state_len, flags, head: h })
}

/// Reads a whole file: its tokens and state, the MAC verified with `secret`.
pub fn read(file: &mut File, key: &Key, secret: &Secret) -> io::Result<(Vec<Token>, Vec<u8>)> {
    let head = read_head(file, key)?;
    let mut state = vec![0u8; head.state_len as usize];
    file.read_exact(&mut state).map_err(|e| bad(format!("state unreadable: {e}")))?;
    let tag = mac(secret, &head.head[..SIGNED_HEAD], &token_bytes(&head.tokens), &state);
    if !constant_time_eq(&tag, &head.head[SIGNED_HEAD..]) {
        return Err(bad("its MAC does not match (changed, corrupted, or written without this installation's secret)"));
    }
    Ok((head.tokens, state))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads the file at `path` (not through a symlink).
#[cfg(test)]
pub fn read_path(path: &Path, key: &Key, secret: &Secret) -> io::Result<(Vec<Token>, Vec<u8>)> {
    read(&mut open_nofollow(path)?, key, secret)
}

/// Opens `path` for reading, refusing a symlink (ELOOP).
pub fn open_nofollow(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options().read(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Secret = Secret([5; 32]);

    /// A file in the temp dir, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn roundtrip_file(tokens: &[Token], state: &[u8]) -> (TempFile, std::path::PathBuf) {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("llb-pc-file-{}-{n}.{EXT}", std::process::id()));
        let mut f = File::create(&path).unwrap();
        write(&mut f, &Key([7; 32]), &S, tokens, state, AS_COLD).unwrap();
        (TempFile(path.clone()), path)
    }

    #[test]
    fn a_file_reads_back_what_was_written() {
        let (_d, path) = roundtrip_file(&[1, 2, 3, -4], b"state bytes");
        assert_eq!(read_path(&path, &Key([7; 32]), &S).unwrap(), (vec![1, 2, 3, -4], b"state bytes".to_vec()));
    }

    #[test]
    fn truncated_corrupted_extended_and_foreign_files_are_refused_with_a_reason() {
        let (_d, path) = roundtrip_file(&[1, 2, 3], &[9u8; 1000]);
        let full = std::fs::read(&path).unwrap();
        let err_with = |bytes: &[u8], key: Key, secret: Secret| {
            std::fs::write(&path, bytes).unwrap();
            read_path(&path, &key, &secret).unwrap_err().to_string()
        };
        let err = |bytes: &[u8], key: Key| err_with(bytes, key, S);
        assert!(err(&full[..full.len() - 1], Key([7; 32])).contains("truncated"));
        let mut longer = full.clone();
        longer.extend_from_slice(b"junk");
        assert!(err(&longer, Key([7; 32])).contains("4 bytes appended"));
        assert!(err(&full[..10], Key([7; 32])).contains("shorter than a header"));
        let mut flipped = full.clone();
        flipped[full.len() - 100] ^= 1;
        assert!(err(&flipped, Key([7; 32])).contains("MAC"));
        let mut magic = full.clone();
        magic[7] = 1;
        assert!(err(&magic, Key([7; 32])).contains("magic"));
        assert!(err(&full, Key([8; 32])).contains("another model"));
        // Another installation's secret: the same bytes do not verify.
        assert!(err_with(&full, Key([7; 32]), Secret([6; 32])).contains("MAC"));
    }

    #[test]
    fn tokens_are_bound_to_the_state() {
        // Someone swaps the tokens of a valid file (the name a victim's prompt looks up) and
        // keeps the rest, as a forger without the secret would: refused.
        let (_d, path) = roundtrip_file(&[1, 2, 3], b"the state of another conversation");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&42i32.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(read_path(&path, &Key([7; 32]), &S).unwrap_err().to_string().contains("MAC"));
    }

    #[test]
    fn a_symlink_is_not_read_through() {
        let (_d, path) = roundtrip_file(&[1], b"x");
        let link = path.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let _l = TempFile(link.clone());
        assert_eq!(read_path(&link, &Key([7; 32]), &S).unwrap_err().raw_os_error(), Some(libc::ELOOP));
    }

    #[test]
    fn names_depend_on_key_and_tokens_only() {
        let k = Key([1; 32]);
        assert_eq!(name(&k, &[1, 2]), name(&k, &[1, 2]));
        assert_ne!(name(&k, &[1, 2]), name(&k, &[1, 3]));
        assert!(name(&k, &[1]).starts_with(&k.prefix()));
        assert_ne!(name(&Key([2; 32]), &[1]), name(&k, &[1]));
        assert!(is_name(&name(&k, &[1])));
        assert!(!is_name("notes.llbkv") && !is_name(&format!("{}.part", name(&k, &[1]))));
    }
}
