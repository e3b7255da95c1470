//! Speculative decoding: draft → verify → accept, in that order and one way.
//!
//! - **Draft**: after a step, llama.cpp's self-drafting n-gram drafters (common_speculative,
//!   through [`crate::shim::SpecDrafter`]) propose the tokens that followed the same tokens
//!   earlier in the conversation; the request's grammar cuts the draft at the first token its
//!   mask refuses ([`Speculation::draft`]).
//! - **Verify**: the step and its draft go to the scheduler as one entry, which returns a logits
//!   row after the step and after each drafted token ([`crate::scheduler::Ticket::submit_draft`]).
//!   The request then samples from those rows exactly as it would without a draft: same sampler,
//!   grammar, call syntax and jump-forward, one row per token ([`Rows`]).
//! - **Accept**: while each chosen step is what the draft held ([`Speculation::follow`]), its
//!   tokens are already in the sequence and the next row is there: no decode. At the first step
//!   that differs, the rest of the draft is taken back and the step is submitted with a new draft.
//!
//! Lanes that ask for a draft at once share it: each posts its ask, and whoever holds the
//! drafter next drafts for every lane that posted, in one llama.cpp call (a draft model then
//! decodes all of them in one batch per drafted position; [`Drafters::draft`]).
//!
//! How long a draft is comes from the cost model (src/cost.rs): a lane verifies only as many
//! drafted tokens as its acceptance pays for at the measured cost of their rows in the step. A
//! lane that stops paying drafts in the shadow: the drafter still proposes, nothing is verified,
//! and the reply's own next tokens say how much would have been accepted, until it pays again.
//! On a device that charges for a change of the step's shape (CUDA's captured graphs), a lane
//! verifies a fixed number of rows or none (`draft_max` in a pool; a lone lane's hold is chosen
//! by tokens per ms): a shorter proposal is followed by filler tokens (its last token again),
//! which keep the step's shape and are accepted only where the model chooses them, and the part
//! of a proposal past the hold is the lane's next draft while the reply follows it.
//!
//! Every token is still chosen from the model's own logits for the same prefix, with the same
//! random draws in the same order: the reply is token for token the reply without speculation,
//! at any temperature and seed (llama.cpp's acceptance rule, common_sampler_sample_and_accept_n).

use crate::cost::{Acceptance, Costs, DraftRows};
use crate::error::Result;
use crate::shim::SpecDrafter;
use crate::tokens::Token;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// An engine's or pool's drafter: llama.cpp's drafter for `lanes` requests at once (a request
/// takes a free lane for its generation, or goes without speculation when none is free).
pub struct Drafters {
    drafter: Mutex<SpecDrafter>,
    /// What a draft model's drafter decodes in (its context and model, made by the scheduler),
    /// kept alive after the drafter (declared after it: dropped after it).
    _context: Option<Box<dyn Send + Sync>>,
    /// Threads a draft run takes from the process's budget (0: the n-gram types, which compute
    /// nothing worth a thread).
    threads: usize,
    /// The lanes' asks not yet drafted, and the drafts made for lanes that did not run them.
    board: Mutex<Board>,
    /// Asks drafted, and the drafter's runs that drafted them (fewer runs: lanes shared them).
    asks: AtomicU64,
    runs: AtomicU64,
    free: Mutex<Vec<usize>>,
    /// Each lane's acceptance, kept from one request to the next (a lane's next request starts
    /// from what its last one showed, not from the prior).
    acceptance: Mutex<Vec<Acceptance>>,
    lanes: usize,
    /// The most tokens a draft holds, and the fewest worth verifying.
    draft_max: usize,
    draft_min: usize,
    /// The engine's or pool's costs (None: every draft is verified whole, as tests of the
    /// mechanics want).
    costs: Option<Arc<Costs>>,
}

impl Drafters {
    /// Draft lengths chosen by `costs` (src/cost.rs).
    pub fn costed(mut self, costs: Arc<Costs>) -> Drafters {
        self.costs = Some(costs);
        self
    }

    /// llama.cpp's drafter `kind` (an n-gram type, n-grams of `ngram_size` tokens) for `lanes`
    /// requests at once.
    pub fn new(kind: &str, ngram_size: u16, lanes: usize, draft_max: usize, draft_min: usize) -> Result<Drafters> {
        let lanes = lanes.max(1);
        Ok(Drafters::of(SpecDrafter::new(kind, lanes, ngram_size)?, lanes, draft_max, draft_min))
    }

    /// `draft-simple`: `drafter` drafts with a model, in `context` (made and owned by the
    /// scheduler; kept here until the drafter is gone), on `threads` threads of the budget.
    pub fn with_model(
        drafter: SpecDrafter,
        context: Box<dyn Send + Sync>,
        threads: usize,
        lanes: usize,
        draft_max: usize,
        draft_min: usize,
    ) -> Drafters {
        let mut d = Drafters::of(drafter, lanes.max(1), draft_max, draft_min);
        d._context = Some(context);
        d.threads = threads.max(1);
        d
    }

    fn of(drafter: SpecDrafter, lanes: usize, draft_max: usize, draft_min: usize) -> Drafters {
        Drafters {
            drafter: Mutex::new(drafter),
            _context: None,
            threads: 0,
            board: Mutex::new(Board { asks: (0..lanes).map(|_| None).collect(), done: (0..lanes).map(|_| None).collect() }),
            asks: AtomicU64::new(0),
            runs: AtomicU64::new(0),
            free: Mutex::new((0..lanes).rev().collect()),
            acceptance: Mutex::new(vec![Acceptance::default(); lanes]),
            lanes,
            draft_max,
            draft_min,
            costs: None,
        }
    }

    /// `lane`'s draft after its new tokens `fresh`, at most `n_max` tokens. The ask is posted
    /// first; whoever then holds the drafter drafts for every posted ask at once, so a lane
    /// that waited for the drafter may find its draft made (flat combining).
    fn draft(&self, lane: usize, fresh: Vec<Token>, n_max: usize) -> Result<Vec<Token>> {
        self.board().asks[lane] = Some(Ask { fresh, n_max });
        let mut drafter = self.drafter();
        if let Some(done) = self.board().done[lane].take() {
            return done;
        }
        let asks: Vec<(usize, Ask)> =
            self.board().asks.iter_mut().enumerate().filter_map(|(l, a)| Some((l, a.take()?))).collect();
        let mut mine = Ok(Vec::new());
        let drafts = self.run(&mut drafter, asks);
        let mut board = self.board();
        for (l, draft) in drafts {
            if l == lane {
                mine = draft;
            } else {
                board.done[l] = Some(draft);
            }
        }
        mine
    }

    /// Drafts for `asks` in one run of the drafter; each lane's draft or error.
    fn run(&self, drafter: &mut SpecDrafter, asks: Vec<(usize, Ask)>) -> Vec<(usize, Result<Vec<Token>>)> {
        let mut out = Vec::with_capacity(asks.len());
        let mut asked = Vec::with_capacity(asks.len());
        for (lane, ask) in asks {
            match drafter.ask(lane, &ask.fresh, ask.n_max) {
                Ok(()) => asked.push((lane, ask.n_max)),
                Err(e) => out.push((lane, Err(e))),
            }
        }
        if asked.is_empty() {
            return out;
        }
        self.asks.fetch_add(asked.len() as u64, Ordering::Relaxed);
        self.runs.fetch_add(1, Ordering::Relaxed);
        let ran = {
            let permit = (self.threads > 0).then(|| crate::threads::acquire(self.threads));
            drafter.run(permit.map_or(0, |p| p.n))
        };
        for (lane, n_max) in asked {
            out.push((lane, ran.clone().and_then(|()| drafter.take(lane, n_max))));
        }
        out
    }

    /// For the scheduler's stats: the drafts asked for and the runs that made them.
    pub fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "lanes": self.lanes,
            "draft_asks": self.asks.load(Ordering::Relaxed),
            "draft_runs": self.runs.load(Ordering::Relaxed),
        })
    }

    fn board(&self) -> MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn drafter(&self) -> MutexGuard<'_, SpecDrafter> {
        self.drafter.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests speculating now (at least 1): they share the step a draft rides on.
    fn busy_lanes(&self) -> usize {
        self.lanes.saturating_sub(self.free().len()).max(1)
    }

    fn free(&self) -> MutexGuard<'_, Vec<usize>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The lanes' asks for a draft not yet run, and the drafts a run made for lanes that did not
/// run it (each taken by its lane).
struct Board {
    asks: Vec<Option<Ask>>,
    done: Vec<Option<Result<Vec<Token>>>>,
}

/// A lane's ask: its tokens since its last ask, and the most tokens it wants.
struct Ask {
    fresh: Vec<Token>,
    n_max: usize,
}

/// How many tokens were drafted and, of those, accepted (`timings.draft_n`,
/// `timings.draft_accepted_n`).
#[derive(Debug, Clone, Copy, Default)]
pub struct DraftStats {
    pub drafted: usize,
    pub accepted: usize,
}

/// What a step did to the draft being verified.
#[derive(Debug, PartialEq, Eq)]
pub enum Followed {
    /// The draft held the whole step (its first `n` tokens): the step is in the sequence and the
    /// row after it is at hand.
    Whole(usize),
    /// The draft held the step's first `matched` tokens only: the draft's other `retract` tokens
    /// leave the sequence, and the step's other tokens must be decoded.
    Diverged { matched: usize, retract: usize },
}

/// One request's speculation: its lane, the conversation's tokens so far, and the draft being
/// verified.
pub struct Speculation<'a> {
    drafters: &'a Drafters,
    lane: usize,
    /// The reply's tokens the drafter has not seen yet (it keeps the conversation itself: a step
    /// hands it only what is new).
    fresh: Vec<Token>,
    /// Drafted tokens not yet reached by the reply (in the sequence, after the last step), the
    /// first `real` of them proposed by the drafter (the rest: filler).
    pending: std::collections::VecDeque<Token>,
    real: usize,
    /// Rows (drafted and filler) of the last draft submitted.
    last_rows: usize,
    /// The tokens of the current draft, and how many of them the reply took so far.
    round: usize,
    round_accepted: usize,
    /// The drafter failed (a draft model's decode, say): this request drafts no more.
    failed: bool,
    /// A proposal not verified (it did not pay): the reply's next tokens are compared with it.
    shadow: std::collections::VecDeque<Token>,
    /// The lane's latest draft had something to copy (as the costs' gauge last heard).
    copying: bool,
    /// How often this lane's drafted tokens are accepted.
    acceptance: Acceptance,
    pub stats: DraftStats,
}

impl<'a> Speculation<'a> {
    /// Speculation for a request whose prompt is `prompt`, on a free lane (None: every lane is
    /// taken, the request decodes without it).
    pub fn start(drafters: &'a Drafters, prompt: &[Token]) -> Result<Option<Speculation<'a>>> {
        let Some(lane) = drafters.free().pop() else { return Ok(None) };
        let acceptance = drafters.acceptance.lock().unwrap_or_else(|p| p.into_inner())[lane].clone();
        let spec = Speculation {
            drafters,
            lane,
            fresh: Vec::new(),
            pending: Default::default(),
            real: 0,
            last_rows: 0,
            round: 0,
            round_accepted: 0,
            failed: false,
            shadow: Default::default(),
            copying: false,
            acceptance,
            stats: DraftStats::default(),
        };
        drafters.drafter().begin(lane, prompt)?;
        Ok(Some(spec))
    }

    /// The reply's next step is `step`: how much of it the pending draft held.
    pub fn follow(&mut self, step: &[Token]) -> Followed {
        if !self.failed {
            self.fresh.extend_from_slice(step);
        }
        let matched = step.iter().zip(&self.pending).take_while(|(a, b)| a == b).count();
        self.pending.drain(..matched);
        let real = matched.min(self.real);
        self.real -= real;
        self.stats.accepted += real;
        if real > 0 {
            self.drafters.costs.iter().for_each(|c| c.accepted(real));
        }
        self.round_accepted += real;
        // The proposal's unverified tail follows its verified part: the step's tokens past the
        // draft are compared with it, and a step that left the draft ends it.
        match self.pending.is_empty() {
            true => self.follow_shadow(&step[matched..]),
            false if matched < step.len() => self.shadow.clear(),
            false => {}
        }

        if matched == step.len() && matched > 0 {
            return Followed::Whole(matched);
        }
        let retract = self.pending.len();
        self.pending.clear();
        self.real = 0;
        Followed::Diverged { matched, retract }
    }

    /// A draft to follow the reply so far, at most `room` tokens, cut where `valid` (the
    /// request's grammar: how many leading tokens it admits) stops admitting it. Empty when
    /// nothing repeats or the draft is shorter than `draft_min` (and no filler keeps the step's
    /// shape).
    pub fn draft(&mut self, room: usize, valid: impl FnOnce(&[Token]) -> Result<usize>) -> Result<Vec<Token>> {
        let d = self.drafters;
        let n_max = d.draft_max.min(room);
        let own_last = std::mem::take(&mut self.last_rows);
        let last = self.fresh.last().copied();
        let Some((mut draft, continued)) = self.proposal(n_max) else { return Ok(Vec::new()) };
        draft.truncate(valid(&draft)?);
        if draft.len() < d.draft_min.max(1) {
            if continued {
                // Too short to verify: followed in the shadow to its end, as before.
                self.shadow.extend(draft);
                return Ok(Vec::new());
            }
            draft.clear();
        }
        self.copies(!draft.is_empty());
        if !continued {
            self.round = draft.len();
        }
        let mut rows = match &d.costs {
            Some(costs) => costs.draft_rows(draft.len().min(n_max), n_max, d.busy_lanes(), own_last, &self.acceptance),
            None => DraftRows { verify: draft.len().min(n_max), pad: 0 },
        };
        if rows.pad == 0 && rows.verify < d.draft_min.max(1) {
            rows.verify = 0;
        }
        // The drafter, and the lane's acceptance, hear how much of the whole proposal was (or
        // would have been) accepted; only `verify` of it is verified, the rest followed in the
        // shadow (where lanes hold the step's shape, offered again at the next step).
        self.shadow.extend(draft.drain(rows.verify..));
        if let Some(filler) = draft.last().copied().or(last) {
            draft.extend(std::iter::repeat_n(filler, rows.pad));
        }
        // Filler alone is not a round of the lane's drafts (its acceptance says what its
        // proposals are worth); the rounds of it are counted, and end where they cost more than
        // the changed steps they spare (src/cost.rs, `held_rows`).
        self.acceptance.filler(rows.verify == 0 && rows.pad > 0);
        self.stats.drafted += rows.verify;
        self.real = rows.verify;
        self.last_rows = draft.len();
        self.acceptance.hold(draft.len());
        self.pending.extend(&draft);
        Ok(draft)
    }

    /// What the next draft is made of, and whether it continues the last proposal (None: no
    /// draft this step). Where lanes hold the step's shape, a proposal's part that was not
    /// verified, and that the reply has followed so far, is the next draft: the round goes on. A
    /// lane that held 7 rows of a copy of 16 verifies the other 9 where they pay, not one step a
    /// token, each step's shape changed. Elsewhere (a CPU, where a row costs about a step) the
    /// rest is followed in the shadow to its end, as a draft that did not pay is: offered again
    /// at every step, a pool's marginal drafts found more steps to pass on noise (bench (d),
    /// stories with repeats beside copies: 0.92-0.94x, no step saved).
    fn proposal(&mut self, n_max: usize) -> Option<(Vec<Token>, bool)> {
        let d = self.drafters;
        let can = !self.failed && n_max > 0 && n_max >= d.draft_min;
        if !self.shadow.is_empty() {
            // Following a proposal: it has something to copy.
            self.copies(true);
            let held = d.costs.as_ref().is_some_and(|c| c.holds_shapes());
            return (can && held).then(|| (self.shadow.drain(..).collect(), true));
        }
        if !can {
            self.copies(false);
            return None;
        }
        match self.propose(n_max) {
            Ok(draft) => Some((draft, false)),
            Err(e) => {
                self.give_up(&e);
                None
            }
        }
    }

    /// The reply's `step` against a proposal that was not verified: how much of it would have
    /// been accepted, for the lane's acceptance (and the drafter's, as a verified round).
    fn follow_shadow(&mut self, step: &[Token]) {
        if self.shadow.is_empty() {
            return;
        }
        let matched = step.iter().zip(&self.shadow).take_while(|(a, b)| a == b).count();
        self.shadow.drain(..matched);
        self.round_accepted += matched;
        if matched < step.len() {
            self.shadow.clear();
        }
    }

    /// Tells the drafter how much of its last draft was accepted, hands it the new tokens and
    /// asks for at most `n_max` more.
    fn propose(&mut self, n_max: usize) -> Result<Vec<Token>> {
        let d = self.drafters;
        if self.round > 0 {
            self.acceptance.record(self.round, self.round_accepted);
            d.drafter().accept(self.lane, self.round_accepted)?;
            (self.round, self.round_accepted) = (0, 0);
        }
        d.draft(self.lane, std::mem::take(&mut self.fresh), n_max)
    }

    /// A drafter that failed costs the request its drafts, never its reply: it goes on without.
    fn give_up(&mut self, e: &crate::error::Error) {
        if crate::debug::enabled() {
            eprintln!("[llb] speculative decoding: the drafter failed, this request drafts no more: {e}");
        }
        self.failed = true;
        self.fresh = Vec::new();
        self.copies(false);
    }

    /// The lane has (`now`) something to copy or not: the costs' gauge hears of a change.
    fn copies(&mut self, now: bool) {
        if now != self.copying {
            self.copying = now;
            self.drafters.costs.iter().for_each(|c| c.copying(now));
        }
    }
}

impl Drop for Speculation<'_> {
    fn drop(&mut self) {
        self.copies(false);
        self.acceptance.end_hold();
        let kept = std::mem::take(&mut self.acceptance);
        self.drafters.acceptance.lock().unwrap_or_else(|p| p.into_inner())[self.lane] = kept;
        self.drafters.free().push(self.lane);
    }
}

/// The logits rows of one decode: one after the step, one after each drafted token. The reply
/// reads them in order, one per step it takes from the draft.
pub struct Rows {
    data: Vec<f32>,
    n_vocab: usize,
    at: usize,
}

impl Rows {
    pub fn new(data: Vec<f32>, n_vocab: usize) -> Rows {
        Rows { data, n_vocab, at: 0 }
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The row the next token is chosen from.
    pub fn current(&self) -> &[f32] {
        &self.data[self.at * self.n_vocab..(self.at + 1) * self.n_vocab]
    }

    /// The draft held the last `n` tokens: the row after them.
    pub fn advance(&mut self, n: usize) {
        self.at += n;
    }

    /// The buffer, given back to the scheduler for the next decode's rows.
    pub fn take(&mut self) -> Vec<f32> {
        std::mem::take(&mut self.data)
    }
}

#[cfg(test)]
mod tests;
