//! The requests as they arrive: engine config and OpenAI chat-completion requests, typed by
//! serde (unknown or wrong-typed fields are `invalid_argument` errors that name the field, its
//! JSON path). Below everything that reads them: this module imports nothing of llb but errors.
use crate::error::{bail, Error, ErrorCode, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Parses JSON text into `T`: not JSON → `invalid_json`; wrong shape → `invalid_argument` with path.
pub fn parse<T: DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| Error::new(ErrorCode::InvalidJson, format!("{what} is not valid JSON: {e}")))?;
    if !v.is_object() {
        bail!(InvalidArgument, "{what} must be a JSON object");
    }
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let msg = if path == "." { format!("{what}: {inner}") } else { format!("{what}: field `{path}`: {inner}") };
        Error::new(ErrorCode::InvalidArgument, msg)
    })
}

/// `llb_chat_create` and `llb_pool_create` config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    pub model_path: String,
    #[serde(default)]
    pub n_ctx: Option<u32>,
    #[serde(default)]
    pub n_threads: Option<i32>,
    #[serde(default)]
    pub n_batch: Option<u32>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// Pools: requests decoding at once (default 4). Engines: absent or 1.
    #[serde(default)]
    pub n_parallel: Option<u32>,
    /// Pools: requests that may wait for a turn (default 16 per `n_parallel`).
    #[serde(default)]
    pub max_queue: Option<u32>,
    /// Devices and memory (src/backend.rs; docs/scaling.md).
    #[serde(default)]
    pub n_gpu_layers: Option<i32>,
    #[serde(default)]
    pub main_gpu: Option<i32>,
    #[serde(default)]
    pub split_mode: Option<SplitMode>,
    #[serde(default)]
    pub tensor_split: Option<Vec<f32>>,
    #[serde(default)]
    pub devices: Option<Vec<String>>,
    #[serde(default)]
    pub flash_attn: Option<FlashAttn>,
    #[serde(default)]
    pub offload_kqv: Option<bool>,
    #[serde(default)]
    pub type_k: Option<KvType>,
    #[serde(default)]
    pub type_v: Option<KvType>,
    #[serde(default)]
    pub use_mmap: Option<bool>,
    #[serde(default)]
    pub use_mlock: Option<bool>,
    /// llama.cpp `rpc-server`s (`"host:port"`) to offload layers to; in every build unless `LLB_RPC=0` (docs/scaling.md).
    #[serde(default)]
    pub rpc_servers: Option<Vec<String>>,
    /// Greedy call wrappers (docs/design.md, "Deterministic call syntax"); default true.
    #[serde(default)]
    pub deterministic_call_syntax: Option<bool>,
    /// Jump-forward decoding (docs/design.md, "Jump-forward decoding"); default true.
    #[serde(default)]
    pub jump_forward: Option<bool>,
    /// Replay mode (docs/design.md, "Determinism"): reference kernels on every step, fixed
    /// threads, no speculation, a cached prefix only where it is bit-exact; default false.
    #[serde(default)]
    pub deterministic: Option<bool>,
    /// The default reasoning budget in tokens (-1 unlimited, 0 no thinking), as llama-server's
    /// `--reasoning-budget`; a request's `reasoning_budget` overrides it (docs/tool-calls.md).
    #[serde(default)]
    pub reasoning_budget: Option<i64>,
    /// Decode threads follow what the machine gives (docs/scaling.md, "Sharing the cores with the host");
    /// `n_threads` stays the ceiling. Default true; false keeps `n_threads` fixed.
    #[serde(default)]
    pub adaptive_threads: Option<bool>,
    /// How hard idle compute threads poll for the next batch before sleeping, 0-100 as
    /// llama.cpp's `--poll` (0 sleeps at once: the cores go to the host). Default 0.
    #[serde(default)]
    pub thread_poll: Option<u32>,
    /// Where conversations that leave the context are kept (docs/design.md, "The prompt cache").
    #[serde(default)]
    pub prompt_cache: Option<PromptCacheConfig>,
    /// Speculative decoding (docs/design.md, "Speculative decoding").
    #[serde(default)]
    pub speculative: Option<SpeculativeConfig>,
}

/// `speculative` of an engine or pool config; every field optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeConfig {
    /// llama.cpp's name of the drafter (`ngram-simple`, `ngram-map-k`, ..., `none`).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The most tokens one draft holds.
    #[serde(default)]
    pub draft_max: Option<i64>,
    /// Drafts shorter than this are not verified.
    #[serde(default)]
    pub draft_min: Option<i64>,
    /// The n-gram the n-gram types look up, in tokens (llama-server's `--spec-ngram-*-size-n`).
    #[serde(default)]
    pub ngram_size: Option<i64>,
    /// A draft model's GGUF (`draft-simple`).
    #[serde(default)]
    pub draft_model_path: Option<String>,
    /// The draft model's layers on the GPU.
    #[serde(default)]
    pub draft_n_gpu_layers: Option<i32>,
    /// Drafts sized by the cost model (default true); false verifies every draft whole, as
    /// llama-server does.
    #[serde(default)]
    pub adaptive: Option<bool>,
}

/// `prompt_cache` of an engine or pool config; every field optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptCacheConfig {
    /// Bytes of sequence states kept in memory (0: none).
    #[serde(default)]
    pub ram_bytes: Option<u64>,
    /// A directory for states that outlive the process (none: no disk tier).
    #[serde(default)]
    pub dir: Option<String>,
    /// Bytes of prompt-cache files the directory may hold.
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// The file of the secret that seals the directory's files (default
    /// `$XDG_CONFIG_HOME/llb/prompt-cache.key`).
    #[serde(default)]
    pub secret_file: Option<String>,
    /// The directory may belong to, or be writable by, other users (default false: refused).
    #[serde(default)]
    pub shared: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitMode {
    None,
    Layer,
    Row,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashAttn {
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvType {
    F16,
    #[serde(rename = "q8_0")]
    Q8_0,
    #[serde(rename = "q4_0")]
    Q4_0,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text of the content (parts joined as llama.cpp does: by newlines).
    pub fn text(&self) -> String {
        match self {
            Content::Text(s) => s.clone(),
            Content::Parts(p) => p.iter().filter_map(|p| p.text.as_deref()).collect::<Vec<_>>().join("\n"),
        }
    }
}

/// A content part. Image, audio and file parts are read so that `validate` can name them in
/// its error (an untagged `Content` would only say the content matched no variant).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: PartKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing)]
    pub image_url: Option<Value>,
    #[serde(default, skip_serializing)]
    pub input_audio: Option<Value>,
    #[serde(default, skip_serializing)]
    pub file: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKind {
    Text,
    ImageUrl,
    InputAudio,
    File,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".into()
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionCall {
    pub name: String,
    /// A JSON text, as OpenAI sends it.
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Accepted (OpenAI sends it on assistant messages); not rendered.
    #[serde(default, skip_serializing)]
    pub refusal: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: ToolKind,
    pub function: FunctionDef,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    Function,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(ToolChoiceMode),
    Named(NamedToolChoice),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceMode {
    Auto,
    None,
    Required,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    pub kind: ToolKind,
    pub function: NamedFunction,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedFunction {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: ResponseFormatKind,
    #[serde(default)]
    pub json_schema: Option<JsonSchemaFormat>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormatKind {
    Text,
    JsonObject,
    JsonSchema,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSchemaFormat {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub schema: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningFormat {
    None,
    Auto,
}

/// OpenAI's `reasoning_effort`: mapped to the template's thinking switch (`enable_thinking`),
/// and passed to the template as `reasoning_effort` (gpt-oss reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    pub fn thinking(self) -> bool {
        !matches!(self, ReasoningEffort::None | ReasoningEffort::Minimal)
    }

    /// The reasoning budget this effort stands for: none/minimal 0, low 1024, medium 4096
    /// tokens, high unlimited (-1).
    pub fn budget(self) -> i64 {
        match self {
            ReasoningEffort::None | ReasoningEffort::Minimal => 0,
            ReasoningEffort::Low => 1024,
            ReasoningEffort::Medium => 4096,
            ReasoningEffort::High => -1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// An OpenAI chat-completions request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i32>,
    #[serde(default)]
    pub min_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub reasoning_format: Option<ReasoningFormat>,
    #[serde(default)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// Accepted for OpenAI compatibility and ignored: an engine serves one model.
    #[serde(default)]
    pub model: Option<String>,
    /// Accepted for OpenAI compatibility and ignored.
    #[serde(default)]
    pub user: Option<String>,
    /// Only 1 is supported.
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub presence_penalty: Option<f32>,
    /// Token id (as a decimal string) → bias in [-100, 100].
    #[serde(default)]
    pub logit_bias: Option<Map<String, Value>>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// 0..=20 alternatives per token; needs `logprobs: true`.
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Only `["text"]` is supported.
    #[serde(default)]
    pub modalities: Option<Vec<String>>,
    /// Audio output: always an error (llb serves text models).
    #[serde(default)]
    pub audio: Option<Value>,
    /// Accepted and ignored: nothing is stored, billed, routed or cached by key here.
    #[serde(default)]
    pub store: Option<Value>,
    #[serde(default)]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub service_tier: Option<Value>,
    #[serde(default)]
    pub prompt_cache_key: Option<Value>,
    #[serde(default)]
    pub safety_identifier: Option<Value>,
    /// Greedy call wrappers for this request (default: the engine's config, true).
    #[serde(default)]
    pub deterministic_call_syntax: Option<bool>,
    /// llb's extension: `false` samples text a strict grammar forces token by token instead of
    /// evaluating it in one batch (jump-forward decoding; default: the engine's config, true).
    #[serde(default)]
    pub jump_forward: Option<bool>,
    /// llb's extension: `false` decodes this request without speculation, `true` with it
    /// (default: the engine's config; docs/design.md, "Speculative decoding").
    #[serde(default)]
    pub speculative: Option<bool>,
    /// llb's extension: `true` computes this request as replay mode does (docs/design.md,
    /// "Determinism"; default: the engine's config, false).
    #[serde(default)]
    pub deterministic: Option<bool>,
    /// llb's extension, as llama-server's: the most tokens the reply may spend reasoning (-1
    /// unlimited, 0 no thinking); past it the template's end-of-thinking tag is forced and the
    /// reply goes on (docs/tool-calls.md, "Reasoning budget").
    #[serde(default)]
    pub reasoning_budget: Option<i64>,
}

/// The resolved tool choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    Auto,
    None,
    Required,
    Named(String),
}
