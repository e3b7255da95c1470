//! The grammar layer: everything that decides which tokens may come next.
//!
//! - [`gbnf`]: GBNF text, llama.cpp's grammar language: what llb writes (literals, "text up to",
//!   trigger regexes) and a reader for what llama.cpp's chat stack writes.
//! - [`strict`]: llb's strict tool-call grammars (tool_choice required or named): llama.cpp's
//!   call section rewritten to enforce each tool's JSON Schema, and the schema checks.
//! - [`json`]: the JSON inside any grammar admits only what JSON parsers accept (surrogate
//!   escapes in pairs, JSON escapes, no control characters, exponents no double overflows on).
//! - [`raw_text`]: raw text up to a delimiter (the XML-parameter formats' string values)
//!   admits only what the parser reads back whole (never the delimiter inside).
//! - [`lark`]: GBNF → llguidance's Lark dialect (regular rules become terminals).
//! - [`engine`]: the constraint engine, llguidance's token masks over the model's vocabulary,
//!   with a bounded cache of compiled grammars per model.
//! - [`llama`]: llama.cpp's own grammar sampler, the fallback for a grammar the engine cannot
//!   take (docs/tool-calls.md, "The constraint engine"), with llb's UTF-8 guard.
//!
//! A request's grammar is a [`GrammarSpec`] (GBNF text and, for lazy grammars, its triggers);
//! [`Grammar::build`] turns it into the running constraint the sampler asks.

pub mod engine;
pub mod gbnf;
pub mod json;
pub mod lark;
pub mod llama;
pub mod raw_text;
pub mod strict;

use crate::error::{ErrorCode, Result};
use crate::sys;
use crate::tokens::Vocab;
use engine::{BuildStats, Constraint, Engine, Triggers};
pub use gbnf::GrammarSpec;
use std::sync::Arc;

/// What a request's grammar runs on.
pub enum Grammar {
    /// The constraint engine (llguidance).
    Engine(Constraint),
    /// llama.cpp's grammar sampler: a grammar the engine cannot take.
    Llama(llama::LlamaGrammar),
}

/// Whether the engine may be used (`LLB_GRAMMAR_ENGINE=gbnf` forces llama.cpp's sampler: for
/// side-by-side benchmarks and for diagnosing the engine).
fn engine_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LLB_GRAMMAR_ENGINE").map(|v| v != "gbnf").unwrap_or(true))
}

impl Grammar {
    /// The running grammar for `spec`: on the engine when it takes the grammar, else on
    /// llama.cpp's sampler (which reports a grammar that does not parse as `invalid_argument`).
    /// Every grammar passes here, so its JSON is made parsable here ([`json::parsable`]) and its
    /// raw text exact ([`raw_text::exact`]).
    pub fn build(vocab: &Arc<Vocab>, spec: &GrammarSpec, engine: Option<&Arc<Engine>>) -> Result<(Grammar, Option<BuildStats>)> {
        let spec = &GrammarSpec { gbnf: raw_text::exact(&json::parsable(&spec.gbnf)), ..spec.clone() };
        let token_id = |t: &str| vocab.single_token(t).map(|t| t as u32);
        if let Some(engine) = engine.filter(|_| engine_enabled()) {
            match engine.compile(&spec.gbnf, &token_id) {
                Ok((matcher, stats)) => {
                    let triggers = if spec.lazy {
                        Some(Triggers::new(&spec.trigger_patterns, &spec.trigger_tokens)?)
                    } else {
                        None
                    };
                    return Ok((Grammar::Engine(Constraint::new(engine.clone(), matcher, triggers)), Some(stats)));
                }
                Err(e) if e.code == ErrorCode::InvalidArgument => {
                    if crate::debug::enabled() {
                        eprintln!("[llb] grammar engine fallback to llama.cpp's sampler: {}", e.message);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let g = llama::LlamaGrammar::new(vocab.clone(), spec)?;
        Ok((Grammar::Llama(g), None))
    }

    /// Whether `token` may come next.
    pub fn allows(&mut self, token: sys::llama_token) -> Result<bool> {
        match self {
            Grammar::Engine(c) => c.allows(token),
            Grammar::Llama(g) => g.allows_any(&[token]),
        }
    }

    /// How many leading tokens of `tokens` may come next in a row, the state unchanged. The
    /// engine checks them all; llama.cpp's sampler cannot without advancing, and admits them
    /// (a caller that samples each token under the grammar refuses them there).
    pub fn valid_prefix(&mut self, tokens: &[sys::llama_token]) -> Result<usize> {
        match self {
            Grammar::Engine(c) => c.valid_prefix(tokens),
            Grammar::Llama(_) => Ok(tokens.len()),
        }
    }

    /// Whether any of `tokens` may come next.
    pub fn allows_any(&mut self, tokens: &[sys::llama_token]) -> Result<bool> {
        match self {
            Grammar::Engine(c) => match c.mask()? {
                Some(mask) => Ok(tokens.iter().any(|&t| t >= 0 && mask.is_allowed(t as u32))),
                None => Ok(!tokens.is_empty()),
            },
            Grammar::Llama(g) => g.allows_any(tokens),
        }
    }

    /// Refuses (logit -infinity) the candidates the grammar does not allow.
    pub fn constrain(&mut self, cur: &mut Vec<sys::llama_token_data>) -> Result<()> {
        match self {
            Grammar::Engine(c) => {
                if let Some(mask) = c.mask()? {
                    cur.retain(|t| t.id >= 0 && mask.is_allowed(t.id as u32));
                }
                Ok(())
            }
            Grammar::Llama(g) => g.constrain(cur),
        }
    }

    /// The allowed candidates from a full row of logits, when the grammar can list them without
    /// looking at every token (the engine's mask). None: use [`Grammar::constrain`].
    pub fn allowed_candidates(&mut self, logits: &[f32]) -> Result<Option<Vec<sys::llama_token_data>>> {
        let Grammar::Engine(c) = self else { return Ok(None) };
        let Some(mask) = c.mask()? else { return Ok(None) };
        let mut out = Vec::with_capacity(64);
        mask.iter_set_entries(|i| {
            if let Some(&logit) = logits.get(i) {
                out.push(sys::llama_token_data { id: i as i32, logit, p: 0.0 });
            }
        });
        Ok(Some(out))
    }

    /// Advances past a generated token. When the grammar fails (llama.cpp's throws on a lazy
    /// grammar whose trigger text its own root rejects), it is dropped: Some(message), and
    /// generation goes on unconstrained.
    pub fn accept(&mut self, token: sys::llama_token, piece: &[u8]) -> Result<Option<String>> {
        match self {
            Grammar::Engine(c) => Ok(c.accept(token, piece).err().map(|e| e.message)),
            Grammar::Llama(g) => g.accept(token),
        }
    }

    /// Advances past text already in the prompt (the generation prompt a grammar starts with).
    pub fn prefill(&mut self, token: sys::llama_token, piece: &[u8]) -> Result<()> {
        match self {
            Grammar::Engine(c) => c.accept(token, piece),
            Grammar::Llama(g) => g.prefill(token),
        }
    }

    /// The text the grammar forces next (at most `max` bytes; "" at a choice or while a lazy
    /// grammar waits). Ends on a character boundary.
    pub fn forced_text(&mut self, max: usize) -> Result<String> {
        match self {
            Grammar::Engine(c) => {
                let b = c.forced_bytes(max);
                let valid = match std::str::from_utf8(&b) {
                    Ok(_) => b.len(),
                    Err(e) => e.valid_up_to(),
                };
                Ok(String::from_utf8_lossy(&b[..valid]).into_owned())
            }
            Grammar::Llama(g) => g.forced_text(max),
        }
    }
}
