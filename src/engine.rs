//! Engines and pools: the handles behind `llb_chat_*` and `llb_pool_*`.
//!
//! Both are a model's chat side ([`Prompter`]) and vocabulary ([`Vocab`]) over one scheduler
//! ([`Scheduler`]: a llama context whose sequences requests share) and a book of the model's
//! replies for exact replay. A config is resolved once, at create, into [`EngineSettings`]; a
//! request, before it runs, into a [`ResolvedRequest`].
//! An engine is one conversation: one sequence, one request at a time (`busy` otherwise), events
//! to the callback given at creation. A pool serves many requests at once on `n_parallel`
//! sequences of one batched context, sharing prompt prefixes across them; each call brings its
//! own callback. Either way a request runs on its caller's thread ([`generate`]), and its events
//! are sent from there.

use crate::backend::LoadParams;
use crate::error::{bail, Error, ErrorCode, Result};
use crate::generate::Run;
use crate::model::{self, Model};
use crate::model_info;
use crate::prompt::Prompter;
use crate::prompt_cache;
use crate::request::{
    self, DraftModel, Drafter, EngineConfig, EngineSettings, HandleKind, ResolvedRequest,
};
use crate::scheduler::{DraftPlan, Proposer, SchedConfig, Scheduler};
use crate::session::ReplyBook;
use crate::shim::Probe;
use crate::tokens::Vocab;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex, TryLockError};

/// Receives events (JSON); returns false to cancel the running operation.
pub type EventSink = Box<dyn Fn(&Value) -> bool + Send + Sync>;

/// Refuses an `n_ctx` whose KV cache alone (keys and values of the configured types for every
/// layer, the usual layout; an estimate) would not fit in the machine's memory, instead of
/// letting llama.cpp try to allocate and clear it.
fn check_context_memory(model: &Model, n_ctx: u32, cp: &crate::backend::ContextParams) -> Result<()> {
    let need = context_kv_bytes(model, n_ctx, cp);
    let have = machine_memory();
    if have > 0 && need > have {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        bail!(
            InvalidArgument,
            "field `n_ctx`: a context of {n_ctx} tokens needs about {:.1} GiB of KV cache for this model, more than \
             this machine's {:.1} GiB of memory",
            gib(need),
            gib(have)
        );
    }
    Ok(())
}

/// The KV cache of a context of `n_ctx` tokens, in bytes (an estimate: the usual layout).
fn context_kv_bytes(model: &Model, n_ctx: u32, cp: &crate::backend::ContextParams) -> u64 {
    let per_token = (cp.kv_bytes_per_element() * model.kv_elements_per_token() as f64) as u64;
    per_token.saturating_mul(n_ctx as u64)
}

/// The machine's physical memory in bytes (0: unknown).
fn machine_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    (pages.max(0) as u64).saturating_mul(page.max(0) as u64)
}

/// The prompt cache's tiers: the config's, the RAM budget sized from the model's KV cache when
/// the config gives none.
fn prompt_cache_settings(
    s: &EngineSettings,
    model: &Model,
    cp: &crate::backend::ContextParams,
) -> prompt_cache::Settings {
    let ram = s
        .prompt_cache_ram
        .unwrap_or_else(|| request::prompt_cache_ram(context_kv_bytes(model, s.n_ctx, cp), machine_memory()));
    prompt_cache::Settings {
        ram_bytes: ram,
        dir: s.prompt_cache_dir.clone(),
        disk_bytes: s.prompt_cache_disk,
        secret_file: s.prompt_cache_secret.clone(),
        shared: s.prompt_cache_shared,
        as_cold: false, // set by the scheduler, which decides it
    }
}

/// What an engine and a pool are made of. Field order matters for Drop: the scheduler (and its
/// context) goes before the prompter and the vocabulary, which hold the model.
struct Chat {
    sched: Scheduler,
    prompter: Prompter,
    vocab: Arc<Vocab>,
    book: ReplyBook,
    model_name: String,
    settings: EngineSettings,
    /// The model's vocabulary size, which a request's `logit_bias` is checked against.
    n_vocab: i32,
}

impl Chat {
    /// Opens the model's chat side and its context. Refuses non-tool models
    /// (`tools_unsupported`) before loading weights or allocating a KV cache.
    fn open(config: &EngineConfig, kind: HandleKind) -> Result<Chat> {
        crate::init_backend();
        config.validate(kind)?;
        let (load, ctx_params) = crate::backend::resolve(config)?;
        let path = Path::new(&config.model_path).to_path_buf();
        let ins = model_info::inspect(&path)?;
        if !ins.probe.supports_tools() {
            return Err(model_info::tools_unsupported(&path, &ins.probe));
        }
        let n_ctx_train = ins.header.n_ctx_train.filter(|n| *n > 0).map(|n| n.min(u32::MAX as i64) as u32);
        let settings = EngineSettings::resolve(config, kind, n_ctx_train)?;
        let model = model::acquire_with(&path, &load)?;
        model.check_kv_types(&ctx_params)?;
        check_context_memory(&model, settings.n_ctx, &ctx_params)?;
        let templates = model.templates()?;
        crate::fault::site("create");
        let s = &settings;
        let exact_reuse = !model.uses_rpc && crate::backend::devices().iter().all(|d| d.kind == "cpu");
        // An emulated GPU's profile (benchmarks only) makes the CPU's steps count as a device's.
        let on_device = crate::backend::device_does_the_work(&load, &ctx_params, model.n_layer())
            || crate::emulate::profile().is_some();
        let mut sched = Scheduler::start(
            &model,
            SchedConfig {
                n_ctx: s.n_ctx,
                n_batch: s.n_batch,
                n_ubatch: s.n_ubatch,
                n_slots: s.n_slots,
                n_parallel: s.n_parallel as usize,
                max_queue: s.max_queue,
                n_threads: s.n_threads,
                // With every layer on a device the tuner would only measure noise (issue 31).
                adaptive_threads: s.adaptive_threads && !on_device,
                on_device,
                thread_poll: s.thread_poll,
                prompt_cache: prompt_cache_settings(s, &model, &ctx_params),
                backend: ctx_params,
                deterministic: s.deterministic,
                exact_reuse,
                reuse_as_cold: exact_reuse && !s.deterministic && s.n_slots == 1,
            },
        )?;
        if let Some(plan) = draft_plan(&settings, &model, &load, &ctx_params)? {
            sched.open_drafters(plan)?;
        }
        let vocab = Arc::new(Vocab::new(model));
        let n_vocab = vocab.n_tokens();
        Ok(Chat {
            sched,
            prompter: Prompter::new(vocab.clone(), templates, ins.probe),
            vocab,
            book: ReplyBook::new(settings.n_slots * 2),
            model_name: path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
            settings,
            n_vocab,
        })
    }

    /// Parses and resolves a request (see [`request::resolve`]).
    fn resolve(&self, request_json: &str) -> Result<ResolvedRequest> {
        request::resolve(request_json, &self.settings, self.n_vocab)
    }

    fn infer(&self, request_json: &str, emit: &dyn Fn(&Value) -> bool) -> Result<Value> {
        let req = self.resolve(request_json)?;
        let run = Run {
            prompter: &self.prompter,
            vocab: &self.vocab,
            sched: &self.sched,
            book: &self.book,
            model_name: &self.model_name,
            max_seq: self.settings.max_seq as usize,
            n_batch: self.settings.n_batch as usize,
            emit,
        };
        run.run(&req)
    }
}

/// The drafter of speculative decoding (docs/design.md, "Speculative decoding"), one lane per
/// request that runs at once; the scheduler makes it. None for a model whose memory cannot cut
/// a sequence (recurrent and hybrid models: every rejected draft would rebuild the sequence).
fn draft_plan(
    settings: &EngineSettings,
    model: &Model,
    load: &LoadParams,
    ctx_params: &crate::backend::ContextParams,
) -> Result<Option<DraftPlan>> {
    if !model.can_cut() {
        return Ok(None);
    }
    let s = &settings.speculative;
    let proposer = match &s.drafter {
        Drafter::SelfDrafting(kind) => Proposer::SelfDrafting { kind: kind.to_string(), ngram_size: s.ngram_size },
        Drafter::Model(draft) => {
            let draft = load_draft_model(draft, load)?;
            draft.check_kv_types(ctx_params)?;
            Proposer::Model(draft)
        }
    };
    Ok(Some(DraftPlan {
        proposer,
        lanes: settings.n_parallel as usize,
        draft_max: s.draft_max,
        draft_min: s.draft_min,
        costed: s.adaptive,
    }))
}

/// draft-simple's model, loaded as the target is (its layers on the GPU as many as the target's
/// unless `draft_n_gpu_layers` says).
fn load_draft_model(draft: &DraftModel, load: &LoadParams) -> Result<Arc<Model>> {
    if !draft.path.is_file() {
        return Err(Error::new(
            ErrorCode::IoError,
            format!("speculative.draft_model_path: no such file: {}", draft.path.display()),
        ));
    }
    let params = LoadParams { n_gpu_layers: draft.n_gpu_layers.unwrap_or(load.n_gpu_layers), ..load.clone() };
    let model = model::acquire_with(&draft.path, &params)?;
    if !model.can_cut() {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            "speculative.draft_model_path: a recurrent or hybrid model cannot draft (its memory cannot take drafted tokens back)",
        ));
    }
    Ok(model)
}

/// An engine: one conversation's context over a shared model.
pub struct Engine {
    chat: Chat,
    busy: Mutex<()>,
    events: Option<EventSink>,
}

impl Engine {
    /// Opens an engine. Refuses non-tool models (`tools_unsupported`) before loading weights or
    /// allocating a KV cache.
    pub fn create(config: EngineConfig, events: Option<EventSink>) -> Result<Engine> {
        Ok(Engine { chat: Chat::open(&config, HandleKind::Engine)?, busy: Mutex::new(()), events })
    }

    pub fn probe(&self) -> &Probe {
        self.chat.prompter.probe()
    }

    /// The model's chat side (templates, plans, grammars): for benchmarks and tests.
    #[doc(hidden)]
    pub fn prompter(&self) -> &Prompter {
        &self.chat.prompter
    }

    /// The model's vocabulary: for benchmarks and tests.
    #[doc(hidden)]
    pub fn vocab(&self) -> &Arc<Vocab> {
        &self.chat.vocab
    }

    /// `request_json` parsed and resolved against this engine's settings, as a request runs
    /// it: for benchmarks and tests that plan a request without running it.
    #[doc(hidden)]
    pub fn resolve(&self, request_json: &str) -> Result<ResolvedRequest> {
        self.chat.resolve(request_json)
    }

    /// The scheduler's state, as a pool's (`cost_model` included): for benchmarks.
    #[doc(hidden)]
    pub fn stats(&self) -> Value {
        self.chat.sched.stats()
    }

    /// Runs one chat completion. Returns `busy` at once if another thread is inside.
    pub fn infer(&self, request_json: &str) -> Result<Value> {
        let _guard = match self.busy.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => bail!(Busy, "this engine is running another request"),
            Err(TryLockError::Poisoned(p)) => {
                // A request panicked half way (caught at the C boundary): its sequence was
                // cleared when it left the scheduler; forget its replies too.
                self.busy.clear_poison();
                self.chat.book.clear();
                p.into_inner()
            }
        };
        let emit = |ev: &Value| self.events.as_ref().is_none_or(|f| f(ev));
        self.chat.infer(request_json, &emit)
    }
}

/// A pool: many requests at once on one batched context of one model.
pub struct Pool {
    chat: Chat,
}

impl Pool {
    /// Opens a pool (same gate and config as an engine, plus `n_parallel` and `max_queue`).
    pub fn create(config: EngineConfig) -> Result<Pool> {
        Ok(Pool { chat: Chat::open(&config, HandleKind::Pool)? })
    }

    pub fn probe(&self) -> &Probe {
        self.chat.prompter.probe()
    }

    /// Runs one chat completion, concurrently with the pool's other requests; `emit` receives
    /// this request's events on the calling thread.
    pub fn infer(&self, request_json: &str, emit: &dyn Fn(&Value) -> bool) -> Result<Value> {
        self.chat.infer(request_json, emit)
    }

    /// Sequences, what they hold, running and queued requests.
    pub fn stats(&self) -> Value {
        self.chat.sched.stats()
    }
}
