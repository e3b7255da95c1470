//! The one error vocabulary of llb (docs/STYLE.md §5). Codes are part of the ABI: never rename or reuse
//! one once released; add new ones at the end. docs/errors.md lists them with their meaning.

use serde_json::{json, Value};
use std::fmt;

/// Stable snake_case error codes carried by `{"type":"error","code":...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// A NULL or non-UTF-8 argument, a wrong-typed or unknown field, an out-of-range value.
    InvalidArgument,
    /// The request or config text is not JSON.
    InvalidJson,
    /// The model path does not exist.
    FileNotFound,
    /// The file exists but could not be read.
    IoError,
    /// The file is not a GGUF, or is a truncated/corrupt one.
    NotAGguf,
    /// llama.cpp refused to load the weights.
    ModelLoadFailed,
    /// The chat template failed to parse or render.
    TemplateError,
    /// The model's chat template cannot describe tools and render tool calls.
    ToolsUnsupported,
    /// A bug in llb or an unexpected failure (a caught panic or C++ exception).
    Internal,
    /// llama.cpp could not create a context (KV cache) with the requested parameters.
    ContextCreateFailed,
    /// The prompt does not fit in the engine's context.
    ContextOverflow,
    /// The engine is running another request.
    Busy,
    /// The repo is gated (or private) and no Hugging Face token is set.
    AuthRequired,
    /// The token's account has not been granted access to a gated repo (license not accepted).
    LicenseNotAccepted,
    /// The hub rejected the token (invalid, expired, or lacking permission).
    AuthFailed,
    /// The repo does not exist, or is private and the token cannot see it.
    RepoNotFound,
    /// The branch, tag or commit does not exist in the repo.
    RevisionNotFound,
    /// The hub has disabled access to the repo.
    RepoDisabled,
    /// The hub kept answering 429 after the allowed retries.
    RateLimited,
    /// The repo (at that revision) holds no GGUF model file.
    NoGguf,
    /// No GGUF in the repo matches the requested quantization.
    QuantNotFound,
    /// A downloaded file's sha256 (or size) differs from what the hub lists; the file was deleted.
    ChecksumMismatch,
    /// The hub or its CDN could not be reached, or answered unexpectedly, after retries.
    Network,
    /// Writing to the model cache failed (permissions, no space).
    Disk,
    /// The host's event callback returned non-zero; a partial download stays resumable.
    Cancelled,
    /// The hub's file listing is unusable: an unsafe path (absolute, `..`), a bad checksum or commit id, a missing shard.
    InvalidRepoListing,
    /// Offline (HF_HUB_OFFLINE=1 or offline:true), and the cache does not hold the requested model.
    NotCached,
    /// A pool's queue of waiting requests is full (`max_queue`); nothing was started.
    QueueFull,
    /// A device the config names (or needs: GPU layers, `main_gpu`, a split) is not in this build or machine.
    DeviceUnavailable,
}

impl ErrorCode {
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidArgument,
        ErrorCode::InvalidJson,
        ErrorCode::FileNotFound,
        ErrorCode::IoError,
        ErrorCode::NotAGguf,
        ErrorCode::ModelLoadFailed,
        ErrorCode::TemplateError,
        ErrorCode::ToolsUnsupported,
        ErrorCode::Internal,
        ErrorCode::ContextCreateFailed,
        ErrorCode::ContextOverflow,
        ErrorCode::Busy,
        ErrorCode::AuthRequired,
        ErrorCode::LicenseNotAccepted,
        ErrorCode::AuthFailed,
        ErrorCode::RepoNotFound,
        ErrorCode::RevisionNotFound,
        ErrorCode::RepoDisabled,
        ErrorCode::RateLimited,
        ErrorCode::NoGguf,
        ErrorCode::QuantNotFound,
        ErrorCode::ChecksumMismatch,
        ErrorCode::Network,
        ErrorCode::Disk,
        ErrorCode::Cancelled,
        ErrorCode::InvalidRepoListing,
        ErrorCode::NotCached,
        ErrorCode::QueueFull,
        ErrorCode::DeviceUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::FileNotFound => "file_not_found",
            ErrorCode::IoError => "io_error",
            ErrorCode::NotAGguf => "not_a_gguf",
            ErrorCode::ModelLoadFailed => "model_load_failed",
            ErrorCode::TemplateError => "template_error",
            ErrorCode::ToolsUnsupported => "tools_unsupported",
            ErrorCode::Internal => "internal",
            ErrorCode::ContextCreateFailed => "context_create_failed",
            ErrorCode::ContextOverflow => "context_overflow",
            ErrorCode::Busy => "busy",
            ErrorCode::AuthRequired => "auth_required",
            ErrorCode::LicenseNotAccepted => "license_not_accepted",
            ErrorCode::AuthFailed => "auth_failed",
            ErrorCode::RepoNotFound => "repo_not_found",
            ErrorCode::RevisionNotFound => "revision_not_found",
            ErrorCode::RepoDisabled => "repo_disabled",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::NoGguf => "no_gguf",
            ErrorCode::QuantNotFound => "quant_not_found",
            ErrorCode::ChecksumMismatch => "checksum_mismatch",
            ErrorCode::Network => "network",
            ErrorCode::Disk => "disk",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::InvalidRepoListing => "invalid_repo_listing",
            ErrorCode::NotCached => "not_cached",
            ErrorCode::QueueFull => "queue_full",
            ErrorCode::DeviceUnavailable => "device_unavailable",
        }
    }
}

/// An error with its code, a human message and optional extra fields (e.g. `caps`).
#[derive(Debug, Clone)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
    pub extra: Option<serde_json::Map<String, Value>>,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error { code, message: message.into(), extra: None }
    }

    pub fn with_field(mut self, key: &str, value: Value) -> Self {
        self.extra.get_or_insert_with(Default::default).insert(key.to_string(), value);
        self
    }

    /// `{"type":"error","code":...,"message":...,<extra>}`
    pub fn to_json(&self) -> Value {
        self.to_json_typed("error")
    }

    /// The same object under another `type` (e.g. `create_failure` events).
    pub fn to_json_typed(&self, ty: &str) -> Value {
        let mut v = json!({"type": ty, "code": self.code.as_str(), "message": self.message});
        if let (Some(extra), Value::Object(map)) = (&self.extra, &mut v) {
            for (k, val) in extra {
                map.insert(k.clone(), val.clone());
            }
        }
        v
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

macro_rules! bail {
    ($code:ident, $($arg:tt)*) => {
        return Err($crate::error::Error::new($crate::error::ErrorCode::$code, format!($($arg)*)))
    };
}
pub(crate) use bail;
