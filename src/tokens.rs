//! The vocabulary: tokenizing text and rendering tokens, over llama.cpp's buffer protocol.

use crate::error::{Error, ErrorCode, Result};
use crate::sys;

/// A token id of the model's vocabulary (llama.cpp's `llama_token`).
pub type Token = sys::llama_token;

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

/// Piece bytes → token, in byte order, for spelling text exactly in tokens and for finding the
/// tokens that extend a piece (built once per model on first need). Every piece lives in one
/// buffer and the index is one sorted array: two allocations, whatever the vocabulary's size.
pub struct PieceIndex {
    bytes: Vec<u8>,
    /// (start in `bytes`, length, token), sorted by the piece; one entry per distinct piece.
    entries: Vec<(u32, u32, sys::llama_token)>,
}

impl PieceIndex {
    /// # Safety
    /// `vocab` must be a valid llama vocabulary for the duration of the call.
    pub unsafe fn build(vocab: *const sys::llama_vocab) -> PieceIndex {
        // SAFETY: caller contract.
        let n = unsafe { sys::llama_vocab_n_tokens(vocab) };
        // SAFETY: caller contract.
        PieceIndex::from_pieces((0..n).map(|t| (unsafe { piece(vocab, t, true) }, t)))
    }

    /// The index of `pieces` (the first token of a piece wins; empty pieces are left out).
    pub fn from_pieces(pieces: impl IntoIterator<Item = (Vec<u8>, sys::llama_token)>) -> PieceIndex {
        let mut idx = PieceIndex { bytes: Vec::new(), entries: Vec::new() };
        for (p, t) in pieces.into_iter().filter(|(p, _)| !p.is_empty()) {
            idx.entries.push((idx.bytes.len() as u32, p.len() as u32, t));
            idx.bytes.extend_from_slice(&p);
        }
        let bytes = std::mem::take(&mut idx.bytes);
        let at = |&(start, len, _): &(u32, u32, sys::llama_token)| &bytes[start as usize..(start + len) as usize];
        // Stable: among equal pieces the first token stays first, and dedup keeps it.
        idx.entries.sort_by(|x, y| at(x).cmp(at(y)));
        idx.entries.dedup_by(|later, first| at(later) == at(first));
        idx.entries.shrink_to_fit();
        idx.bytes = bytes;
        idx
    }

    fn piece_of(&self, &(start, len, _): &(u32, u32, sys::llama_token)) -> &[u8] {
        &self.bytes[start as usize..(start + len) as usize]
    }

    fn get(&self, piece: &[u8]) -> Option<sys::llama_token> {
        let i = self.entries.partition_point(|e| self.piece_of(e) < piece);
        self.entries.get(i).filter(|e| self.piece_of(e) == piece).map(|e| e.2)
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
            let (len, tok) = (1..=max).rev().find_map(|l| self.get(&bytes[i..i + l]).map(|t| (l, t)))?;
            out.push(tok);
            i += len;
        }
        Some(out)
    }

    /// The tokens whose pieces start with `prefix` and are longer than it.
    pub fn extensions<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = sys::llama_token> + 'a {
        let from = self.entries.partition_point(|e| self.piece_of(e) <= prefix);
        self.entries[from..].iter().take_while(move |e| self.piece_of(e).starts_with(prefix)).map(|e| e.2)
    }
}

#[cfg(test)]
mod tests {
    use super::PieceIndex;

    #[test]
    fn extensions_are_the_longer_pieces_a_piece_starts() {
        let pieces = [" \"", " \"/", " \"\"", " \"", "\"", " ", " \"/usr", " #", "x"];
        let idx = PieceIndex::from_pieces(pieces.iter().enumerate().map(|(i, p)| (p.as_bytes().to_vec(), i as i32)));
        let mut ext: Vec<i32> = idx.extensions(b" \"").collect();
        ext.sort();
        // ` "/`, ` ""` and ` "/usr`: not the piece itself, nor its duplicate (token 3).
        assert_eq!(ext, [1, 2, 6]);
        assert_eq!(idx.extensions(b"x").count(), 0);
        assert_eq!(idx.extensions(b"\"").count(), 0, "a piece is not extended by pieces that merely contain it");
        assert_eq!(idx.extensions(b" ").count(), 5);
        assert_eq!(idx.spell(" \"/usr\"x"), Some(vec![6, 4, 8]), "longest match first");
        assert_eq!(idx.spell(" \""), Some(vec![0]), "of two tokens with one piece, the first");
        assert_eq!(idx.spell("y"), None);
    }
}
