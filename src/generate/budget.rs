//! The reasoning budget of one reply (docs/tool-calls.md, "Reasoning budget").

use crate::prompt::Plan;
use crate::request::ResolvedRequest;
use crate::response::find;

/// The reasoning budget of one reply (llama-server's `--reasoning-budget`, as llb runs it):
/// tokens are counted from the template's start-of-thinking tag (or from the first token when
/// the prompt opened the block); when `limit` of them have been generated and the end tag has
/// not, the end tag is forced and generation goes on.
pub(crate) struct Budget {
    start: String,
    pub(super) end: String,
    pub(super) limit: usize,
    state: BudgetState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BudgetState {
    /// Waiting for the start tag (searched from this byte on).
    Idle {
        from: usize,
    },
    /// Inside the block: it opened after this many tokens, at this byte.
    Counting {
        tokens: usize,
        byte: usize,
    },
    Done,
}

impl Budget {
    /// The end tag is forced now: the budget is spent.
    pub(super) fn done(&mut self) {
        self.state = BudgetState::Done;
    }

    /// The budget that applies to this reply (docs/tool-calls.md, "Reasoning budget"): the
    /// request's `reasoning_budget`, else the config's, else the one `reasoning_effort` stands
    /// for; with `tool_choice` required or named, a budget not set explicitly is at most half of
    /// the reply's room (`max_tokens`, or what the context has left), so the call fits. None:
    /// unlimited, or a template without reasoning tags.
    pub(super) fn new(req: &ResolvedRequest, plan: &Plan, room: usize) -> Option<Budget> {
        let r = plan.reasoning.as_ref()?;
        let limit = match req.reasoning_budget {
            Some(b) => usize::try_from(b).ok()?,
            None => {
                let effort = req.effort_budget.and_then(|b| usize::try_from(b).ok());
                match (plan.forced_call, effort) {
                    (true, e) => e.unwrap_or(usize::MAX).min(room / 2),
                    (false, e) => e?,
                }
            }
        };
        let state = if r.opened { BudgetState::Counting { tokens: 0, byte: 0 } } else { BudgetState::Idle { from: 0 } };
        Some(Budget { start: r.start.clone(), end: r.end.clone(), limit, state })
    }

    /// Follows the output: the block opening, and closing by itself.
    pub(super) fn observe(&mut self, bytes: &[u8], n_tokens: usize) {
        if let BudgetState::Idle { from } = self.state {
            let at = from.saturating_sub(self.start.len());
            match find(&bytes[at.min(bytes.len())..], self.start.as_bytes()) {
                Some(p) => self.state = BudgetState::Counting { tokens: n_tokens, byte: at + p + self.start.len() },
                None => self.state = BudgetState::Idle { from: bytes.len() },
            }
        }
        if let BudgetState::Counting { byte, .. } = self.state {
            if find(&bytes[byte.min(bytes.len())..], self.end.as_bytes()).is_some() {
                self.state = BudgetState::Done;
            }
        }
    }

    /// Whether the end tag is forced now: the budget is spent, and the output does not end
    /// inside a UTF-8 character.
    pub(super) fn due(&self, bytes: &[u8], n_tokens: usize) -> bool {
        let BudgetState::Counting { tokens, .. } = self.state else { return false };
        if n_tokens - tokens < self.limit {
            return false;
        }
        // The last character's lead byte, and whether the character is complete (a few tokens
        // of grace to complete one, as llama.cpp's WAITING_UTF8 state).
        let lead = (bytes.len().saturating_sub(4)..bytes.len()).rev().find(|&i| bytes[i] & 0xC0 != 0x80);
        let inside =
            lead.is_some_and(|i| matches!(std::str::from_utf8(&bytes[i..]), Err(e) if e.error_len().is_none()));
        !inside || n_tokens - tokens >= self.limit + 4
    }
}
