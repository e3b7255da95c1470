//! One cached prompt on disk: a fixed header, the tokens, llama.cpp's sequence state, and a
//! checksum over tokens and state. Little-endian:
//!
//! ```text
//! offset  size  field
//! 0       8     magic "LLBKV\0\0" and the format version (1)
//! 8       32    key: sha256 of the model's fingerprint and the state format (see `Key`)
//! 40      4     n_tokens
//! 44      8     state bytes
//! 52      4     crc32 of the tokens' bytes then the state's
//! 56      4n    tokens (i32 each)
//! ...           state (llama_state_seq_get_data)
//! ```
//!
//! Reading never trusts a file: the magic, the key, the length the header announces against the
//! file's, and (before the state is used) the checksum. Anything else is an error whose message
//! says what was wrong; the caller ignores the file with a warning.

use crate::tokens::Token;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

const MAGIC: [u8; 8] = *b"LLBKV\0\0\x01";
pub const HEADER_LEN: usize = 56;
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

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The header and tokens of a file, read without its state.
#[derive(Debug)]
pub struct Head {
    pub tokens: Vec<Token>,
    pub state_len: u64,
    crc: u32,
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

fn crc(tokens: &[Token], state: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(&token_bytes(tokens));
    c.update(state);
    c.finalize()
}

fn token_bytes(tokens: &[Token]) -> Vec<u8> {
    tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
}

/// Writes a file of `tokens` and `state` to `out`.
pub fn write(out: &mut impl Write, key: &Key, tokens: &[Token], state: &[u8]) -> io::Result<()> {
    let mut head = Vec::with_capacity(HEADER_LEN);
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&key.0);
    head.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    head.extend_from_slice(&(state.len() as u64).to_le_bytes());
    head.extend_from_slice(&crc(tokens, state).to_le_bytes());
    out.write_all(&head)?;
    out.write_all(&token_bytes(tokens))?;
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
    let crc = u32::from_le_bytes(h[52..56].try_into().unwrap());
    let want = (HEADER_LEN as u64).checked_add(n * 4).and_then(|x| x.checked_add(state_len));
    if want != Some(len) {
        return Err(bad(format!("{len} bytes where the header announces {} (truncated?)", want.unwrap_or(u64::MAX))));
    }
    let mut raw = vec![0u8; n as usize * 4];
    file.read_exact(&mut raw)?;
    let tokens = raw.chunks_exact(4).map(|c| Token::from_le_bytes(c.try_into().unwrap())).collect();
    Ok(Head { tokens, state_len, crc })
}

/// Reads a whole file: its tokens and state, checksum verified.
pub fn read(path: &Path, key: &Key) -> io::Result<(Vec<Token>, Vec<u8>)> {
    let mut f = File::open(path)?;
    let head = read_head(&mut f, key)?;
    let mut state = vec![0u8; head.state_len as usize];
    f.read_exact(&mut state).map_err(|e| bad(format!("state unreadable: {e}")))?;
    if crc(&head.tokens, &state) != head.crc {
        return Err(bad("checksum mismatch (corrupted)"));
    }
    Ok((head.tokens, state))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        write(&mut f, &Key([7; 32]), tokens, state).unwrap();
        (TempFile(path.clone()), path)
    }

    #[test]
    fn a_file_reads_back_what_was_written() {
        let (_d, path) = roundtrip_file(&[1, 2, 3, -4], b"state bytes");
        assert_eq!(read(&path, &Key([7; 32])).unwrap(), (vec![1, 2, 3, -4], b"state bytes".to_vec()));
    }

    #[test]
    fn truncated_corrupted_and_foreign_files_are_refused_with_a_reason() {
        let (_d, path) = roundtrip_file(&[1, 2, 3], &[9u8; 1000]);
        let full = std::fs::read(&path).unwrap();
        let err = |bytes: &[u8], key: Key| {
            std::fs::write(&path, bytes).unwrap();
            read(&path, &key).unwrap_err().to_string()
        };
        assert!(err(&full[..full.len() - 1], Key([7; 32])).contains("truncated"));
        assert!(err(&full[..10], Key([7; 32])).contains("shorter than a header"));
        let mut flipped = full.clone();
        flipped[full.len() - 100] ^= 1;
        assert!(err(&flipped, Key([7; 32])).contains("checksum"));
        let mut magic = full.clone();
        magic[7] = 2;
        assert!(err(&magic, Key([7; 32])).contains("magic"));
        assert!(err(&full, Key([8; 32])).contains("another model"));
    }

    #[test]
    fn names_depend_on_key_and_tokens_only() {
        let k = Key([1; 32]);
        assert_eq!(name(&k, &[1, 2]), name(&k, &[1, 2]));
        assert_ne!(name(&k, &[1, 2]), name(&k, &[1, 3]));
        assert!(name(&k, &[1]).starts_with(&k.prefix()));
        assert_ne!(name(&Key([2; 32]), &[1]), name(&k, &[1]));
    }
}
