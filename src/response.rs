//! The response, built here and only here: a request's streamed chunks (deltas of what the
//! parser makes of the output so far, with their tokens' logprobs) and its `chat.completion`
//! (message, tool-call ids, finish reason, usage, timings, logprobs, warnings). Generation hands
//! in what it parsed and measured; the JSON's shape is this module's.

use crate::logprobs::TokenLogprob;
use crate::request::{random_id, ResolvedRequest};
use crate::shim::{ParsedCall, ParsedMsg};
use crate::tokens::Token;
use serde_json::{json, Value};
use std::time::Duration;

fn unix_time() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Length of the longest prefix of `bytes` that is complete UTF-8: an incomplete multi-byte
/// sequence at the very end is held back (it may complete with the next token).
pub fn complete_utf8_len(bytes: &[u8]) -> usize {
    let n = bytes.len();
    for back in 1..=3.min(n) {
        let b = bytes[n - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte: look further back
        }
        let need = if b >= 0xF0 {
            4
        } else if b >= 0xE0 {
            3
        } else if b >= 0xC0 {
            2
        } else {
            1
        };
        return if need > back { n - back } else { n };
    }
    n
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How much of the output may be shown while streaming: complete UTF-8 only, and nothing that
/// could still turn out to be the start of a stop string.
pub fn visible_len(out: &[u8], stops: &[String]) -> usize {
    let mut n = complete_utf8_len(out);
    for s in stops {
        let s = s.as_bytes();
        for k in (1..s.len()).rev() {
            if n >= k && out[..n].ends_with(&s[..k]) {
                n -= k;
                break;
            }
        }
    }
    n
}

/// How a reply ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Finish {
    Stop,
    Length,
    Cancelled,
}

/// The OpenAI finish reason.
pub fn finish_reason(finish: Finish, has_calls: bool) -> &'static str {
    match finish {
        Finish::Cancelled => "cancelled",
        Finish::Length => "length",
        Finish::Stop if has_calls => "tool_calls",
        Finish::Stop => "stop",
    }
}

/// What generation measured, for the completion's `usage` and `timings`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub prompt_tokens: usize,
    /// Of the prompt's tokens, those the KV cache already held.
    pub cached_tokens: usize,
    /// Every token of the reply, forced ones included.
    pub completion_tokens: usize,
    /// Of those, the ones jump-forward decoding evaluated without sampling.
    pub forced_tokens: usize,
    /// Until the first logits (prompt evaluation).
    pub t_prompt: Duration,
    /// Of `cached_tokens`, those restored from the prompt cache; of `t_prompt`, restoring them.
    pub restored_tokens: usize,
    pub t_restore: Duration,
    /// From the first logits to the end.
    pub t_generate: Duration,
    /// Of `t_generate`: waiting for the model's next logits (the decode, in the scheduler).
    pub t_model: Duration,
    /// Of `t_model`, `llama_decode` itself.
    pub t_decode: Duration,
    /// Of `t_generate`: the sampler chain.
    pub t_sampling: Duration,
    /// Of `t_generate`: the grammar (masks, checks, accepting tokens).
    pub t_grammar: Duration,
    /// Speculative decoding: tokens drafted, and of those, the ones the model accepted.
    pub draft_tokens: usize,
    pub draft_accepted: usize,
}

/// One request's response: its identity, where its chunks go, what has been streamed, its
/// tool-call ids, its tokens' logprobs and its warnings.
pub struct Response<'a> {
    id: String,
    created: u64,
    model: &'a str,
    emit: &'a dyn Fn(&Value) -> bool,
    stream: bool,
    include_usage: bool,
    role_sent: bool,
    /// What has been streamed of each field.
    content: String,
    reasoning: String,
    /// Name and arguments sent per tool call index, for calls whose header was sent.
    call_names: Vec<String>,
    call_args: Vec<String>,
    /// Tool-call ids by call index: minted here, on first need, and nowhere else.
    ids: Vec<String>,
    /// With `logprobs`: one entry per generated token, and how many chunks carried already.
    logprobs: Option<Vec<Value>>,
    logprobs_sent: usize,
    warnings: Vec<Value>,
}

impl<'a> Response<'a> {
    /// The response to `req`, from `model`, its chunks sent to `emit`.
    pub fn new(req: &ResolvedRequest, model: &'a str, emit: &'a dyn Fn(&Value) -> bool) -> Response<'a> {
        Response {
            id: random_id("chatcmpl-", 24),
            created: unix_time(),
            model,
            emit,
            stream: req.stream,
            include_usage: req.include_usage,
            role_sent: false,
            content: String::new(),
            reasoning: String::new(),
            call_names: Vec::new(),
            call_args: Vec::new(),
            ids: Vec::new(),
            logprobs: req.logprobs.map(|_| Vec::new()),
            logprobs_sent: 0,
            warnings: Vec::new(),
        }
    }

    /// Opens a stream with its role chunk (nothing when not streaming). False: the host
    /// cancelled.
    pub fn open(&mut self) -> bool {
        if !self.stream {
            return true;
        }
        self.role_sent = true;
        self.send_chunk(json!({"role": "assistant", "content": Value::Null}), None, Value::Null)
    }

    /// Records a warning (`warnings` of the completion): `code` and what happened.
    pub fn warn(&mut self, code: &str, message: String) {
        self.warnings.push(json!({"code": code, "message": message}));
    }

    /// Records an `unparsed_remainder` warning: the output's end after its last call, which
    /// did not parse and is not in the message, as it was written (`remainder`).
    pub fn warn_remainder(&mut self, message: String, remainder: &str) {
        self.warnings.push(json!({"code": "unparsed_remainder", "message": message, "remainder": remainder}));
    }

    /// Records one generated token's logprobs (`logprobs: true` requests); `piece` gives a
    /// token's bytes.
    pub fn push_logprob(&mut self, lp: &TokenLogprob, piece: impl Fn(Token) -> Vec<u8>) {
        if let Some(all) = self.logprobs.as_mut() {
            all.push(logprob_entry(lp, piece));
        }
    }

    /// Streams what a partial parse adds to what was sent (nothing when not streaming). False:
    /// the host cancelled.
    pub fn stream_partial(&mut self, msg: &ParsedMsg) -> bool {
        !self.stream || self.stream_diffs(msg, false)
    }

    /// The ids of the first `n` tool calls (those streamed already keep theirs).
    pub fn call_ids(&mut self, n: usize) -> &[String] {
        while self.ids.len() < n {
            self.ids.push(random_id("call_", 24));
        }
        &self.ids[..n]
    }

    /// Ends the response: when streaming, the last chunks (the role chunk if the prompt was
    /// cancelled, what the final message adds, the finish reason, and the usage with
    /// `include_usage`); then the `chat.completion` object. Its message is `msg` settled against
    /// what was streamed ([`Response::settle`]), so the deltas add up to it exactly.
    pub fn complete(mut self, msg: &ParsedMsg, finish: Finish, stats: &Stats) -> Value {
        let msg = &self.settle(msg.clone());
        let finish_reason = finish_reason(finish, !msg.tool_calls.is_empty());
        let usage = json!({
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.completion_tokens,
            "total_tokens": stats.prompt_tokens + stats.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": stats.cached_tokens},
        });
        self.call_ids(msg.tool_calls.len());
        if self.stream {
            if !self.role_sent {
                // Cancelled during the prompt: the stream still opens with the role chunk.
                self.open();
            }
            self.stream_diffs(msg, true);
            let lp = self.pending_logprobs();
            self.send_chunk(json!({}), Some(finish_reason), lp);
            if self.include_usage {
                (self.emit)(&json!({"type": "chunk", "data": {
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "choices": [], "usage": usage,
                }}));
            }
        }
        let mut v = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": self.message(msg), "finish_reason": finish_reason, "logprobs": Value::Null}],
            "usage": usage,
            "timings": timings(stats),
        });
        if let Some(all) = self.logprobs.take() {
            v["choices"][0]["logprobs"] = json!({"content": all, "refusal": Value::Null});
        }
        if !self.warnings.is_empty() {
            v["warnings"] = json!(self.warnings);
        }
        v
    }

    /// `msg` made to extend what was streamed ([`settle`]); settling twice changes nothing.
    pub fn settle(&self, msg: ParsedMsg) -> ParsedMsg {
        settle(msg, &self.content, &self.reasoning, &self.call_names, &self.call_args)
    }

    /// The completion's `message`.
    fn message(&self, msg: &ParsedMsg) -> Value {
        let tool_calls: Vec<Value> = msg
            .tool_calls
            .iter()
            .zip(&self.ids)
            .map(
                |(c, id)| json!({"id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}),
            )
            .collect();
        let mut message = json!({
            "role": "assistant",
            "content": if msg.content.is_empty() && !tool_calls.is_empty() { Value::Null } else { json!(msg.content) },
        });
        if !tool_calls.is_empty() {
            message["tool_calls"] = json!(tool_calls);
        }
        if !msg.reasoning_content.is_empty() {
            message["reasoning_content"] = json!(msg.reasoning_content);
        }
        message
    }

    fn send_chunk(&self, delta: Value, finish: Option<&str>, logprobs: Value) -> bool {
        (self.emit)(&json!({"type": "chunk", "data": {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}],
        }}))
    }

    /// A chunk's `logprobs`: the entries not sent yet (null when none).
    fn pending_logprobs(&mut self) -> Value {
        let all = self.logprobs.as_deref().unwrap_or(&[]);
        if all.len() == self.logprobs_sent {
            return Value::Null;
        }
        let new = all[self.logprobs_sent..].to_vec();
        self.logprobs_sent = all.len();
        json!({"content": new, "refusal": Value::Null})
    }

    /// A delta carrying the logprobs of the tokens generated since the last chunk.
    fn send_with_logprobs(&mut self, delta: Value) -> bool {
        let lp = self.pending_logprobs();
        self.send_chunk(delta, None, lp)
    }

    /// Sends what `msg` adds to what was already sent. A field that stopped extending what was
    /// sent (a parser's change of mind on partial text) waits for text that extends it again.
    fn stream_diffs(&mut self, msg: &ParsedMsg, last: bool) -> bool {
        let mut ok = true;
        if let Some(d) = msg.reasoning_content.strip_prefix(self.reasoning.as_str()).filter(|d| !d.is_empty()) {
            ok &= self.send_with_logprobs(json!({"reasoning_content": d}));
            self.reasoning.push_str(d);
        }
        if let Some(d) = msg.content.strip_prefix(self.content.as_str()).filter(|d| !d.is_empty()) {
            ok &= self.send_with_logprobs(json!({"content": d}));
            self.content.push_str(d);
        }
        for (i, c) in msg.tool_calls.iter().enumerate() {
            // A call's name is final once its arguments started, a later call exists, or at the end.
            let settled = last || !c.arguments.is_empty() || i + 1 < msg.tool_calls.len();
            if i == self.call_args.len() {
                if c.name.is_empty() || !settled {
                    break;
                }
                let id = self.call_ids(i + 1)[i].clone();
                ok &= self.send_with_logprobs(json!({"tool_calls": [{
                    "index": i, "id": id, "type": "function", "function": {"name": c.name, "arguments": ""}}]}));
                self.call_names.push(c.name.clone());
                self.call_args.push(String::new());
            }
            if let Some(d) = c.arguments.strip_prefix(self.call_args[i].as_str()).filter(|d| !d.is_empty()) {
                ok &= self.send_with_logprobs(json!({"tool_calls": [{"index": i, "function": {"arguments": d}}]}));
                self.call_args[i].push_str(d);
            }
        }
        ok
    }
}

/// The final message `msg` made to extend what was streamed (`content`, `reasoning`, and the
/// name and arguments of each call whose header was sent), so that every streamed field is a
/// prefix of the final one and the last chunks carry exactly the rest (docs/tool-calls.md, "The
/// stream is the reply"). A final field that already extends the stream is kept as it is. Else:
/// a text field is what was streamed followed by the rest of the final text after their common
/// part (leading whitespace aside: the stream's is kept); a call keeps its streamed name, and
/// arguments that do not extend the streamed ones are the streamed ones closed into JSON
/// (src/partial_json.rs); a streamed call the final message lacks is added so. A request that
/// did not stream sent nothing, and its message is kept as it is.
pub(crate) fn settle(
    mut msg: ParsedMsg,
    content: &str,
    reasoning: &str,
    call_names: &[String],
    call_args: &[String],
) -> ParsedMsg {
    msg.content = extend(content, &msg.content);
    msg.reasoning_content = extend(reasoning, &msg.reasoning_content);
    for (i, (name, args)) in call_names.iter().zip(call_args).enumerate() {
        if i == msg.tool_calls.len() {
            msg.tool_calls.push(ParsedCall::default());
        }
        let c = &mut msg.tool_calls[i];
        if c.name != *name || !c.arguments.starts_with(args.as_str()) {
            c.name = name.clone();
            c.arguments = match args.trim() {
                "" => "{}".into(),
                _ => crate::partial_json::close(args).unwrap_or_else(|| args.clone()),
            };
        }
    }
    msg
}

/// `fin` made to start with `sent` (see [`settle`]).
fn extend(sent: &str, fin: &str) -> String {
    if fin.starts_with(sent) {
        return fin.to_string();
    }
    let (s, f) = (sent.trim_start(), fin.trim_start());
    let common =
        s.char_indices().zip(f.chars()).find(|&((_, a), b)| a != b).map_or(s.len().min(f.len()), |((i, _), _)| i);
    // `common` is a character boundary of both: they agree up to it.
    format!("{sent}{}", &f[common..])
}

/// The completion's `timings` (llama-server's names, and llb's split of `predicted_ms`).
fn timings(s: &Stats) -> Value {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let predicted_ms = ms(s.t_generate);
    let n = s.completion_tokens;
    json!({
        "prompt_n": s.prompt_tokens - s.cached_tokens,
        "prompt_ms": ms(s.t_prompt),
        // Of the cached prompt tokens, those restored from the prompt cache; of prompt_ms, the
        // restore.
        "cache_restored_n": s.restored_tokens,
        "cache_restore_ms": ms(s.t_restore),
        "predicted_n": n,
        "predicted_ms": predicted_ms,
        "predicted_per_second": if predicted_ms > 0.0 { n as f64 * 1e3 / predicted_ms } else { 0.0 },
        "predicted_forced_n": s.forced_tokens,
        // Speculative decoding: tokens drafted and, of those, accepted (llama-server's names).
        "draft_n": s.draft_tokens,
        "draft_accepted_n": s.draft_accepted,
        // Of predicted_ms: waiting for the model's logits, the sampler chain, and the grammar
        // (masks, checks, accepting); the rest is llb's own work (parsing, streaming, stops).
        "model_ms": ms(s.t_model),
        // Of model_ms: llama_decode itself (predicted_ms - decode_ms is llb's host work).
        "decode_ms": ms(s.t_decode),
        "sampling_ms": ms(s.t_sampling),
        "grammar_ms": ms(s.t_grammar),
    })
}

/// OpenAI's logprobs entry of a token; `piece` gives a token's bytes. -infinity (a banned
/// token) is reported as -9999, as OpenAI does.
fn logprob_entry(lp: &TokenLogprob, piece: impl Fn(Token) -> Vec<u8>) -> Value {
    let one = |token: Token, logprob: f32| {
        let bytes = piece(token);
        let logprob = if logprob.is_finite() { logprob } else { -9999.0 };
        json!({"token": String::from_utf8_lossy(&bytes), "logprob": logprob, "bytes": bytes})
    };
    let mut e = one(lp.token, lp.logprob);
    e["top_logprobs"] = lp.top.iter().map(|&(t, l)| one(t, l)).collect();
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{ChatRequest, EngineConfig, EngineSettings, HandleKind};
    use std::cell::RefCell;

    fn msg(content: &str, reasoning: &str, calls: &[(&str, &str)]) -> ParsedMsg {
        ParsedMsg {
            content: content.into(),
            reasoning_content: reasoning.into(),
            tool_calls: calls
                .iter()
                .map(|&(n, a)| ParsedCall { name: n.into(), arguments: a.into(), id: String::new() })
                .collect(),
        }
    }

    /// Streams `partials` (what partial parses made of the output as it grew), completes with
    /// `fin`, and returns the message the deltas add up to and the completion's message.
    fn stream_then_complete(partials: &[ParsedMsg], fin: &ParsedMsg) -> (Value, Value) {
        let config: EngineConfig = serde_json::from_value(json!({"model_path": "m"})).unwrap();
        let settings = EngineSettings::resolve(&config, HandleKind::Engine, None).unwrap();
        let req: ChatRequest =
            serde_json::from_value(json!({"messages": [{"role": "user", "content": "hi"}], "stream": true})).unwrap();
        let req = req.resolve(&settings, 100).unwrap();
        let chunks = RefCell::new(Vec::new());
        let emit = |v: &Value| {
            chunks.borrow_mut().push(v["data"].clone());
            true
        };
        let mut r = Response::new(&req, "m", &emit);
        assert!(r.open());
        for p in partials {
            assert!(r.stream_partial(p));
        }
        let done = r.complete(fin, Finish::Stop, &Stats::default());
        let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), Vec::<(String, String)>::new());
        for c in chunks.borrow().iter() {
            let d = &c["choices"][0]["delta"];
            content += d["content"].as_str().unwrap_or("");
            reasoning += d["reasoning_content"].as_str().unwrap_or("");
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let i = tc["index"].as_u64().unwrap() as usize;
                if i == calls.len() {
                    calls.push((tc["function"]["name"].as_str().unwrap().into(), String::new()));
                }
                calls[i].1 += tc["function"]["arguments"].as_str().unwrap_or("");
            }
        }
        let m = &done["choices"][0]["message"];
        let final_calls: Vec<Value> = m["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!([c["function"]["name"], c["function"]["arguments"]]))
            .collect();
        let streamed = json!({"content": content, "reasoning": reasoning, "calls": calls});
        let returned = json!({"content": m["content"].as_str().unwrap_or(""),
            "reasoning": m["reasoning_content"].as_str().unwrap_or(""), "calls": final_calls});
        (streamed, returned)
    }

    #[test]
    fn the_stream_is_the_reply_when_the_final_message_contradicts_it() {
        // The parser trimmed a leading space while streaming; the raw-text fallback kept it.
        let (s, f) = stream_then_complete(&[msg("clear Cumberland", "", &[])], &msg(" clear Cumberland road", "", &[]));
        assert_eq!(s, f);
        assert_eq!(f["content"], "clear Cumberland road");
        // The stream sent a character the final text does not have there (cut, replaced).
        let (s, f) = stream_then_complete(&[msg("ab 시키", "", &[])], &msg("ab 시\u{fffd}", "", &[]));
        assert_eq!(s, f);
        assert_eq!(f["content"], "ab 시키\u{fffd}");
        // Both at once: no text is repeated.
        let (s, f) = stream_then_complete(&[msg("clear 시키", "", &[])], &msg(" clear 시 end", "", &[]));
        assert_eq!(s, f);
        assert_eq!(f["content"], "clear 시키 end");
        // Reasoning, as content.
        let (s, f) = stream_then_complete(&[msg("", "think", &[])], &msg("done", " think", &[]));
        assert_eq!(s, f);
        assert_eq!(f["reasoning"], "think");
        assert_eq!(f["content"], "done");
        // Text after a divergence: the stream's, then the final text's after the common part.
        let (s, f) = stream_then_complete(&[msg("", "think", &[])], &msg("", "thought", &[]));
        assert_eq!(s, f);
        assert_eq!(f["reasoning"], "thinkought");
        // A streamed call the final message lacks, or whose arguments it changed: closed where
        // the stream left it, under its streamed name.
        let partial = msg("", "", &[("search_docs", r#"{"query":"do"#)]);
        let (s, f) = stream_then_complete(std::slice::from_ref(&partial), &msg("raw text", "", &[]));
        assert_eq!(s, f);
        assert_eq!(f["calls"], json!([["search_docs", r#"{"query":"do"}"#]]));
        let (s, f) = stream_then_complete(&[partial], &msg("", "", &[("other", r#"{"x":1}"#), ("b", "{}")]));
        assert_eq!(s, f);
        assert_eq!(f["calls"], json!([["search_docs", r#"{"query":"do"}"#], ["b", "{}"]]));
    }

    #[test]
    fn a_final_message_that_extends_the_stream_is_kept_as_it_is() {
        let partials = [msg("a", "", &[]), msg(" a b", "", &[]), msg("a b", "r", &[("f", r#"{"k":"#)])];
        let fin = msg("a b c", "r s", &[("f", r#"{"k":1}"#)]);
        let (s, f) = stream_then_complete(&partials, &fin);
        assert_eq!(s, f);
        assert_eq!(f, json!({"content": "a b c", "reasoning": "r s", "calls": [["f", r#"{"k":1}"#]]}));
        let kept = settle(fin.clone(), "a", "r", &["f".into()], &[r#"{"k":"#.into()]);
        assert_eq!(kept, fin);
        assert_eq!(settle(kept.clone(), "a", "r", &["f".into()], &[r#"{"k":"#.into()]), kept, "settling twice");
    }

    #[test]
    fn utf8_hold_back_keeps_incomplete_sequences_and_stop_prefixes() {
        assert_eq!(complete_utf8_len(b"ab"), 2);
        assert_eq!(complete_utf8_len("é".as_bytes()), 2);
        assert_eq!(complete_utf8_len(&"aé".as_bytes()[..2]), 1);
        assert_eq!(complete_utf8_len(&"a😀".as_bytes()[..4]), 1);
        assert_eq!(complete_utf8_len(b"a\x80\x80\x80\x80"), 5); // invalid, not incomplete: shown (replaced)
        assert_eq!(visible_len(b"hello END", &["ENDS".into()]), 6);
        assert_eq!(visible_len(b"hello EN", &["ENDS".into()]), 6);
        assert_eq!(visible_len(b"hello", &["ENDS".into()]), 5);
    }
}
