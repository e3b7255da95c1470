//! Engine settings: an [`EngineConfig`] resolved once, when an engine or pool is created, into
//! [`EngineSettings`], where every default is filled in. The defaults live here and nowhere else,
//! one comment per field (as llama.h's `llama_context_default_params()` does), so nothing
//! downstream reads an `Option` of the config or writes a default of its own.

use super::wire::EngineConfig;
use crate::error::{bail, Result};
use serde_json::{Map, Value};

/// A context's size in tokens when the config gives none: per parallel request, and at most the
/// model's training context.
pub const DEFAULT_N_CTX: u32 = 4096;
/// The logical batch (`n_batch`) when the config gives none.
pub const DEFAULT_N_BATCH: u32 = 512;
/// The physical batch (`n_ubatch`) is `n_batch` up to this: llama.cpp reserves logits for a
/// whole physical batch (n_vocab × n_ubatch × 4 bytes: 5 GB for a 152k vocabulary at 8192), and
/// larger physical batches gain nothing on a CPU.
pub const MAX_UBATCH: u32 = 512;
/// A pool's `n_parallel` when the config gives none.
pub const DEFAULT_N_PARALLEL: u32 = 4;
/// Waiting requests per running one when the config gives no `max_queue`.
pub const DEFAULT_QUEUE_PER_PARALLEL: u32 = 16;
/// Sequences per running request a pool keeps (the rest hold idle conversations for reuse).
pub const SLOTS_PER_PARALLEL: usize = 4;
/// The self-drafting speculative types llb runs, by llama.cpp's names (common/speculative.h):
/// they draft from the tokens of the conversation itself.
pub const SPECULATIVE_TYPES: [&str; 5] = ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"];
/// The draft-model type llb runs: a smaller model of the same vocabulary drafts.
pub const DRAFT_SIMPLE: &str = "draft-simple";
/// The drafter when the config names none (docs/design.md, "Speculative decoding": it costs
/// nothing measurable where nothing repeats, and drafts the longest copies).
pub const DEFAULT_SPECULATIVE_TYPE: &str = "ngram-mod";
/// The most tokens one draft holds when the config gives no `draft_max`: a rejected draft costs
/// its rows in the verifying batch (a copy of n_vocab floats each, and compute on a CPU).
pub const DEFAULT_DRAFT_MAX: usize = 16;
/// The n-gram the drafters look up, in tokens, when the config gives no `ngram_size` (llama.cpp's
/// default is 12 for the map types and 24 for ngram-mod).
pub const DEFAULT_NGRAM_SIZE: u16 = 4;
/// `draft_max` may be at most this (and the batch, `n_batch`, bounds it too).
pub const MAX_DRAFT: i64 = 256;
/// llama.cpp's limit on sequences (`LLAMA_MAX_SEQ`).
pub const MAX_SEQ_IDS: usize = 256;
/// The prompt cache's RAM budget when the config gives none, in whole contexts' KV cache (the
/// context's `n_ctx` tokens): the states of about this many full contexts' worth of
/// conversations that left it.
pub const PROMPT_CACHE_RAM_CONTEXTS: u64 = 4;
/// ... and at most this share of the machine's memory, and at most 8 GiB (llama-server's
/// `--cache-ram` default).
pub const PROMPT_CACHE_RAM_SHARE: u64 = 4;
pub const PROMPT_CACHE_RAM_MAX: u64 = 8 << 30;
/// The disk tier's budget when a `dir` is given without `disk_bytes`.
pub const PROMPT_CACHE_DISK_BYTES: u64 = 16 << 30;
/// ggml's thread limit (`GGML_MAX_N_THREADS`): more makes ggml allocate and spawn per thread.
pub const MAX_THREADS: i32 = 512;

/// What a config opens: an engine (`llb_chat_create`: one conversation, one request at a time)
/// or a pool (`llb_pool_create`: `n_parallel` requests at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleKind {
    Engine,
    Pool,
}

/// An engine's or pool's settings, every default resolved.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Requests decoding at once. Engine: 1. Pool: `n_parallel`, default 4 (1 to 128).
    pub n_parallel: u32,
    /// KV cells of the context, shared by its sequences. Default: 4096 per parallel request,
    /// each at most the model's training context. An engine's may not exceed the training
    /// context (llb sets no RoPE scaling: more buys nothing and costs memory).
    pub n_ctx: u32,
    /// The most tokens one sequence (a prompt and its reply) may hold: an engine's `n_ctx`; a
    /// pool's `n_ctx` (or 4096 by default), at most the training context.
    pub max_seq: u32,
    /// The logical batch: `n_batch`, default 512, at most `n_ctx`.
    pub n_batch: u32,
    /// The physical batch: `n_batch` up to 512 ([`MAX_UBATCH`]).
    pub n_ubatch: u32,
    /// Sequences of the context. Engine: 1. Pool: 4 per parallel request (at most 256): running
    /// requests plus idle conversations kept for reuse.
    pub n_slots: usize,
    /// Requests that may wait for a turn (one more is `queue_full`): `max_queue` (pools only),
    /// default 16 per parallel request.
    pub max_queue: usize,
    /// The most compute threads a decode uses: `n_threads` (1 to 512), default the process's
    /// thread budget (the machine's cores, or `LLB_THREAD_BUDGET`; src/threads.rs).
    pub n_threads: usize,
    /// Decode threads follow what the machine gives, `n_threads` the ceiling (docs/scaling.md,
    /// "Sharing the cores"). Default true (docs/benchmarks.md, "Decode when the host is busy").
    pub adaptive_threads: bool,
    /// How hard idle compute threads poll before sleeping, 0 to 100 as llama.cpp's `--poll`.
    /// Default 0 (sleep at once: the cores go to the host).
    pub thread_poll: u32,
    /// The seed of requests that give none. Default none: each such request draws its own.
    pub seed: Option<u64>,
    /// Greedy call wrappers for requests that do not say (docs/design.md, "Deterministic call
    /// syntax"). Default true.
    pub deterministic_call_syntax: bool,
    /// Jump-forward decoding for requests that do not say (docs/design.md, "Jump-forward
    /// decoding"). Default true.
    pub jump_forward: bool,
    /// Replay mode for every request (docs/design.md, "Determinism"): the context computes
    /// with reference kernels, threads stay fixed, nothing speculates. Default false.
    pub deterministic: bool,
    /// The reasoning budget of requests that set none (-1 unlimited, 0 no thinking). Default
    /// none: a request's `reasoning_effort` may then stand for one (docs/tool-calls.md).
    pub reasoning_budget: Option<i64>,
    /// Template kwargs every request gets (a request's own override them). Default none.
    pub chat_template_kwargs: Map<String, Value>,
    /// The prompt cache's RAM budget: `prompt_cache.ram_bytes`; None: sized from the model once
    /// it is loaded ([`prompt_cache_ram`]).
    pub prompt_cache_ram: Option<u64>,
    /// The disk tier's directory: `prompt_cache.dir`. Default none (no disk tier).
    pub prompt_cache_dir: Option<std::path::PathBuf>,
    /// The disk tier's budget: `prompt_cache.disk_bytes`, default 16 GiB.
    pub prompt_cache_disk: u64,
    /// `prompt_cache.secret_file` (`~` expanded) and `prompt_cache.shared`.
    pub prompt_cache_secret: Option<std::path::PathBuf>,
    pub prompt_cache_shared: bool,
    /// Speculative decoding: `speculative.*` resolved.
    pub speculative: SpeculativeSettings,
}

/// How an engine or pool speculates (the running state of one request's speculation is
/// `speculate::Speculation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeculativeSettings {
    /// Who drafts: `speculative.type`, default [`DEFAULT_SPECULATIVE_TYPE`]; a
    /// `speculative.draft_model_path` makes it [`DRAFT_SIMPLE`] with that model.
    pub drafter: Drafter,
    /// Which requests speculate: every one that does not say `"speculative": false`, or, with
    /// `"type": "none"`, only those that say `"speculative": true` (with the default drafter).
    pub drafting: Drafting,
    /// The most tokens a draft holds: `speculative.draft_max`, default [`DEFAULT_DRAFT_MAX`].
    pub draft_max: usize,
    /// Shorter drafts are dropped: `speculative.draft_min`, default 0.
    pub draft_min: usize,
    /// The n-gram looked up: `speculative.ngram_size`, default [`DEFAULT_NGRAM_SIZE`].
    pub ngram_size: u16,
    /// Drafts sized by the cost model: `speculative.adaptive`, default true (docs/design.md,
    /// "The cost model"); false verifies every draft whole, as llama-server does.
    pub adaptive: bool,
}

/// The drafter of speculative decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drafter {
    /// One of llama.cpp's self-drafting types ([`SPECULATIVE_TYPES`]): drafts come from the
    /// conversation itself.
    SelfDrafting(&'static str),
    /// [`DRAFT_SIMPLE`]: a smaller model of the same vocabulary drafts.
    Model(DraftModel),
}

/// Which requests speculate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drafting {
    /// Every request that does not say `"speculative": false`.
    EveryRequest,
    /// Off unless a request says `"speculative": true` (the config's `"type": "none"`).
    OnlyWhenAsked,
}

/// A draft model: its GGUF, and its layers on the GPU (None: as many as the target's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftModel {
    pub path: std::path::PathBuf,
    pub n_gpu_layers: Option<i32>,
}

impl SpeculativeSettings {
    fn resolve(config: Option<&super::wire::SpeculativeConfig>) -> SpeculativeSettings {
        let c = config.cloned().unwrap_or_default();
        let named = c.kind.as_deref().and_then(|k| SPECULATIVE_TYPES.iter().copied().find(|t| *t == k));
        let drafter = match c.draft_model_path {
            Some(p) => Drafter::Model(DraftModel { path: p.into(), n_gpu_layers: c.draft_n_gpu_layers }),
            None => Drafter::SelfDrafting(named.unwrap_or(DEFAULT_SPECULATIVE_TYPE)),
        };
        SpeculativeSettings {
            drafter,
            drafting: if c.kind.as_deref() == Some("none") { Drafting::OnlyWhenAsked } else { Drafting::EveryRequest },
            draft_max: c.draft_max.map_or(DEFAULT_DRAFT_MAX, |n| n as usize),
            draft_min: c.draft_min.map_or(0, |n| n as usize),
            ngram_size: c.ngram_size.map_or(DEFAULT_NGRAM_SIZE, |n| n as u16),
            adaptive: c.adaptive.unwrap_or(true),
        }
    }
}

/// Why llb refuses a draft-model type it does not run, or None.
fn unrun_draft_type(kind: &str) -> Option<&'static str> {
    match kind {
        "draft-eagle3" => Some("llama.cpp b9371's draft-eagle3 drafts nothing yet (its implementation is a TODO there); use draft-simple with a draft model, or a self-drafting type"),
        "draft-mtp" => Some("llb does not run draft-mtp yet (it drafts from the model's own MTP heads and needs the target's embeddings of every decode); use draft-simple with a draft model, or a self-drafting type"),
        _ => None,
    }
}

/// Checks `speculative` of a config: a known type llb runs, and draft sizes in range.
fn validate_speculative(c: &super::wire::SpeculativeConfig) -> Result<()> {
    let kind = c.kind.as_deref();
    if let Some(k) = kind {
        if let Some(why) = unrun_draft_type(k) {
            bail!(InvalidArgument, "field `speculative.type`: `{k}`: {why}");
        }
        if k != "none" && k != DRAFT_SIMPLE && !SPECULATIVE_TYPES.contains(&k) {
            bail!(
                InvalidArgument,
                "field `speculative.type`: unknown type `{k}`: one of none, {}, {DRAFT_SIMPLE}",
                SPECULATIVE_TYPES.join(", ")
            );
        }
    }
    match (kind, c.draft_model_path.as_deref()) {
        (Some(DRAFT_SIMPLE), None) => {
            bail!(InvalidArgument, "field `speculative.draft_model_path`: `{DRAFT_SIMPLE}` needs a draft model's GGUF")
        }
        (Some(k), Some(_)) if k != DRAFT_SIMPLE && k != "none" => bail!(
            InvalidArgument,
            "field `speculative.draft_model_path`: type `{k}` drafts without a model; a draft model is type `{DRAFT_SIMPLE}`"
        ),
        (_, Some("")) => bail!(InvalidArgument, "field `speculative.draft_model_path`: empty"),
        _ => {}
    }
    if c.draft_n_gpu_layers.is_some() && c.draft_model_path.is_none() {
        bail!(InvalidArgument, "field `speculative.draft_n_gpu_layers`: there is no draft model (`draft_model_path`)");
    }
    if let Some(n) = c.draft_n_gpu_layers.filter(|n| *n < -1) {
        bail!(InvalidArgument, "field `speculative.draft_n_gpu_layers`: {n} is not -1 (all) or a layer count");
    }
    if let Some(n) = c.draft_max.filter(|n| !(1..=MAX_DRAFT).contains(n)) {
        bail!(InvalidArgument, "field `speculative.draft_max`: {n} is not 1 to {MAX_DRAFT}");
    }
    if let Some(n) = c.ngram_size.filter(|n| !(1..=1024).contains(n)) {
        bail!(InvalidArgument, "field `speculative.ngram_size`: {n} is not 1 to 1024");
    }
    let max = c.draft_max.unwrap_or(DEFAULT_DRAFT_MAX as i64);
    if let Some(n) = c.draft_min.filter(|n| !(0..=max).contains(n)) {
        bail!(InvalidArgument, "field `speculative.draft_min`: {n} is not 0 to draft_max ({max})");
    }
    Ok(())
}

/// A path of the config, `~` or `~/...` at its start expanded as a shell would.
fn home(p: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(p);
    let Ok(rest) = path.strip_prefix("~") else { return path.to_path_buf() };
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => std::path::PathBuf::from(home).join(rest),
        None => path.to_path_buf(),
    }
}

/// The prompt cache's default RAM budget for a context whose whole KV cache takes
/// `context_kv_bytes`, on a machine with `memory` bytes (0: unknown).
pub fn prompt_cache_ram(context_kv_bytes: u64, memory: u64) -> u64 {
    let mut b = context_kv_bytes.saturating_mul(PROMPT_CACHE_RAM_CONTEXTS).min(PROMPT_CACHE_RAM_MAX);
    if memory > 0 {
        b = b.min(memory / PROMPT_CACHE_RAM_SHARE);
    }
    b
}

impl EngineConfig {
    /// Checks what serde cannot (value ranges, and fields only a pool takes), before the model
    /// is opened.
    pub fn validate(&self, kind: HandleKind) -> Result<()> {
        if self.n_ctx == Some(0) || self.n_batch == Some(0) {
            bail!(InvalidArgument, "n_ctx and n_batch must be positive");
        }
        if self.reasoning_budget.is_some_and(|b| b < -1) {
            bail!(
                InvalidArgument,
                "field `reasoning_budget`: must be -1 (unlimited), 0 (no thinking) or a number of tokens"
            );
        }
        if self.n_threads.is_some_and(|t| t <= 0) {
            bail!(InvalidArgument, "field `n_threads`: must be positive");
        }
        if let Some(t) = self.n_threads.filter(|t| *t > MAX_THREADS) {
            bail!(InvalidArgument, "field `n_threads`: {t} is more than ggml's limit of {MAX_THREADS} threads");
        }
        if self.thread_poll.is_some_and(|p| p > 100) {
            bail!(InvalidArgument, "field `thread_poll`: must be 0 to 100");
        }
        match (self.n_parallel, kind) {
            (Some(n), HandleKind::Pool) if n == 0 || n as usize > MAX_SEQ_IDS / 2 => {
                bail!(InvalidArgument, "field `n_parallel`: must be 1 to {}", MAX_SEQ_IDS / 2)
            }
            (Some(n), HandleKind::Engine) if n != 1 => bail!(
                InvalidArgument,
                "field `n_parallel`: an engine (llb_chat_create) runs one request at a time; open a pool \
                 (llb_pool_create) to serve {n} at once"
            ),
            _ => {}
        }
        if let Some(pc) = &self.prompt_cache {
            if pc.dir.as_deref() == Some("") {
                bail!(InvalidArgument, "field `prompt_cache.dir`: must be a directory path");
            }
            if pc.secret_file.as_deref() == Some("") {
                bail!(InvalidArgument, "field `prompt_cache.secret_file`: must be a file path");
            }
            if (pc.secret_file.is_some() || pc.shared.is_some()) && pc.dir.is_none() {
                bail!(
                    InvalidArgument,
                    "fields `prompt_cache.secret_file` and `shared` concern `prompt_cache.dir`, which is not set"
                );
            }
            if pc.disk_bytes.is_some() && pc.dir.is_none() {
                bail!(
                    InvalidArgument,
                    "field `prompt_cache.disk_bytes`: sets the budget of `prompt_cache.dir`, which is not set"
                );
            }
        }
        if let Some(sc) = &self.speculative {
            validate_speculative(sc)?;
        }
        if self.max_queue.is_some() && kind == HandleKind::Engine {
            bail!(InvalidArgument, "field `max_queue`: only pools (llb_pool_create) queue requests");
        }
        Ok(())
    }
}

impl EngineSettings {
    /// `config` (checked by [`EngineConfig::validate`]) with every default filled in.
    /// `n_ctx_train` is the model's training context, when its header gives one.
    pub fn resolve(config: &EngineConfig, kind: HandleKind, n_ctx_train: Option<u32>) -> Result<EngineSettings> {
        let n_parallel = match kind {
            HandleKind::Engine => 1,
            HandleKind::Pool => config.n_parallel.unwrap_or(DEFAULT_N_PARALLEL),
        };
        let (n_ctx, max_seq) = context_size(config.n_ctx, n_ctx_train, n_parallel)?;
        let n_batch = config.n_batch.unwrap_or(DEFAULT_N_BATCH).min(n_ctx);
        Ok(EngineSettings {
            n_parallel,
            n_ctx,
            max_seq,
            n_batch,
            n_ubatch: n_batch.min(MAX_UBATCH),
            n_slots: match kind {
                HandleKind::Engine => 1,
                HandleKind::Pool => (n_parallel as usize * SLOTS_PER_PARALLEL).min(MAX_SEQ_IDS),
            },
            max_queue: config.max_queue.unwrap_or(n_parallel * DEFAULT_QUEUE_PER_PARALLEL) as usize,
            n_threads: config.n_threads.map_or(crate::threads::total(), |t| t as usize),
            // Replay mode keeps the thread count fixed (docs/design.md, "Determinism").
            adaptive_threads: config.adaptive_threads.unwrap_or(true) && !config.deterministic.unwrap_or(false),
            thread_poll: config.thread_poll.unwrap_or(0),
            seed: config.seed,
            deterministic_call_syntax: config.deterministic_call_syntax.unwrap_or(true),
            jump_forward: config.jump_forward.unwrap_or(true),
            deterministic: config.deterministic.unwrap_or(false),
            reasoning_budget: config.reasoning_budget,
            chat_template_kwargs: config.chat_template_kwargs.clone().unwrap_or_default(),
            prompt_cache_ram: config.prompt_cache.as_ref().and_then(|p| p.ram_bytes),
            prompt_cache_dir: config.prompt_cache.as_ref().and_then(|p| p.dir.as_deref().map(home)),
            prompt_cache_secret: config.prompt_cache.as_ref().and_then(|p| p.secret_file.as_deref().map(home)),
            prompt_cache_shared: config.prompt_cache.as_ref().and_then(|p| p.shared).unwrap_or(false),
            prompt_cache_disk: config
                .prompt_cache
                .as_ref()
                .and_then(|p| p.disk_bytes)
                .unwrap_or(PROMPT_CACHE_DISK_BYTES),
            speculative: SpeculativeSettings::resolve(config.speculative.as_ref()),
        })
    }
}

/// The context's size in tokens and the most one sequence may hold. An engine's `n_ctx` is its
/// conversation's (4096 by default, at most the training context: llb sets no RoPE scaling, so
/// more buys nothing and costs memory, up to terabytes for a u32). A pool's `n_ctx` is the KV
/// budget all its sequences share (by default 4096 per parallel request); one sequence still
/// holds at most the training context.
fn context_size(n_ctx: Option<u32>, n_ctx_train: Option<u32>, n_parallel: u32) -> Result<(u32, u32)> {
    let per_seq = DEFAULT_N_CTX.min(n_ctx_train.unwrap_or(DEFAULT_N_CTX));
    let train = n_ctx_train.unwrap_or(u32::MAX);
    Ok(match n_ctx {
        Some(n) if n_parallel == 1 && n > train => bail!(
            InvalidArgument,
            "field `n_ctx`: {n} is more than the {train} tokens of context the model was trained for"
        ),
        Some(n) => (n, n.min(train)),
        None => (per_seq.saturating_mul(n_parallel), per_seq),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn home_is_expanded() {
        if let Some(h) = std::env::var_os("HOME").map(PathBuf::from) {
            assert_eq!(home("~/x/y"), h.join("x/y"));
        }
        assert_eq!(home("/a/~b"), PathBuf::from("/a/~b"));
    }

    fn config(v: serde_json::Value) -> EngineConfig {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_are_resolved_once() {
        let c = config(serde_json::json!({"model_path": "m.gguf"}));
        let e = EngineSettings::resolve(&c, HandleKind::Engine, Some(32768)).unwrap();
        assert_eq!((e.n_parallel, e.n_ctx, e.max_seq, e.n_batch, e.n_ubatch), (1, 4096, 4096, 512, 512));
        assert_eq!((e.n_slots, e.max_queue), (1, 16));
        assert!(e.adaptive_threads && e.deterministic_call_syntax && e.jump_forward);
        assert_eq!((e.thread_poll, e.seed, e.reasoning_budget), (0, None, None));
        let p = EngineSettings::resolve(&c, HandleKind::Pool, Some(2048)).unwrap();
        assert_eq!((p.n_parallel, p.n_ctx, p.max_seq, p.n_slots, p.max_queue), (4, 8192, 2048, 16, 64));
        let c = config(serde_json::json!({"model_path": "m.gguf", "n_ctx": 256, "n_batch": 1024}));
        let e = EngineSettings::resolve(&c, HandleKind::Engine, Some(512)).unwrap();
        assert_eq!((e.n_ctx, e.n_batch, e.n_ubatch), (256, 256, 256), "the batch is at most the context");
        let c = config(serde_json::json!({"model_path": "m.gguf", "n_ctx": 1024}));
        assert!(EngineSettings::resolve(&c, HandleKind::Engine, Some(512)).is_err(), "past the training context");
        assert_eq!(EngineSettings::resolve(&c, HandleKind::Pool, Some(512)).unwrap().max_seq, 512);
    }
}
