//! The reply's text, as a request's tokens come: each token's bytes and logprobs, stop strings,
//! partial parses (streaming deltas, a second call cut where one is allowed), and at the end the
//! final parse, salvage of a reply that does not parse whole, and the record kept for replay.
//! It knows nothing of the model or the scheduler: tokens come in, text and a response go out.

use super::link::ModelTime;
use super::state::Generation;
use crate::error::{Error, ErrorCode, Result};
use crate::response::{find, visible_len, Finish, Stats};
use crate::session::ReplyRecord;
use crate::shim::ParsedMsg;
use crate::tokens::Token;
use serde_json::{json, Value};

impl Generation<'_> {
    /// Appends one token of the reply (sampled from `logits`, or forced when None): its text,
    /// its logprobs, and a stop string it completes (Some(Stop): the reply ends there).
    pub(super) fn record(&mut self, tok: Token, logits: Option<&[f32]>) -> Option<Finish> {
        self.reply.n_sampled += 1;
        let before = self.reply.bytes.len();
        let (vocab, preserved) = (self.vocab, &self.plan.preserved);
        self.reply.bytes.extend(vocab.piece(tok, preserved.contains(&tok)));
        self.reply.tokens.push(tok);
        // logprobs: from this step's raw logits row (requests that ask never jump forward).
        if let (Some(top), Some(logits)) = (self.req.logprobs, logits) {
            let lp = crate::logprobs::of(logits, tok, top);
            self.response.push_logprob(&lp, |t| vocab.piece(t, preserved.contains(&t)));
        }
        let stops = &self.plan.stops;
        let max_stop = stops.iter().map(String::len).max().unwrap_or(0);
        if max_stop > 0 {
            let from = before.saturating_sub(max_stop - 1);
            let hit =
                stops.iter().filter_map(|s| find(&self.reply.bytes[from..], s.as_bytes()).map(|p| from + p)).min();
            if let Some(pos) = hit {
                self.reply.bytes.truncate(pos);
                return Some(Finish::Stop);
            }
        }
        None
    }

    /// Partial parses (for streaming, and to stop at a second call when only one is allowed)
    /// run when the text grew by 1/16: linear in the output length overall.
    pub(super) fn partial(&mut self) -> Option<Finish> {
        // Parsed while generating to stream deltas, and to cut a second call where only one is
        // allowed and the grammar does not see to that itself (a parse's cost grows with the
        // number of tools: milliseconds at 128).
        let plan = &self.plan;
        if !self.req.stream && (!plan.single_call || plan.one_call_by_grammar) {
            return None;
        }
        let visible = visible_len(&self.reply.bytes, &plan.stops);
        let grow = (self.reply.last_parse_len / 16).max(1);
        if visible < self.reply.last_parse_len + grow {
            return None;
        }
        self.reply.last_parse_len = visible;
        let text = String::from_utf8_lossy(&self.reply.bytes[..visible]);
        let mut msg = plan.parser.parse(&text, true).ok()?;
        // Arguments stream only as far as they are stable: a call cut later is closed from
        // that prefix (src/partial_json.rs), so the deltas always add up to the completion.
        for c in &mut msg.tool_calls {
            let stable = crate::partial_json::stable_prefix(&c.arguments).len();
            c.arguments.truncate(stable);
        }
        if plan.single_call && msg.tool_calls.len() > 1 {
            self.reply.dropped_calls = true;
            return Some(Finish::Stop);
        }
        if !self.response.stream_partial(&msg) {
            return Some(Finish::Cancelled);
        }
        None
    }

    /// The end: the final message (everything parsed, invalid UTF-8 replaced, or the raw text),
    /// the completion (with the last chunks when streaming), and the reply to remember for
    /// replay when it ended naturally on an end-of-generation token.
    pub(super) fn finish(
        mut self,
        finish: Finish,
        prompt: Vec<Token>,
        stats: Stats,
        model: ModelTime,
    ) -> (Value, Option<ReplyRecord>) {
        if crate::debug::enabled() {
            let plan = &self.plan;
            eprintln!(
                "[llb] grammar (lazy={}):\n{}\n[llb] prompt tail: {:?}\n[llb] raw output ({} tokens): {:?}",
                plan.grammar.as_ref().is_some_and(|g| g.lazy),
                plan.grammar.as_ref().map(|g| g.gbnf.as_str()).unwrap_or("(none)"),
                &plan.prompt[plan.prompt.len().saturating_sub(200)..],
                self.reply.tokens.len(),
                String::from_utf8_lossy(&self.reply.bytes)
            );
        }
        // What the response will hold: the final message, made to extend what was streamed.
        let msg = self.final_message(finish);
        let msg = self.response.settle(msg);
        let tool_call_ids = self.response.call_ids(msg.tool_calls.len()).to_vec();
        let stats = Stats {
            completion_tokens: self.reply.n_sampled,
            forced_tokens: self.reply.n_forced,
            t_model: model.wait,
            t_decode: model.decode,
            t_sampling: self.sampling.chain,
            t_grammar: self.sampling.grammar,
            draft_tokens: model.drafts.drafted,
            draft_accepted: model.drafts.accepted,
            ..stats
        };
        let completion = self.response.complete(&msg, finish, &stats);
        let remember = !self.reply.eog_piece.is_empty() && !self.reply.dropped_calls;
        let reply = remember.then_some(ReplyRecord {
            prompt: self.plan.prompt,
            prompt_tokens: prompt,
            gen_tokens: self.reply.tokens,
            tool_call_ids,
            content: msg.content,
            eog_piece: self.reply.eog_piece,
        });
        (completion, reply)
    }

    /// Parses the whole output. A reply that does not parse, or whose parse places none of it,
    /// is salvaged ([`Generation::salvage`]): the calls and text of its longest prefix that
    /// parses, so a complete call is never lost to a remainder that does not parse.
    pub(super) fn final_message(&mut self, finish: Finish) -> ParsedMsg {
        let cut = matches!(finish, Finish::Length | Finish::Cancelled);
        // A reply cut inside a character (a multi-byte marker such as DeepSeek-V3.2's `｜`) ends
        // at the last whole character: a U+FFFD there made the partial parser place nothing.
        let mut bytes = &self.reply.bytes[..];
        if cut {
            if let Err(e) = std::str::from_utf8(bytes) {
                if e.error_len().is_none() {
                    bytes = &bytes[..e.valid_up_to()];
                }
            }
        }
        let text = String::from_utf8_lossy(bytes).into_owned();
        let msg = match self.parse_final(&text, cut) {
            Ok((m, _)) if placed_nothing(&m, &text) => self.salvage(&text, cut, None),
            Ok((m, incomplete)) => {
                self.warn_incomplete(&incomplete);
                m
            }
            Err(e) => self.salvage(&text, cut, Some(e.message)),
        };
        let mut msg = if self.plan.parse_tool_calls { msg } else { ParsedMsg { tool_calls: vec![], ..msg } };
        if self.plan.single_call && msg.tool_calls.len() > 1 {
            msg.tool_calls.truncate(1);
            self.reply.dropped_calls = true;
        }
        msg
    }

    /// The message of an output whose whole text did not parse (`why`, None: it parsed and
    /// placed nothing; `cut`: by `max_tokens` or cancellation): its lenient parse (a cut call
    /// closed), else the parse of its longest prefix, at a token boundary, that places
    /// something; a reply that was not cut needs a complete call to keep its calls. With calls, the rest is reported in an `unparsed_remainder` warning; without,
    /// it is appended to the content (never dropped). Only the last [`SALVAGE_TRIES`]
    /// boundaries are tried; when none parses, the whole text is the content.
    pub(super) fn salvage(&mut self, text: &str, cut: bool, why: Option<String>) -> ParsedMsg {
        let reason = why.clone().unwrap_or_else(|| "the template's parser placed none of it".into());
        // Read as cut (leniently, a cut call closed), as the partial parses that streamed it did:
        // the whole text first, then its prefixes. A reply that ended (a stop string) keeps its
        // calls so only when one of them is complete.
        let (ended, cut) = (!cut, true);
        let mut ends = self.token_ends(text);
        ends.push(text.len());
        let mut tries = ends.iter().rev().take(SALVAGE_TRIES);
        while let Some(&end) = tries.next() {
            let Ok((mut m, incomplete)) = self.parse_final(&text[..end], cut) else { continue };
            if placed_nothing(&m, &text[..end])
                || (ended && !m.tool_calls.is_empty() && incomplete.len() == m.tool_calls.len())
            {
                continue;
            }
            // The shortest prefix with the same message: the remainder is all the parser did not
            // place (it may pass over the start of a call it cannot finish).
            let mut end = end;
            for &shorter in tries.by_ref() {
                match self.parse_final(&text[..shorter], cut) {
                    Ok((s, _)) if s == m => end = shorter,
                    _ => break,
                }
            }
            self.warn_incomplete(&incomplete);
            let rest = &text[end..];
            if m.tool_calls.is_empty() {
                m.content.push_str(rest);
                self.response.warn("unparsed_text_kept", format!("the end of the output did not parse as this template's format ({reason}): it is appended to the content as it was written"));
            } else if !rest.is_empty() {
                let n = m.tool_calls.len();
                self.response.warn_remainder(format!("the output after its last call did not parse as this template's format ({reason}): the {n} call(s) before it are returned, and the remainder is not"), rest);
            }
            return m;
        }
        match why {
            None => self.response.warn("unparsed_text_kept", "the template's parser placed none of the output (a call cut before its name was complete, or text held back as a possible call): it is returned as content".into()),
            Some(why) => self.response.warn("tool_call_parse_failed", format!("the output did not parse as this template's format: {why}")),
        }
        ParsedMsg { content: self.as_content(text).to_string(), ..Default::default() }
    }

    /// The raw `text` as content begins where the template's parser begins content: without
    /// the leading whitespace the parser drops (it did so in every partial parse that streamed
    /// the text, and the stream is the reply: docs/tool-calls.md, "The stream is the reply").
    pub(super) fn as_content<'t>(&self, text: &'t str) -> &'t str {
        let body = text.trim_start();
        let ws = text.len() - body.len();
        let Some(first) = body.chars().next().filter(|_| ws > 0) else { return text };
        let probe = &text[..ws + first.len_utf8()];
        match self.plan.parser.parse(probe, true) {
            Ok(m) if m.content == probe[ws..] => body,
            _ => text,
        }
    }

    /// The byte offsets in `text` (the lossy text of a prefix of the reply's bytes) where the
    /// reply's tokens end, on a character boundary, in order. Token ends are counted in the raw
    /// bytes and carried over to the text, where each invalid sequence is one U+FFFD.
    pub(super) fn token_ends(&self, text: &str) -> Vec<usize> {
        let preserved = &self.plan.preserved;
        let to_text = raw_to_lossy(&self.reply.bytes);
        let mut raw = 0;
        let mut out = Vec::with_capacity(self.reply.tokens.len());
        for &t in &self.reply.tokens {
            raw += self.vocab.piece(t, preserved.contains(&t)).len();
            let Some(end) = to_text(raw) else { continue };
            if end >= text.len() {
                break;
            }
            if text.is_char_boundary(end) && end > 0 {
                out.push(end);
            }
        }
        out
    }

    /// Reports prompt-cache files found bad while the request was placed (ignored: the prompt
    /// was read), as warnings of the reply and as events.
    pub(super) fn cache_warnings(&mut self, warnings: &[String]) {
        for w in warnings {
            (self.emit)(&json!({"type": "warning", "code": "prompt_cache_ignored", "message": w}));
            self.response.warn("prompt_cache_ignored", w.clone());
        }
    }

    pub(super) fn warn_incomplete(&mut self, incomplete: &[(String, String)]) {
        for (name, closed) in incomplete {
            self.response.warn("tool_call_incomplete", format!(
                "the reply was cut inside the call to `{name}`: its arguments were closed where they stopped ({closed}); members not yet started were dropped"));
        }
    }

    /// The parse of the output `text` (`cut`: by `max_tokens` or cancellation), and the calls cut
    /// short (name, closed arguments): their arguments are closed into valid JSON, the members
    /// that had not started dropped (src/partial_json.rs). Other incomplete arguments are an
    /// error.
    pub(super) fn parse_final(&self, text: &str, cut: bool) -> Result<(ParsedMsg, Vec<(String, String)>)> {
        let partial = self.reply.dropped_calls || cut;
        let mut m = self.plan.parser.parse(text, partial)?;
        let mut incomplete = Vec::new();
        for c in &mut m.tool_calls {
            if serde_json::from_str::<Value>(&c.arguments).is_ok_and(|v| v.is_object()) {
                continue;
            }
            let closed = crate::partial_json::close(&c.arguments)
                .or_else(|| c.arguments.trim().is_empty().then(|| "{}".to_string()));
            match closed.filter(|_| cut) {
                Some(closed) if serde_json::from_str::<Value>(&closed).is_ok_and(|v| v.is_object()) => {
                    incomplete.push((c.name.clone(), closed.clone()));
                    c.arguments = closed;
                }
                _ if !partial || cut => {
                    return Err(Error::new(
                        ErrorCode::TemplateError,
                        format!("the call to `{}` has incomplete arguments {:?}", c.name, c.arguments),
                    ))
                }
                _ => {}
            }
        }
        Ok((m, incomplete))
    }
}

/// How many token boundaries [`Generation::salvage`] tries, from the end: a parse costs up to
/// milliseconds, and a reply that parses nowhere near its end is kept as text.
const SALVAGE_TRIES: usize = 64;

/// Whether a parse of the non-blank `text` placed none of it (no call, no content, no
/// reasoning): a call cut before its name was whole, or text held back as a possible call.
fn placed_nothing(m: &ParsedMsg, text: &str) -> bool {
    m.tool_calls.is_empty()
        && m.content.trim().is_empty()
        && m.reasoning_content.trim().is_empty()
        && !text.trim().is_empty()
}
/// Maps an offset in `bytes` to the same place in `String::from_utf8_lossy(bytes)`, where it is
/// one: the end of a valid character or of an invalid sequence (None inside either).
fn raw_to_lossy(bytes: &[u8]) -> impl Fn(usize) -> Option<usize> + '_ {
    // (raw start, text start, valid length, invalid length) of each chunk.
    let mut chunks = Vec::new();
    let (mut raw, mut lossy) = (0, 0);
    for c in bytes.utf8_chunks() {
        let (v, bad) = (c.valid().len(), c.invalid().len());
        chunks.push((raw, lossy, c.valid(), bad));
        raw += v + bad;
        lossy += v + if bad > 0 { '\u{FFFD}'.len_utf8() } else { 0 };
    }
    move |at| {
        if at == 0 {
            return Some(0);
        }
        let &(r, l, valid, bad) = chunks.iter().rev().find(|c| c.0 < at)?;
        match at - r {
            k if k <= valid.len() => valid.is_char_boundary(k).then_some(l + k),
            k if k == valid.len() + bad => Some(l + valid.len() + '\u{FFFD}'.len_utf8()),
            _ => None,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::raw_to_lossy;

    /// Token ends in raw bytes land on the same places of the lossy text, past invalid bytes.
    #[test]
    pub(super) fn raw_offsets_map_to_the_lossy_text() {
        let bytes = b"ab\xff\xfec\xe2\x82\xacd";
        let text = String::from_utf8_lossy(bytes);
        let map = raw_to_lossy(bytes);
        let want = [
            (0, Some(0)),
            (2, Some(2)),
            (3, Some(5)),
            (4, Some(8)),
            (5, Some(9)),
            (6, None),
            (8, Some(12)),
            (9, Some(13)),
        ];
        for (raw, lossy) in want {
            assert_eq!(map(raw), lossy, "raw {raw} in {text:?}");
        }
        assert_eq!(&text[..map(5).unwrap()], "ab\u{FFFD}\u{FFFD}c");
    }
}
