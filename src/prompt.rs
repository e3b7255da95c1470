//! The prompt: llama.cpp's chat templates turn a resolved request into the prompt text, the
//! grammar (llb's strict one for `required` and named choices, written by
//! [`crate::grammar::strict`]), the parser and the stop strings; and the prompt's tokens,
//! replaying a remembered reply of the model token for token.

use crate::call_syntax::CallSyntax;
use crate::error::{Error, ErrorCode, Result};
use crate::grammar::strict::{self, Lead};
use crate::grammar::{gbnf, GrammarSpec};
use crate::request::{self, Choice, ResolvedRequest, Role};
use crate::session::ReplyRecord;
use crate::shim::{ChatParams, Parser, Probe, Templates};
use crate::tokens::{Token, Vocab};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;

/// Everything derived from the request and the templates, decided once: the rendering, the
/// reasoning block, the grammar (strict or the template's) and the splice of a remembered reply
/// ([`Prompter::plan`], before the prompt goes to the scheduler), then what the reply is read
/// with, the parser and the call syntax ([`Prompter::finish`], from the same rendering).
pub struct Plan {
    pub prompt: String,
    pub parser: Parser,
    pub grammar: Option<GrammarSpec>,
    /// Tokens fed to a non-lazy grammar that starts with the generation prompt.
    pub grammar_prefill: Option<String>,
    pub stops: Vec<String>,
    pub preserved: HashSet<Token>,
    pub parse_tool_calls: bool,
    /// `parallel_tool_calls` is false (or unsupported): at most one call. llama.cpp's grammars
    /// do not always enforce it, so generation stops when a second call begins.
    pub single_call: bool,
    /// The grammar is llb's strict tool-call grammar (required or named choice).
    pub strict: bool,
    /// The grammar itself admits one call only (llb's strict grammar with `single_call`, where
    /// the template's section is a bare repetition of calls): no need to parse the output
    /// while generating to catch a second call.
    pub one_call_by_grammar: bool,
    /// How this template writes calls, for deterministic call syntax (None: no tool calls, or
    /// a grammar whose call format llb does not recognise).
    pub call_syntax: Option<CallSyntax>,
    /// The template's reasoning block, when it has tags (for the reasoning budget).
    pub reasoning: Option<Reasoning>,
    /// `tool_choice` is `required` or a named tool.
    pub forced_call: bool,
}

/// A template's reasoning block: its tags, and whether the prompt already opened it.
#[derive(Debug, Clone)]
pub struct Reasoning {
    pub start: String,
    pub end: String,
    pub opened: bool,
}

/// Whether the prompt ends inside an open reasoning block: the generation prompt ends with the
/// start tag, or the prompt's last start tag sits in its final bytes with no end tag after it
/// (Apriel's template opens the block with text of its own after the tag).
fn reasoning_opened(p: &ChatParams) -> bool {
    let (start, end) = (p.thinking_start_tag.as_str(), p.thinking_end_tag.as_str());
    if start.is_empty() || end.is_empty() {
        return false;
    }
    let tail_opened = p.prompt.rfind(start).is_some_and(|i| p.prompt.len() - i <= 128 && !p.prompt[i..].contains(end));
    p.generation_prompt.trim_end().ends_with(start) || tail_opened
}

/// A request's prompt as rendered once, with the chat params, grammar and grammar prefill that
/// constrain its reply: what its tokens need ([`Prompter::plan`]). [`Prompter::finish`] reads
/// the rest of its [`Plan`] from it (parser, stop strings, call syntax, preserved tokens) while
/// the scheduler evaluates the prompt; nothing is rendered again.
pub struct Rendered {
    prompt: String,
    params: ChatParams,
    thinking: Thinking,
    grammar: Option<GrammarSpec>,
    prefill: Option<String>,
    /// llb's strict grammar for the template's call section (not the template's own), and
    /// whether it admits one call only.
    strict: Option<bool>,
    /// The template's tool mode the prompt was rendered with (see [`Rendering`]).
    mode: &'static str,
}

/// What a request is rendered with: the template's tool mode and the tools as the template
/// sees them (every tool, for a named choice too: a stable KV prefix). Decided once; a splice
/// renders the history with the same.
struct Rendering {
    mode: &'static str,
    tools: Option<Value>,
}

impl Rendering {
    fn of(req: &ResolvedRequest) -> Rendering {
        let tools = (!req.tools.is_empty()).then(|| serde_json::to_value(&req.tools).unwrap_or(Value::Null));
        let mode = match (&tools, &req.choice) {
            (None, _) | (_, Choice::None) => "none",
            (_, Choice::Auto) => "auto",
            _ => "required",
        };
        Rendering { mode, tools }
    }
}

/// What a rendered prompt says about the reply's reasoning, read once from its chat params.
struct Thinking {
    /// The template's tags and whether the prompt opened the block (None: no tags).
    tags: Option<Reasoning>,
    /// Thinking is on for the request and the template supports it.
    optional: bool,
    /// The reply may open with (or is inside) a reasoning block: thinking on, or the prompt
    /// already holds the start tag.
    may_reason: bool,
    /// Thinking is off for the request.
    off: bool,
}

impl Thinking {
    fn read(p: &ChatParams, on: bool) -> Thinking {
        let (start, end) = (p.thinking_start_tag.as_str(), p.thinking_end_tag.as_str());
        let tagged = !start.is_empty() && !end.is_empty();
        let optional = on && p.supports_thinking;
        Thinking {
            tags: tagged.then(|| Reasoning { start: start.into(), end: end.into(), opened: reasoning_opened(p) }),
            optional,
            may_reason: tagged && (optional || p.prompt.contains(start)),
            off: !on,
        }
    }

    /// What a strict reply may write before its calls: only the template's reasoning block,
    /// when thinking is on (closed at once when the prompt opened one and thinking is off).
    fn lead(&self) -> Lead<'_> {
        match &self.tags {
            Some(t) if t.opened && self.off => Lead::Close { end: &t.end },
            Some(t) if t.opened => Lead::Finish { end: &t.end },
            Some(t) if self.optional => Lead::Optional { start: &t.start, end: &t.end },
            _ => Lead::None,
        }
    }
}

/// A model's chat side: its templates and what they can do, and the grammars of its replies.
pub struct Prompter {
    vocab: Arc<Vocab>,
    templates: Templates,
    probe: Probe,
    /// The template takes parallel tool calls (probed once, at create).
    parallel_calls: bool,
    /// The model's constraint engine (built at create, once per vocabulary; None when it
    /// cannot be built: grammars then run on llama.cpp's sampler).
    engine: Option<Arc<crate::grammar::engine::Engine>>,
}

impl Prompter {
    pub fn new(vocab: Arc<Vocab>, templates: Templates, probe: Probe) -> Prompter {
        let engine = crate::grammar::engine::for_vocab(&vocab);
        let parallel_calls = probe.supports_parallel_tool_calls();
        Prompter { vocab, templates, probe, parallel_calls, engine }
    }

    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// The constraint engine of this model's vocabulary (None when it cannot be built:
    /// grammars then run on llama.cpp's sampler).
    pub fn engine(&self) -> Option<&Arc<crate::grammar::engine::Engine>> {
        self.engine.as_ref()
    }

    /// The running grammar for `spec` (see [`crate::grammar::Grammar::build`]).
    pub fn grammar(&self, spec: &GrammarSpec) -> Result<crate::grammar::Grammar> {
        let (g, stats) = crate::grammar::Grammar::build(&self.vocab, spec, self.engine())?;
        if crate::debug::enabled() {
            eprintln!("[llb] grammar build: {stats:?}");
        }
        Ok(g)
    }

    fn apply_inputs(
        &self,
        req: &ResolvedRequest,
        messages: &Value,
        tools: Option<Value>,
        mode: &str,
        add_gen: bool,
    ) -> Value {
        json!({
            "messages": messages,
            "tools": tools,
            "tool_choice": mode,
            "parallel_tool_calls": self.parallel(req),
            "reasoning_format": req.reasoning_format,
            "enable_thinking": req.thinking,
            "chat_template_kwargs": req.template_kwargs,
            "json_schema": req.json_schema,
            "add_generation_prompt": add_gen,
        })
    }

    fn parallel(&self, req: &ResolvedRequest) -> bool {
        req.parallel_tool_calls && self.parallel_calls
    }

    /// Applies the template; a template that rejects an OpenAI-legal sequence gets the messages
    /// adapted (system merged into the first user message, same-role runs merged) and a retry.
    fn apply(
        &self,
        req: &ResolvedRequest,
        messages: &[request::Message],
        tools: Option<Value>,
        mode: &str,
        add_gen: bool,
    ) -> Result<ChatParams> {
        let msgs = serde_json::to_value(messages).map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?;
        match self.templates.apply(&self.apply_inputs(req, &msgs, tools.clone(), mode, add_gen)) {
            Ok(p) => Ok(p),
            Err(e) if e.code == ErrorCode::TemplateError => {
                let adapted = adapt_messages(
                    messages,
                    self.probe.caps.get("supports_system_role").and_then(Value::as_bool).unwrap_or(true),
                );
                if adapted.as_slice() == messages {
                    return Err(e);
                }
                let msgs =
                    serde_json::to_value(&adapted).map_err(|e| Error::new(ErrorCode::Internal, e.to_string()))?;
                self.templates.apply(&self.apply_inputs(req, &msgs, tools, mode, add_gen)).map_err(|_| e)
            }
            Err(e) => Err(e),
        }
    }

    /// The tokens of the template's preserved tokens (those that are one token).
    fn preserved(&self, p: &ChatParams) -> HashSet<Token> {
        p.preserved_tokens.iter().filter_map(|t| self.vocab.single_token(t)).collect()
    }

    /// The request's prompt and its tokens, in one pass: rendered once (with a retry of adapted
    /// messages), its reasoning block read once, its grammar chosen once, and, when the history
    /// holds a reply the model generated (`replay`), that reply spliced in.
    pub fn plan(&self, req: &ResolvedRequest, replay: Option<(usize, ReplyRecord)>) -> Result<(Rendered, Vec<Token>)> {
        let rendering = Rendering::of(req);
        let r = match &req.choice {
            Choice::Required | Choice::Named(_) if rendering.tools.is_some() => self.render_required(req, &rendering)?,
            _ => {
                let p = self.apply(req, &req.messages, rendering.tools.clone(), rendering.mode, true)?;
                let (grammar, prefill) = self.grammar_of(&p, &req.tools)?;
                let thinking = Thinking::read(&p, req.thinking);
                let prompt = p.prompt.clone();
                Rendered { prompt, params: p, thinking, grammar, prefill, strict: None, mode: rendering.mode }
            }
        };
        let tokens = match replay.and_then(|(k, last)| self.splice(req, &rendering, &r.prompt, k, &last)) {
            Some(toks) => toks,
            None => self.vocab.tokenize_with_bos(&r.prompt)?,
        };
        Ok((r, tokens))
    }

    /// The request's [`Plan`], read from its rendered prompt: the template's parser and stop
    /// strings, the call syntax of its grammar, its preserved tokens.
    pub fn finish(&self, r: Rendered, req: &ResolvedRequest) -> Result<Plan> {
        let calls = r.mode != "none";
        let params = &r.params;
        let parser = Parser::new(params, req.reasoning_format, calls)?;
        let mut stops = params.additional_stops.clone();
        stops.extend(req.stop.iter().cloned());
        let call_syntax = r.grammar.as_ref().filter(|_| calls).and_then(|g| {
            let words: Vec<String> = params
                .grammar_triggers
                .iter()
                .filter(|t| t.kind == crate::shim::TRIGGER_WORD)
                .map(|t| t.value.clone())
                .collect();
            let s = CallSyntax::from_grammar(&g.gbnf, &words)?;
            Some(match r.strict {
                Some(_) => s.strict_section(&params.thinking_end_tag, r.thinking.may_reason),
                None => s,
            })
        });
        Ok(Plan {
            preserved: self.preserved(params),
            prompt: r.prompt,
            parser,
            grammar: r.grammar,
            grammar_prefill: r.prefill,
            stops,
            parse_tool_calls: calls,
            single_call: calls && !self.parallel(req),
            strict: r.strict.is_some(),
            one_call_by_grammar: r.strict == Some(true),
            call_syntax,
            reasoning: r.thinking.tags,
            forced_call: r.mode == "required",
        })
    }

    /// `required` or a named tool: the prompt always lists every tool (a stable KV prefix); a
    /// named choice narrows only the constraint and the parser. The grammar is llb's strict one
    /// where the template's call section is known, else the template's own.
    fn render_required(&self, req: &ResolvedRequest, rendering: &Rendering) -> Result<Rendered> {
        let all = self.apply(req, &req.messages, rendering.tools.clone(), rendering.mode, true)?;
        let typed: Vec<request::Tool> = match &req.choice {
            Choice::Named(name) => req.tools.iter().filter(|t| &t.function.name == name).cloned().collect(),
            _ => req.tools.clone(),
        };
        let p = if matches!(req.choice, Choice::Named(_)) {
            let section_tools = serde_json::to_value(&typed).unwrap_or(Value::Null);
            self.apply(req, &req.messages, Some(section_tools), rendering.mode, true)?
        } else {
            all.clone()
        };
        let thinking = Thinking::read(&p, req.thinking);
        let Some(strict) = strict::strict_reply(&p.parser, &typed, thinking.lead(), !self.parallel(req))? else {
            let (grammar, prefill) = self.grammar_of(&p, &typed)?;
            return Ok(Rendered { prompt: all.prompt, params: p, thinking, grammar, prefill, strict: None, mode: rendering.mode });
        };
        let grammar = GrammarSpec { gbnf: strict.gbnf, ..Default::default() };
        Ok(Rendered {
            prompt: all.prompt,
            params: p,
            thinking,
            grammar: Some(grammar),
            prefill: None,
            strict: Some(strict.one_call),
            mode: rendering.mode,
        })
    }

    /// The grammar llama.cpp derived (lazy with triggers, or non-lazy starting with the generation
    /// prompt, which is then prefilled exactly), with each tool argument at most once
    /// ([`crate::grammar::strict::at_most_once`]).
    fn grammar_of(&self, p: &ChatParams, tools: &[request::Tool]) -> Result<(Option<GrammarSpec>, Option<String>)> {
        if p.grammar.is_empty() {
            return Ok((None, None));
        }
        let gbnf = if tools.is_empty() { p.grammar.clone() } else { strict::at_most_once(&p.grammar, tools) };
        if !p.grammar_lazy {
            let prefill = (!p.generation_prompt.is_empty()).then(|| p.generation_prompt.clone());
            return Ok((Some(GrammarSpec { gbnf, ..Default::default() }), prefill));
        }
        let mut g = GrammarSpec { gbnf, lazy: true, ..Default::default() };
        let preserved = self.preserved(p);
        for t in &p.grammar_triggers {
            match t.kind {
                crate::shim::TRIGGER_WORD => {
                    let ids = self.vocab.tokenize(&t.value)?;
                    if ids.len() == 1 && preserved.contains(&ids[0]) {
                        g.trigger_tokens.push(ids[0]);
                    } else {
                        g.trigger_patterns.push(gbnf::regex_escape(&t.value));
                    }
                }
                crate::shim::TRIGGER_PATTERN => g.trigger_patterns.push(t.value.clone()),
                crate::shim::TRIGGER_PATTERN_FULL => {
                    let v = &t.value;
                    let mut a = String::new();
                    if !v.starts_with('^') {
                        a.push('^');
                    }
                    a.push_str(v);
                    if !v.ends_with('$') {
                        a.push('$');
                    }
                    g.trigger_patterns.push(a);
                }
                _ => {}
            }
        }
        Ok((Some(g), None))
    }

    /// The prompt's tokens when the history holds a reply the model generated (`last`, found at
    /// message `k`): that turn's exact prompt and reply tokens followed by the tokenized rest
    /// (from the template's end-of-turn marker on), so the whole previous turn stays reusable in
    /// the KV cache. None (the prompt is tokenized whole) when the history does not render as
    /// that turn did.
    fn splice(
        &self,
        req: &ResolvedRequest,
        rendering: &Rendering,
        prompt: &str,
        k: usize,
        last: &ReplyRecord,
    ) -> Option<Vec<Token>> {
        let (tools, mode) = (&rendering.tools, rendering.mode);
        let why = |r: &str| {
            if crate::debug::enabled() {
                eprintln!("[llb] no splice: {r}");
            }
        };
        let before = self.apply(req, &req.messages[..k], tools.clone(), mode, true).ok()?;
        if before.prompt != last.prompt {
            why("the history before the reply renders differently than that turn's prompt");
            return None;
        }
        let Some(through) = self.apply(req, &req.messages[..=k], tools.clone(), mode, false).ok() else {
            why("the template cannot render the history ending with the reply");
            return None;
        };
        let Some(reply) = through.prompt.strip_prefix(&last.prompt) else {
            why("the reply's rendering does not extend that turn's prompt");
            return None;
        };
        let Some(rest) = prompt.strip_prefix(&through.prompt) else {
            why("the new prompt does not extend the rendered reply");
            return None;
        };
        let Some(end_of_turn) = reply.rfind(&last.eog_piece) else {
            why("the rendered reply lacks the end-of-generation token the model stopped on");
            return None;
        };
        let tail = format!("{}{}", &reply[end_of_turn..], rest);
        let mut toks = last.prompt_tokens.clone();
        toks.extend_from_slice(&last.gen_tokens);
        toks.extend(self.vocab.tokenize(&tail).ok()?);
        Some(toks)
    }
}

/// Adapts an OpenAI message list for templates that reject what OpenAI allows (tried only after
/// the template raised on the original list):
/// - developer messages are system messages;
/// - leading system messages are merged into one (or, without a system role, into the first user
///   message); later system messages are folded into the next user message;
/// - consecutive user/assistant messages of the same role (without tool calls) are merged;
/// - a history that opens with an assistant (or tool) message gets an empty user turn first;
/// - tool-call ids become 9 alphanumerics (Mistral's templates reject any other id), mapped
///   stably so a call and its result keep matching.
///
/// One pass, in one function: the rules act on the same running state (the output so far, the
/// pending system text, whether the history is still leading), so they read top to bottom.
pub fn adapt_messages(messages: &[request::Message], system_role: bool) -> Vec<request::Message> {
    use request::{Content, Message};
    let fits = |id: &str| id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric());
    let text = |m: &Message| m.content.as_ref().map(|c| c.text()).unwrap_or_default();
    let mut out: Vec<Message> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    let mut leading = true;
    for m in messages {
        let mut m = m.clone();
        if m.role == Role::Developer {
            m.role = Role::System;
        }
        for c in m.tool_calls.iter_mut().flatten() {
            if !fits(&c.id) {
                c.id = short_id(&c.id);
            }
        }
        if let Some(id) = m.tool_call_id.as_mut().filter(|id| !fits(id)) {
            *id = short_id(id);
        }
        if m.role == Role::System {
            if leading && system_role {
                match out.last_mut() {
                    Some(prev) => prev.content = Some(Content::Text(format!("{}\n\n{}", text(prev), text(&m)))),
                    None => out.push(plain(Role::System, text(&m))),
                }
            } else {
                pending.push(text(&m));
            }
            continue;
        }
        leading = false;
        if out.iter().all(|x| x.role == Role::System) && m.role != Role::User {
            out.push(plain(Role::User, std::mem::take(&mut pending).join("\n\n")));
        }
        if m.role == Role::User && !pending.is_empty() {
            m.content = Some(Content::Text(format!("{}\n\n{}", pending.join("\n\n"), text(&m))));
            pending.clear();
        }
        if let Some(prev) = out.last_mut() {
            let mergeable = |x: &Message| matches!(x.role, Role::User | Role::Assistant) && x.tool_calls.is_none();
            if prev.role == m.role && mergeable(prev) && mergeable(&m) {
                prev.content = Some(Content::Text(format!("{}\n\n{}", text(prev), text(&m))));
                continue;
            }
        }
        out.push(m);
    }
    if !pending.is_empty() {
        out.push(plain(Role::User, pending.join("\n\n")));
    }
    out
}

/// A tool-call id Mistral's templates accept (9 alphanumerics), the same for the same `id`.
fn short_id(id: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in id.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..9).map(|i| ALPHA[((h >> (i * 7)) % 62) as usize] as char).collect()
}

/// A message of `role` with text `t` and nothing else.
fn plain(role: Role, t: String) -> request::Message {
    request::Message {
        role,
        content: Some(request::Content::Text(t)),
        name: None,
        tool_calls: None,
        tool_call_id: None,
        reasoning_content: None,
        refusal: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use request::{Content, Message};

    fn msg(role: Role, t: &str) -> Message {
        Message {
            role,
            content: Some(Content::Text(t.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            reasoning_content: None,
            refusal: None,
        }
    }

    fn roles(v: &[Message]) -> Vec<(Role, String)> {
        v.iter().map(|m| (m.role, m.content.as_ref().unwrap().text())).collect()
    }

    #[test]
    fn adaptation_merges_what_strict_templates_reject() {
        let a = adapt_messages(
            &[
                msg(Role::System, "s1"),
                msg(Role::Developer, "s2"),
                msg(Role::User, "a"),
                msg(Role::User, "b"),
                msg(Role::System, "late"),
                msg(Role::Assistant, "x"),
                msg(Role::Assistant, "y"),
                msg(Role::User, "c"),
            ],
            true,
        );
        assert_eq!(
            roles(&a),
            vec![
                (Role::System, "s1\n\ns2".into()),
                (Role::User, "a\n\nb".into()),
                (Role::Assistant, "x\n\ny".into()),
                (Role::User, "late\n\nc".into())
            ]
        );
        let b = adapt_messages(&[msg(Role::System, "s"), msg(Role::User, "a")], false);
        assert_eq!(roles(&b), vec![(Role::User, "s\n\na".into())]);
        let c = adapt_messages(&[msg(Role::Assistant, "hi"), msg(Role::User, "a")], true);
        assert_eq!(roles(&c), vec![(Role::User, "".into()), (Role::Assistant, "hi".into()), (Role::User, "a".into())]);
        // Tool-call ids: 9 alphanumerics, the same for a call and its result.
        let mut call = msg(Role::Assistant, "");
        call.tool_calls = Some(vec![request::ToolCall {
            id: "call_abc".into(),
            kind: "function".into(),
            function: request::FunctionCall { name: "f".into(), arguments: "{}".into() },
        }]);
        let mut result = msg(Role::Tool, "42");
        result.tool_call_id = Some("call_abc".into());
        let d = adapt_messages(&[msg(Role::User, "q"), call, result], true);
        let id = &d[1].tool_calls.as_ref().unwrap()[0].id;
        assert!(id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()), "{id}");
        assert_eq!(d[2].tool_call_id.as_deref(), Some(id.as_str()));
    }
}
