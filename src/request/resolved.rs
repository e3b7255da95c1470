//! A chat request resolved once, before anything runs: [`ChatRequest::resolve`] checks it and
//! fills in every default (its own, then the engine's [`EngineSettings`]), as text-generation-
//! inference's `ValidGenerateRequest`. Planning, sampling, generation and the response read the
//! [`ResolvedRequest`]; none of them sees the raw request or writes a default of its own.

use super::settings::{Drafting, EngineSettings};
use super::wire::{ChatRequest, Choice, Message, ReasoningFormat, Tool};
use crate::error::{bail, Error, ErrorCode, Result};
use serde_json::{json, Map, Value};

/// The sampling settings of one request, every default filled in (llama.cpp's where the
/// request is silent).
#[derive(Debug, Clone)]
pub struct SamplingParams {
    /// `temperature` (0 to 2), default 0.8; 0 or less samples greedily.
    pub temperature: f32,
    /// `top_k`, default 40; 0 or less turns it off.
    pub top_k: i32,
    /// `top_p` (0 to 1), default 0.95; 1 turns it off.
    pub top_p: f32,
    /// `min_p` (0 to 1), default 0.05; 0 turns it off.
    pub min_p: f32,
    /// `seed`, else the config's, else one drawn for this request.
    pub seed: u32,
    /// OpenAI's `frequency_penalty` (-2 to 2), default 0 (off).
    pub frequency_penalty: f32,
    /// OpenAI's `presence_penalty` (-2 to 2), default 0 (off).
    pub presence_penalty: f32,
    /// `logit_bias`: (token id, bias) added to the logits, every id in the vocabulary; a bias of
    /// -100 is -infinity (a ban). Default none.
    pub logit_bias: Vec<(i32, f32)>,
}

/// A chat request with every default resolved.
#[derive(Debug, Clone)]
pub struct ResolvedRequest {
    /// The conversation (at least one message).
    pub messages: Vec<Message>,
    /// The tools offered (empty: none).
    pub tools: Vec<Tool>,
    /// `tool_choice` as given; default `auto` with tools, `none` without. A request without
    /// tools that says `auto` keeps it (the plan treats it as `none`).
    pub choice: Choice,
    /// `parallel_tool_calls`, default true (the plan also needs the template's support).
    pub parallel_tool_calls: bool,
    /// `stop`, empty strings left out. Default none.
    pub stop: Vec<String>,
    /// The JSON schema `response_format` asks the reply to follow; None: free text (default).
    pub json_schema: Option<Value>,
    /// `reasoning_format` as llama.cpp names it: "auto" (default) or "none".
    pub reasoning_format: &'static str,
    /// The template's kwargs: the config's, then what `reasoning_effort` stands for, then a
    /// reasoning budget's thinking switch, then the request's own `chat_template_kwargs`.
    pub template_kwargs: Map<String, Value>,
    /// Whether the template is asked to think: `enable_thinking` among the kwargs, default true.
    pub thinking: bool,
    /// The reasoning budget set explicitly (-1 unlimited, 0 no thinking): the request's
    /// `reasoning_budget`, else the config's; None: neither set one.
    pub reasoning_budget: Option<i64>,
    /// The budget the request's `reasoning_effort` stands for; None without one.
    pub effort_budget: Option<i64>,
    pub sampling: SamplingParams,
    /// `max_completion_tokens`, else `max_tokens`; default unlimited (`usize::MAX`: the context
    /// still bounds the reply).
    pub max_tokens: usize,
    /// `stream`, default false.
    pub stream: bool,
    /// `stream_options.include_usage`, default false.
    pub include_usage: bool,
    /// With `logprobs: true`, how many alternatives per token (`top_logprobs`, default 0); None:
    /// no logprobs (default).
    pub logprobs: Option<usize>,
    /// Greedy call wrappers: the request's `deterministic_call_syntax`, else the config's.
    pub deterministic_call_syntax: bool,
    /// Jump-forward decoding: the request's `jump_forward`, else the config's.
    pub jump_forward: bool,
    /// Speculative decoding: the request's `speculative`, else the config's; never in replay mode.
    pub speculative: bool,
    /// Replay mode: the request's `deterministic`, else the config's.
    pub deterministic: bool,
}

impl ChatRequest {
    /// Checks the request ([`ChatRequest::validate`], and `logit_bias` against a vocabulary of
    /// `n_vocab` tokens) and resolves every default, the engine's from `settings`.
    pub fn resolve(self, settings: &EngineSettings, n_vocab: i32) -> Result<ResolvedRequest> {
        let logit_bias = self.validate()?;
        if let Some((id, _)) = logit_bias.iter().find(|(id, _)| *id >= n_vocab) {
            bail!(
                InvalidArgument,
                "field `logit_bias.{id}`: not a token of this model's vocabulary ({n_vocab} tokens)"
            );
        }
        let template_kwargs = self.template_kwargs(settings);
        let thinking = template_kwargs.get("enable_thinking").and_then(Value::as_bool).unwrap_or(true);
        let deterministic = self.deterministic.unwrap_or(settings.deterministic);
        Ok(ResolvedRequest {
            choice: self.choice(),
            stop: self.stop_strings(),
            json_schema: self.json_schema(),
            reasoning_format: match self.reasoning_format {
                Some(ReasoningFormat::None) => "none",
                _ => "auto",
            },
            template_kwargs,
            thinking,
            reasoning_budget: self.reasoning_budget.or(settings.reasoning_budget),
            effort_budget: self.reasoning_effort.map(|e| e.budget()),
            sampling: SamplingParams {
                temperature: self.temperature.unwrap_or(0.8),
                top_k: self.top_k.unwrap_or(40),
                top_p: self.top_p.unwrap_or(0.95),
                min_p: self.min_p.unwrap_or(0.05),
                seed: self.seed.or(settings.seed).map(|s| s as u32).unwrap_or_else(random_seed),
                frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
                presence_penalty: self.presence_penalty.unwrap_or(0.0),
                logit_bias,
            },
            max_tokens: self.max_completion_tokens.or(self.max_tokens).map_or(usize::MAX, |m| m as usize),
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
            logprobs: (self.logprobs == Some(true)).then(|| self.top_logprobs.unwrap_or(0) as usize),
            deterministic_call_syntax: self.deterministic_call_syntax.unwrap_or(settings.deterministic_call_syntax),
            jump_forward: self.jump_forward.unwrap_or(settings.jump_forward),
            speculative: self.speculative.unwrap_or(settings.speculative.drafting == Drafting::EveryRequest)
                && !deterministic,
            deterministic,
            parallel_tool_calls: self.parallel_tool_calls.unwrap_or(true),
            tools: self.tools.unwrap_or_default(),
            messages: self.messages,
        })
    }

    /// The template's kwargs: the config's, then the request's `reasoning_effort` (thinking off
    /// for none/minimal, on otherwise; also passed as `reasoning_effort`), then a reasoning
    /// budget of 0 (thinking off; a positive budget the request sets turns it on), then the
    /// request's own.
    fn template_kwargs(&self, settings: &EngineSettings) -> Map<String, Value> {
        let mut kw = settings.chat_template_kwargs.clone();
        if let Some(effort) = self.reasoning_effort {
            kw.insert("enable_thinking".into(), json!(effort.thinking()));
            kw.insert("reasoning_effort".into(), json!(effort.as_str()));
        }
        match self.reasoning_budget.or(settings.reasoning_budget) {
            Some(0) => {
                kw.insert("enable_thinking".into(), json!(false));
            }
            Some(_) if self.reasoning_budget.is_some() => {
                kw.insert("enable_thinking".into(), json!(true));
            }
            _ => {}
        }
        if let Some(r) = &self.chat_template_kwargs {
            kw.extend(r.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        kw
    }

    /// `logit_bias` as (token id, bias) pairs; a bias of -100 bans the token (OpenAI: "should
    /// result in a ban"), so it becomes -infinity.
    pub(super) fn parse_logit_bias(&self) -> Result<Vec<(i32, f32)>> {
        let mut out = Vec::new();
        for (k, v) in self.logit_bias.iter().flatten() {
            let id: i32 = k.parse().ok().filter(|id| *id >= 0).ok_or_else(|| {
                Error::new(ErrorCode::InvalidArgument, format!("field `logit_bias.{k}`: keys must be token ids"))
            })?;
            let bias = v.as_f64().filter(|b| (-100.0..=100.0).contains(b)).ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidArgument,
                    format!("field `logit_bias.{k}`: must be a number between -100 and 100"),
                )
            })?;
            out.push((id, if bias <= -100.0 { f32::NEG_INFINITY } else { bias as f32 }));
        }
        Ok(out)
    }
}

/// A random alphanumeric id (not cryptographic: ids only need to be unique and unguessable
/// enough not to collide across engines and processes): completion ids, tool-call ids, seeds.
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

/// A seed for a request that gives none (nor its config).
fn random_seed() -> u32 {
    random_id("", 8).bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
}

#[cfg(test)]
mod tests {
    use super::super::settings::HandleKind;
    use super::super::wire::EngineConfig;
    use super::*;

    fn settings(config: Value) -> EngineSettings {
        let c: EngineConfig = serde_json::from_value(config).unwrap();
        EngineSettings::resolve(&c, HandleKind::Engine, None).unwrap()
    }

    fn resolve(req: Value, s: &EngineSettings) -> Result<ResolvedRequest> {
        serde_json::from_value::<ChatRequest>(req).unwrap().resolve(s, 100)
    }

    #[test]
    fn a_silent_request_gets_every_default() {
        let s = settings(json!({"model_path": "m", "seed": 7, "jump_forward": false, "reasoning_budget": 0}));
        let r = resolve(json!({"messages": [{"role": "user", "content": "hi"}]}), &s).unwrap();
        let p = &r.sampling;
        assert_eq!((p.temperature, p.top_k, p.top_p, p.min_p, p.seed), (0.8, 40, 0.95, 0.05, 7));
        assert_eq!((p.frequency_penalty, p.presence_penalty, p.logit_bias.len()), (0.0, 0.0, 0));
        assert_eq!((r.max_tokens, r.stream, r.include_usage, r.logprobs), (usize::MAX, false, false, None));
        assert_eq!((r.choice, r.parallel_tool_calls, r.reasoning_format), (Choice::None, true, "auto"));
        assert!(r.deterministic_call_syntax && !r.jump_forward);
        assert_eq!((r.reasoning_budget, r.thinking), (Some(0), false), "the config's budget of 0 turns thinking off");
    }

    #[test]
    fn logit_bias_is_parsed_and_checked_once() {
        let s = settings(json!({"model_path": "m"}));
        let msgs = json!([{"role": "user", "content": "hi"}]);
        let r = resolve(json!({"messages": msgs, "logit_bias": {"5": -100, "6": 2.5}}), &s).unwrap();
        assert_eq!(r.sampling.logit_bias, vec![(5, f32::NEG_INFINITY), (6, 2.5)]);
        let e = resolve(json!({"messages": msgs, "logit_bias": {"100": 1}}), &s).unwrap_err();
        assert!(e.message.contains("not a token of this model's vocabulary (100 tokens)"), "{}", e.message);
        let e = resolve(json!({"messages": msgs, "logit_bias": {"x": 1}}), &s).unwrap_err();
        assert!(e.message.contains("keys must be token ids"), "{}", e.message);
        let e = resolve(json!({"messages": msgs, "logit_bias": {"1": 101}}), &s).unwrap_err();
        assert!(e.message.contains("between -100 and 100"), "{}", e.message);
    }
}
