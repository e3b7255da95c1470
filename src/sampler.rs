//! Token sampling: a llama.cpp sampler chain plus an optional grammar (src/grammar/), combined
//! the way llama.cpp's common_sampler does it: sample without the grammar, check that one token
//! against the grammar, and only when it is rejected sample again from the allowed candidates
//! (the constraint engine lists them from its mask; llama.cpp's grammar filters the row).

use crate::error::{Error, ErrorCode, Result};
use crate::grammar::Grammar;
use crate::request::SamplingParams;
use crate::sys;
use crate::tokens::{Token, Vocab};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many of the latest tokens the penalties count (llama-server's default).
pub const PENALTY_LAST_N: i32 = 64;

/// Adds logit_bias and the penalties to the front of `chain`, as llama.cpp's common_sampler
/// orders them (the bias's tokens were checked against the vocabulary when the request was
/// resolved).
///
/// # Safety
/// `chain` must be a live sampler chain.
unsafe fn add_adjustments(chain: *mut sys::llama_sampler, p: &SamplingParams, n_vocab: i32) {
    let bias: Vec<sys::llama_logit_bias> =
        p.logit_bias.iter().map(|&(token, bias)| sys::llama_logit_bias { token, bias }).collect();
    // SAFETY: the chain is live; logit_bias copies the array.
    unsafe {
        if !bias.is_empty() {
            let b = sys::llama_sampler_init_logit_bias(n_vocab, bias.len() as i32, bias.as_ptr());
            sys::llama_sampler_chain_add(chain, b);
        }
        if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
            let pen = sys::llama_sampler_init_penalties(PENALTY_LAST_N, 1.0, p.frequency_penalty, p.presence_penalty);
            sys::llama_sampler_chain_add(chain, pen);
        }
    }
}

/// Where a request's sampling time went (the completion's `timings`): the sampler chain, and the
/// grammar (checks, masks, accepting tokens).
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleStats {
    pub chain: Duration,
    pub grammar: Duration,
}

pub struct Sampler {
    chain: *mut sys::llama_sampler,
    pub stats: SampleStats,
    grammar: Option<Grammar>,
    cur: Vec<sys::llama_token_data>,
    n_vocab: usize,
    /// The request's logit_bias, which greedy call wrappers honour too (bans hold everywhere).
    bias: Vec<(Token, f32)>,
    /// The vocabulary, for token pieces.
    vocab: Arc<Vocab>,
}

// SAFETY: a sampler belongs to one request, used by its caller's thread only.
unsafe impl Send for Sampler {}

impl Sampler {
    /// A request's sampler over `vocab`: its chain for `p`, and its grammar (when it has one).
    pub fn new(vocab: Arc<Vocab>, p: &SamplingParams, grammar: Option<Grammar>) -> Sampler {
        let n_vocab = vocab.n_tokens().max(0) as usize;
        Sampler {
            chain: chain(vocab.n_tokens(), p),
            stats: SampleStats::default(),
            grammar,
            cur: Vec::with_capacity(n_vocab),
            n_vocab,
            bias: p.logit_bias.clone(),
            vocab,
        }
    }

    fn fill(&mut self, logits: &[f32]) {
        self.cur.clear();
        self.cur.extend(logits.iter().enumerate().map(|(i, &l)| sys::llama_token_data {
            id: i as i32,
            logit: l,
            p: 0.0,
        }));
    }

    fn run_chain(&mut self) -> Result<()> {
        let t0 = Instant::now();
        let r = self.run_chain_inner();
        self.stats.chain += t0.elapsed();
        r
    }

    fn run_chain_inner(&mut self) -> Result<()> {
        let mut arr = sys::llama_token_data_array {
            data: self.cur.as_mut_ptr(),
            size: self.cur.len(),
            selected: -1,
            sorted: false,
        };
        // SAFETY: the chain is live; arr points into self.cur, alive for the call.
        unsafe { crate::shim::sampler_apply(self.chain, &mut arr, "sampling") }?;
        self.cur.truncate(arr.size);
        if arr.selected >= 0 && (arr.selected as usize) < arr.size {
            self.cur.swap(0, arr.selected as usize);
        }
        Ok(())
    }

    /// The candidates the grammar allows, from a row of logits.
    fn fill_allowed(&mut self, logits: &[f32]) -> Result<()> {
        let t0 = Instant::now();
        let r = self.fill_allowed_inner(logits);
        self.stats.grammar += t0.elapsed();
        r
    }

    fn fill_allowed_inner(&mut self, logits: &[f32]) -> Result<()> {
        let Some(g) = self.grammar.as_mut() else {
            self.fill(logits);
            return Ok(());
        };
        if let Some(allowed) = g.allowed_candidates(logits)? {
            self.cur = allowed;
        } else {
            self.fill(logits);
            let g = self.grammar.as_mut().expect("checked above");
            g.constrain(&mut self.cur)?;
        }
        if self.cur.is_empty() {
            return Err(Error::new(ErrorCode::Internal, "the grammar admits no token"));
        }
        Ok(())
    }

    fn check_row(&self, logits: &[f32]) -> Result<()> {
        if logits.len() != self.n_vocab {
            return Err(Error::new(ErrorCode::Internal, "a logits row of the wrong size"));
        }
        Ok(())
    }

    /// Samples the next token from a row of logits (n_vocab floats).
    pub fn sample(&mut self, logits: &[f32]) -> Result<Token> {
        self.check_row(logits)?;
        self.fill(logits);
        self.run_chain()?;
        let id = self.cur.first().map(|t| t.id).ok_or_else(|| Error::new(ErrorCode::Internal, "empty candidates"))?;
        if self.grammar_allows(id)? {
            return Ok(id);
        }
        // Rejected: sample again from the candidates the grammar allows.
        self.fill_allowed(logits)?;
        self.run_chain()?;
        Ok(self.cur[0].id)
    }

    // --- deterministic call syntax (src/call_syntax.rs) ---
    /// The most likely token the grammar admits (argmax over the grammar-constrained
    /// candidates, after the request's logit_bias), leaving the chain's state (its random
    /// generator) untouched. The penalties do not apply: a wrapper's tokens are the format's.
    pub fn sample_greedy(&mut self, logits: &[f32]) -> Result<Token> {
        self.check_row(logits)?;
        let best = |c: &[sys::llama_token_data]| c.iter().max_by(|a, b| a.logit.total_cmp(&b.logit)).map(|t| t.id);
        self.fill(logits);
        self.apply_bias();
        let id = best(&self.cur).ok_or_else(|| Error::new(ErrorCode::Internal, "empty candidates"))?;
        if self.grammar_allows(id)? {
            return Ok(id);
        }
        self.fill_allowed(logits)?;
        self.apply_bias();
        best(&self.cur).ok_or_else(|| Error::new(ErrorCode::Internal, "the grammar admits no token"))
    }
    // --- end deterministic call syntax ---

    fn apply_bias(&mut self) {
        let full = self.cur.len() == self.n_vocab;
        for &(id, b) in &self.bias {
            let t = if full { self.cur.get_mut(id as usize) } else { self.cur.iter_mut().find(|t| t.id == id) };
            if let Some(t) = t {
                t.logit += b;
            }
        }
    }

    /// Whether the grammar (when there is one) admits `token` next.
    pub fn grammar_allows(&mut self, token: Token) -> Result<bool> {
        let t0 = Instant::now();
        let r = match self.grammar.as_mut() {
            Some(g) => g.allows(token),
            None => Ok(true),
        };
        self.stats.grammar += t0.elapsed();
        r
    }

    /// Whether the grammar, in its current state, accepts any of `tokens` next.
    pub fn grammar_allows_any(&mut self, tokens: &[Token]) -> Result<bool> {
        let t0 = Instant::now();
        let r = match self.grammar.as_mut() {
            Some(g) => g.allows_any(tokens),
            None => Ok(true),
        };
        self.stats.grammar += t0.elapsed();
        r
    }

    /// The text the grammar forces next, at most `max_bytes` bytes ("" without a grammar, at a
    /// choice, or while a lazy grammar waits for its trigger). See [`crate::jump`].
    pub fn forced_text(&mut self, max_bytes: usize) -> Result<String> {
        let t0 = Instant::now();
        let r = match self.grammar.as_mut() {
            Some(g) => g.forced_text(max_bytes),
            None => Ok(String::new()),
        };
        self.stats.grammar += t0.elapsed();
        r
    }

    fn piece(&self, token: Token) -> Vec<u8> {
        self.vocab.piece(token, true)
    }

    /// Advances only the grammar (past text that is already in the prompt).
    pub fn accept_grammar(&mut self, token: Token) -> Result<()> {
        let piece = self.piece(token);
        match self.grammar.as_mut() {
            Some(g) => g.prefill(token, &piece),
            None => Ok(()),
        }
    }

    /// Records a generated token in the chain and the grammar. When the grammar fails (at the
    /// pin, e.g. a lazy grammar whose trigger text its own root rejects), the grammar is dropped
    /// and its message returned: generation goes on unconstrained and the caller warns.
    pub fn accept(&mut self, token: Token) -> Result<Option<String>> {
        let mut dropped = None;
        if self.grammar.is_some() {
            let t0 = Instant::now();
            let piece = self.piece(token);
            if let Some(why) = self.grammar.as_mut().expect("checked above").accept(token, &piece)? {
                self.grammar = None;
                dropped = Some(why);
            }
            self.stats.grammar += t0.elapsed();
        }
        // SAFETY: the chain is live.
        unsafe { crate::shim::sampler_accept(self.chain, token, "sampler accept") }?;
        Ok(dropped)
    }
}

/// The sampling chain for `p` over a vocabulary of `n_vocab` tokens: logit adjustments, then
/// greedy at temperature 0, else top-k, top-p, min-p, temperature and a seeded draw.
fn chain(n_vocab: i32, p: &SamplingParams) -> *mut sys::llama_sampler {
    // SAFETY: plain constructors; the chain owns what is added to it.
    unsafe {
        let chain = sys::llama_sampler_chain_init(sys::llama_sampler_chain_default_params());
        add_adjustments(chain, p, n_vocab);
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
        chain
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // SAFETY: created in new() and freed once.
        unsafe { sys::llama_sampler_free(self.chain) };
    }
}
