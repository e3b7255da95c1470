//! One request, on its caller's thread: plan → prompt tokens → the scheduler evaluates them
//! (sharing any prefix it holds) → sample each token from this request's logits (its own sampler
//! and grammar) → stop strings, streaming deltas, progress and cancellation → parse → response.

use crate::call_syntax::{Position, Tracker};
use crate::error::{Error, ErrorCode, Result};
use crate::prompt::{debug_enabled, Plan, Prompter};
use crate::request::ChatRequest;
use crate::response::{self, find, visible_len, Emitted, Finish, Responder};
use crate::sampler::{Sampler, SamplingParams};
use crate::scheduler::{Msg, Scheduler, Ticket};
use crate::session::{ReplyBook, ReplyRecord};
use crate::shim::ParsedMsg;
use crate::sys;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Emit a progress event (a cancellation point) at least this often while generating.
const PROGRESS_EVERY: usize = 16;

/// What a request runs against: the model's chat side, the scheduler of its context, the
/// remembered replies, and where its events go.
pub struct Run<'a> {
    pub prompter: &'a Prompter,
    pub sched: &'a Scheduler,
    pub book: &'a ReplyBook,
    pub model_name: &'a str,
    pub default_seed: Option<u64>,
    /// The config's default for greedy call wrappers (src/call_syntax.rs).
    pub deterministic_call_syntax: bool,
    /// The config's default for jump-forward decoding (src/jump.rs).
    pub jump_forward: bool,
    /// The most tokens one sequence may hold (prompt and reply).
    pub max_seq: usize,
    pub emit: &'a dyn Fn(&Value) -> bool,
}

/// The state of the output while generating.
#[derive(Default)]
struct Output {
    bytes: Vec<u8>,
    gen_tokens: Vec<sys::llama_token>,
    /// Every token of the reply (usage's completion_tokens), forced ones included.
    n_sampled: usize,
    /// Of those, the ones jump-forward decoding evaluated without sampling.
    n_forced: usize,
    eog_piece: String,
    emitted: Emitted,
    ids: Vec<String>,
    last_parse_len: usize,
    dropped_calls: bool,
    warnings: Vec<Value>,
    /// The sampler's time so far (chain and grammar).
    sampling: crate::sampler::SampleStats,
    /// Time spent waiting for the model's next logits (the decode, in the scheduler).
    model_wait: Duration,
}

impl Run<'_> {
    pub fn run(&self, req: &ChatRequest) -> Result<Value> {
        let t_start = Instant::now();
        let plan = self.prompter.plan(req)?;
        // SAFETY: the vocab lives as long as the model. (Checked before any event is sent.)
        let n_vocab = unsafe { sys::llama_vocab_n_tokens(self.prompter.vocab()) };
        crate::sampler::check_logit_bias(&req.logit_bias()?, n_vocab)?;
        let prompt = self.prompter.prompt_tokens(req, &plan, self.book.find(req))?;
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
        let resp = Responder {
            id: response::random_id("chatcmpl-", 24),
            created: response::unix_time(),
            model: self.model_name,
            emit: self.emit,
        };
        let ticket = self.sched.join(prompt.clone())?;
        let (n_keep, first) = self.prefill(&ticket, n_prompt)?;
        crate::fault::site("infer");
        let t_prompt = t_start.elapsed();
        let t_gen = Instant::now();
        let mut out = Output::default();
        let stream = req.stream.unwrap_or(false);
        let mut finish = if first.is_some() { Finish::Length } else { Finish::Cancelled };
        if stream && first.is_some() {
            out.emitted.role_sent = true;
            if !resp.send_delta(json!({"role": "assistant", "content": Value::Null}), None) {
                finish = Finish::Cancelled;
            }
        }
        if let (Some(logits), Finish::Length) = (first, finish) {
            finish = self.generate(req, &plan, &ticket, logits, &resp, &mut out, n_prompt)?;
        }
        drop(ticket);
        let timings = (t_prompt, t_gen.elapsed(), n_prompt - n_keep);
        self.finish(req, &plan, &prompt, &resp, out, finish, n_keep, timings)
    }

    /// Waits until the prompt is evaluated, sending progress events. Returns the tokens reused
    /// from the KV cache and the first logits (None: cancelled by the host).
    fn prefill(&self, ticket: &Ticket, n_prompt: usize) -> Result<(usize, Option<Vec<f32>>)> {
        let mut cached = 0;
        loop {
            match ticket.recv() {
                Msg::Admitted { cached: c } => cached = c,
                Msg::Progress { done, total } => {
                    let ev = json!({"type": "progress", "stage": "prompt", "prompt_tokens_done": done, "prompt_tokens": total});
                    if !(self.emit)(&ev) {
                        return Ok((cached, None));
                    }
                }
                Msg::Logits(l) => return Ok((cached.min(n_prompt), Some(l))),
                Msg::Failed(e) => return Err(e),
            }
        }
    }

    fn sampler(&self, req: &ChatRequest, plan: &Plan) -> Result<Sampler> {
        let sp = SamplingParams {
            temperature: req.temperature.unwrap_or(0.8),
            top_k: req.top_k.unwrap_or(40),
            top_p: req.top_p.unwrap_or(0.95),
            min_p: req.min_p.unwrap_or(0.05),
            seed: req.seed.or(self.default_seed).map(|s| s as u32).unwrap_or_else(random_seed),
            frequency_penalty: req.frequency_penalty.unwrap_or(0.0),
            presence_penalty: req.presence_penalty.unwrap_or(0.0),
            logit_bias: req.logit_bias()?,
        };
        let grammar = match plan.grammar.as_ref().filter(|g| !g.gbnf.is_empty()) {
            Some(spec) => Some(self.prompter.grammar(spec)?),
            None => None,
        };
        // SAFETY: the vocab lives as long as the model, which outlives the sampler.
        let mut smpl = unsafe { Sampler::new(self.prompter.vocab(), &sp, grammar) }?;
        if let Some(pre) = &plan.grammar_prefill {
            let toks = self
                .prompter
                .exact_tokens(pre)
                .ok_or_else(|| Error::new(ErrorCode::Internal, "cannot spell the generation prompt in tokens"))?;
            for t in toks {
                smpl.accept_grammar(t)?;
            }
        }
        Ok(smpl)
    }

    /// Samples until an end-of-generation token, a stop string, `max_tokens`, a full context,
    /// a second call where one is allowed, or cancellation.
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        req: &ChatRequest,
        plan: &Plan,
        ticket: &Ticket,
        mut logits: Vec<f32>,
        resp: &Responder,
        out: &mut Output,
        n_prompt: usize,
    ) -> Result<Finish> {
        let mut smpl = self.sampler(req, plan)?;
        let max_new = req.max_completion_tokens.or(req.max_tokens).map(|m| m as usize).unwrap_or(usize::MAX);
        // The most tokens this reply may hold.
        let room = max_new.min(self.max_seq.saturating_sub(n_prompt));
        let vocab = self.prompter.vocab();
        let end_of_turn = end_of_turn(vocab);
        let stream = req.stream.unwrap_or(false);
        let mut syntax = self.call_syntax_tracker(req, plan);
        let jump = crate::jump::enabled(req, plan, self.jump_forward);
        let mut next_progress = PROGRESS_EVERY;
        let mut budget = Budget::new(plan, room);
        loop {
            if out.gen_tokens.len() >= room {
                return Ok(Finish::Length);
            }
            // Text the grammar forces at the very start is evaluated without sampling from the
            // prompt's logits; later spans ride along with the sampled token before them.
            let mut step = Vec::new();
            let mut sampled = false;
            if let Some(b) = budget.as_mut() {
                b.observe(&out.bytes, out.gen_tokens.len());
                if b.due(&out.bytes, out.gen_tokens.len()) {
                    step = self.force_end_of_thinking(b, &mut smpl, room - out.gen_tokens.len(), out)?;
                }
            }
            if step.is_empty() && jump && out.n_sampled == 0 {
                step = crate::jump::forced_tokens(&mut smpl, self.prompter, plan, room)?;
            }
            if step.is_empty() {
                let tok = self.next_token(plan, &mut smpl, syntax.as_ref(), &logits, out, end_of_turn)?;
                // SAFETY: vocab is valid.
                if unsafe { sys::llama_vocab_is_eog(vocab, tok) } {
                    out.n_sampled += 1;
                    out.eog_piece = String::from_utf8_lossy(&self.prompter.piece(tok, true)).into_owned();
                    return Ok(Finish::Stop);
                }
                step.push(tok);
                sampled = true;
                if jump {
                    let limit = room - out.gen_tokens.len() - 1;
                    step.extend(crate::jump::forced_tokens(&mut smpl, self.prompter, plan, limit)?);
                }
            }
            out.n_forced += step.len() - sampled as usize;
            let row = sampled.then_some(&logits[..]);
            if let Some(f) = self.record_step(req, plan, out, &step, row, syntax.as_mut()) {
                return Ok(f);
            }
            ticket.submit(&step);
            if let Some(f) = self.partial(plan, resp, out, stream) {
                return Ok(f);
            }
            if out.gen_tokens.len() >= next_progress {
                next_progress = out.gen_tokens.len() + PROGRESS_EVERY;
                if !(self.emit)(
                    &json!({"type": "progress", "stage": "generate", "completion_tokens": out.gen_tokens.len()}),
                ) {
                    return Ok(Finish::Cancelled);
                }
            }
            let waiting = Instant::now();
            let next = ticket.recv();
            out.model_wait += waiting.elapsed();
            logits = match next {
                Msg::Logits(l) => l,
                Msg::Failed(e) if e.code == ErrorCode::ContextOverflow => return Ok(Finish::Length),
                Msg::Failed(e) => return Err(e),
                Msg::Admitted { .. } | Msg::Progress { .. } => continue_recv(ticket)?,
            };
        }
    }

    /// The reasoning budget ran out: the tokens of the template's end-of-thinking tag, accepted
    /// by the sampler (and its grammar), at most `limit`. When the grammar refuses them the
    /// budget gives up (a warning) and generation goes on as it was.
    fn force_end_of_thinking(
        &self,
        b: &mut Budget,
        smpl: &mut Sampler,
        limit: usize,
        out: &mut Output,
    ) -> Result<Vec<sys::llama_token>> {
        b.state = BudgetState::Done;
        let toks = self.prompter.tokenize(&b.end)?;
        let mut step = Vec::new();
        for t in toks.into_iter().take(limit) {
            if !smpl.grammar_allows(t)? {
                break;
            }
            smpl.accept(t)?;
            step.push(t);
        }
        if step.is_empty() {
            out.warnings.push(json!({"code": "reasoning_budget_not_applied", "message": format!(
                "the reasoning budget of {} tokens ran out, and the grammar did not admit the end-of-thinking tag {:?} there", b.limit, b.end)}));
        }
        out.n_forced += step.len();
        Ok(step)
    }

    /// The step's token from `logits`, accepted by the sampler: the end of the turn when one call
    /// is allowed and the strict grammar is complete after a call, the greedy choice inside a
    /// call's wrapper (deterministic call syntax), else the sampler's choice.
    fn next_token(
        &self,
        plan: &Plan,
        smpl: &mut Sampler,
        syntax: Option<&Tracker>,
        logits: &[f32],
        out: &mut Output,
        end_of_turn: sys::llama_token,
    ) -> Result<sys::llama_token> {
        let force_end = plan.strict
            && plan.single_call
            && end_of_turn >= 0
            && !out.gen_tokens.is_empty()
            && smpl.grammar_allows(end_of_turn)?
            && plan.parser.parse(&String::from_utf8_lossy(&out.bytes), true).is_ok_and(|m| !m.tool_calls.is_empty());
        let tok = if force_end {
            end_of_turn
        } else if syntax.is_some_and(|t| t.position() == Position::Wrapper) {
            smpl.sample_greedy(logits)?
        } else {
            smpl.sample(logits)?
        };
        let dropped = smpl.accept(tok)?;
        out.sampling = smpl.stats;
        if let Some(why) = dropped {
            out.warnings.push(json!({"code": "grammar_disabled", "message": format!("llama.cpp's grammar for this template failed and generation went on unconstrained: {why}")}));
        }
        Ok(tok)
    }

    /// Records a step's tokens (the first sampled from `row` when given, the rest forced) and
    /// feeds their text to the call-syntax tracker; the finish, when a token ends the reply.
    fn record_step(
        &self,
        req: &ChatRequest,
        plan: &Plan,
        out: &mut Output,
        step: &[sys::llama_token],
        row: Option<&[f32]>,
        mut syntax: Option<&mut Tracker>,
    ) -> Option<Finish> {
        for (i, &tok) in step.iter().enumerate() {
            let before = out.bytes.len();
            let finish = self.record(req, plan, out, tok, row.filter(|_| i == 0));
            if let Some(t) = syntax.as_mut() {
                t.feed(&String::from_utf8_lossy(&out.bytes[before.min(out.bytes.len())..]));
            }
            if finish.is_some() {
                return finish;
            }
        }
        None
    }

    /// Deterministic call syntax: on unless the request or the config turns it off, for plans
    /// whose call format is known.
    fn call_syntax_tracker(&self, req: &ChatRequest, plan: &Plan) -> Option<Tracker> {
        let on = req.deterministic_call_syntax.unwrap_or(self.deterministic_call_syntax);
        plan.call_syntax.as_ref().filter(|_| on).map(|s| s.tracker())
    }

    /// Appends one token of the reply (sampled from `logits`, or forced when None): its text,
    /// its logprobs, and a stop string it completes (Some(Stop): the reply ends there).
    fn record(
        &self,
        req: &ChatRequest,
        plan: &Plan,
        out: &mut Output,
        tok: sys::llama_token,
        logits: Option<&[f32]>,
    ) -> Option<Finish> {
        out.n_sampled += 1;
        let before = out.bytes.len();
        out.bytes.extend(self.prompter.piece(tok, plan.preserved.contains(&tok)));
        out.gen_tokens.push(tok);
        // logprobs: from this step's raw logits row (requests that ask never jump forward).
        if let (Some(top), Some(logits)) = (req.logprobs_top(), logits) {
            let lp = crate::logprobs::of(logits, tok, top);
            let piece = |t| self.prompter.piece(t, plan.preserved.contains(&t));
            out.emitted.push_logprob(response::logprob_entry(&lp, piece));
        }
        let max_stop = plan.stops.iter().map(String::len).max().unwrap_or(0);
        if max_stop > 0 {
            let from = before.saturating_sub(max_stop - 1);
            let hit = plan.stops.iter().filter_map(|s| find(&out.bytes[from..], s.as_bytes()).map(|p| from + p)).min();
            if let Some(pos) = hit {
                out.bytes.truncate(pos);
                return Some(Finish::Stop);
            }
        }
        None
    }

    /// Partial parses (for streaming, and to stop at a second call when only one is allowed)
    /// run when the text grew by 1/16: linear in the output length overall.
    fn partial(&self, plan: &Plan, resp: &Responder, out: &mut Output, stream: bool) -> Option<Finish> {
        // Parsed while generating to stream deltas, and to cut a second call where only one is
        // allowed and the grammar does not see to that itself (a parse's cost grows with the
        // number of tools: milliseconds at 128).
        if !stream && (!plan.single_call || plan.one_call_by_grammar) {
            return None;
        }
        let visible = visible_len(&out.bytes, &plan.stops);
        let grow = (out.last_parse_len / 16).max(1);
        if visible < out.last_parse_len + grow {
            return None;
        }
        out.last_parse_len = visible;
        let text = String::from_utf8_lossy(&out.bytes[..visible]);
        let mut msg = plan.parser.parse(&text, true).ok()?;
        // Arguments stream only as far as they are stable: a call cut later is closed from
        // that prefix (src/partial_json.rs), so the deltas always add up to the completion.
        for c in &mut msg.tool_calls {
            let stable = crate::partial_json::stable_prefix(&c.arguments).len();
            c.arguments.truncate(stable);
        }
        if plan.single_call && msg.tool_calls.len() > 1 {
            out.dropped_calls = true;
            return Some(Finish::Stop);
        }
        if stream && !resp.stream_diffs(&mut out.emitted, &msg, &mut out.ids, false) {
            return Some(Finish::Cancelled);
        }
        None
    }

    /// The final message (everything parsed, invalid UTF-8 replaced, or the raw text), the last
    /// chunks when streaming, the reply remembered for replay, and the completion.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        req: &ChatRequest,
        plan: &Plan,
        prompt: &[sys::llama_token],
        resp: &Responder,
        mut out: Output,
        finish: Finish,
        n_keep: usize,
        (t_prompt, t_generate, n_evaluated): (Duration, Duration, usize),
    ) -> Result<Value> {
        if debug_enabled() {
            eprintln!(
                "[llb] grammar (lazy={}):\n{}\n[llb] prompt tail: {:?}\n[llb] raw output ({} tokens): {:?}",
                plan.grammar.as_ref().is_some_and(|g| g.lazy),
                plan.grammar.as_ref().map(|g| g.gbnf.as_str()).unwrap_or("(none)"),
                &plan.prompt[plan.prompt.len().saturating_sub(200)..],
                out.gen_tokens.len(),
                String::from_utf8_lossy(&out.bytes)
            );
        }
        let msg = final_message(plan, &mut out, finish);
        let finish_reason = response::finish_reason(finish, !msg.tool_calls.is_empty());
        let n_prompt = prompt.len();
        let usage = json!({
            "prompt_tokens": n_prompt,
            "completion_tokens": out.n_sampled,
            "total_tokens": n_prompt + out.n_sampled,
            "prompt_tokens_details": {"cached_tokens": n_keep},
        });
        if req.stream.unwrap_or(false) {
            if !out.emitted.role_sent {
                // Cancelled during the prompt: the stream still opens with the role chunk.
                resp.send_delta(json!({"role": "assistant", "content": Value::Null}), None);
                out.emitted.role_sent = true;
            }
            resp.stream_diffs(&mut out.emitted, &msg, &mut out.ids, true);
            resp.send_finish(&mut out.emitted, finish_reason);
            if req.stream_options.is_some_and(|o| o.include_usage) {
                resp.send_usage(&usage);
            }
        }
        // Remember the reply for replay when it ended naturally on an end-of-generation token.
        if !out.eog_piece.is_empty() && !out.dropped_calls {
            self.book.remember(ReplyRecord {
                prompt: plan.prompt.clone(),
                prompt_tokens: prompt.to_vec(),
                gen_tokens: out.gen_tokens.clone(),
                tool_call_ids: out.ids[..msg.tool_calls.len()].to_vec(),
                content: msg.content.clone(),
                eog_piece: out.eog_piece.clone(),
            });
        }
        let prompt_ms = t_prompt.as_secs_f64() * 1e3;
        let predicted_ms = t_generate.as_secs_f64() * 1e3;
        let n = out.n_sampled;
        let timings = json!({
            "prompt_n": n_evaluated,
            "prompt_ms": prompt_ms,
            "predicted_n": n,
            "predicted_ms": predicted_ms,
            "predicted_per_second": if predicted_ms > 0.0 { n as f64 * 1e3 / predicted_ms } else { 0.0 },
            "predicted_forced_n": out.n_forced,
            // Of predicted_ms: waiting for the model's logits, the sampler chain, and the grammar
            // (masks, checks, accepting); the rest is llb's own work (parsing, streaming, stops).
            "model_ms": out.model_wait.as_secs_f64() * 1e3,
            "sampling_ms": out.sampling.chain.as_secs_f64() * 1e3,
            "grammar_ms": out.sampling.grammar.as_secs_f64() * 1e3,
        });
        let mut v = resp.completion(&msg, &out.ids, finish_reason, usage, timings);
        v["choices"][0]["logprobs"] = out.emitted.all_logprobs(req.logprobs_top().is_some());
        if !out.warnings.is_empty() {
            v["warnings"] = json!(out.warnings);
        }
        Ok(v)
    }
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
    Idle { from: usize },
    /// Inside the block: it opened after this many tokens, at this byte.
    Counting { tokens: usize, byte: usize },
    Done,
}

impl Budget {
    /// The budget that applies to this reply (docs/tool-calls.md, "Reasoning budget"): the
    /// request's `reasoning_budget`, else the config's, else the one `reasoning_effort` stands
    /// for; with `tool_choice` required or named, a budget not set explicitly is at most half of
    /// the reply's room (`max_tokens`, or what the context has left), so the call fits. None:
    /// unlimited, or a template without reasoning tags.
    fn new(plan: &Plan, room: usize) -> Option<Budget> {
        let r = plan.reasoning.as_ref()?;
        let limit = match plan.budget_explicit {
            Some(b) => usize::try_from(b).ok()?,
            None => {
                let effort = plan.budget_effort.and_then(|b| usize::try_from(b).ok());
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
        let inside = lead.is_some_and(|i| matches!(std::str::from_utf8(&bytes[i..]), Err(e) if e.error_len().is_none()));
        !inside || n_tokens - tokens >= self.limit + 4
    }
}

/// After a rebuild of the sequence (it was parked for KV space) progress messages may come
/// before the logits: skip them.
fn continue_recv(ticket: &Ticket) -> Result<Vec<f32>> {
    loop {
        match ticket.recv() {
            Msg::Logits(l) => return Ok(l),
            Msg::Failed(e) => return Err(e),
            _ => {}
        }
    }
}

/// Parses the whole output; a reply that does not parse, or a call whose arguments are not a
/// JSON object (llama.cpp's lenient parser returns such calls from replies cut short), comes
/// back as raw content with a `tool_call_parse_failed` warning.
fn final_message(plan: &Plan, out: &mut Output, finish: Finish) -> ParsedMsg {
    let cut = matches!(finish, Finish::Length | Finish::Cancelled);
    // A reply cut inside a character (a multi-byte marker such as DeepSeek-V3.2's `｜`) ends
    // at the last whole character: a U+FFFD there made the partial parser place nothing.
    let mut bytes = &out.bytes[..];
    if cut {
        if let Err(e) = std::str::from_utf8(bytes) {
            if e.error_len().is_none() {
                bytes = &bytes[..e.valid_up_to()];
            }
        }
    }
    let text = String::from_utf8_lossy(bytes).into_owned();
    let partial = out.dropped_calls || cut;
    let parsed = plan.parser.parse(&text, partial).and_then(|mut m| {
        for c in &mut m.tool_calls {
            if serde_json::from_str::<Value>(&c.arguments).is_ok_and(|v| v.is_object()) {
                continue;
            }
            // A call cut by `max_tokens` (or cancelled): its arguments closed into valid JSON,
            // the members that had not started dropped (src/partial_json.rs), and a warning.
            let closed = crate::partial_json::close(&c.arguments)
                .or_else(|| c.arguments.trim().is_empty().then(|| "{}".to_string()));
            match closed.filter(|_| cut) {
                Some(closed) if serde_json::from_str::<Value>(&closed).is_ok_and(|v| v.is_object()) => {
                    out.warnings.push(json!({"code": "tool_call_incomplete", "message": format!(
                        "the reply was cut inside the call to `{}`: its arguments were closed where they stopped ({closed}); members not yet started were dropped", c.name)}));
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
        Ok(m)
    });
    let msg = match parsed {
        // The parser placed none of a non-blank output (a call cut before its name was whole,
        // or text it holds back as a possible call): the text is kept as content, never dropped.
        Ok(m) if m.tool_calls.is_empty()
            && m.content.trim().is_empty()
            && m.reasoning_content.trim().is_empty()
            && !text.trim().is_empty() =>
        {
            out.warnings.push(json!({"code": "unparsed_text_kept", "message": "the template's parser placed none of the output (a call cut before its name was complete, or text held back as a possible call): it is returned as content"}));
            ParsedMsg { content: text, ..Default::default() }
        }
        Ok(m) => m,
        Err(e) => {
            out.warnings.push(json!({"code": "tool_call_parse_failed", "message": format!("the output did not parse as this template's format: {}", e.message)}));
            ParsedMsg { content: text, ..Default::default() }
        }
    };
    let mut msg = if plan.parse_tool_calls { msg } else { ParsedMsg { tool_calls: vec![], ..msg } };
    if plan.single_call && msg.tool_calls.len() > 1 {
        msg.tool_calls.truncate(1);
        out.dropped_calls = true;
    }
    while out.ids.len() < msg.tool_calls.len() {
        out.ids.push(response::random_id("call_", 24));
    }
    msg
}

/// The model's end-of-turn token: what ends a reply once its one allowed call is complete.
fn end_of_turn(vocab: *const sys::llama_vocab) -> sys::llama_token {
    // SAFETY: vocab is valid.
    unsafe {
        let eot = sys::llama_vocab_eot(vocab);
        if eot >= 0 {
            eot
        } else {
            sys::llama_vocab_eos(vocab)
        }
    }
}

fn random_seed() -> u32 {
    let s = response::random_id("", 8);
    s.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
}
