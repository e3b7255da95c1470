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

/// The largest `top_k` the shortlist serves; above it the chain sees the whole row.
const SHORTLIST_MAX_K: usize = 256;

/// Which candidates can win under the chain, without touching the whole vocabulary (issue 31):
/// with no logit_bias and no penalties (which change logits anywhere in the row), the greedy
/// choice is the row's first maximum, and a top-k chain only ever sees the k best. Sampling from
/// those gives the same token, and at T>0 the same draw of the same seeded generator, as the
/// chain over all n_vocab candidates (ties among equal logits aside, which llama.cpp's partial
/// sort leaves in no set order either).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shortlist {
    /// Temperature 0: the argmax.
    Argmax,
    /// The k best candidates, best first (ties by lower id).
    TopK(usize),
    /// The chain needs the whole row.
    Whole,
}

impl Shortlist {
    fn of(p: &SamplingParams) -> Shortlist {
        let adjusted = !p.logit_bias.is_empty() || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0;
        match () {
            _ if adjusted => Shortlist::Whole,
            _ if p.temperature <= 0.0 => Shortlist::Argmax,
            _ if p.top_k > 0 && p.top_k as usize <= SHORTLIST_MAX_K => Shortlist::TopK(p.top_k as usize),
            _ => Shortlist::Whole,
        }
    }
}

/// Runs `chain` over the candidates in `cur`, leaving them as the chain left them, the chosen one
/// first.
///
/// # Safety
/// `chain` must be a live sampler chain.
unsafe fn apply_chain(chain: *mut sys::llama_sampler, cur: &mut Vec<sys::llama_token_data>) -> Result<()> {
    let mut arr =
        sys::llama_token_data_array { data: cur.as_mut_ptr(), size: cur.len(), selected: -1, sorted: false };
    // SAFETY: the chain is live (the caller's promise); arr points into cur, alive for the call.
    unsafe { crate::shim::sampler_apply(chain, &mut arr, "sampling") }?;
    cur.truncate(arr.size);
    if arr.selected >= 0 && (arr.selected as usize) < arr.size {
        cur.swap(0, arr.selected as usize);
    }
    Ok(())
}

/// The chain's choice from a row of logits, from the [`Shortlist`] when `shortlist` allows it.
///
/// # Safety
/// `chain` must be a live sampler chain.
unsafe fn choose_in(
    chain: *mut sys::llama_sampler,
    cur: &mut Vec<sys::llama_token_data>,
    shortlist: Shortlist,
    row: &[f32],
) -> Result<Token> {
    let empty = || Error::new(ErrorCode::Internal, "empty candidates");
    match shortlist {
        Shortlist::Argmax => return argmax(row).map(|i| i as Token).ok_or_else(empty),
        Shortlist::TopK(k) => top_k(row, k, cur),
        Shortlist::Whole => fill(cur, row),
    }
    // SAFETY: as the caller promised.
    unsafe { apply_chain(chain, cur) }?;
    cur.first().map(|t| t.id).ok_or_else(empty)
}

/// Every token of `row` as a candidate, in id order.
fn fill(cur: &mut Vec<sys::llama_token_data>, row: &[f32]) {
    cur.clear();
    cur.extend(row.iter().enumerate().map(|(i, &logit)| sys::llama_token_data { id: i as i32, logit, p: 0.0 }));
}

/// Lanes of the chunked scans below: the compiler turns a fixed-width loop over lanes into
/// vector max instructions (a scalar scan of a 151,936-token row took ~85 µs, this ~6 µs).
const LANES: usize = 16;

/// The index of the first maximum of `row` (llama.cpp's greedy sampler's choice).
fn argmax(row: &[f32]) -> Option<usize> {
    let mut m = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in m.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let best = m.iter().chain(rest).fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    row.iter().position(|&x| x == best)
}

/// Every `STRIDE`-th logit is a sample that sets [`top_k`]'s threshold.
const STRIDE: usize = 64;

/// The `k` best candidates of `row` into `out`, best first (ties: lower id first). Exact, in
/// two vectorized passes: a threshold no higher than the k-th best logit is read from a strided
/// sample (its few best values: about 4k logits of the row are at or above it), then only the
/// logits at or above it are collected and ordered. When fewer than k are, every logit is.
fn top_k(row: &[f32], k: usize, out: &mut Vec<sys::llama_token_data>) {
    let better = |a: &sys::llama_token_data, b: &sys::llama_token_data| b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id));
    let k = k.min(row.len()).max(1);
    let mut sample: Vec<f32> = row.iter().step_by(STRIDE).copied().collect();
    let q = (4 * k).div_ceil(STRIDE) + 2;
    let threshold = if row.len() >= 16 * STRIDE && q < sample.len() {
        sample.select_nth_unstable_by(q - 1, |a, b| b.total_cmp(a));
        sample[q - 1]
    } else {
        f32::NEG_INFINITY
    };
    collect_at_least(row, threshold, out);
    if out.len() < k {
        collect_at_least(row, f32::NEG_INFINITY, out);
    }
    if out.len() > k {
        out.select_nth_unstable_by(k - 1, better);
        out.truncate(k);
    }
    out.sort_unstable_by(better);
}

/// Logits per block of [`collect_at_least`]'s scan.
const BLOCK: usize = 64;

/// Whether a block holds a logit at or above `t`: compares OR-ed lane by lane (vector
/// instructions, one reduction per block: ~7 µs for a 151,936-token row, where a per-chunk max
/// took ~23 µs).
fn any_at_least(c: &[f32; BLOCK], t: f32) -> bool {
    let mut acc = 0u32;
    for &x in c {
        acc |= (x >= t) as u32;
    }
    acc != 0
}

/// The logits of `row` at or above `threshold` into `out` (all of them at -infinity), in id
/// order; a block with none is skipped with vector comparisons.
fn collect_at_least(row: &[f32], threshold: f32, out: &mut Vec<sys::llama_token_data>) {
    out.clear();
    let all = threshold == f32::NEG_INFINITY;
    let take = |out: &mut Vec<sys::llama_token_data>, base: usize, c: &[f32]| {
        for (i, &logit) in c.iter().enumerate() {
            if all || logit >= threshold {
                out.push(sys::llama_token_data { id: (base + i) as i32, logit, p: 0.0 });
            }
        }
    };
    let blocks = row.chunks_exact(BLOCK);
    let rest = blocks.remainder();
    for (n, c) in blocks.enumerate() {
        if all || any_at_least(c.try_into().expect("chunks_exact"), threshold) {
            take(out, n * BLOCK, c);
        }
    }
    take(out, row.len() - rest.len(), rest);
}

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
    /// Which candidates the chain needs to see.
    shortlist: Shortlist,
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
            shortlist: Shortlist::of(p),
        }
    }

    fn fill(&mut self, logits: &[f32]) {
        fill(&mut self.cur, logits);
    }

    fn run_chain(&mut self) -> Result<()> {
        let t0 = Instant::now();
        let r = self.run_chain_inner();
        self.stats.chain += t0.elapsed();
        r
    }

    fn run_chain_inner(&mut self) -> Result<()> {
        // SAFETY: the chain is live (owned by self).
        unsafe { apply_chain(self.chain, &mut self.cur) }
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

    /// The chain's choice from the row, from the shortlist of candidates that can win where
    /// the chain allows it ([`Shortlist`]), else from the whole row.
    fn choose(&mut self, logits: &[f32]) -> Result<Token> {
        let t0 = Instant::now();
        // SAFETY: the chain is live (owned by self).
        let r = unsafe { choose_in(self.chain, &mut self.cur, self.shortlist, logits) };
        self.stats.chain += t0.elapsed();
        r
    }

    /// Samples the next token from a row of logits (n_vocab floats).
    pub fn sample(&mut self, logits: &[f32]) -> Result<Token> {
        self.check_row(logits)?;
        let id = self.choose(logits)?;
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
        let id = if self.bias.is_empty() {
            // The same choice without copying the row: the last of equal maxima, as max_by.
            argmax(logits).and_then(|i| logits.iter().rposition(|&x| x == logits[i])).map(|i| i as Token)
        } else {
            self.fill(logits);
            self.apply_bias();
            best(&self.cur)
        };
        let id = id.ok_or_else(|| Error::new(ErrorCode::Internal, "empty candidates"))?;
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

    /// How many leading tokens of `draft` the grammar admits in a row from its current state
    /// (all of them without a grammar, or where the grammar cannot tell without advancing:
    /// verification samples every token under the grammar anyway). The state is unchanged.
    pub fn grammar_valid_prefix(&mut self, draft: &[Token]) -> Result<usize> {
        let t0 = Instant::now();
        let r = match self.grammar.as_mut() {
            Some(g) => g.valid_prefix(draft),
            None => Ok(draft.len()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows like a model's: spread logits from a fixed generator (xorshift), a few near-ties.
    fn rows(n_vocab: usize, n: usize, mut seed: u64) -> Vec<Vec<f32>> {
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..n).map(|_| (0..n_vocab).map(|_| ((next() - 0.5) * 12.0).powi(3) as f32 / 30.0).collect()).collect()
    }

    fn params(temperature: f32, top_k: i32, top_p: f32, min_p: f32) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            seed: 1234,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: vec![],
        }
    }

    /// Issue 31: the shortlist draws, token for token, what the chain over the whole row draws
    /// from the same seeded generator, at T=0 and at T>0 with top-k, top-p and min-p.
    #[test]
    fn the_shortlist_draws_what_the_whole_row_draws() {
        let cases = [params(0.0, 40, 0.95, 0.05), params(0.8, 40, 0.95, 0.05), params(1.0, 40, 0.9, 0.0), params(1.5, 256, 1.0, 0.0), params(1.0, 1, 1.0, 0.0)];
        for p in cases {
            let short = Shortlist::of(&p);
            assert_ne!(short, Shortlist::Whole, "{p:?}");
            let (a, b) = (chain(5000, &p), chain(5000, &p));
            let (mut ca, mut cb) = (Vec::new(), Vec::new());
            let mut differ = 0;
            for row in rows(5000, 300, 0x9e37_79b9_7f4a_7c15) {
                // SAFETY: both chains are live until freed below.
                let (x, y) = unsafe { (choose_in(a, &mut ca, short, &row).unwrap(), choose_in(b, &mut cb, Shortlist::Whole, &row).unwrap()) };
                assert_eq!(x, y, "{p:?}");
                differ += (x != argmax(&row).unwrap() as Token) as usize;
                // SAFETY: live chains.
                unsafe {
                    sys::llama_sampler_accept(a, x);
                    sys::llama_sampler_accept(b, y);
                }
            }
            // At T>0 the draws are not all the argmax: the test compares real draws.
            assert_eq!(differ > 0, p.temperature > 0.0 && p.top_k > 1, "{p:?}: {differ}");
            // SAFETY: created above, freed once.
            unsafe {
                sys::llama_sampler_free(a);
                sys::llama_sampler_free(b);
            }
        }
    }

    #[test]
    fn adjustments_need_the_whole_row() {
        let mut p = params(0.0, 40, 0.95, 0.05);
        p.logit_bias = vec![(3, 5.0)];
        assert_eq!(Shortlist::of(&p), Shortlist::Whole);
        let mut p = params(0.8, 40, 0.95, 0.05);
        p.presence_penalty = 0.5;
        assert_eq!(Shortlist::of(&p), Shortlist::Whole);
        assert_eq!(Shortlist::of(&params(0.8, 0, 0.95, 0.05)), Shortlist::Whole);
        assert_eq!(Shortlist::of(&params(0.8, 1000, 0.95, 0.05)), Shortlist::Whole);
    }

    #[test]
    fn top_k_is_the_k_best_best_first() {
        let mut row = rows(3000, 1, 7).remove(0);
        row[10] = 99.0;
        row[2999] = 99.0; // a tie: the lower id first
        row[500] = f32::NEG_INFINITY;
        for k in [1, 2, 40, 256, 3000, 5000] {
            let mut out = Vec::new();
            top_k(&row, k, &mut out);
            let mut all: Vec<(f32, i32)> = row.iter().enumerate().map(|(i, &l)| (l, i as i32)).collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let want: Vec<i32> = all.iter().take(k.min(3000)).map(|t| t.1).collect();
            assert_eq!(out.iter().map(|t| t.id).collect::<Vec<_>>(), want, "k={k}");
        }
        assert_eq!(argmax(&row), Some(10));
    }
}
