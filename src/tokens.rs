//! The vocabulary: tokenizing text and rendering tokens, over llama.cpp's buffer protocol.

use crate::error::{Error, ErrorCode, Result};
use crate::sys;
use std::collections::HashMap;

/// llama.cpp's buffer protocol: `call(buf)` returns the count written, or minus the size it needs.
/// Calls once, and once more with the size asked for; None when it still fails.
fn with_growing_buffer<T: Clone + Default>(initial: usize, mut call: impl FnMut(&mut [T]) -> i32) -> Option<Vec<T>> {
    let mut buf = vec![T::default(); initial];
    let mut n = call(&mut buf);
    if n < 0 {
        buf.resize((-n) as usize, T::default());
        n = call(&mut buf);
    }
    (n >= 0).then(|| {
        buf.truncate(n as usize);
        buf
    })
}

/// Tokenizes `text` (special tokens parsed when `parse_special`), without adding BOS/EOS.
///
/// # Safety
/// `vocab` must be a valid llama vocabulary for the duration of the call.
pub unsafe fn tokenize(
    vocab: *const sys::llama_vocab,
    text: &str,
    parse_special: bool,
) -> Result<Vec<sys::llama_token>> {
    let len =
        i32::try_from(text.len()).map_err(|_| Error::new(ErrorCode::ContextOverflow, "prompt larger than 2 GB"))?;
    with_growing_buffer(text.len() + 4, |buf: &mut [sys::llama_token]| {
        // SAFETY: buf holds buf.len() tokens; text is valid for len bytes; vocab per the contract.
        unsafe {
            sys::llama_tokenize(
                vocab,
                text.as_ptr() as *const _,
                len,
                buf.as_mut_ptr(),
                buf.len() as i32,
                false,
                parse_special,
            )
        }
    })
    .ok_or_else(|| Error::new(ErrorCode::Internal, "tokenization failed"))
}

/// The bytes of one token (special tokens rendered when `special`).
///
/// # Safety
/// `vocab` must be a valid llama vocabulary for the duration of the call.
pub unsafe fn piece(vocab: *const sys::llama_vocab, token: sys::llama_token, special: bool) -> Vec<u8> {
    with_growing_buffer(64, |buf: &mut [u8]| {
        // SAFETY: buf holds buf.len() bytes; vocab per the contract.
        unsafe { sys::llama_token_to_piece(vocab, token, buf.as_mut_ptr() as *mut _, buf.len() as i32, 0, special) }
    })
    .unwrap_or_default()
}

/// Piece bytes → token, for spelling text exactly in tokens (built once per model on first need).
pub struct PieceIndex(HashMap<Vec<u8>, sys::llama_token>);

impl PieceIndex {
    /// # Safety
    /// `vocab` must be a valid llama vocabulary for the duration of the call.
    pub unsafe fn build(vocab: *const sys::llama_vocab) -> PieceIndex {
        // SAFETY: caller contract.
        let n = unsafe { sys::llama_vocab_n_tokens(vocab) };
        let mut m = HashMap::with_capacity(n as usize);
        for t in 0..n {
            // SAFETY: caller contract.
            let p = unsafe { piece(vocab, t, true) };
            if !p.is_empty() {
                m.entry(p).or_insert(t);
            }
        }
        PieceIndex(m)
    }

    /// Tokens whose pieces spell `text` exactly (greedy longest match over the vocabulary), so a
    /// grammar can be advanced past text the tokenizer would split differently (SPM's space
    /// prefix makes the tokenized generation prompt start with a space the grammar rejects).
    pub fn spell(&self, text: &str) -> Option<Vec<sys::llama_token>> {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let max = (bytes.len() - i).min(128);
            let (len, tok) = (1..=max).rev().find_map(|l| self.0.get(&bytes[i..i + l]).map(|t| (l, *t)))?;
            out.push(tok);
            i += len;
        }
        Some(out)
    }
}
