//! One request, on its caller's thread: plan → prompt tokens → the scheduler evaluates them
//! (sharing any prefix it holds) → sample each token from this request's logits (its own sampler
//! and grammar) → stop strings, streaming deltas, progress and cancellation → parse → response.
//!
//! A request's state is one [`Generation`]: the resolved request, its plan, its response (built
//! by src/response.rs) and the reply so far. How its tokens are chosen (sampler, grammar,
//! call-syntax tracker, reasoning budget) is its [`Decoder`], built when the first logits come.

mod budget;
mod link;
mod reply;
mod state;

use crate::call_syntax::{Position, Tracker};
use crate::error::{Error, ErrorCode, Result};
use crate::prompt::Prompter;
use crate::request::ResolvedRequest;
use crate::response::{Finish, Response, Stats};
use crate::sampler::{SampleStats, Sampler};
use crate::scheduler::{Admission, Msg, Scheduler, Ticket};
use crate::session::ReplyBook;
use crate::speculate::Speculation;
use crate::tokens::{Token, Vocab};
use budget::Budget;
use link::{Link, ModelTime};
use serde_json::{json, Value};
use state::{Generation, ReplyText};
use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Emit a progress event (a cancellation point) at least this often while generating.
const PROGRESS_EVERY: usize = 16;

/// What a request runs against: the model's chat side and vocabulary, the scheduler of its
/// context, the remembered replies, and where its events go.
pub struct Run<'a> {
    pub prompter: &'a Prompter,
    pub vocab: &'a Arc<Vocab>,
    pub sched: &'a Scheduler,
    pub book: &'a ReplyBook,
    pub model_name: &'a str,
    /// The most tokens one sequence may hold (prompt and reply).
    pub max_seq: usize,
    /// The most tokens one decode takes (a step and its draft fit in it).
    pub n_batch: usize,
    pub emit: &'a dyn Fn(&Value) -> bool,
}

impl<'a> Run<'a> {
    /// Runs `req` to its completion (streamed to `emit` as it goes when the request streams).
    pub fn run(&self, req: &ResolvedRequest) -> Result<Value> {
        let t_start = Instant::now();
        // A place in the scheduler first: under a burst, a refusal costs no prompt and no token.
        let place = self.sched.reserve()?;
        let (rendered, prompt) = self.prompter.plan(req, self.book.find(&req.messages))?;
        let n_prompt = prompt.len();
        if n_prompt >= self.max_seq {
            return Err(Error::new(
                ErrorCode::ContextOverflow,
                format!(
                    "the prompt has {n_prompt} tokens and the context holds {} (n_ctx): shorten the conversation or raise n_ctx",
                    self.max_seq
                ),
            ));
        }
        let ticket = place.join(prompt.clone(), req.deterministic);
        // The prompt is with the scheduler: what only the reply needs is read while it is evaluated.
        let mut g = Generation {
            req,
            vocab: self.vocab,
            emit: self.emit,
            response: Response::new(req, self.model_name, self.emit),
            room: req.max_tokens.min(self.max_seq - n_prompt),
            plan: self.prompter.finish(rendered, req)?,
            reply: ReplyText::default(),
            script: crate::fault::take_reply(),
            sampling: SampleStats::default(),
        };
        let (admission, first) = self.prefill(&ticket)?;
        g.cache_warnings(&admission.warnings);
        crate::fault::site("infer");
        let t_prompt = t_start.elapsed();
        let t_gen = Instant::now();
        // The link owns the ticket from here: closing it gives the sequence back.
        let (finish, model) = match first {
            Some(logits) if g.response.open() => {
                let spec = self.speculation(req, &prompt)?;
                let mut link = Link::new(ticket, logits, self.vocab.n_tokens() as usize, spec, self.n_batch);
                let finish = g.generate(self.prompter, &mut link)?;
                (finish, link.close())
            }
            _ => {
                drop(ticket);
                (Finish::Cancelled, ModelTime::default())
            }
        };
        let stats = prompt_stats(n_prompt, &admission, t_prompt, t_gen.elapsed());
        let (completion, reply) = g.finish(finish, prompt, stats, model);
        if let Some(r) = reply {
            self.book.remember(r);
        }
        Ok(completion)
    }

    /// The request's speculation when it speculates and finds a free lane (src/speculate/).
    fn speculation(&self, req: &ResolvedRequest, prompt: &[Token]) -> Result<Option<Speculation<'a>>> {
        match self.sched.drafters().filter(|_| req.speculative) {
            Some(d) => Speculation::start(d, prompt),
            None => Ok(None),
        }
    }

    /// Waits until the prompt is evaluated, sending progress events. Returns how the request
    /// got its sequence (the tokens reused from the KV cache or restored from the prompt cache)
    /// and the first logits (None: cancelled by the host).
    fn prefill(&self, ticket: &Ticket) -> Result<(Admission, Option<Vec<f32>>)> {
        let mut admission = Admission::default();
        let mut admitted = false;
        loop {
            // While it waits for a place, the request says so every QUEUED_EVERY: its host can
            // cancel it there (a timeout), which frees its place at once.
            let msg = if admitted { Some(ticket.recv()) } else { ticket.recv_within(QUEUED_EVERY) };
            let Some(msg) = msg else {
                if !(self.emit)(&json!({"type": "progress", "stage": "queued"})) {
                    return Ok((admission, None));
                }
                continue;
            };
            match msg {
                Msg::Admitted(a) => {
                    admitted = true;
                    // Admitted again: a restored state failed and the prompt is read cold; the
                    // warnings of both admissions are the request's.
                    let mut warnings = std::mem::take(&mut admission.warnings);
                    admission = a;
                    warnings.append(&mut admission.warnings);
                    admission.warnings = warnings;
                }
                Msg::Progress { done, total } => {
                    let ev = json!({"type": "progress", "stage": "prompt", "prompt_tokens_done": done, "prompt_tokens": total});
                    if !(self.emit)(&ev) {
                        return Ok((admission, None));
                    }
                }
                Msg::Logits(l, _) => return Ok((admission, Some(l))),
                Msg::Failed(e) => return Err(e),
            }
        }
    }
}

/// How often a request waiting for a place in a pool sends a `queued` progress event.
const QUEUED_EVERY: Duration = Duration::from_millis(50);

/// What the prompt's evaluation measured, for the completion's `usage` and `timings`.
fn prompt_stats(n_prompt: usize, admission: &Admission, t_prompt: Duration, t_generate: Duration) -> Stats {
    Stats {
        prompt_tokens: n_prompt,
        cached_tokens: admission.cached.min(n_prompt),
        restored_tokens: admission.restored.min(n_prompt),
        t_restore: admission.restore_time,
        t_prompt,
        t_generate,
        ..Stats::default()
    }
}

/// How a request's tokens are chosen: its sampler (chain and grammar), the call-syntax
/// tracker, the reasoning budget, and whether forced text jumps forward.
struct Decoder {
    smpl: Sampler,
    syntax: Option<Tracker>,
    budget: Option<Budget>,
    jump: bool,
    end_of_turn: Option<Token>,
}

impl Generation<'_> {
    /// The decoder of this request: its sampler over the plan's grammar (advanced past a
    /// grammar prefill), deterministic call syntax (on unless the request or the config turns it
    /// off, for plans whose call format is known), its reasoning budget and jump-forward.
    fn decoder(&self, prompter: &Prompter) -> Result<Decoder> {
        let grammar = match self.plan.grammar.as_ref().filter(|g| !g.gbnf.is_empty()) {
            Some(spec) => Some(prompter.grammar(spec)?),
            None => None,
        };
        let mut smpl = Sampler::new(self.vocab.clone(), &self.req.sampling, grammar);
        if let Some(pre) = &self.plan.grammar_prefill {
            let toks = self
                .vocab
                .spell(pre)
                .ok_or_else(|| Error::new(ErrorCode::Internal, "cannot spell the generation prompt in tokens"))?;
            for t in toks {
                smpl.accept_grammar(t)?;
            }
        }
        Ok(Decoder {
            smpl,
            syntax: self.plan.call_syntax.as_ref().filter(|_| self.req.deterministic_call_syntax).map(|s| s.tracker()),
            budget: Budget::new(self.req, &self.plan, self.room),
            // A scripted reply (tests) is written token by token: forced text could run past its end.
            jump: crate::jump::enabled(self.req, &self.plan) && self.script.is_none(),
            end_of_turn: self.vocab.end_of_turn(),
        })
    }

    /// Samples until an end-of-generation token, a stop string, `max_tokens`, a full context,
    /// a second call where one is allowed, or cancellation. Each step goes to the model through
    /// `link`, which gives the row the next one is chosen from.
    fn generate(&mut self, prompter: &Prompter, link: &mut Link) -> Result<Finish> {
        let mut d = self.decoder(prompter)?;
        let mut next_progress = PROGRESS_EVERY;
        loop {
            if self.reply.tokens.len() >= self.room {
                return Ok(Finish::Length);
            }
            let (step, sampled) = match self.step(&mut d, link.row())? {
                Continue(s) => s,
                Break(finish) => return Ok(finish),
            };
            self.reply.n_forced += step.len() - sampled as usize;
            if let Some(f) = self.record_step(&step, sampled.then_some(link.row()), d.syntax.as_mut()) {
                return Ok(f);
            }
            let room = self.room - self.reply.tokens.len();
            link.tell(&step, room, |draft| d.smpl.grammar_valid_prefix(draft))?;
            if let Some(f) = self.partial() {
                return Ok(f);
            }
            if self.reply.tokens.len() >= next_progress {
                next_progress = self.reply.tokens.len() + PROGRESS_EVERY;
                let n = self.reply.tokens.len();
                if !(self.emit)(&json!({"type": "progress", "stage": "generate", "completion_tokens": n})) {
                    return Ok(Finish::Cancelled);
                }
            }
            if let Break(finish) = link.next()? {
                return Ok(finish);
            }
        }
    }

    /// The next step's tokens, and whether the first was sampled (from `logits`; the rest are
    /// forced): the end-of-thinking tag when the reasoning budget is spent; text the grammar
    /// forces at the very start, evaluated without sampling from the prompt's logits; else a
    /// sampled token and the text the grammar forces after it. Break(Stop): the sampled token
    /// ends the generation.
    fn step(&mut self, d: &mut Decoder, logits: &[f32]) -> Result<ControlFlow<Finish, (Vec<Token>, bool)>> {
        let mut step = Vec::new();
        if let Some(b) = d.budget.as_mut() {
            b.observe(&self.reply.bytes, self.reply.tokens.len());
            if b.due(&self.reply.bytes, self.reply.tokens.len()) {
                step = self.force_end_of_thinking(b, &mut d.smpl)?;
            }
        }
        if step.is_empty() && d.jump && self.reply.n_sampled == 0 {
            step = crate::jump::forced_tokens(&mut d.smpl, self.vocab, &self.plan, self.room)?;
        }
        if !step.is_empty() {
            return Ok(Continue((step, false)));
        }
        if self.script.as_ref().is_some_and(|s| s.text == self.reply.bytes && !s.end_of_turn) {
            return Ok(Break(Finish::Length));
        }
        let tok = self.next_token(d, logits)?;
        if self.vocab.is_eog(tok) {
            self.reply.n_sampled += 1;
            self.reply.eog_piece = String::from_utf8_lossy(&self.vocab.piece(tok, true)).into_owned();
            return Ok(Break(Finish::Stop));
        }
        step.push(tok);
        if d.jump {
            let limit = self.room - self.reply.tokens.len() - 1;
            step.extend(crate::jump::forced_tokens(&mut d.smpl, self.vocab, &self.plan, limit)?);
        }
        Ok(Continue((step, true)))
    }

    /// The reasoning budget ran out: the tokens of the template's end-of-thinking tag, accepted
    /// by the sampler (and its grammar), at most what the reply has room for. When the grammar
    /// refuses them the budget gives up (a warning) and generation goes on as it was.
    fn force_end_of_thinking(&mut self, b: &mut Budget, smpl: &mut Sampler) -> Result<Vec<Token>> {
        b.done();
        let toks = self.vocab.tokenize(&b.end)?;
        let mut step = Vec::new();
        for t in toks.into_iter().take(self.room - self.reply.tokens.len()) {
            if !smpl.grammar_allows(t)? {
                break;
            }
            smpl.accept(t)?;
            step.push(t);
        }
        if step.is_empty() {
            self.response.warn("reasoning_budget_not_applied", format!(
                "the reasoning budget of {} tokens ran out, and the grammar did not admit the end-of-thinking tag {:?} there", b.limit, b.end));
        }
        Ok(step)
    }

    /// The step's token from `logits`, accepted by the sampler: the end of the turn when one call
    /// is allowed and the strict grammar is complete after a call, a scripted reply's token
    /// (tests), the greedy choice inside a call's wrapper (deterministic call syntax), else the
    /// sampler's choice.
    fn next_token(&mut self, d: &mut Decoder, logits: &[f32]) -> Result<Token> {
        let plan = &self.plan;
        let end = match d.end_of_turn.filter(|_| plan.strict && plan.single_call && !self.reply.tokens.is_empty()) {
            Some(t) if d.smpl.grammar_allows(t)? && self.has_call() => Some(t),
            _ => None,
        };
        let tok = match end {
            Some(t) => t,
            None if self.script.is_some() => self.scripted_token(d)?,
            None if d.syntax.as_ref().is_some_and(|t| t.position() == Position::Wrapper) => {
                d.smpl.sample_greedy(logits)?
            }
            None => d.smpl.sample(logits)?,
        };
        let dropped = d.smpl.accept(tok)?;
        self.sampling = d.smpl.stats;
        if let Some(why) = dropped {
            self.response.warn(
                "grammar_disabled",
                format!("llama.cpp's grammar for this template failed and generation went on unconstrained: {why}"),
            );
        }
        Ok(tok)
    }

    /// Test-only ([`crate::fault::arm_reply`]): the scripted reply's next token, the longest the
    /// grammar allows that continues it; at its end, the end-of-turn token.
    fn scripted_token(&self, d: &mut Decoder) -> Result<Token> {
        let script = self.script.as_ref().map(|s| s.text.as_slice()).unwrap_or_default();
        let left = |why: &str| {
            Error::new(
                ErrorCode::Internal,
                format!("scripted reply: {why} after {:?}", String::from_utf8_lossy(&self.reply.bytes)),
            )
        };
        let rest = script.strip_prefix(self.reply.bytes.as_slice()).ok_or_else(|| left("the output left it"))?;
        let pieces = self.vocab.pieces();
        let candidates: Vec<Token> = match rest.is_empty() {
            true => self.vocab.end_of_turn().into_iter().collect(),
            false => (1..=rest.len().min(128)).rev().filter_map(|l| pieces.get(&rest[..l])).collect(),
        };
        for t in candidates {
            if d.smpl.grammar_allows(t)? {
                return Ok(t);
            }
        }
        Err(left("the grammar allows no token of it"))
    }

    /// Whether the reply so far parses with a tool call.
    fn has_call(&self) -> bool {
        self.plan
            .parser
            .parse(&String::from_utf8_lossy(&self.reply.bytes), true)
            .is_ok_and(|m| !m.tool_calls.is_empty())
    }

    /// Records a step's tokens (the first sampled from `row` when given, the rest forced) and
    /// feeds their text to the call-syntax tracker; the finish, when a token ends the reply.
    fn record_step(&mut self, step: &[Token], row: Option<&[f32]>, mut syntax: Option<&mut Tracker>) -> Option<Finish> {
        for (i, &tok) in step.iter().enumerate() {
            let before = self.reply.bytes.len();
            let finish = self.record(tok, row.filter(|_| i == 0));
            if let Some(t) = syntax.as_mut() {
                t.feed(&String::from_utf8_lossy(&self.reply.bytes[before.min(self.reply.bytes.len())..]));
            }
            if finish.is_some() {
                return finish;
            }
        }
        None
    }
}
