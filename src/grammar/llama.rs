//! llama.cpp's own grammar sampler, for a grammar the constraint engine cannot take, with llb's
//! UTF-8 guard (src/utf8.rs): llama.cpp's grammar decodes a token's bytes leniently, so under it
//! llb refuses tokens invalid wherever they stand and tokens that do not continue a pending
//! character. Every call goes through the shim, which catches llama.cpp's exceptions.

use super::gbnf::GrammarSpec;
use crate::error::Result;
use crate::sys;
use crate::tokens::Vocab;
use std::ptr;
use std::sync::Arc;

pub struct LlamaGrammar {
    /// Null once dropped after a failure (see [`LlamaGrammar::accept`]).
    sampler: *mut sys::llama_sampler,
    /// The vocabulary it was built for: pieces and the tokens never valid as UTF-8.
    vocab: Arc<Vocab>,
    /// The first bytes of a character the output has not finished.
    pending: Vec<u8>,
}

// SAFETY: a grammar belongs to one request, used by one thread at a time.
unsafe impl Send for LlamaGrammar {}

impl LlamaGrammar {
    pub fn new(vocab: Arc<Vocab>, g: &GrammarSpec) -> Result<Self> {
        // SAFETY: the vocabulary is valid while `vocab` lives; the grammar holds it.
        let sampler = unsafe {
            crate::shim::grammar_sampler(vocab.raw(), &g.gbnf, g.lazy, &g.trigger_patterns, &g.trigger_tokens)?
        };
        Ok(LlamaGrammar { sampler, vocab, pending: Vec::new() })
    }

    fn piece(&self, id: sys::llama_token) -> Vec<u8> {
        self.vocab.piece(id, false)
    }

    fn utf8_allows(&self, id: sys::llama_token) -> bool {
        self.vocab.not_utf8_tokens().binary_search(&id).is_err()
            && (self.pending.is_empty() || crate::utf8::continues(&self.pending, &self.piece(id)))
    }

    fn run(&self, cur: &mut Vec<sys::llama_token_data>) -> Result<()> {
        let mut arr =
            sys::llama_token_data_array { data: cur.as_mut_ptr(), size: cur.len(), selected: -1, sorted: false };
        // SAFETY: arr points into `cur`, alive for the call; the sampler is live.
        unsafe { crate::shim::sampler_apply(self.sampler, &mut arr, "grammar") }?;
        cur.truncate(arr.size);
        Ok(())
    }

    /// Refuses (drops) the candidates the grammar does not allow.
    pub fn constrain(&mut self, cur: &mut Vec<sys::llama_token_data>) -> Result<()> {
        if self.sampler.is_null() {
            return Ok(());
        }
        self.run(cur)?;
        cur.retain(|t| t.logit.is_finite() && self.utf8_allows(t.id));
        Ok(())
    }

    /// Whether the grammar, in its current state, accepts any of `tokens` next.
    pub fn allows_any(&mut self, tokens: &[sys::llama_token]) -> Result<bool> {
        if self.sampler.is_null() {
            return Ok(true);
        }
        let mut data: Vec<_> = tokens
            .iter()
            .filter(|&&id| self.utf8_allows(id))
            .map(|&id| sys::llama_token_data { id, logit: 1.0, p: 0.0 })
            .collect();
        if data.is_empty() {
            return Ok(false);
        }
        self.run(&mut data)?;
        Ok(data.iter().any(|d| d.logit.is_finite()))
    }

    /// The text the grammar forces next (see llb_shim_grammar_forced).
    pub fn forced_text(&mut self, max_bytes: usize) -> Result<String> {
        if self.sampler.is_null() {
            return Ok(String::new());
        }
        // SAFETY: a live grammar sampler made by shim::grammar_sampler.
        unsafe { crate::shim::grammar_forced(self.sampler, max_bytes) }
    }

    /// Advances only the grammar (past text that is already in the prompt).
    pub fn prefill(&mut self, token: sys::llama_token) -> Result<()> {
        if self.sampler.is_null() {
            return Ok(());
        }
        // SAFETY: live sampler; exceptions are caught by the shim.
        unsafe { crate::shim::sampler_accept(self.sampler, token, "grammar prefill") }
    }

    /// Records a generated token. When llama.cpp's grammar throws, it is dropped and its message
    /// returned: generation goes on unconstrained and the caller warns.
    pub fn accept(&mut self, token: sys::llama_token) -> Result<Option<String>> {
        if self.sampler.is_null() {
            return Ok(None);
        }
        // SAFETY: live sampler; exceptions are caught by the shim.
        if let Err(e) = unsafe { crate::shim::sampler_accept(self.sampler, token, "grammar accept") } {
            // SAFETY: created in new(), freed once here.
            unsafe { sys::llama_sampler_free(self.sampler) };
            self.sampler = ptr::null_mut();
            return Ok(Some(e.message));
        }
        self.pending = crate::utf8::pending_after(&self.pending, &self.piece(token));
        Ok(None)
    }
}

impl Drop for LlamaGrammar {
    fn drop(&mut self) {
        if !self.sampler.is_null() {
            // SAFETY: created in new(), freed once here.
            unsafe { sys::llama_sampler_free(self.sampler) };
        }
    }
}

