//! One request, on its caller's thread: plan → prompt tokens → the scheduler evaluates them
//! (sharing any prefix it holds) → sample each token from this request's logits (its own sampler
//! and grammar) → stop strings, streaming deltas, progress and cancellation → parse → response.
//!
//! A request's state is one [`Generation`]: the resolved request, its plan, its response (built
//! by src/response.rs) and the reply so far. How its tokens are chosen (sampler, grammar,
//! call-syntax tracker, reasoning budget) is its [`Decoder`], built when the first logits come.

use crate::call_syntax::{Position, Tracker};
use crate::error::{Error, ErrorCode, Result};
use crate::prompt::{Plan, Prompter};
use crate::request::ResolvedRequest;
use crate::response::{find, visible_len, Finish, Response, Stats};
use crate::sampler::{SampleStats, Sampler};
use crate::scheduler::{Admission, Msg, Scheduler, Ticket};
use crate::session::{ReplyBook, ReplyRecord};
use crate::shim::ParsedMsg;
use crate::speculate::{DraftStats, Drafters, Followed, Rows, Speculation};
use crate::tokens::{Token, Vocab};
use serde_json::{json, Value};
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
    /// Speculative decoding's drafter (None: the model cannot take drafted tokens back).
    pub drafters: Option<&'a Drafters>,
    pub emit: &'a dyn Fn(&Value) -> bool,
}

impl<'a> Run<'a> {
    /// Runs `req` to its completion (streamed to `emit` as it goes when the request streams).
    pub fn run(&self, req: &ResolvedRequest) -> Result<Value> {
        let t_start = Instant::now();
        // A place in the scheduler first: under a burst, a refusal costs no prompt and no token.
        let place = self.sched.reserve()?;
        let plan = self.prompter.plan(req)?;
        let prompt = self.prompter.prompt_tokens(req, &plan, self.book.find(&req.messages))?;
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
        let mut g = Generation {
            req,
            vocab: self.vocab,
            emit: self.emit,
            response: Response::new(req, self.model_name, self.emit),
            room: req.max_tokens.min(self.max_seq - n_prompt),
            plan,
            bytes: Vec::new(),
            gen_tokens: Vec::new(),
            n_sampled: 0,
            n_forced: 0,
            eog_piece: String::new(),
            last_parse_len: 0,
            dropped_calls: false,
            script: crate::fault::take_reply(),
            sampling: SampleStats::default(),
            model_wait: Duration::ZERO,
            decode_time: Duration::ZERO,
            drafts: DraftStats::default(),
        };
        let ticket = place.join(prompt.clone(), req.deterministic);
        let (admission, first) = self.prefill(&ticket)?;
        g.cache_warnings(&admission.warnings);
        crate::fault::site("infer");
        let t_prompt = t_start.elapsed();
        let t_gen = Instant::now();
        let finish = match first {
            None => Finish::Cancelled,
            Some(_) if !g.response.open() => Finish::Cancelled,
            Some(logits) => {
                let rows = Rows::new(logits, self.vocab.n_tokens() as usize);
                g.generate(self.prompter, &ticket, rows, self.speculation(req, &prompt)?, self.n_batch)?
            }
        };
        drop(ticket);
        let stats = prompt_stats(n_prompt, &admission, t_prompt, t_gen.elapsed());
        let (completion, reply) = g.finish(finish, prompt, stats);
        if let Some(r) = reply {
            self.book.remember(r);
        }
        Ok(completion)
    }

    /// The request's speculation when it speculates and finds a free lane (src/speculate/).
    fn speculation(&self, req: &ResolvedRequest, prompt: &[Token]) -> Result<Option<Speculation<'a>>> {
        match self.drafters.filter(|_| req.speculative) {
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

/// One request's generation: what it asked for, its plan, its response, and the reply so far.
struct Generation<'a> {
    req: &'a ResolvedRequest,
    plan: Plan,
    vocab: &'a Arc<Vocab>,
    /// Where progress events go (the response sends its chunks there too).
    emit: &'a dyn Fn(&Value) -> bool,
    response: Response<'a>,
    /// The most tokens the reply may hold: `max_tokens`, and what the sequence has left.
    room: usize,
    /// The reply's bytes and tokens.
    bytes: Vec<u8>,
    gen_tokens: Vec<Token>,
    /// Every token of the reply (usage's completion_tokens), forced ones included.
    n_sampled: usize,
    /// Of those, the ones jump-forward decoding (or the reasoning budget) forced.
    n_forced: usize,
    /// Text of the end-of-generation token the reply ended on ("" when it did not).
    eog_piece: String,
    /// The visible length at the last partial parse.
    last_parse_len: usize,
    /// A second call was cut where one is allowed.
    dropped_calls: bool,
    /// Test-only: the reply to write instead of sampling ([`crate::fault::arm_reply`]).
    script: Option<crate::fault::Reply>,
    /// The sampler's time so far (chain and grammar).
    sampling: SampleStats,
    /// Time spent waiting for the model's next logits (the decode, in the scheduler).
    model_wait: Duration,
    /// Of that, the time `llama_decode` itself took (the rest is the scheduler's and the
    /// hand-over between threads).
    decode_time: Duration,
    /// Speculative decoding: tokens drafted and accepted.
    drafts: DraftStats,
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
    /// a second call where one is allowed, or cancellation. With speculation (`spec`), a step
    /// the draft held takes the next row of the same decode instead of a decode of its own.
    fn generate(&mut self, prompter: &Prompter, ticket: &Ticket, mut rows: Rows, mut spec: Option<Speculation>, n_batch: usize) -> Result<Finish> {
        let mut d = self.decoder(prompter)?;
        let mut next_progress = PROGRESS_EVERY;
        let finish = loop {
            if self.gen_tokens.len() >= self.room {
                break Finish::Length;
            }
            let (step, sampled) = match self.step(&mut d, rows.current())? {
                Continue(s) => s,
                Break(finish) => break finish,
            };
            self.n_forced += step.len() - sampled as usize;
            let row = sampled.then_some(rows.current());
            if let Some(f) = self.record_step(&step, row, d.syntax.as_mut()) {
                break f;
            }
            let decode = self.hand_over(&mut d, ticket, &step, &mut rows, spec.as_mut(), n_batch)?;
            if let Some(f) = self.partial() {
                break f;
            }
            if self.gen_tokens.len() >= next_progress {
                next_progress = self.gen_tokens.len() + PROGRESS_EVERY;
                let n = self.gen_tokens.len();
                if !(self.emit)(&json!({"type": "progress", "stage": "generate", "completion_tokens": n})) {
                    break Finish::Cancelled;
                }
            }
            if decode {
                rows = match self.next_logits(ticket)? {
                    Continue(l) => Rows::new(l, rows.n_vocab()),
                    Break(finish) => break finish,
                };
            }
        };
        self.drafts = spec.map(|s| s.stats).unwrap_or_default();
        Ok(finish)
    }

    /// Hands the step to the model: submits it (with a draft after it when the request
    /// speculates), or, when the draft being verified held it, moves to the row after it.
    /// Whether a decode is coming.
    fn hand_over(&mut self, d: &mut Decoder, ticket: &Ticket, step: &[Token], rows: &mut Rows, spec: Option<&mut Speculation>, n_batch: usize) -> Result<bool> {
        let Some(spec) = spec else {
            ticket.submit(step, rows.take());
            return Ok(true);
        };
        match spec.follow(step) {
            Followed::Whole(n) => {
                rows.advance(n);
                Ok(false)
            }
            Followed::Diverged { matched, retract } => {
                let rest = &step[matched..];
                let room = (self.room - self.gen_tokens.len()).min(n_batch.saturating_sub(rest.len()));
                let draft = spec.draft(room, |draft| d.smpl.grammar_valid_prefix(draft))?;
                ticket.submit_draft(retract, rest, &draft, rows.take());
                Ok(true)
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
            b.observe(&self.bytes, self.gen_tokens.len());
            if b.due(&self.bytes, self.gen_tokens.len()) {
                step = self.force_end_of_thinking(b, &mut d.smpl)?;
            }
        }
        if step.is_empty() && d.jump && self.n_sampled == 0 {
            step = crate::jump::forced_tokens(&mut d.smpl, self.vocab, &self.plan, self.room)?;
        }
        if !step.is_empty() {
            return Ok(Continue((step, false)));
        }
        if self.script.as_ref().is_some_and(|s| s.text == self.bytes && !s.end_of_turn) {
            return Ok(Break(Finish::Length));
        }
        let tok = self.next_token(d, logits)?;
        if self.vocab.is_eog(tok) {
            self.n_sampled += 1;
            self.eog_piece = String::from_utf8_lossy(&self.vocab.piece(tok, true)).into_owned();
            return Ok(Break(Finish::Stop));
        }
        step.push(tok);
        if d.jump {
            let limit = self.room - self.gen_tokens.len() - 1;
            step.extend(crate::jump::forced_tokens(&mut d.smpl, self.vocab, &self.plan, limit)?);
        }
        Ok(Continue((step, true)))
    }

    /// The logits after the step just submitted (the wait is the model's time). Break(Length):
    /// the context is full.
    fn next_logits(&mut self, ticket: &Ticket) -> Result<ControlFlow<Finish, Vec<f32>>> {
        let waiting = Instant::now();
        let next = ticket.recv();
        self.model_wait += waiting.elapsed();
        Ok(match next {
            Msg::Logits(l, decode) => {
                self.decode_time += decode;
                Continue(l)
            }
            Msg::Failed(e) if e.code == ErrorCode::ContextOverflow => Break(Finish::Length),
            Msg::Failed(e) => return Err(e),
            Msg::Admitted(_) | Msg::Progress { .. } => {
                let (l, decode) = continue_recv(ticket)?;
                self.decode_time += decode;
                Continue(l)
            }
        })
    }

    /// The reasoning budget ran out: the tokens of the template's end-of-thinking tag, accepted
    /// by the sampler (and its grammar), at most what the reply has room for. When the grammar
    /// refuses them the budget gives up (a warning) and generation goes on as it was.
    fn force_end_of_thinking(&mut self, b: &mut Budget, smpl: &mut Sampler) -> Result<Vec<Token>> {
        b.state = BudgetState::Done;
        let toks = self.vocab.tokenize(&b.end)?;
        let mut step = Vec::new();
        for t in toks.into_iter().take(self.room - self.gen_tokens.len()) {
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
        let end = match d.end_of_turn.filter(|_| plan.strict && plan.single_call && !self.gen_tokens.is_empty()) {
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
        let left = |why: &str| Error::new(ErrorCode::Internal, format!("scripted reply: {why} after {:?}", String::from_utf8_lossy(&self.bytes)));
        let rest = script.strip_prefix(self.bytes.as_slice()).ok_or_else(|| left("the output left it"))?;
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
        self.plan.parser.parse(&String::from_utf8_lossy(&self.bytes), true).is_ok_and(|m| !m.tool_calls.is_empty())
    }

    /// Records a step's tokens (the first sampled from `row` when given, the rest forced) and
    /// feeds their text to the call-syntax tracker; the finish, when a token ends the reply.
    fn record_step(&mut self, step: &[Token], row: Option<&[f32]>, mut syntax: Option<&mut Tracker>) -> Option<Finish> {
        for (i, &tok) in step.iter().enumerate() {
            let before = self.bytes.len();
            let finish = self.record(tok, row.filter(|_| i == 0));
            if let Some(t) = syntax.as_mut() {
                t.feed(&String::from_utf8_lossy(&self.bytes[before.min(self.bytes.len())..]));
            }
            if finish.is_some() {
                return finish;
            }
        }
        None
    }

    /// Appends one token of the reply (sampled from `logits`, or forced when None): its text,
    /// its logprobs, and a stop string it completes (Some(Stop): the reply ends there).
    fn record(&mut self, tok: Token, logits: Option<&[f32]>) -> Option<Finish> {
        self.n_sampled += 1;
        let before = self.bytes.len();
        let (vocab, preserved) = (self.vocab, &self.plan.preserved);
        self.bytes.extend(vocab.piece(tok, preserved.contains(&tok)));
        self.gen_tokens.push(tok);
        // logprobs: from this step's raw logits row (requests that ask never jump forward).
        if let (Some(top), Some(logits)) = (self.req.logprobs, logits) {
            let lp = crate::logprobs::of(logits, tok, top);
            self.response.push_logprob(&lp, |t| vocab.piece(t, preserved.contains(&t)));
        }
        let stops = &self.plan.stops;
        let max_stop = stops.iter().map(String::len).max().unwrap_or(0);
        if max_stop > 0 {
            let from = before.saturating_sub(max_stop - 1);
            let hit = stops.iter().filter_map(|s| find(&self.bytes[from..], s.as_bytes()).map(|p| from + p)).min();
            if let Some(pos) = hit {
                self.bytes.truncate(pos);
                return Some(Finish::Stop);
            }
        }
        None
    }

    /// Partial parses (for streaming, and to stop at a second call when only one is allowed)
    /// run when the text grew by 1/16: linear in the output length overall.
    fn partial(&mut self) -> Option<Finish> {
        // Parsed while generating to stream deltas, and to cut a second call where only one is
        // allowed and the grammar does not see to that itself (a parse's cost grows with the
        // number of tools: milliseconds at 128).
        let plan = &self.plan;
        if !self.req.stream && (!plan.single_call || plan.one_call_by_grammar) {
            return None;
        }
        let visible = visible_len(&self.bytes, &plan.stops);
        let grow = (self.last_parse_len / 16).max(1);
        if visible < self.last_parse_len + grow {
            return None;
        }
        self.last_parse_len = visible;
        let text = String::from_utf8_lossy(&self.bytes[..visible]);
        let mut msg = plan.parser.parse(&text, true).ok()?;
        // Arguments stream only as far as they are stable: a call cut later is closed from
        // that prefix (src/partial_json.rs), so the deltas always add up to the completion.
        for c in &mut msg.tool_calls {
            let stable = crate::partial_json::stable_prefix(&c.arguments).len();
            c.arguments.truncate(stable);
        }
        if plan.single_call && msg.tool_calls.len() > 1 {
            self.dropped_calls = true;
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
    fn finish(mut self, finish: Finish, prompt: Vec<Token>, stats: Stats) -> (Value, Option<ReplyRecord>) {
        if crate::debug::enabled() {
            let plan = &self.plan;
            eprintln!(
                "[llb] grammar (lazy={}):\n{}\n[llb] prompt tail: {:?}\n[llb] raw output ({} tokens): {:?}",
                plan.grammar.as_ref().is_some_and(|g| g.lazy),
                plan.grammar.as_ref().map(|g| g.gbnf.as_str()).unwrap_or("(none)"),
                &plan.prompt[plan.prompt.len().saturating_sub(200)..],
                self.gen_tokens.len(),
                String::from_utf8_lossy(&self.bytes)
            );
        }
        // What the response will hold: the final message, made to extend what was streamed.
        let msg = self.final_message(finish);
        let msg = self.response.settle(msg);
        let tool_call_ids = self.response.call_ids(msg.tool_calls.len()).to_vec();
        let stats = Stats {
            completion_tokens: self.n_sampled,
            forced_tokens: self.n_forced,
            t_model: self.model_wait,
            t_decode: self.decode_time,
            t_sampling: self.sampling.chain,
            t_grammar: self.sampling.grammar,
            draft_tokens: self.drafts.drafted,
            draft_accepted: self.drafts.accepted,
            ..stats
        };
        let completion = self.response.complete(&msg, finish, &stats);
        let remember = !self.eog_piece.is_empty() && !self.dropped_calls;
        let reply = remember.then_some(ReplyRecord {
            prompt: self.plan.prompt,
            prompt_tokens: prompt,
            gen_tokens: self.gen_tokens,
            tool_call_ids,
            content: msg.content,
            eog_piece: self.eog_piece,
        });
        (completion, reply)
    }

    /// Parses the whole output. A reply that does not parse, or whose parse places none of it,
    /// is salvaged ([`Generation::salvage`]): the calls and text of its longest prefix that
    /// parses, so a complete call is never lost to a remainder that does not parse.
    fn final_message(&mut self, finish: Finish) -> ParsedMsg {
        let cut = matches!(finish, Finish::Length | Finish::Cancelled);
        // A reply cut inside a character (a multi-byte marker such as DeepSeek-V3.2's `｜`) ends
        // at the last whole character: a U+FFFD there made the partial parser place nothing.
        let mut bytes = &self.bytes[..];
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
            self.dropped_calls = true;
        }
        msg
    }

    /// The message of an output whose whole text did not parse (`why`, None: it parsed and
    /// placed nothing; `cut`: by `max_tokens` or cancellation): its lenient parse (a cut call
    /// closed), else the parse of its longest prefix, at a token boundary, that places
    /// something; a reply that was not cut needs a complete call to keep its calls. With calls, the rest is reported in an `unparsed_remainder` warning; without,
    /// it is appended to the content (never dropped). Only the last [`SALVAGE_TRIES`]
    /// boundaries are tried; when none parses, the whole text is the content.
    fn salvage(&mut self, text: &str, cut: bool, why: Option<String>) -> ParsedMsg {
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
            if placed_nothing(&m, &text[..end]) || (ended && !m.tool_calls.is_empty() && incomplete.len() == m.tool_calls.len()) {
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
    fn as_content<'t>(&self, text: &'t str) -> &'t str {
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
    fn token_ends(&self, text: &str) -> Vec<usize> {
        let preserved = &self.plan.preserved;
        let to_text = raw_to_lossy(&self.bytes);
        let mut raw = 0;
        let mut out = Vec::with_capacity(self.gen_tokens.len());
        for &t in &self.gen_tokens {
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
    fn cache_warnings(&mut self, warnings: &[String]) {
        for w in warnings {
            (self.emit)(&json!({"type": "warning", "code": "prompt_cache_ignored", "message": w}));
            self.response.warn("prompt_cache_ignored", w.clone());
        }
    }

    fn warn_incomplete(&mut self, incomplete: &[(String, String)]) {
        for (name, closed) in incomplete {
            self.response.warn("tool_call_incomplete", format!(
                "the reply was cut inside the call to `{name}`: its arguments were closed where they stopped ({closed}); members not yet started were dropped"));
        }
    }

    /// The parse of the output `text` (`cut`: by `max_tokens` or cancellation), and the calls cut
    /// short (name, closed arguments): their arguments are closed into valid JSON, the members
    /// that had not started dropped (src/partial_json.rs). Other incomplete arguments are an
    /// error.
    fn parse_final(&self, text: &str, cut: bool) -> Result<(ParsedMsg, Vec<(String, String)>)> {
        let partial = self.dropped_calls || cut;
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

/// The reasoning budget of one reply (llama-server's `--reasoning-budget`, as llb runs it):
/// tokens are counted from the template's start-of-thinking tag (or from the first token when
/// the prompt opened the block); when `limit` of them have been generated and the end tag has
/// not, the end tag is forced and generation goes on.
pub(crate) struct Budget {
    start: String,
    end: String,
    limit: usize,
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
    /// The budget that applies to this reply (docs/tool-calls.md, "Reasoning budget"): the
    /// request's `reasoning_budget`, else the config's, else the one `reasoning_effort` stands
    /// for; with `tool_choice` required or named, a budget not set explicitly is at most half of
    /// the reply's room (`max_tokens`, or what the context has left), so the call fits. None:
    /// unlimited, or a template without reasoning tags.
    fn new(req: &ResolvedRequest, plan: &Plan, room: usize) -> Option<Budget> {
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
    fn observe(&mut self, bytes: &[u8], n_tokens: usize) {
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
    fn due(&self, bytes: &[u8], n_tokens: usize) -> bool {
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

/// After a rebuild of the sequence (it was parked for KV space) progress messages may come
/// before the logits: skip them.
fn continue_recv(ticket: &Ticket) -> Result<(Vec<f32>, Duration)> {
    loop {
        match ticket.recv() {
            Msg::Logits(l, decode) => return Ok((l, decode)),
            Msg::Failed(e) => return Err(e),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::raw_to_lossy;

    /// Token ends in raw bytes land on the same places of the lossy text, past invalid bytes.
    #[test]
    fn raw_offsets_map_to_the_lossy_text() {
        let bytes = b"ab\xff\xfec\xe2\x82\xacd";
        let text = String::from_utf8_lossy(bytes);
        let map = raw_to_lossy(bytes);
        let want = [(0, Some(0)), (2, Some(2)), (3, Some(5)), (4, Some(8)), (5, Some(9)), (6, None), (8, Some(12)), (9, Some(13))];
        for (raw, lossy) in want {
            assert_eq!(map(raw), lossy, "raw {raw} in {text:?}");
        }
        assert_eq!(&text[..map(5).unwrap()], "ab\u{FFFD}\u{FFFD}c");
    }
}
