//! The vocabulary: [`Vocab`], a model's tokenizer and token pieces behind a safe interface
//! (tokenizing text, rendering tokens, special and byte tokens, spelling text exactly in
//! tokens). Nothing above this module calls llama.cpp's vocabulary functions; the grammar layer
//! (src/grammar/), which keeps a vocabulary pointer for a grammar's lifetime, takes
//! [`Vocab::raw`].

use crate::error::{Error, ErrorCode, Result};
use crate::model::Model;
use crate::sys;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// A token id of the model's vocabulary (llama.cpp's `llama_token`).
pub type Token = sys::llama_token;

/// The length of the common beginning of `a` and `b`.
pub fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A model's vocabulary. It holds the model, so the vocabulary stays valid as long as the
/// `Vocab` lives; the indexes over it are built once per loaded model and shared by every
/// engine, pool and request on it (any thread may use it: llama.cpp's vocabulary is immutable
/// once loaded).
pub struct Vocab {
    model: Arc<Model>,
    n_tokens: i32,
    indexes: Arc<Indexes>,
}

/// What is built over a vocabulary once per loaded model (issue 31: not per engine, and not
/// while a request waits when [`Vocab::prepare`] ran at create).
#[derive(Default)]
struct Indexes {
    /// piece text → token (exact spelling, jump-forward).
    pieces: OnceLock<PieceIndex>,
    /// The tokens that are never valid UTF-8.
    not_utf8: OnceLock<Vec<Token>>,
}

impl Vocab {
    /// The vocabulary of `model`, with the indexes its other `Vocab`s built already.
    pub fn new(model: Arc<Model>) -> Vocab {
        static SHARED: Mutex<Option<HashMap<u64, Weak<Indexes>>>> = Mutex::new(None);
        let n_tokens = model.n_vocab() as i32;
        let mut guard = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        let all = guard.get_or_insert_with(HashMap::new);
        let indexes = match all.get(&model.id).and_then(Weak::upgrade) {
            Some(i) => i,
            None => {
                all.retain(|_, w| w.strong_count() > 0);
                let i = Arc::new(Indexes::default());
                all.insert(model.id, Arc::downgrade(&i));
                i
            }
        };
        Vocab { model, n_tokens, indexes }
    }

    /// Builds every index a request may need (pieces, never-UTF-8 tokens) now, and returns each
    /// token's bytes (special tokens by their text) and whether it ends a generation. Done once
    /// per model when it loads, so that no request waits for it.
    pub fn prepare(&self) -> Vec<(Vec<u8>, bool)> {
        let special: Vec<Vec<u8>> = (0..self.n_tokens).map(|t| self.piece(t, true)).collect();
        let _ = self.not_utf8_tokens();
        self.indexes.pieces.get_or_init(|| PieceIndex::from_pieces(special.iter().cloned().zip(0..)));
        special.into_iter().zip(0..).map(|(p, t)| (p, self.is_eog(t))).collect()
    }

    /// llama.cpp's vocabulary, for the grammar layer: valid as long as `self` lives.
    pub fn raw(&self) -> *const sys::llama_vocab {
        self.model.vocab()
    }

    /// How many tokens the vocabulary has (a logits row's length).
    pub fn n_tokens(&self) -> i32 {
        self.n_tokens
    }

    /// Tokenizes `text`, special tokens' text parsed as those tokens (what a rendered prompt
    /// needs), without adding BOS/EOS.
    pub fn tokenize(&self, text: &str) -> Result<Vec<Token>> {
        // SAFETY: the vocabulary lives as long as the model `self` holds.
        unsafe { tokenize(self.raw(), text, true) }
    }

    /// Tokenizes `text` as plain text: special tokens' text is not parsed.
    pub fn tokenize_literal(&self, text: &str) -> Result<Vec<Token>> {
        // SAFETY: as above.
        unsafe { tokenize(self.raw(), text, false) }
    }

    /// `text`'s tokens, with the model's BOS first when the vocabulary adds one.
    pub fn tokenize_with_bos(&self, text: &str) -> Result<Vec<Token>> {
        let mut toks = self.tokenize(text)?;
        // SAFETY: as above.
        let (add_bos, bos) = unsafe { (sys::llama_vocab_get_add_bos(self.raw()), sys::llama_vocab_bos(self.raw())) };
        if add_bos && bos >= 0 && toks.first() != Some(&bos) {
            toks.insert(0, bos);
        }
        Ok(toks)
    }

    /// The token `text` tokenizes to when it is one token (a grammar's `<text>` reference, a
    /// template's preserved token).
    pub fn single_token(&self, text: &str) -> Option<Token> {
        match self.tokenize(text) {
            Ok(ids) if ids.len() == 1 => Some(ids[0]),
            _ => None,
        }
    }

    /// The bytes of `token` (special tokens rendered when `special`).
    pub fn piece(&self, token: Token, special: bool) -> Vec<u8> {
        // SAFETY: as above.
        unsafe { piece(self.raw(), token, special) }
    }

    /// Whether `token` ends a generation (EOS, EOT and the like).
    pub fn is_eog(&self, token: Token) -> bool {
        // SAFETY: as above.
        unsafe { sys::llama_vocab_is_eog(self.raw(), token) }
    }

    /// The model's end-of-turn token (EOT, else EOS): what ends a reply once its one allowed
    /// call is complete. None when the vocabulary has neither.
    pub fn end_of_turn(&self) -> Option<Token> {
        // SAFETY: as above.
        let (eot, eos) = unsafe { (sys::llama_vocab_eot(self.raw()), sys::llama_vocab_eos(self.raw())) };
        Some(if eot >= 0 { eot } else { eos }).filter(|t| *t >= 0)
    }

    /// The vocabulary's pieces (special tokens rendered), indexed on first need.
    pub fn pieces(&self) -> &PieceIndex {
        self.indexes.pieces.get_or_init(|| PieceIndex::from_pieces((0..self.n_tokens).map(|t| (self.piece(t, true), t))))
    }

    /// Tokens whose pieces spell `text` exactly (see [`PieceIndex::spell`]).
    pub fn spell(&self, text: &str) -> Option<Vec<Token>> {
        self.pieces().spell(text)
    }

    /// The byte tokens that are invalid UTF-8 wherever they stand ([`crate::utf8::never_valid`]:
    /// byte-fallback and byte-level tokens for C0, C1, F5–FF), sorted, found on first need.
    pub fn not_utf8_tokens(&self) -> &[Token] {
        self.indexes
            .not_utf8
            .get_or_init(|| (0..self.n_tokens).filter(|&t| crate::utf8::never_valid(&self.piece(t, false))).collect())
    }
}

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
unsafe fn tokenize(vocab: *const sys::llama_vocab, text: &str, parse_special: bool) -> Result<Vec<Token>> {
    let len =
        i32::try_from(text.len()).map_err(|_| Error::new(ErrorCode::ContextOverflow, "prompt larger than 2 GB"))?;
    with_growing_buffer(text.len() + 4, |buf: &mut [Token]| {
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

/// The bytes of one token (special tokens rendered when `special`): [`Vocab::piece`], for the
/// grammar layer, which holds a vocabulary pointer for a grammar's lifetime.
///
/// # Safety
/// `vocab` must be a valid llama vocabulary for the duration of the call.
pub(crate) unsafe fn piece(vocab: *const sys::llama_vocab, token: Token, special: bool) -> Vec<u8> {
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
    entries: Vec<(u32, u32, Token)>,
}

impl PieceIndex {
    /// The index of `pieces` (the first token of a piece wins; empty pieces are left out).
    pub fn from_pieces(pieces: impl IntoIterator<Item = (Vec<u8>, Token)>) -> PieceIndex {
        let mut idx = PieceIndex { bytes: Vec::new(), entries: Vec::new() };
        for (p, t) in pieces.into_iter().filter(|(p, _)| !p.is_empty()) {
            idx.entries.push((idx.bytes.len() as u32, p.len() as u32, t));
            idx.bytes.extend_from_slice(&p);
        }
        let bytes = std::mem::take(&mut idx.bytes);
        let at = |&(start, len, _): &(u32, u32, Token)| &bytes[start as usize..(start + len) as usize];
        // Stable: among equal pieces the first token stays first, and dedup keeps it.
        idx.entries.sort_by(|x, y| at(x).cmp(at(y)));
        idx.entries.dedup_by(|later, first| at(later) == at(first));
        idx.entries.shrink_to_fit();
        idx.bytes = bytes;
        idx
    }

    fn piece_of(&self, &(start, len, _): &(u32, u32, Token)) -> &[u8] {
        &self.bytes[start as usize..(start + len) as usize]
    }

    /// The token whose piece is `piece` (the first of several).
    pub fn get(&self, piece: &[u8]) -> Option<Token> {
        let i = self.entries.partition_point(|e| self.piece_of(e) < piece);
        self.entries.get(i).filter(|e| self.piece_of(e) == piece).map(|e| e.2)
    }

    /// Tokens whose pieces spell `text` exactly (greedy longest match over the vocabulary), so a
    /// grammar can be advanced past text the tokenizer would split differently (SPM's space
    /// prefix makes the tokenized generation prompt start with a space the grammar rejects).
    pub fn spell(&self, text: &str) -> Option<Vec<Token>> {
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
    pub fn extensions<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = Token> + 'a {
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
