//! One request's state while it generates, in two parts: what it asked for and its response
//! ([`Generation`]), and the reply so far ([`ReplyText`]). The sampling loop (mod.rs) and the
//! reply's text (reply.rs) both work on it; it imports neither.

use crate::prompt::Plan;
use crate::request::ResolvedRequest;
use crate::response::Response;
use crate::sampler::SampleStats;
use crate::tokens::{Token, Vocab};
use serde_json::Value;
use std::sync::Arc;

/// One request's generation: what it asked for, its plan, its response, and the reply so far.
pub(super) struct Generation<'a> {
    pub(super) req: &'a ResolvedRequest,
    pub(super) plan: Plan,
    pub(super) vocab: &'a Arc<Vocab>,
    /// Where progress events go (the response sends its chunks there too).
    pub(super) emit: &'a dyn Fn(&Value) -> bool,
    pub(super) response: Response<'a>,
    /// The most tokens the reply may hold: `max_tokens`, and what the sequence has left.
    pub(super) room: usize,
    /// The reply so far.
    pub(super) reply: ReplyText,
    /// Test-only: the reply to write instead of sampling ([`crate::fault::arm_reply`]).
    pub(super) script: Option<crate::fault::Reply>,
    /// The sampler's time so far (chain and grammar).
    pub(super) sampling: SampleStats,
}

/// The reply so far: its bytes and tokens, and what was learned of it on the way.
#[derive(Default)]
pub(super) struct ReplyText {
    pub bytes: Vec<u8>,
    pub tokens: Vec<Token>,
    /// Every token of the reply (usage's completion_tokens), forced ones included.
    pub n_sampled: usize,
    /// Of those, the ones jump-forward decoding (or the reasoning budget) forced.
    pub n_forced: usize,
    /// Text of the end-of-generation token the reply ended on ("" when it did not).
    pub eog_piece: String,
    /// The visible length at the last partial parse.
    pub last_parse_len: usize,
    /// A second call was cut where one is allowed.
    pub dropped_calls: bool,
}
