//! The hand-over to the model for one request: its ticket in the scheduler, the logits rows of
//! the last decode, its speculation when it drafts (src/speculate/), the batch cap and what the
//! decodes cost. A generation asks it for the row to choose the next token from and tells it
//! each step it took; nothing else of the generation knows that drafts exist.

use crate::error::{ErrorCode, Result};
use crate::response::Finish;
use crate::scheduler::{Msg, Ticket};
use crate::speculate::{DraftStats, Followed, Rows, Speculation};
use crate::tokens::Token;
use std::ops::ControlFlow::{self, Break, Continue};
use std::time::{Duration, Instant};

/// One request's link to the model, from its first logits to its last step.
pub(super) struct Link<'a> {
    ticket: Ticket,
    rows: Rows,
    spec: Option<Speculation<'a>>,
    /// The most tokens one decode takes (a step and its draft fit in it).
    n_batch: usize,
    /// A decode was submitted and its logits are not read yet.
    pending: bool,
    time: ModelTime,
}

/// What the model's side of a reply cost, for the response's `timings`.
#[derive(Default)]
pub(super) struct ModelTime {
    /// Time spent waiting for the model's next logits (the decode, in the scheduler).
    pub wait: Duration,
    /// Of that, the time the decode itself took (the rest is the scheduler's and the hand-over
    /// between threads).
    pub decode: Duration,
    /// Speculative decoding: tokens drafted and accepted.
    pub drafts: DraftStats,
}

impl<'a> Link<'a> {
    /// The link of a request whose prompt gave `first` (one row of `n_vocab` logits).
    pub(super) fn new(
        ticket: Ticket,
        first: Vec<f32>,
        n_vocab: usize,
        spec: Option<Speculation<'a>>,
        n_batch: usize,
    ) -> Self {
        let rows = Rows::new(first, n_vocab);
        Link { ticket, rows, spec, n_batch, pending: false, time: ModelTime::default() }
    }

    /// The logits row the next token is chosen from.
    pub(super) fn row(&self) -> &[f32] {
        self.rows.current()
    }

    /// The step the generation took (its tokens, `room` more the reply may hold after them):
    /// submitted to the model, with a draft after it when the request speculates (`valid`: how
    /// much of a draft the grammar accepts), or, when the draft being verified held it, the next
    /// row of the same decode.
    pub(super) fn tell(
        &mut self,
        step: &[Token],
        room: usize,
        valid: impl FnOnce(&[Token]) -> Result<usize>,
    ) -> Result<()> {
        let Some(spec) = self.spec.as_mut() else {
            self.ticket.submit(step, self.rows.take());
            self.pending = true;
            return Ok(());
        };
        match spec.follow(step) {
            Followed::Whole(n) => self.rows.advance(n),
            Followed::Diverged { matched, retract } => {
                let rest = &step[matched..];
                let draft = spec.draft(room.min(self.n_batch.saturating_sub(rest.len())), valid)?;
                self.ticket.submit_draft(retract, rest, &draft, self.rows.take());
                self.pending = true;
            }
        }
        Ok(())
    }

    /// Waits for the logits of the decode [`Link::tell`] submitted, when it submitted one.
    /// Break(Length): the context is full.
    pub(super) fn next(&mut self) -> Result<ControlFlow<Finish>> {
        if !std::mem::take(&mut self.pending) {
            return Ok(Continue(()));
        }
        let waiting = Instant::now();
        let next = loop {
            match self.ticket.recv() {
                Msg::Logits(l, decode) => break Ok((l, decode)),
                Msg::Failed(e) => break Err(e),
                // After a rebuild of the sequence (it was parked for KV space) progress
                // messages may come before the logits.
                Msg::Admitted(_) | Msg::Progress { .. } => {}
            }
        };
        self.time.wait += waiting.elapsed();
        match next {
            Ok((logits, decode)) => {
                self.time.decode += decode;
                self.rows = Rows::new(logits, self.rows.n_vocab());
                Ok(Continue(()))
            }
            Err(e) if e.code == ErrorCode::ContextOverflow => Ok(Break(Finish::Length)),
            Err(e) => Err(e),
        }
    }

    /// The end of the reply: the ticket goes back to the scheduler; what the model's side cost.
    pub(super) fn close(self) -> ModelTime {
        let Link { spec, mut time, .. } = self;
        time.drafts = spec.map(|s| s.stats).unwrap_or_default();
        time
    }
}
