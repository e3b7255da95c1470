//! llama.cpp's own grammar sampler, for a grammar the constraint engine cannot take, with llb's
//! UTF-8 guard (src/utf8.rs): llama.cpp's grammar decodes a token's bytes leniently, so under it
//! llb refuses tokens invalid wherever they stand and tokens that do not continue a pending
//! character. Every call goes through the shim, which catches llama.cpp's exceptions.

use super::gbnf::GrammarSpec;
use crate::error::{Error, ErrorCode, Result};
use crate::sys;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr;

pub struct LlamaGrammar {
    /// Null once dropped after a failure (see [`LlamaGrammar::accept`]).
    sampler: *mut sys::llama_sampler,
    /// The vocabulary (valid for the grammar's lifetime: `new`'s contract).
    vocab: *const sys::llama_vocab,
    /// Tokens invalid wherever they stand (sorted).
    never: Vec<sys::llama_token>,
    /// The first bytes of a character the output has not finished.
    pending: Vec<u8>,
}

// SAFETY: a grammar belongs to one request, used by one thread at a time.
unsafe impl Send for LlamaGrammar {}

impl LlamaGrammar {
    /// # Safety
    /// `vocab` must be valid for the grammar's lifetime. `not_utf8`: sorted.
    pub unsafe fn new(vocab: *const sys::llama_vocab, g: &GrammarSpec, not_utf8: Vec<sys::llama_token>) -> Result<Self> {
        // SAFETY: per the contract.
        let sampler = unsafe { grammar_sampler(vocab, g)? };
        Ok(LlamaGrammar { sampler, vocab, never: not_utf8, pending: Vec::new() })
    }

    fn piece(&self, id: sys::llama_token) -> Vec<u8> {
        // SAFETY: the vocab outlives the grammar (new's contract).
        unsafe { crate::tokens::piece(self.vocab, id, false) }
    }

    fn utf8_allows(&self, id: sys::llama_token) -> bool {
        self.never.binary_search(&id).is_err()
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
        let mut text: *mut c_char = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: live grammar sampler made by llb_shim_grammar_new; exceptions caught by the shim.
        let st = unsafe { sys::llb_shim_grammar_forced(self.sampler, max_bytes, &mut text, &mut err) };
        crate::shim::check_llb(st, err, "forced grammar text")?;
        // SAFETY: on success the shim returns a NUL-terminated malloc'd string, freed here once.
        let out = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
        // SAFETY: `text` came from the shim and is not used after this.
        unsafe { sys::llb_shim_string_free(text) };
        Ok(out)
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

/// llama.cpp's grammar sampler for `g` (lazy with its triggers, or strict). A grammar llama.cpp
/// cannot parse, or one holding a NUL, comes from the request: `invalid_argument`.
///
/// # Safety
/// `vocab` must be valid for the sampler's lifetime.
unsafe fn grammar_sampler(vocab: *const sys::llama_vocab, g: &GrammarSpec) -> Result<*mut sys::llama_sampler> {
    let gbnf = CString::new(g.gbnf.as_str()).map_err(|_| {
        // Only a request's schema (a `pattern` with a raw NUL) can put one there.
        Error::new(
            ErrorCode::InvalidArgument,
            "the request's tool schemas or response_format give a grammar holding a NUL character",
        )
    })?;
    let pats: Vec<CString> = g.trigger_patterns.iter().map(|p| CString::new(p.as_str()).unwrap_or_default()).collect();
    let pat_ptrs: Vec<*const c_char> = pats.iter().map(|p| p.as_ptr()).collect();
    let mut grammar = ptr::null_mut();
    let mut err: *mut c_char = ptr::null_mut();
    // SAFETY: every pointer outlives the call; `grammar` is a valid out-pointer.
    let st = unsafe {
        sys::llb_shim_grammar_new(
            vocab,
            gbnf.as_ptr(),
            g.lazy as i32,
            pat_ptrs.as_ptr() as *mut *const c_char,
            pat_ptrs.len(),
            g.trigger_tokens.as_ptr(),
            g.trigger_tokens.len(),
            &mut grammar,
            &mut err,
        )
    };
    if st == sys::LLB_SHIM_INVALID {
        // The grammar comes from the request's tool schemas and response_format: one llama.cpp
        // cannot parse is the request's to fix, not an internal error.
        let e = crate::shim::check(st, err, "grammar").unwrap_err();
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            format!("the request's tool schemas or response_format give a grammar llama.cpp cannot parse: {}", e.message),
        ));
    }
    crate::shim::check_llb(st, err, "building the grammar sampler")?;
    Ok(grammar)
}
