//! Jump-forward decoding: text a strict grammar forces (a call's marker, its name, the keys and
//! separators between argument values) is tokenized and evaluated in one batch instead of being
//! sampled one model step at a time.
//!
//! The forced text comes from the grammar's stacks (the shim extends it while every stack expects
//! the same character). It is tokenized with the model's tokenizer. The span's last token is left
//! to the sampler when a longer token the grammar allows extends it, so the free text after the
//! span may still merge with the span's end the way the model would write it. Every forced token
//! is checked against the grammar before it is accepted: the span ends at the first token the
//! grammar would refuse, or at an end-of-generation token, and the sampler goes on from there.

use crate::error::Result;
use crate::prompt::Plan;
use crate::request::ResolvedRequest;
use crate::sampler::Sampler;
use crate::tokens::{Token, Vocab};

/// The most forced text evaluated in one jump (bytes); the rest comes in the next jump.
pub const MAX_SPAN_BYTES: usize = 512;

/// Whether a request jumps forward: its `jump_forward` switch (else the config's), under a
/// grammar that constrains from the first token (strict tool calls, `response_format`), and no
/// logprobs (forced tokens have no logits row of their own).
pub fn enabled(req: &ResolvedRequest, plan: &Plan) -> bool {
    let constrained = plan.grammar.as_ref().is_some_and(|g| !g.lazy && !g.gbnf.is_empty());
    req.jump_forward && constrained && req.logprobs.is_none()
}

/// The tokens of the text the grammar forces now, at most `limit`, already accepted by `smpl`
/// (grammar and chain). Empty when nothing worth a jump is forced.
pub fn forced_tokens(smpl: &mut Sampler, vocab: &Vocab, plan: &Plan, limit: usize) -> Result<Vec<Token>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let text = smpl.forced_text(MAX_SPAN_BYTES)?;
    let text = before_partial_special(vocab, plan, &text);
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let Some(mut toks) = spell(vocab, plan, text) else { return Ok(Vec::new()) };
    let whole = toks.len() <= limit;
    toks.truncate(limit);
    let mut accepted = Vec::with_capacity(toks.len());
    for (i, &t) in toks.iter().enumerate() {
        if vocab.is_eog(t) || !smpl.grammar_allows(t)? {
            break;
        }
        if whole && i + 1 == toks.len() && may_run_on(smpl, vocab, t)? {
            break;
        }
        let dropped = smpl.accept(t)?.is_some();
        accepted.push(t);
        if dropped {
            break; // cannot happen for an allowed token; never jump on without the grammar
        }
    }
    Ok(accepted)
}

/// Whether the span's last token `t` may be the start of a longer token that runs into the free
/// text after the span (` "` before a string value that begins `/`: ` "/`): some token whose
/// piece extends `t`'s is allowed by the grammar here. Such a token is left to the sampler, so
/// the reply is spelled the way the model would write it; a token nothing allowed extends (the
/// end of a call, before the end of the turn) is forced with the rest.
fn may_run_on(smpl: &mut Sampler, vocab: &Vocab, t: Token) -> Result<bool> {
    let piece = vocab.piece(t, true);
    let longer: Vec<_> = vocab.pieces().extensions(&piece).collect();
    smpl.grammar_allows_any(&longer)
}

/// `text` up to where its end could be the start of a preserved token (Gemma 4's `<|` before
/// `<|tool_call>` or `<|channel>`): forced as plain text, such a prefix would keep the model from
/// writing the special token whole, so the sampler goes on from there.
fn before_partial_special<'a>(vocab: &Vocab, plan: &Plan, text: &'a str) -> &'a str {
    let specials: Vec<Vec<u8>> = plan.preserved.iter().map(|&t| vocab.piece(t, true)).collect();
    let longest = specials.iter().map(Vec::len).max().unwrap_or(0);
    let b = text.as_bytes();
    let from = b.len().saturating_sub(longest.saturating_sub(1));
    let partial = |i: usize| specials.iter().any(|sp| sp.len() > b.len() - i && sp.starts_with(&b[i..]));
    match (from..b.len()).find(|&i| text.is_char_boundary(i) && partial(i)) {
        Some(i) => &text[..i],
        None => text,
    }
}

/// Tokens whose rendered pieces (as the output renders them) are exactly `text`: the
/// tokenizer's own split when it spells the text (SPM may add a leading space), else the
/// longest-match spelling over the vocabulary.
fn spell(vocab: &Vocab, plan: &Plan, text: &str) -> Option<Vec<Token>> {
    let spells = |toks: &[Token]| {
        let mut bytes = Vec::with_capacity(text.len());
        toks.iter().for_each(|&t| bytes.extend(vocab.piece(t, plan.preserved.contains(&t))));
        bytes == text.as_bytes()
    };
    let toks = vocab.tokenize(text).ok()?;
    if spells(&toks) {
        return Some(toks);
    }
    vocab.spell(text).filter(|t| spells(t))
}
