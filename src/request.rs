//! Typed requests: engine config and OpenAI chat-completion requests as they arrive
//! ([`wire`]), checked here, and what they resolve to: [`EngineSettings`] and
//! [`ResolvedRequest`], where every default is filled in.

mod resolved;
mod settings;
pub(crate) mod wire;

pub use resolved::{random_id, ResolvedRequest, SamplingParams};
pub use settings::{
    prompt_cache_ram, DraftModel, Drafter, Drafting, EngineSettings, HandleKind, SpeculativeSettings, DRAFT_SIMPLE,
    SPECULATIVE_TYPES,
};
pub use wire::*;

use crate::error::{bail, Error, ErrorCode, Result};
use serde_json::Value;

/// A chat request's JSON read, checked and resolved against an engine's settings and its
/// model's vocabulary size, in one call: what a handle does first with each request.
pub fn resolve(request_json: &str, settings: &EngineSettings, n_vocab: i32) -> Result<ResolvedRequest> {
    parse::<ChatRequest>(request_json, "request")?.resolve(settings, n_vocab)
}

impl ChatRequest {
    /// Checks what serde cannot: cross-field rules and value ranges. Returns `logit_bias`
    /// parsed (its check is its parse; [`ChatRequest::resolve`] keeps it).
    fn validate(&self) -> Result<Vec<(i32, f32)>> {
        let logit_bias = self.validate_openai_fields()?;
        self.validate_messages()?;
        self.validate_sampling()?;
        let tools = self.tools.as_deref().unwrap_or(&[]);
        let names = validate_tools(tools)?;
        match self.choice() {
            Choice::Required if tools.is_empty() => {
                bail!(InvalidArgument, "field `tool_choice`: `required` needs `tools`")
            }
            Choice::Named(n) if !names.contains(n.as_str()) => {
                bail!(InvalidArgument, "field `tool_choice`: no tool named `{n}` in `tools`")
            }
            _ => {}
        }
        if let Some(rf) = &self.response_format {
            if rf.kind == ResponseFormatKind::JsonSchema && rf.json_schema.is_none() {
                bail!(InvalidArgument, "field `response_format.json_schema`: required with type json_schema");
            }
            if rf.kind != ResponseFormatKind::Text && !tools.is_empty() && self.choice() != Choice::None {
                bail!(InvalidArgument, "field `response_format`: cannot be combined with tools");
            }
        }
        Ok(logit_bias)
    }

    /// Each message has what its role needs, and nothing only another role may carry.
    fn validate_messages(&self) -> Result<()> {
        if self.messages.is_empty() {
            bail!(InvalidArgument, "field `messages`: must hold at least one message");
        }
        for (i, m) in self.messages.iter().enumerate() {
            match m.role {
                Role::Tool if m.tool_call_id.is_none() => {
                    bail!(InvalidArgument, "field `messages[{i}].tool_call_id`: required on tool messages")
                }
                Role::Assistant if m.content.is_none() && m.tool_calls.is_none() => {
                    bail!(InvalidArgument, "field `messages[{i}]`: an assistant message needs content or tool_calls")
                }
                Role::System | Role::Developer | Role::User | Role::Tool if m.content.is_none() => {
                    bail!(InvalidArgument, "field `messages[{i}].content`: required")
                }
                _ => {}
            }
            if let Some(Content::Parts(parts)) = &m.content {
                check_parts(i, parts)?;
            }
            if m.tool_calls.is_some() && m.role != Role::Assistant {
                bail!(InvalidArgument, "field `messages[{i}].tool_calls`: only assistant messages carry tool calls");
            }
            for (j, c) in m.tool_calls.iter().flatten().enumerate() {
                if serde_json::from_str::<Value>(&c.function.arguments).is_err() {
                    bail!(InvalidArgument, "field `messages[{i}].tool_calls[{j}].function.arguments`: not a JSON text");
                }
            }
        }
        Ok(())
    }

    /// The sampling fields' ranges.
    fn validate_sampling(&self) -> Result<()> {
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                bail!(InvalidArgument, "field `temperature`: must be between 0 and 2");
            }
        }
        if let Some(p) = self.top_p {
            if !(0.0..=1.0).contains(&p) {
                bail!(InvalidArgument, "field `top_p`: must be between 0 and 1");
            }
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                bail!(InvalidArgument, "field `min_p`: must be between 0 and 1");
            }
        }
        if self.max_tokens == Some(0) || self.max_completion_tokens == Some(0) {
            bail!(InvalidArgument, "field `max_tokens`: must be at least 1");
        }
        if self.n.is_some_and(|n| n != 1) {
            bail!(InvalidArgument, "field `n`: only 1 is supported");
        }
        if self.reasoning_budget.is_some_and(|b| b < -1) {
            bail!(
                InvalidArgument,
                "field `reasoning_budget`: must be -1 (unlimited), 0 (no thinking) or a number of tokens"
            );
        }
        Ok(())
    }

    /// The sampling, logprobs and modality fields OpenAI's SDKs send; `logit_bias` parsed.
    fn validate_openai_fields(&self) -> Result<Vec<(i32, f32)>> {
        for (name, v) in [("frequency_penalty", self.frequency_penalty), ("presence_penalty", self.presence_penalty)] {
            if v.is_some_and(|v| !(-2.0..=2.0).contains(&v)) {
                bail!(InvalidArgument, "field `{name}`: must be between -2 and 2");
            }
        }
        let logit_bias = self.parse_logit_bias()?;
        if let Some(n) = self.top_logprobs {
            if n > 20 {
                bail!(InvalidArgument, "field `top_logprobs`: must be between 0 and 20");
            }
            if self.logprobs != Some(true) {
                bail!(InvalidArgument, "field `top_logprobs`: needs `logprobs: true`");
            }
        }
        for (i, m) in self.modalities.iter().flatten().enumerate() {
            if m != "text" {
                bail!(
                    InvalidArgument,
                    "field `modalities[{i}]`: only \"text\" is supported (llb serves text models), not {m:?}"
                );
            }
        }
        if self.audio.as_ref().is_some_and(|a| !a.is_null()) {
            bail!(InvalidArgument, "field `audio`: audio output is not supported (llb serves text models)");
        }
        Ok(logit_bias)
    }

    /// `tool_choice`, the default resolved: auto with tools, none without.
    fn choice(&self) -> Choice {
        match &self.tool_choice {
            None if self.tools.as_ref().is_some_and(|t| !t.is_empty()) => Choice::Auto,
            None => Choice::None,
            Some(ToolChoice::Mode(ToolChoiceMode::Auto)) => Choice::Auto,
            Some(ToolChoice::Mode(ToolChoiceMode::None)) => Choice::None,
            Some(ToolChoice::Mode(ToolChoiceMode::Required)) => Choice::Required,
            Some(ToolChoice::Named(n)) => Choice::Named(n.function.name.clone()),
        }
    }

    /// `stop` as a list, empty strings left out.
    fn stop_strings(&self) -> Vec<String> {
        match &self.stop {
            None => vec![],
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        }
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect()
    }

    /// The JSON schema the reply must follow (response_format), if any.
    fn json_schema(&self) -> Option<Value> {
        let rf = self.response_format.as_ref()?;
        match rf.kind {
            ResponseFormatKind::Text => None,
            ResponseFormatKind::JsonObject => Some(serde_json::json!({"type": "object"})),
            ResponseFormatKind::JsonSchema => Some(
                rf.json_schema
                    .as_ref()
                    .and_then(|s| s.schema.clone())
                    .unwrap_or_else(|| serde_json::json!({"type": "object"})),
            ),
        }
    }
}

/// Tool names (OpenAI's rule, unique) and parameter schemas llb can compile; the names.
fn validate_tools(tools: &[Tool]) -> Result<std::collections::HashSet<&str>> {
    let mut names = std::collections::HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        let name = &t.function.name;
        // OpenAI's rule: the name is spliced into prompts, grammars and parsers verbatim.
        if name.is_empty()
            || name.len() > 64
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            bail!(
                InvalidArgument,
                "field `tools[{i}].function.name`: must be 1-64 characters of a-z, A-Z, 0-9, _ and - (as OpenAI requires)"
            );
        }
        if !names.insert(name.as_str()) {
            bail!(InvalidArgument, "field `tools[{i}].function.name`: duplicate name {name:?}");
        }
        if let Some(p) = &t.function.parameters {
            if !p.is_object() {
                bail!(InvalidArgument, "field `tools[{i}].function.parameters`: must be a JSON Schema object");
            }
            check_tool_schema(name, p).map_err(|e| {
                Error::new(ErrorCode::InvalidArgument, format!("field `tools[{i}].function.parameters`: {}", e.message))
            })?;
        }
    }
    Ok(names)
}

/// Rejects what llama.cpp's schema converter cannot compile, before any template sees it: a
/// boolean schema (`true`/`false`) where a schema belongs, and a `type` that JSON Schema does
/// not have (`"double"`, `"int"`). The message names the tool, the keyword and where it is.
fn check_tool_schema(tool: &str, schema: &Value) -> Result<()> {
    fn walk(s: &Value, path: &str) -> std::result::Result<(), String> {
        const TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "object", "array", "null"];
        let Some(o) = s.as_object() else {
            return Err(format!(
                "a boolean schema (`{s}`) at `{path}` cannot be compiled into a grammar; use {{}} for any value"
            ));
        };
        let types: Vec<&Value> = match o.get("type") {
            Some(Value::Array(a)) => a.iter().collect(),
            Some(t) => vec![t],
            None => vec![],
        };
        for t in types {
            if !t.as_str().is_some_and(|t| TYPES.contains(&t)) {
                return Err(format!("`type: {t}` at `{path}` is not a JSON Schema type ({})", TYPES.join(", ")));
            }
        }
        for (k, v) in o {
            match k.as_str() {
                "properties" | "$defs" | "definitions" => {
                    for (n, x) in v.as_object().into_iter().flatten() {
                        walk(x, &format!("{path}/{k}/{n}"))?;
                    }
                }
                "items" if v.is_object() || v.is_boolean() => walk(v, &format!("{path}/items"))?,
                "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                    for (i, x) in v.as_array().into_iter().flatten().enumerate() {
                        walk(x, &format!("{path}/{k}/{i}"))?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
    match walk(schema, "") {
        Ok(()) => Ok(()),
        Err(why) => bail!(InvalidArgument, "tool `{tool}`: {why}"),
    }
}

/// Text parts only: an image, audio or file part is an error naming it.
fn check_parts(i: usize, parts: &[ContentPart]) -> Result<()> {
    for (j, p) in parts.iter().enumerate() {
        let kind = match p.kind {
            PartKind::Text if p.text.is_some() => continue,
            PartKind::Text => bail!(InvalidArgument, "field `messages[{i}].content[{j}].text`: required on text parts"),
            PartKind::ImageUrl => "image_url",
            PartKind::InputAudio => "input_audio",
            PartKind::File => "file",
        };
        bail!(
            InvalidArgument,
            "field `messages[{i}].content[{j}]`: content parts of type `{kind}` are not supported: llb serves text models (text parts only)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_llama_cpp_cannot_compile_are_named() {
        let ok = serde_json::json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}},
            "additionalProperties": false, "$defs": {"d": {"items": {"type": "integer"}}}});
        assert!(check_tool_schema("t", &ok).is_ok());
        let e = check_tool_schema("t", &serde_json::json!({"properties": {"a": false}})).unwrap_err();
        assert!(e.message.contains("tool `t`") && e.message.contains("/properties/a"), "{e:?}");
        let e = check_tool_schema("t", &serde_json::json!({"properties": {"a": {"type": "double"}}})).unwrap_err();
        assert!(e.message.contains("`type: \"double\"`"), "{e:?}");
    }
}
