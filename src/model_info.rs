//! `llb_model_info`: what a GGUF's chat template can do, from the header alone.
//!
//! Reading the header (gguf API, no tensor data, no vocab build) and building the templates from
//! strings gives the same caps as a `vocab_only` load at a fraction of the cost (issue #2 measured
//! 0.03-0.13× of vocab_only); tests/model_info.rs checks the two paths agree on every corpus template.

use crate::error::{bail, Error, ErrorCode, Result};
use crate::gguf::{self, GgufHeader, HeaderError};
use crate::shim::{Probe, ProbeLimits};
use serde_json::{json, Value};
use std::path::Path;

/// Checks the path before any native code sees it, so errors carry precise codes.
pub fn check_model_path(path: &Path) -> Result<u64> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => bail!(InvalidArgument, "{} is a directory, not a GGUF file", path.display()),
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!(FileNotFound, "model file not found: {}", path.display())
        }
        Err(e) => bail!(IoError, "cannot read {}: {e}", path.display()),
    }
}

/// The GGUF header, with llb's error codes.
pub fn read_header(path: &Path) -> Result<GgufHeader> {
    gguf::read_header(path).map_err(|e| match e {
        HeaderError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Error::new(ErrorCode::FileNotFound, format!("model file not found: {}", path.display()))
        }
        HeaderError::Io(e) => Error::new(ErrorCode::IoError, format!("cannot read {}: {e}", path.display())),
        HeaderError::Invalid(m) => {
            Error::new(ErrorCode::NotAGguf, format!("{} is not a valid GGUF file: {m}", path.display()))
        }
    })
}

/// Header + probe: the caps gate's inputs, shared by model_info, chat create and pull.
pub struct Inspection {
    pub file_size: u64,
    pub header: GgufHeader,
    pub probe: Probe,
}

pub fn inspect(path: &Path) -> Result<Inspection> {
    crate::backend::init_backend();
    let file_size = check_model_path(path)?;
    let header = read_header(path)?;
    // The template is untrusted code: it runs first in a bounded child process (shim.rs).
    let probe = Probe::isolated(&header, ProbeLimits::from_env())?;
    Ok(Inspection { file_size, header, probe })
}

/// The error every refusal of a non-tool model carries (chat create, pull).
pub fn tools_unsupported(path: &Path, probe: &Probe) -> Error {
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let flag = |k: &str| probe.caps.get(k).and_then(Value::as_bool).unwrap_or(false);
    Error::new(
        ErrorCode::ToolsUnsupported,
        format!(
            "Model {file} rejected: its chat template does not support tool calling \
             (supports_tools={}, supports_tool_calls={}). Only tool-capable GGUFs can be loaded.",
            flag("supports_tools"),
            flag("supports_tool_calls")
        ),
    )
    .with_field("caps", Value::Object(probe.caps.clone()))
}

pub fn model_info(path: &Path) -> Result<Value> {
    let ins = inspect(path)?;
    crate::fault::site("model_info");
    let h = &ins.header;
    let p = &ins.probe;
    Ok(json!({
        "type": "model_info",
        "path": path.to_string_lossy(),
        "file_size": ins.file_size,
        "name": h.name,
        "architecture": h.architecture,
        "n_params": h.n_params,
        "n_ctx_train": h.n_ctx_train,
        "n_vocab": h.n_vocab,
        "tokenizer_model": h.tokenizer_model,
        "supports_tools": p.supports_tools(),
        "caps": p.caps,
        "caps_source": p.caps_source,
        "has_tool_use_template": p.has_tool_use_template,
        "chat_format": p.chat_format,
        "tool_parser_error": p.tool_parser_error,
        "chat_template": p.chat_template,
        "memory": memory_estimate(h),
    }))
}

/// What loading needs, to size `n_ctx` and pools before loading: the weights' bytes, and the
/// KV cache's bytes per 1024 tokens with the default f16 cache (keys and values of every layer;
/// q8_0 takes 34/64 of it, q4_0 18/64). An estimate: models with sliding-window or recurrent
/// layers need less. `null` when the header lacks the attention shape.
pub fn memory_estimate(h: &GgufHeader) -> Value {
    let [n_layer, n_embd, n_head, n_head_kv, k_len, v_len] = h.attention;
    let kv = (|| {
        let (n_layer, n_embd, n_head) = (n_layer?, n_embd?, n_head?.max(1));
        let n_head_kv = n_head_kv.unwrap_or(n_head);
        let k = k_len.unwrap_or(n_embd / n_head);
        let v = v_len.unwrap_or(n_embd / n_head);
        let per_token = n_layer.checked_mul(n_head_kv)?.checked_mul(k + v)?.checked_mul(2)?;
        per_token.checked_mul(1024).filter(|b| *b >= 0)
    })();
    json!({
        "weights_bytes": h.data_size,
        "kv_bytes_per_1k_tokens": kv,
        "kv_type": "f16",
    })
}
