//! Conversations: the replies an engine or pool generated, kept token for token so the next turn
//! replays them exactly (the template's re-rendering of a reply may tokenize differently, and
//! would then miss the KV cache from that reply on).

use crate::request::{Message, Role};
use crate::tokens::Token;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A reply the model generated that ended on an end-of-generation token.
#[derive(Debug, Clone)]
pub struct ReplyRecord {
    /// The prompt text of that turn and its tokens.
    pub prompt: String,
    pub prompt_tokens: Vec<Token>,
    /// The generated tokens (all of them evaluated into the KV cache), and the reply's identity.
    pub gen_tokens: Vec<Token>,
    pub tool_call_ids: Vec<String>,
    pub content: String,
    /// Text of the end-of-generation token the model stopped on.
    pub eog_piece: String,
}

impl ReplyRecord {
    /// Whether assistant message `m` of a history is this reply (its tool-call ids, or its
    /// content when it made no call).
    fn is(&self, m: &Message) -> bool {
        m.role == Role::Assistant
            && match &m.tool_calls {
                Some(calls) if !self.tool_call_ids.is_empty() => {
                    calls.iter().map(|c| c.id.as_str()).eq(self.tool_call_ids.iter().map(String::as_str))
                }
                None => {
                    self.tool_call_ids.is_empty() && m.content.as_ref().map(|c| c.text()) == Some(self.content.clone())
                }
                _ => false,
            }
    }
}

/// The most recent replies of an engine or pool (a bounded, most-recent-first list).
pub struct ReplyBook {
    records: Mutex<VecDeque<ReplyRecord>>,
    capacity: usize,
}

impl ReplyBook {
    pub fn new(capacity: usize) -> ReplyBook {
        ReplyBook { records: Mutex::new(VecDeque::new()), capacity: capacity.max(1) }
    }

    pub fn remember(&self, r: ReplyRecord) {
        let mut q = self.records.lock().unwrap_or_else(|p| p.into_inner());
        q.push_front(r);
        q.truncate(self.capacity);
    }

    /// The latest assistant message of a request's `messages` that is a remembered reply: its
    /// index in `messages` and the record.
    pub fn find(&self, messages: &[Message]) -> Option<(usize, ReplyRecord)> {
        let q = self.records.lock().unwrap_or_else(|p| p.into_inner());
        messages
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, m)| m.role == Role::Assistant)
            .find_map(|(k, m)| q.iter().find(|r| r.is(m)).map(|r| (k, r.clone())))
    }

    /// Forgets everything (after a request panicked half way).
    pub fn clear(&self) {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
