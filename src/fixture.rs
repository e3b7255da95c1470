//! Test models: a real tokenizer (copied from the pinned tree's `models/ggml-vocab-*.gguf`), a
//! chosen chat template, and random weights for a small llama-architecture network.
//!
//! `llb fixture` is the CLI front; tests and benchmarks call [`write_fixture`] directly.

use crate::error::{bail, Error, ErrorCode, Result};
use crate::gguf::{self, Fill, GgufValue, TensorSpec, TensorType};
use std::path::{Path, PathBuf};

/// How large the random network is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Size {
    /// A few MB: n_embd 64, 2 layers. Loads and decodes in milliseconds.
    Tiny,
    /// Tiny, with 32-dimension attention heads (n_embd 128): what quantized KV cache types
    /// (q8_0, q4_0: 32-element blocks) need.
    Small,
    /// At least this many bytes of weights (n_embd 2048, F16; layers added until reached).
    AtLeast(u64),
}

impl std::str::FromStr for Size {
    type Err = Error;
    fn from_str(s: &str) -> Result<Size> {
        if s == "tiny" {
            return Ok(Size::Tiny);
        }
        if s == "small" {
            return Ok(Size::Small);
        }
        let gb =
            s.strip_suffix('g').and_then(|n| n.parse::<f64>().ok()).filter(|g| *g > 0.0 && *g <= 64.0).ok_or_else(
                || {
                    Error::new(
                        ErrorCode::InvalidArgument,
                        format!("size must be `tiny`, `small` or `<N>g` (e.g. 1g, 1.5g), not `{s}`"),
                    )
                },
            )?;
        Ok(Size::AtLeast((gb * 1e9) as u64))
    }
}

#[derive(Debug, Clone)]
pub struct FixtureOptions {
    /// A vocabulary name (`qwen2` → models/ggml-vocab-qwen2.gguf) or a path to a GGUF.
    pub vocab: String,
    /// Default chat template source; None writes no `tokenizer.chat_template`.
    pub template: Option<String>,
    /// `tokenizer.chat_template.tool_use` source.
    pub tool_use_template: Option<String>,
    /// Header and tokenizer only, no tensors (like the vocab files).
    pub vocab_only: bool,
    pub size: Size,
    pub seed: u64,
    /// `llama.context_length`: the context the model says it was trained for (n_ctx's ceiling).
    pub context_length: u32,
}

impl FixtureOptions {
    pub fn new(vocab: &str) -> Self {
        FixtureOptions {
            vocab: vocab.to_string(),
            template: None,
            tool_use_template: None,
            vocab_only: false,
            size: Size::Tiny,
            seed: 42,
            context_length: 8192,
        }
    }
}

/// The llama.cpp tree whose models/ folder holds the vocabularies and templates:
/// `LLB_LLAMA_CPP_DIR` at run time, else the tree this crate was built from.
/// The two tools the tests, the stress runs and the fuzz seeds call: enums and bounds give the
/// strict modes something to enforce on a random-weight model.
pub fn sample_tools() -> serde_json::Value {
    serde_json::json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "enum": ["Paris", "Rome"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "required": ["city", "days"]}}},
        {"type": "function", "function": {"name": "get_time", "description": "Get the time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["tz"]}}}
    ])
}

pub fn llama_cpp_dir() -> PathBuf {
    std::env::var_os("LLB_LLAMA_CPP_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(crate::version::LLAMA_CPP_DIR))
}

pub fn vocab_path(vocab: &str) -> PathBuf {
    let p = Path::new(vocab);
    if vocab.ends_with(".gguf") || p.components().count() > 1 {
        return p.to_path_buf();
    }
    llama_cpp_dir().join("models").join(format!("ggml-vocab-{vocab}.gguf"))
}

/// A template argument: a file path, or the name of a corpus template (`Qwen-Qwen2.5-7B-Instruct`).
pub fn read_template(arg: &str) -> Result<String> {
    let direct = Path::new(arg);
    let corpus = llama_cpp_dir().join("models/templates").join(format!("{}.jinja", arg.trim_end_matches(".jinja")));
    for p in [direct, corpus.as_path()] {
        if p.is_file() {
            return std::fs::read_to_string(p)
                .map_err(|e| Error::new(ErrorCode::IoError, format!("reading {}: {e}", p.display())));
        }
    }
    bail!(FileNotFound, "template not found: {arg} (neither a file nor {})", corpus.display())
}

struct Shape {
    n_embd: u64,
    n_head: u64,
    n_head_kv: u64,
    n_ff: u64,
    n_layer: u64,
    embd_type: TensorType,
}

fn layer_tensors(i: u64, s: &Shape, ty: TensorType) -> Vec<TensorSpec> {
    let kv = s.n_embd / s.n_head * s.n_head_kv;
    let t =
        |name: &str, dims: Vec<u64>, ty, fill| TensorSpec { name: format!("blk.{i}.{name}.weight"), dims, ty, fill };
    vec![
        t("attn_norm", vec![s.n_embd], TensorType::F32, Fill::Const(1.0)),
        t("attn_q", vec![s.n_embd, s.n_embd], ty, Fill::Random),
        t("attn_k", vec![s.n_embd, kv], ty, Fill::Random),
        t("attn_v", vec![s.n_embd, kv], ty, Fill::Random),
        t("attn_output", vec![s.n_embd, s.n_embd], ty, Fill::Random),
        t("ffn_norm", vec![s.n_embd], TensorType::F32, Fill::Const(1.0)),
        t("ffn_gate", vec![s.n_embd, s.n_ff], ty, Fill::Random),
        t("ffn_up", vec![s.n_embd, s.n_ff], ty, Fill::Random),
        t("ffn_down", vec![s.n_ff, s.n_embd], ty, Fill::Random),
    ]
}

fn shape(size: Size, n_vocab: u64) -> Shape {
    match size {
        Size::Tiny => Shape { n_embd: 64, n_head: 4, n_head_kv: 2, n_ff: 128, n_layer: 2, embd_type: TensorType::Q8_0 },
        Size::Small => {
            Shape { n_embd: 128, n_head: 4, n_head_kv: 2, n_ff: 256, n_layer: 2, embd_type: TensorType::Q8_0 }
        }
        Size::AtLeast(bytes) => {
            let mut s =
                Shape { n_embd: 2048, n_head: 16, n_head_kv: 8, n_ff: 5632, n_layer: 1, embd_type: TensorType::F16 };
            let embd = TensorType::F16.bytes(s.n_embd * n_vocab);
            let layer: u64 = layer_tensors(0, &s, TensorType::F16).iter().map(TensorSpec::n_bytes).sum();
            s.n_layer = (bytes.saturating_sub(embd)).div_ceil(layer).max(1);
            s
        }
    }
}

/// Writes a llama-architecture GGUF at `out`. Returns the number of tensor bytes written.
// Over 60 lines: the fixture's keys are written in one list, in the order llama.cpp's loader
// reads them; splitting it would scatter one file's layout over several functions.
pub fn write_fixture(opts: &FixtureOptions, out: &Path) -> Result<u64> {
    let vpath = vocab_path(&opts.vocab);
    let meta = gguf::read_metadata(&vpath).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound { ErrorCode::FileNotFound } else { ErrorCode::NotAGguf };
        Error::new(code, format!("vocabulary {}: {e}", vpath.display()))
    })?;
    let n_vocab =
        meta.iter().find(|(k, _)| k == "tokenizer.ggml.tokens").and_then(|(_, v)| v.array_len()).ok_or_else(|| {
            Error::new(ErrorCode::InvalidArgument, format!("{} has no tokenizer.ggml.tokens", vpath.display()))
        })? as u64;

    let s = shape(opts.size, n_vocab);
    let vocab_name = vpath.file_stem().map(|f| f.to_string_lossy().replace("ggml-vocab-", "")).unwrap_or_default();
    let mut kvs: Vec<(String, GgufValue)> = vec![
        ("general.architecture".into(), GgufValue::str("llama")),
        ("general.name".into(), GgufValue::str(&format!("llb fixture ({vocab_name})"))),
        ("general.alignment".into(), GgufValue::u32(gguf::ALIGNMENT as u32)),
        ("general.file_type".into(), GgufValue::u32(1)),
        ("llama.context_length".into(), GgufValue::u32(opts.context_length)),
        ("llama.embedding_length".into(), GgufValue::u32(s.n_embd as u32)),
        ("llama.block_count".into(), GgufValue::u32(s.n_layer as u32)),
        ("llama.feed_forward_length".into(), GgufValue::u32(s.n_ff as u32)),
        ("llama.attention.head_count".into(), GgufValue::u32(s.n_head as u32)),
        ("llama.attention.head_count_kv".into(), GgufValue::u32(s.n_head_kv as u32)),
        ("llama.rope.dimension_count".into(), GgufValue::u32((s.n_embd / s.n_head) as u32)),
        ("llama.rope.freq_base".into(), GgufValue::f32(10000.0)),
        ("llama.attention.layer_norm_rms_epsilon".into(), GgufValue::f32(1e-5)),
        ("llama.vocab_size".into(), GgufValue::u32(n_vocab as u32)),
    ];
    // The tokenizer, minus any template the vocabulary file carries: templates are set on purpose.
    kvs.extend(
        meta.into_iter().filter(|(k, _)| k.starts_with("tokenizer.") && !k.starts_with("tokenizer.chat_template")),
    );
    if let Some(t) = &opts.template {
        kvs.push(("tokenizer.chat_template".into(), GgufValue::str(t)));
    }
    if let Some(t) = &opts.tool_use_template {
        kvs.push(("tokenizer.chat_template.tool_use".into(), GgufValue::str(t)));
    }

    let mut tensors = Vec::new();
    if !opts.vocab_only {
        tensors.push(TensorSpec {
            name: "token_embd.weight".into(),
            dims: vec![s.n_embd, n_vocab],
            ty: s.embd_type,
            fill: Fill::Random,
        });
        tensors.push(TensorSpec {
            name: "output_norm.weight".into(),
            dims: vec![s.n_embd],
            ty: TensorType::F32,
            fill: Fill::Const(1.0),
        });
        for i in 0..s.n_layer {
            tensors.extend(layer_tensors(i, &s, TensorType::F16));
        }
    }
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::new(ErrorCode::IoError, format!("creating {}: {e}", dir.display())))?;
    }
    gguf::write(out, &kvs, &tensors, opts.seed)
        .map_err(|e| Error::new(ErrorCode::IoError, format!("writing {}: {e}", out.display())))?;
    Ok(tensors.iter().map(TensorSpec::n_bytes).sum())
}
