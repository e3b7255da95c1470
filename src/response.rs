//! The response: streamed deltas of what the parser makes of the output so far, and the final
//! `chat.completion` JSON.

use crate::shim::ParsedMsg;
use serde_json::{json, Value};

pub fn unix_time() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A random alphanumeric id (not cryptographic: ids only need to be unique and unguessable
/// enough not to collide across engines and processes).
pub fn random_id(prefix: &str, len: usize) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut x =
        STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ nanos ^ ((std::process::id() as u64) << 40) | 1;
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut s = String::from(prefix);
    for _ in 0..len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push(ALPHA[((x >> 11) % ALPHA.len() as u64) as usize] as char);
    }
    s
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

/// The state of a response being streamed: what has been sent for each field.
#[derive(Default)]
pub struct Emitted {
    pub role_sent: bool,
    content: String,
    reasoning: String,
    /// (id, name, arguments) per tool call index, for calls whose header was sent.
    calls: Vec<(String, String, String)>,
    /// With `logprobs`: one entry per generated token, and how many chunks carried already.
    logprobs: Option<Vec<Value>>,
    logprobs_sent: usize,
}

impl Emitted {
    /// Records one generated token's logprobs entry (`logprobs: true` requests).
    pub fn push_logprob(&mut self, entry: Value) {
        self.logprobs.get_or_insert_with(Vec::new).push(entry);
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

    /// The completion's `logprobs`: every entry (null unless the request asked for them).
    pub fn all_logprobs(&self, requested: bool) -> Value {
        if !requested {
            return Value::Null;
        }
        json!({"content": self.logprobs.clone().unwrap_or_default(), "refusal": Value::Null})
    }
}

/// OpenAI's logprobs entry of a token; `piece` gives a token's bytes. -infinity (a banned
/// token) is reported as -9999, as OpenAI does.
pub fn logprob_entry(lp: &crate::logprobs::TokenLogprob, piece: impl Fn(i32) -> Vec<u8>) -> Value {
    let one = |token: i32, logprob: f32| {
        let bytes = piece(token);
        let logprob = if logprob.is_finite() { logprob } else { -9999.0 };
        json!({"token": String::from_utf8_lossy(&bytes), "logprob": logprob, "bytes": bytes})
    };
    let mut e = one(lp.token, lp.logprob);
    e["top_logprobs"] = lp.top.iter().map(|&(t, l)| one(t, l)).collect();
    e
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Finish {
    Stop,
    Length,
    Cancelled,
}

/// One response's identity and where its chunks go.
pub struct Responder<'a> {
    pub id: String,
    pub created: u64,
    pub model: &'a str,
    pub emit: &'a dyn Fn(&Value) -> bool,
}

impl Responder<'_> {
    pub fn send_delta(&self, delta: Value, finish: Option<&str>) -> bool {
        self.send_chunk(delta, finish, Value::Null)
    }

    fn send_chunk(&self, delta: Value, finish: Option<&str>, logprobs: Value) -> bool {
        (self.emit)(&json!({"type": "chunk", "data": {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}],
        }}))
    }

    /// A delta carrying the logprobs of the tokens generated since the last chunk.
    fn send_with_logprobs(&self, em: &mut Emitted, delta: Value) -> bool {
        let lp = em.pending_logprobs();
        self.send_chunk(delta, None, lp)
    }

    /// The chunk with the finish reason (and the logprobs of any tokens not sent yet).
    pub fn send_finish(&self, em: &mut Emitted, finish: &str) -> bool {
        let lp = em.pending_logprobs();
        self.send_chunk(json!({}), Some(finish), lp)
    }

    /// Sends what `msg` adds to what was already sent. A field that stopped extending what was
    /// sent (a parser's change of mind on partial text) waits for text that extends it again.
    pub fn stream_diffs(&self, em: &mut Emitted, msg: &ParsedMsg, ids: &mut Vec<String>, last: bool) -> bool {
        let mut ok = true;
        if let Some(d) = msg.reasoning_content.strip_prefix(em.reasoning.as_str()).filter(|d| !d.is_empty()) {
            ok &= self.send_with_logprobs(em, json!({"reasoning_content": d}));
            em.reasoning.push_str(d);
        }
        if let Some(d) = msg.content.strip_prefix(em.content.as_str()).filter(|d| !d.is_empty()) {
            ok &= self.send_with_logprobs(em, json!({"content": d}));
            em.content.push_str(d);
        }
        for (i, c) in msg.tool_calls.iter().enumerate() {
            // A call's name is final once its arguments started, a later call exists, or at the end.
            let settled = last || !c.arguments.is_empty() || i + 1 < msg.tool_calls.len();
            if i == em.calls.len() {
                if c.name.is_empty() || !settled {
                    break;
                }
                if ids.len() <= i {
                    ids.push(random_id("call_", 24));
                }
                ok &= self.send_with_logprobs(
                    em,
                    json!({"tool_calls": [{
                    "index": i, "id": ids[i], "type": "function", "function": {"name": c.name, "arguments": ""}}]}),
                );
                em.calls.push((ids[i].clone(), c.name.clone(), String::new()));
            }
            if let Some(d) = c.arguments.strip_prefix(em.calls[i].2.as_str()).filter(|d| !d.is_empty()) {
                ok &= self.send_with_logprobs(em, json!({"tool_calls": [{"index": i, "function": {"arguments": d}}]}));
                em.calls[i].2.push_str(d);
            }
        }
        ok
    }

    /// The usage chunk (empty `choices`) sent with `stream_options.include_usage`.
    pub fn send_usage(&self, usage: &Value) {
        (self.emit)(&json!({"type": "chunk", "data": {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [], "usage": usage,
        }}));
    }

    /// The `chat.completion` object.
    pub fn completion(
        &self,
        msg: &ParsedMsg,
        ids: &[String],
        finish_reason: &str,
        usage: Value,
        timings: Value,
    ) -> Value {
        let tool_calls: Vec<Value> = msg
            .tool_calls
            .iter()
            .zip(ids)
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
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": Value::Null}],
            "usage": usage,
            "timings": timings,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
