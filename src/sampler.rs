//! Token sampling: a llama.cpp sampler chain plus an optional grammar, combined the way
//! llama.cpp's common_sampler does it: sample without the grammar, check that one token against
//! the grammar, and only when it is rejected apply the grammar to every candidate and resample.
//! Grammar calls go through the shim, which catches llama.cpp's exceptions.

use crate::error::{Error, ErrorCode, Result};
use crate::sys;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr;

/// Sampling settings of one request (llama.cpp's defaults where the request is silent).
#[derive(Debug, Clone)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub seed: u32,
    /// OpenAI's penalties: llama.cpp's penalties sampler over the last `PENALTY_LAST_N` tokens.
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    /// (token id, bias) added to the logits; -infinity bans.
    pub logit_bias: Vec<(i32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: 0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
        }
    }
}

/// A `logit_bias` id outside the vocabulary is the request's error.
pub fn check_logit_bias(bias: &[(i32, f32)], n_vocab: i32) -> Result<()> {
    match bias.iter().find(|(id, _)| *id >= n_vocab) {
        Some((id, _)) => Err(Error::new(
            ErrorCode::InvalidArgument,
            format!("field `logit_bias.{id}`: not a token of this model's vocabulary ({n_vocab} tokens)"),
        )),
        None => Ok(()),
    }
}

/// How many of the latest tokens the penalties count (llama-server's default).
pub const PENALTY_LAST_N: i32 = 64;

impl SamplingParams {
    fn penalized(&self) -> bool {
        self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }

    /// Whether the chain changes logits before choosing (then any token may win: see `needed`).
    fn adjusts_logits(&self) -> bool {
        self.penalized() || !self.logit_bias.is_empty()
    }

    /// Adds logit_bias and the penalties to the front of `chain`, as llama.cpp's common_sampler
    /// orders them. Fails for a token id outside the vocabulary.
    ///
    /// # Safety
    /// `chain` must be a live sampler chain.
    unsafe fn add_adjustments(&self, chain: *mut sys::llama_sampler, n_vocab: i32) -> Result<()> {
        check_logit_bias(&self.logit_bias, n_vocab)?;
        let bias: Vec<sys::llama_logit_bias> =
            self.logit_bias.iter().map(|&(token, bias)| sys::llama_logit_bias { token, bias }).collect();
        // SAFETY: the chain is live; logit_bias copies the array.
        unsafe {
            if !bias.is_empty() {
                let b = sys::llama_sampler_init_logit_bias(n_vocab, bias.len() as i32, bias.as_ptr());
                sys::llama_sampler_chain_add(chain, b);
            }
            if self.penalized() {
                let pen = sys::llama_sampler_init_penalties(
                    PENALTY_LAST_N,
                    1.0,
                    self.frequency_penalty,
                    self.presence_penalty,
                );
                sys::llama_sampler_chain_add(chain, pen);
            }
        }
        Ok(())
    }
}

/// A grammar constraint: GBNF text, and for lazy grammars what wakes it up.
#[derive(Debug, Clone, Default)]
pub struct GrammarSpec {
    pub gbnf: String,
    pub lazy: bool,
    pub trigger_patterns: Vec<String>,
    pub trigger_tokens: Vec<sys::llama_token>,
}

fn shim_err(st: sys::llb_shim_status, err: *mut c_char, what: &str) -> Result<()> {
    if st == sys::LLB_SHIM_OK {
        return Ok(());
    }
    let msg = if err.is_null() {
        what.to_string()
    } else {
        // SAFETY: the shim returns a NUL-terminated malloc'd message, freed here once.
        let m = unsafe { CStr::from_ptr(err) }.to_string_lossy().into_owned();
        unsafe { sys::llb_shim_string_free(err) };
        format!("{what}: {m}")
    };
    Err(Error::new(ErrorCode::Internal, msg))
}

pub struct Sampler {
    chain: *mut sys::llama_sampler,
    grammar: *mut sys::llama_sampler,
    cur: Vec<sys::llama_token_data>,
    n_vocab: usize,
    /// How many allowed candidates the chain can use (greedy: 1, top-k: k, else all).
    needed: usize,
    /// The request's logit_bias, which greedy call wrappers honour too (bans hold everywhere).
    bias: Vec<(i32, f32)>,
    /// With a grammar: the UTF-8 guard (src/utf8.rs).
    utf8: Option<Utf8Guard>,
}

/// What keeps a grammar's output valid UTF-8 (src/utf8.rs).
struct Utf8Guard {
    /// The sampler's vocabulary (valid for its lifetime: Sampler::new's contract).
    vocab: *const sys::llama_vocab,
    /// Tokens invalid wherever they stand (sorted).
    never: Vec<sys::llama_token>,
    /// The first bytes of a character the output has not finished.
    pending: Vec<u8>,
}

impl Utf8Guard {
    fn piece(&self, id: sys::llama_token) -> Vec<u8> {
        // SAFETY: the vocab outlives the sampler (Sampler::new's contract).
        unsafe { crate::tokens::piece(self.vocab, id, false) }
    }

    fn allows(&self, id: sys::llama_token) -> bool {
        self.never.binary_search(&id).is_err()
            && (self.pending.is_empty() || crate::utf8::continues(&self.pending, &self.piece(id)))
    }
}

// SAFETY: a sampler belongs to one request, used by its caller's thread only.
unsafe impl Send for Sampler {}

impl Sampler {
    /// # Safety
    /// `vocab` must be valid for the sampler's lifetime.
    ///
    /// `not_utf8` (sorted): the vocabulary's tokens that are invalid UTF-8 wherever they stand;
    /// with a grammar, the sampler keeps its output valid UTF-8 (src/utf8.rs): those tokens are
    /// refused, and while a character is incomplete only tokens that continue it are allowed.
    pub unsafe fn new(
        vocab: *const sys::llama_vocab,
        p: &SamplingParams,
        grammar: Option<&GrammarSpec>,
        not_utf8: &[sys::llama_token],
    ) -> Result<Sampler> {
        // SAFETY: vocab is valid per the contract.
        let n_vocab = unsafe { sys::llama_vocab_n_tokens(vocab) } as usize;
        let mut s = Sampler {
            // SAFETY: as above.
            chain: unsafe { chain(vocab, p)? },
            grammar: ptr::null_mut(),
            cur: Vec::with_capacity(n_vocab),
            n_vocab,
            needed: candidates_needed(p),
            bias: p.logit_bias.clone(),
            utf8: None,
        };
        if let Some(g) = grammar.filter(|g| !g.gbnf.is_empty()) {
            // SAFETY: as above. On an error `s` is dropped, which frees the chain.
            s.grammar = unsafe { grammar_sampler(vocab, g)? };
            s.utf8 = Some(Utf8Guard { vocab, never: not_utf8.to_vec(), pending: Vec::new() });
        }
        Ok(s)
    }

    fn utf8_allows(&self, id: sys::llama_token) -> bool {
        self.utf8.as_ref().is_none_or(|g| g.allows(id))
    }

    /// Applies the grammar to the candidates (refused ones get -infinity).
    fn run_grammar(&mut self) -> Result<()> {
        self.run(self.grammar)?;
        if self.utf8.is_some() {
            for i in 0..self.cur.len() {
                if self.cur[i].logit.is_finite() && !self.utf8_allows(self.cur[i].id) {
                    self.cur[i].logit = f32::NEG_INFINITY;
                }
            }
        }
        Ok(())
    }

    fn fill(&mut self, logits: &[f32]) {
        self.cur.clear();
        self.cur.extend(logits.iter().enumerate().map(|(i, &l)| sys::llama_token_data {
            id: i as i32,
            logit: l,
            p: 0.0,
        }));
    }

    fn run(&mut self, smpl: *mut sys::llama_sampler) -> Result<()> {
        let mut arr = sys::llama_token_data_array {
            data: self.cur.as_mut_ptr(),
            size: self.cur.len(),
            selected: -1,
            sorted: false,
        };
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: arr points into self.cur, alive for the call.
        let st = unsafe { sys::llb_shim_sampler_apply(smpl, &mut arr, &mut err) };
        shim_err(st, err, "sampling")?;
        self.cur.truncate(arr.size);
        if arr.selected >= 0 && (arr.selected as usize) < arr.size {
            self.cur.swap(0, arr.selected as usize);
        }
        Ok(())
    }

    /// Samples the next token from a row of logits (n_vocab floats).
    pub fn sample(&mut self, logits: &[f32]) -> Result<sys::llama_token> {
        if logits.len() != self.n_vocab {
            return Err(Error::new(ErrorCode::Internal, "a logits row of the wrong size"));
        }
        self.fill(logits);
        self.run(self.chain)?;
        let id = self.cur.first().map(|t| t.id).ok_or_else(|| Error::new(ErrorCode::Internal, "empty candidates"))?;
        if self.grammar_allows(id)? {
            return Ok(id);
        }
        // Rejected: constrain the candidates, then sample again. The chain keeps at most
        // `needed` candidates (top-k), so when enough of the highest-logit candidates pass the
        // grammar, checking those suffices and gives the same result as checking all of them.
        self.fill(logits);
        const HEAD: usize = 1024;
        if self.needed <= HEAD / 4 && self.cur.len() > HEAD {
            self.cur.select_nth_unstable_by(HEAD - 1, |a, b| b.logit.total_cmp(&a.logit));
            let tail_max = self.cur[HEAD..].iter().map(|t| t.logit).fold(f32::NEG_INFINITY, f32::max);
            let mut head: Vec<sys::llama_token_data> = self.cur[..HEAD].to_vec();
            let saved = std::mem::replace(&mut self.cur, head);
            self.run_grammar()?;
            self.cur.retain(|t| t.logit.is_finite());
            let enough = self.cur.len() >= self.needed
                && self.cur.iter().map(|t| t.logit).fold(f32::INFINITY, f32::min) >= tail_max;
            if enough {
                self.run(self.chain)?;
                return Ok(self.cur[0].id);
            }
            head = std::mem::replace(&mut self.cur, saved);
            drop(head);
        }
        self.run_grammar()?;
        self.cur.retain(|t| t.logit.is_finite());
        if self.cur.is_empty() {
            return Err(Error::new(ErrorCode::Internal, "the grammar admits no token"));
        }
        self.run(self.chain)?;
        Ok(self.cur[0].id)
    }

    // --- deterministic call syntax (src/call_syntax.rs) ---
    /// The most likely token the grammar admits (argmax over the grammar-constrained
    /// candidates, after the request's logit_bias), leaving the chain's state (its random
    /// generator) untouched. The penalties do not apply: a wrapper's tokens are the format's.
    pub fn sample_greedy(&mut self, logits: &[f32]) -> Result<sys::llama_token> {
        if logits.len() != self.n_vocab {
            return Err(Error::new(ErrorCode::Internal, "a logits row of the wrong size"));
        }
        let best = |c: &[sys::llama_token_data]| c.iter().max_by(|a, b| a.logit.total_cmp(&b.logit)).map(|t| t.id);
        self.fill(logits);
        for &(id, b) in &self.bias {
            if let Some(t) = self.cur.get_mut(id as usize) {
                t.logit += b;
            }
        }
        let id = best(&self.cur).ok_or_else(|| Error::new(ErrorCode::Internal, "empty candidates"))?;
        if self.grammar_allows(id)? {
            return Ok(id);
        }
        self.run_grammar()?;
        self.cur.retain(|t| t.logit.is_finite());
        best(&self.cur).ok_or_else(|| Error::new(ErrorCode::Internal, "the grammar admits no token"))
    }
    // --- end deterministic call syntax ---

    /// Whether the grammar (when there is one) admits `token` next.
    pub fn grammar_allows(&mut self, token: sys::llama_token) -> Result<bool> {
        self.grammar_allows_any(&[token])
    }

    /// Whether the grammar, in its current state, accepts any of `tokens` next.
    pub fn grammar_allows_any(&mut self, tokens: &[sys::llama_token]) -> Result<bool> {
        if self.grammar.is_null() {
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
        let mut arr =
            sys::llama_token_data_array { data: data.as_mut_ptr(), size: data.len(), selected: -1, sorted: false };
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: arr points to `data`, alive for the call.
        let st = unsafe { sys::llb_shim_sampler_apply(self.grammar, &mut arr, &mut err) };
        shim_err(st, err, "grammar check")?;
        Ok(data[..arr.size].iter().any(|d| d.logit.is_finite()))
    }

    /// The text the grammar forces next, at most `max_bytes` bytes ("" without a grammar, at a
    /// choice, or while a lazy grammar waits for its trigger). See [`crate::jump`].
    pub fn forced_text(&mut self, max_bytes: usize) -> Result<String> {
        if self.grammar.is_null() {
            return Ok(String::new());
        }
        let mut text: *mut c_char = ptr::null_mut();
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: live grammar sampler made by llb_shim_grammar_new; exceptions caught by the shim.
        let st = unsafe { sys::llb_shim_grammar_forced(self.grammar, max_bytes, &mut text, &mut err) };
        shim_err(st, err, "forced grammar text")?;
        // SAFETY: on success the shim returns a NUL-terminated malloc'd string, freed here once.
        let out = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
        unsafe { sys::llb_shim_string_free(text) };
        Ok(out)
    }

    /// Advances only the grammar (past text that is already in the prompt).
    pub fn accept_grammar(&mut self, token: sys::llama_token) -> Result<()> {
        if self.grammar.is_null() {
            return Ok(());
        }
        let mut err: *mut c_char = ptr::null_mut();
        // SAFETY: live sampler; exceptions are caught by the shim.
        let st = unsafe { sys::llb_shim_sampler_accept(self.grammar, token, &mut err) };
        shim_err(st, err, "grammar prefill")
    }

    /// Records a generated token in the chain and the grammar. When llama.cpp's grammar throws
    /// (at the pin, e.g. a lazy grammar whose trigger text its own root rejects), the grammar is
    /// dropped and its message returned: generation goes on unconstrained and the caller warns.
    pub fn accept(&mut self, token: sys::llama_token) -> Result<Option<String>> {
        let mut err: *mut c_char = ptr::null_mut();
        let mut dropped = None;
        if !self.grammar.is_null() {
            // SAFETY: live sampler; exceptions are caught by the shim.
            let st = unsafe { sys::llb_shim_sampler_accept(self.grammar, token, &mut err) };
            if let Err(e) = shim_err(st, err, "grammar accept") {
                // SAFETY: created in new(), freed once here.
                unsafe { sys::llama_sampler_free(self.grammar) };
                self.grammar = ptr::null_mut();
                dropped = Some(e.message);
            }
        }
        if let Some(g) = self.utf8.as_mut() {
            g.pending = crate::utf8::pending_after(&g.pending, &g.piece(token));
        }
        // SAFETY: live sampler.
        let st = unsafe { sys::llb_shim_sampler_accept(self.chain, token, &mut err) };
        shim_err(st, err, "sampler accept")?;
        Ok(dropped)
    }
}

/// The sampling chain for `p`: logit adjustments, then greedy at temperature 0, else top-k,
/// top-p, min-p, temperature and a seeded draw.
///
/// # Safety
/// `vocab` must be valid.
unsafe fn chain(vocab: *const sys::llama_vocab, p: &SamplingParams) -> Result<*mut sys::llama_sampler> {
    // SAFETY: plain constructors; the chain owns what is added to it.
    unsafe {
        let chain = sys::llama_sampler_chain_init(sys::llama_sampler_chain_default_params());
        if let Err(e) = p.add_adjustments(chain, sys::llama_vocab_n_tokens(vocab)) {
            sys::llama_sampler_free(chain);
            return Err(e);
        }
        if p.temperature <= 0.0 {
            sys::llama_sampler_chain_add(chain, sys::llama_sampler_init_greedy());
        } else {
            if p.top_k > 0 {
                sys::llama_sampler_chain_add(chain, sys::llama_sampler_init_top_k(p.top_k));
            }
            if p.top_p < 1.0 {
                sys::llama_sampler_chain_add(chain, sys::llama_sampler_init_top_p(p.top_p, 1));
            }
            if p.min_p > 0.0 {
                sys::llama_sampler_chain_add(chain, sys::llama_sampler_init_min_p(p.min_p, 1));
            }
            sys::llama_sampler_chain_add(chain, sys::llama_sampler_init_temp(p.temperature));
            sys::llama_sampler_chain_add(chain, sys::llama_sampler_init_dist(p.seed));
        }
        Ok(chain)
    }
}

/// How many of the best candidates the chain can pick from: the grammar need only check those.
fn candidates_needed(p: &SamplingParams) -> usize {
    if p.adjusts_logits() {
        usize::MAX // a bias or a negative penalty may lift any token to the top
    } else if p.temperature <= 0.0 {
        1
    } else if p.top_k > 0 {
        p.top_k as usize
    } else {
        usize::MAX
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
        // The grammar comes from the request's tool schemas and response_format: one
        // llama.cpp cannot parse is the request's to fix, not an internal error.
        let what = "the request's tool schemas or response_format give a grammar llama.cpp cannot parse";
        let mut e = shim_err(st, err, what).unwrap_err();
        e.code = ErrorCode::InvalidArgument;
        return Err(e);
    }
    shim_err(st, err, "building the grammar sampler")?;
    Ok(grammar)
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // SAFETY: both were created here and are freed once.
        unsafe {
            sys::llama_sampler_free(self.chain);
            if !self.grammar.is_null() {
                sys::llama_sampler_free(self.grammar);
            }
        }
    }
}

/// Escapes a literal for a trigger regex (as llama.cpp's regex_escape).
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if ".^$|()*+?[]{}\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// GBNF text for "any text up to (not including) `lit`", as llama.cpp writes it:
/// `([^<] | "<" [^/] | "</" [^t] ...)*`.
pub fn gbnf_until(lit: &str) -> String {
    let chars: Vec<char> = lit.chars().collect();
    if chars.is_empty() {
        return String::new();
    }
    let mut alts = Vec::new();
    for i in 0..chars.len() {
        let prefix: String = chars[..i].iter().collect();
        let c = gbnf_class_char(chars[i]);
        if i == 0 {
            alts.push(format!("[^{c}]"));
        } else {
            alts.push(format!("{} [^{c}]", gbnf_literal(&prefix)));
        }
    }
    format!("({})*", alts.join(" | "))
}

fn gbnf_class_char(c: char) -> String {
    match c {
        '\\' | ']' | '[' | '^' | '-' => format!("\\{c}"),
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c => c.to_string(),
    }
}

/// A GBNF string literal.
pub fn gbnf_literal(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
